"""No dashboard draws a graph whose lines grow with the fleet (issue 30): every range query of every dashboard is run
on a small and a three-times larger simulated cluster, faults scaled with it, and the fleet entities its series name
(nodes, GPUs, jobs, users, ranks, ports, OSTs) must not grow. A view of one entity (one node, one job) may draw that
entity's GPUs or ranks: its variables pin it, so its lines stay as many on the larger cluster.

Instant queries (tables, stats) are not graphs: a table of offenders lists rows, picked once."""

import json

import pytest

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel
from hpcobs.build import pipeline
from hpcobs.lang import lint
from hpcobs.proof.simulate import Simulation, write
from hpcobs.proof.workload import replay_layers
from tests.conftest import MEASUREMENT
from tests.live.conftest import raw_names_read
from tests.live.test_dashboards_live import _resolve_variables, _substituted

pytestmark = pytest.mark.live

STEP = 30
HOURS = 1
# The labels that name fleet entities: a set of series keyed by them grows with the fleet. Partitions, accounts,
# collectives and severities are the site's own short lists.
FLEET = ("node", "instance", "gpu", "hpc_job", "user", "rank", "device", "port", "target", "ost", "mountpoint")
# Faults on a third of the batch nodes: four nodes have one hit, twelve have three.
FAULTS = ("dbe", "thermal", "nvlink_errors", "ib_symbol_errors", "unexpected_outbound", "crypto_miner")
SIZES = {"small": (4, ("gpu003",)), "large": (12, ("gpu003", "gpu006", "gpu009"))}


def _scenarios(nodes: tuple[str, ...]) -> str:
    return ",".join(f"{fault}:node={node}:start=10m" for node in nodes for fault in FAULTS)


@pytest.fixture(scope="module")
def dashboards(generated):
    return [json.loads(text) for path, text in generated.items() if path.startswith("grafana/dashboards/")]


@pytest.fixture(scope="module")
def clusters(config, dashboards, tmp_path_factory, prometheus_factory):
    groups = [g for gs in pipeline.rule_groups(Context(config)).values() for g in gs]
    panel_names = {
        name
        for dashboard in dashboards
        for panel in every_panel(dashboard)
        if panel.get("datasource", {}).get("type") == "prometheus"
        for target in panel["targets"]
        for name in lint.metric_names(_substituted(target["expr"], {}))
    }
    names = raw_names_read(config, groups) | panel_names | {"up"}
    out = {}
    for size, (nodes, faulty) in SIZES.items():
        sim = Simulation(config, nodes=nodes, gpus_per_node=8, hours=HOURS, scenarios=_scenarios(faulty), seed=1)
        folder = tmp_path_factory.mktemp(f"growth-{size}")
        openmetrics = folder / "cluster.om"
        with open(openmetrics, "w") as stream:
            write(sim, "openmetrics", stream, names=names)
        layers = replay_layers(groups, folder)
        start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
        prometheus = prometheus_factory(openmetrics=openmetrics, lookback_delta=f"{STEP * 3 // 2}s")
        prometheus.replay_rules(layers, start, end, f"{STEP}s")
        hero = next(j for j in sim.cluster.jobs if j.id == sim.cluster.roles.hero_job)
        preferred = {"hpc_job": hero.id, "node": sim.cluster.nodes[hero.nodes[0]].name}
        out[size] = (prometheus, start, end, preferred)
    return out


def _entities(server, expr: str, start: float, end: float) -> set[tuple]:
    return {tuple(s.labels.get(label, "") for label in FLEET) for s in server.query_range(expr, start, end, 300)}


def test_no_graph_grows_with_the_fleet(clusters, dashboards, record_property):
    grown, counted = [], 0
    for dashboard in dashboards:
        seen = {}
        for size, (server, start, end, preferred) in clusters.items():
            values = _resolve_variables(dashboard, server, start + 20 * 60, preferred)
            for panel in every_panel(dashboard):
                if panel.get("datasource", {}).get("type") != "prometheus":
                    continue
                for target in panel["targets"]:
                    if not target.get("instant"):
                        key = (panel["title"], target["refId"])
                        expr = _substituted(target["expr"], values)
                        seen.setdefault(key, {})[size] = len(_entities(server, expr, start, end))
        for (title, ref), count in sorted(seen.items()):
            counted += 1
            if count["large"] > count["small"]:
                grown.append(f"{dashboard['uid']} / {title} ({ref}): {count['small']} -> {count['large']} entities")
    record_property(MEASUREMENT, f"range queries run on 4 and 12 nodes: {counted}; growing: {len(grown)}")
    assert counted > 50
    assert not grown, "graphs whose lines grow with the fleet:\n" + "\n".join(grown)
