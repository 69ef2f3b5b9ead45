"""Every dashboard query, with its variables resolved on the simulated cluster, returns data in real
Prometheus and real VictoriaMetrics, on the cluster the panel is about.

Two clusters are simulated, replayed through the recording rules on both servers and read as a user
would: variables take the values a user would pick (the hero training job, one of its nodes, its
partition and account; All for the other multi-value ones) and panels are read over the whole window.
- healthy: every panel shows data, except the fault panels (DashboardSpec panels with `shows=`), which
  must stay silent (no series, or only zeros);
- faults: every fault scenario in its slot (test_scenarios); every panel shows data, the fault panels
  included, on the hero's node or job or, for a fault placed elsewhere, on the node or job it hit.
Loki panels are listed as not checked: no Loki runs here.
"""

import json
import re

import pytest

from hpcobs import dashboards as dashboard_modules
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import ALL, fault_panels, panel_queries, query_result_line, variable_options
from hpcobs.build import pipeline
from hpcobs.lang import lint
from hpcobs.lang.lint import GRAFANA_VARIABLE
from hpcobs.proof.simulate import Simulation, kinds, write
from hpcobs.proof.workload import replay_layers
from tests.conftest import MEASUREMENT
from tests.live.conftest import raw_names_read
from tests.live.test_scenarios import HOURS, SCENARIOS
from tests.test_dashboards import DURATIONS

STEP = 30
CLUSTERS = {"healthy": "healthy", "faults": SCENARIOS}


@pytest.fixture(scope="module")
def dashboards(generated):
    return [json.loads(text) for path, text in generated.items() if path.startswith("grafana/dashboards/")]


@pytest.fixture(scope="module")
def shows(config):
    """(dashboard uid, panel title) -> the fault scenarios the panel is about."""
    ctx = Context(config)
    specs = [module.dashboard(ctx) for module in dashboard_modules.MODULES]
    return {(spec.uid, title): scenarios for spec in specs for title, scenarios in fault_panels(spec).items()}


def test_fault_panels_name_real_scenarios(shows):
    unknown = {key: s for key, scenarios in shows.items() for s in scenarios if s not in kinds()}
    assert not unknown, unknown


@pytest.fixture(scope="module")
def clusters(config, dashboards, tmp_path_factory, prometheus_factory, victoria_factory):
    ctx = Context(config)
    groups = [g for gs in pipeline.rule_groups(ctx).values() for g in gs]
    panel_names = {
        n
        for d in dashboards
        for _, _, expr, kind in panel_queries(d)
        if kind == "prometheus"
        for n in lint.metric_names(_substituted(expr, {}))
    }
    names = raw_names_read(config, groups) | panel_names | {"up"}
    out = {}
    for name, scenarios in CLUSTERS.items():
        sim = Simulation(config, nodes=10, gpus_per_node=8, hours=HOURS, scenarios=scenarios, seed=1)
        folder = tmp_path_factory.mktemp(f"dashboards-{name}")
        openmetrics, jsonl = folder / "cluster.om", folder / "cluster.jsonl"
        with open(openmetrics, "w") as stream:
            write(sim, "openmetrics", stream, names=names)
        with open(jsonl, "w") as stream:
            write(sim, "vm", stream, names=names)
        layers = replay_layers(groups, folder)
        start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
        prometheus = prometheus_factory(openmetrics=openmetrics, lookback_delta=f"{STEP * 3 // 2}s")
        prometheus.replay_rules(layers, start, end, f"{STEP}s")
        victoria = victoria_factory(jsonl=jsonl)
        victoria.backfill_rules(layers, start, end, f"{STEP}s")
        hero = next(j for j in sim.cluster.jobs if j.id == sim.cluster.roles.hero_job)
        preferred = {
            "hpc_job": hero.id,
            "node": sim.cluster.nodes[hero.nodes[0]].name,
            "partition": hero.partition,
            "account": hero.account,
            "user": hero.user,
        }
        # Variables are picked inside the straggler's slot, while the hero job runs (test_scenarios); panels
        # are read over the whole simulation, where every fault had its slot.
        out[name] = {
            "prometheus": prometheus,
            "victoriametrics": victoria,
            "at": start + 25 * 60,
            "from": start,
            "to": end,
            "preferred": preferred,
        }
    return out


