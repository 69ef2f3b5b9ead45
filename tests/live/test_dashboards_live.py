"""Every dashboard query, with its variables resolved on the simulated cluster, returns data in real
Prometheus and real VictoriaMetrics.

The cluster runs every fault scenario (so the fault panels have something to show), the recording rules
are replayed on both servers, and each variable takes the value a user would pick: the hero training
job, one of its nodes, its partition and account. Loki panels are listed as not checked: no Loki runs here.
"""
import json
import re

import pytest

from hpcobs import lint, pipeline
from hpcobs.context import Context
from hpcobs.dashboard import panel_queries
from hpcobs.simulate import Simulation, write

from .conftest import raw_names_read, recording_layer_files
from .test_scenarios import SCENARIOS

HOURS = 2.75
STEP = 30
GRAFANA_BUILTINS = {"__range": "1h", "__range_s": "3600", "__interval": "1m", "__rate_interval": "2m",
                    "__interval_ms": "60000"}
# Panels whose data exists only when a fault is active at the evaluation time, or in an optional field.
MAY_BE_EMPTY = {
    ("hpcobs-network-storage", "Port state by node"): "no scenario trains a link below its nominal rate",
    ("hpcobs-gpu-cluster", "Throttled GPUs by node"): "DCGM_EXP_CLOCK_EVENTS_COUNT is not in the default CSV",
    ("hpcobs-gpu-cluster", "Nodes"): "its throttled-GPUs column, as above",
    ("hpcobs-security", "Critical events by rule"): "the simulated Falco rules are Warning and Error",
    ("hpcobs-security", "Critical events by node"): "as above",
}


@pytest.fixture(scope="module")
def dashboards(generated):
    return [json.loads(text) for path, text in generated.items() if path.startswith("grafana/dashboards/")]


@pytest.fixture(scope="module")
def world(config, dashboards, tmp_path_factory, prometheus_factory, victoria_factory):
    ctx = Context(config)
    groups = [g for gs in pipeline.rule_groups(ctx).values() for g in gs]
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=HOURS, scenarios=SCENARIOS, seed=1)
    panel_names = {n for d in dashboards for _, _, expr, kind in panel_queries(d) if kind == "prometheus"
                   for n in lint.metric_names(_substituted(expr, {}))}
    names = raw_names_read(config, groups) | panel_names | {"up"}
    folder = tmp_path_factory.mktemp("dashboards-live")
    openmetrics, jsonl = folder / "cluster.om", folder / "cluster.jsonl"
    with open(openmetrics, "w") as out:
        write(sim, "openmetrics", out, names=names)
    with open(jsonl, "w") as out:
        write(sim, "vm", out, names=names)
    layers = recording_layer_files([g for g in groups if any(hasattr(r, "record") for r in g.rules)], folder)
    start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
    prometheus = prometheus_factory(openmetrics=openmetrics, lookback_delta=f"{STEP * 3 // 2}s")
    prometheus.replay_rules(layers, start, end, f"{STEP}s")
    victoria = victoria_factory(jsonl=jsonl)
    victoria.backfill_rules(layers, start, end, f"{STEP}s")
    hero = next(j for j in sim.cluster.jobs if j.id == sim.cluster.roles.hero_job)
    preferred = {"hpc_job": hero.id, "node": sim.cluster.nodes[hero.nodes[0]].name, "partition": hero.partition,
                 "account": hero.account, "user": hero.user}
    # Variables are picked inside the straggler's slot, while the hero job runs (test_scenarios); panels
    # are read over the last two hours, as a user would look at them.
    return {"prometheus": prometheus, "victoriametrics": victoria, "at": start + 25 * 60, "from": end - 7200,
            "to": end, "preferred": preferred}


def _substituted(expr: str, values: dict[str, str]) -> str:
    def value(match):
        name = match.group(1) or match.group(2)
        return GRAFANA_BUILTINS.get(name, values.get(name, ".*"))
    return re.sub(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)", value, expr)


def _resolve_variables(dashboard: dict, server, at: float, preferred: dict[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", variable["query"], re.S)
        expr, label = _substituted(match.group(1), values), match.group(2)
        seen = sorted({s.labels.get(label) for s in server.query(expr, at)} - {None})
        values[variable["name"]] = preferred.get(variable["name"]) if preferred.get(variable["name"]) in seen \
            else (seen[0] if seen else "")
    return values


@pytest.mark.live
@pytest.mark.parametrize("backend", ["prometheus", "victoriametrics"])
def test_every_panel_query_returns_data(world, dashboards, backend):
    server, at = world[backend], world["at"]
    checked, empty, skipped, elsewhere = 0, [], [], []

    def has_data(expr):
        return bool(server.query_range(expr, world["from"], world["to"], 300))

    for dashboard in dashboards:
        values = _resolve_variables(dashboard, server, at, world["preferred"])
        for uid, title, expr, kind in panel_queries(dashboard):
            if kind != "prometheus":
                skipped.append(f"{uid} / {title} ({kind})")
                continue
            checked += 1
            if has_data(_substituted(expr, values)):
                continue
            # A fault panel shows its fault where the fault is: on another node, GPU or job than the
            # hero's. Let every variable take any value, as picking the faulty node would.
            anywhere = _substituted(re.sub(r'="(\$\{?\w+\}?)"', r'=~"\1"', expr), {})
            if has_data(anywhere):
                elsewhere.append(f"{uid} / {title}")
            elif (uid, title) not in MAY_BE_EMPTY:
                empty.append(f"{uid} / {title}: {_substituted(expr, values)}")
    print(f"{backend}: {checked} queries, {checked - len(empty)} returned data ({len(elsewhere)} of them for "
          f"another node or job than the hero's: {elsewhere}); not checked: {skipped}")
    assert checked > 50
    assert not empty, "\n".join(empty)