def _substituted(expr: str, values: dict[str, str]) -> str:
    def value(match):
        name = next(g for g in match.groups() if g)
        return DURATIONS.get(name, values.get(name, ALL))

    return GRAFANA_VARIABLE.sub(value, expr)


def _resolve_variables(dashboard: dict, server, at: float, preferred: dict[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        if result_of := re.fullmatch(r"\s*query_result\((.*)\)\s*", variable["query"], re.S):
            results = server.query(_substituted(result_of.group(1), values), at)
            seen = variable_options(variable, (query_result_line(s.labels, s.value, at) for s in results))
        else:
            match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", variable["query"], re.S)
            assert match, f"variable {variable['name']}: not a label_values() or query_result() query"
            expr, label = _substituted(match.group(1), values), match.group(2)
            seen = sorted({s.labels.get(label) for s in server.query(expr, at)} - {None})
        if preferred.get(variable["name"]) in seen:
            values[variable["name"]] = preferred[variable["name"]]
        else:  # a user leaves a multi-value variable at All, or picks one value
            values[variable["name"]] = ALL if variable.get("includeAll") else (seen[0] if seen else "")
    return values


@pytest.mark.live
@pytest.mark.parametrize("backend", ["prometheus", "victoriametrics"])
def test_every_panel_shows_its_cluster(clusters, dashboards, shows, backend, record_property):
    failures, report, skipped = [], {}, set()
    for cluster_name, world in clusters.items():
        server = world[backend]

        def shows_data(expr, about_a_fault, server=server, world=world):
            """A fault panel shows its fault with a non-zero point; any other panel with any point."""
            found = [v for s in server.query_range(expr, world["from"], world["to"], 300) for _, v in s.points]
            return any(found) if about_a_fault else bool(found)

        for dashboard in dashboards:
            values = _resolve_variables(dashboard, server, world["at"], world["preferred"])
            queries = panel_queries(dashboard)
            for index, (uid, title, expr, kind) in enumerate(queries):
                if kind != "prometheus":
                    skipped.add(f"{uid} / {title} ({kind})")
                    continue
                about_a_fault = (uid, title) in shows
                shown = shows_data(_substituted(expr, values), about_a_fault)
                if not shown and cluster_name == "faults":
                    # A fault shows where it is: on another node, GPU or job than the hero's. Let every
                    # variable take any value, as picking the faulty node would.
                    anywhere = re.sub(r'="(\$\{?\w+\}?)"', r'=~"\1"', expr)
                    shown = shows_data(_substituted(anywhere, {}), about_a_fault)
                # A panel's queries are told apart by their position among the panel's queries.
                target = [q[1] for q in queries[:index]].count(title)
                report.setdefault((uid, title, target), {})[cluster_name] = shown
                if cluster_name == "healthy" and about_a_fault and shown:
                    failures.append(f"{uid} / {title}: not silent on the healthy cluster: {expr}")
                elif not shown and (cluster_name == "faults" or not about_a_fault):
                    failures.append(
                        f"{uid} / {title}: no data on the {cluster_name} cluster: {_substituted(expr, values)}"
                    )
    with_data = sum(1 for r in report.values() if r.get("faults"))
    silent = sum(1 for key, r in report.items() if key[:2] in shows and not r.get("healthy"))
    measured = (
        f"dashboards on {backend}: {len(report)} panel queries; data on the fault cluster: {with_data}; "
        f"on the healthy cluster: {sum(1 for r in report.values() if r.get('healthy'))}, and "
        f"{silent} fault-panel queries silent there; Loki panels not run: {len(skipped)}"
    )
    record_property(MEASUREMENT, measured)
    print(f"\n{measured}: {sorted(skipped)}")
    for (uid, title, target), seen in sorted(report.items()):
        fault = f"  (fault: {', '.join(shows[uid, title])})" if (uid, title) in shows else ""
        print(
            f"  {uid:24} {title[:52]:52} {chr(65 + target)} healthy={'data' if seen['healthy'] else '-':4} "
            f"faults={'data' if seen['faults'] else '-'}{fault}"
        )
    assert len(report) > 50
    assert not failures, "\n".join(failures)
