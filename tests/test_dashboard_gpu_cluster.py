"""The GPU cluster dashboard as an on-call engineer works from it (issue 30): what is wrong and where first, no graph
whose lines grow with the fleet, colours that mean the same as on every other dashboard."""

import json

import promql_parser
import pytest
from hpcobs.dashboards import common

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel

PATH = "grafana/dashboards/HPC/hpcobs-gpu-cluster.json"
# Labels whose values grow with the fleet: a graph keeping one draws a line per node, GPU, job or user.
FLEET_ENTITIES = {"node", "gpu", "hpc_job", "user"}
# Record levels (docs/recording-rules.md) whose series are bounded by the cluster's configuration, not its size.
BOUNDED_LEVELS = {"cluster", "partition", "account"}
# The one-node drill-down may draw a line per GPU of that node.
DRILL_DOWN = "Node $node: GPUs"
# Heatmap colours that say nothing good or bad about a count: one hue, or opacity.
DENSITY_SCHEMES = {"Blues", "Greys", "Purples"}


@pytest.fixture(scope="module")
def dashboard(generated):
    return json.loads(generated[PATH])


def rows(dashboard):
    """(row title, its panels), the panels a collapsed row holds included."""
    out, current = [], None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = (panel["title"], list(panel.get("panels", [])))
            out.append(current)
        elif current is not None:
            current[1].append(panel)
    return out


def test_the_first_row_holds_the_firing_alerts_and_the_gpus_not_ok(dashboard):
    title, panels = rows(dashboard)[0]
    assert [panel["title"] for panel in panels] == ["Firing alerts", "GPUs not OK now"], title
    not_ok = panels[1]
    expr = not_ok["targets"][0]["expr"]
    assert "gpu:problems:count" in expr and "job:slurm_job_info:max" in expr  # the GPU's job and its user
    # One above the other, each the whole width (half of it cut off the job and its user), both above the fleet.
    assert [(panel["gridPos"]["x"], panel["gridPos"]["w"]) for panel in panels] == [(0, 24), (0, 24)]
    assert sum(panel["gridPos"]["h"] for panel in panels) <= 14
    links = {o["matcher"]["options"]["names"][0]: o for o in not_ok["fieldConfig"]["overrides"]}
    assert {"node", "hpc_job"} <= set(links), "the node and the job link to their own views"


def _levels_and_groupings(node) -> tuple[set[str], list[set[str] | None]]:
    """The record levels a query selects outside any aggregation, and the label sets it aggregates by (None for an
    aggregation `without` labels, which keeps what it does not name)."""
    levels: set[str] = set()
    groupings: list[set[str] | None] = []

    def visit(inner, aggregated: bool) -> None:
        if isinstance(inner, promql_parser.AggregateExpr):
            modifier = inner.modifier
            by = modifier is None or str(modifier.type).endswith("By")
            groupings.append(set(modifier.labels if modifier else []) if by else None)
            visit(inner.expr, True)
        elif isinstance(inner, promql_parser.BinaryExpr):
            visit(inner.lhs, aggregated)
            visit(inner.rhs, aggregated)
        elif isinstance(inner, promql_parser.ParenExpr | promql_parser.UnaryExpr):
            visit(inner.expr, aggregated)
        elif isinstance(inner, promql_parser.Call):
            for arg in inner.args:
                visit(arg, aggregated)
        elif isinstance(inner, promql_parser.MatrixSelector):
            visit(inner.vector_selector, aggregated)
        elif isinstance(inner, promql_parser.VectorSelector) and not aggregated:
            levels.add((inner.name or "").split(":")[0])

    visit(node, False)
    return levels, groupings


def test_no_graph_draws_a_line_per_node_gpu_job_or_user(dashboard):
    growing = []
    for title, panels in rows(dashboard):
        if title == DRILL_DOWN:
            continue
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("instant") or target.get("format") == "table":
                    continue
                expr = target["expr"].replace("$__range", "1h").replace("$__rate_interval", "2m")
                levels, groupings = _levels_and_groupings(promql_parser.parse(expr))
                unbounded = levels - BOUNDED_LEVELS or any(g is None or g & FLEET_ENTITIES for g in groupings)
                if unbounded:
                    growing.append(f"{panel['title']}: {target['expr']}")
    assert not growing, "graphs whose lines grow with the fleet:\n" + "\n".join(growing)


def test_the_graph_check_sees_a_line_per_node():
    assert _levels_and_groupings(promql_parser.parse('node:gpus_unhealthy:count{cluster="c"} > 0'))[0] == {"node"}
    assert _levels_and_groupings(promql_parser.parse("sum by (node) (cluster:x)"))[1] == [{"node"}]


def test_the_utilisation_heatmap_colours_how_many_gpus_not_good_or_bad(dashboard):
    heatmaps = [panel for panel in every_panel(dashboard) if panel["type"] == "heatmap"]
    assert heatmaps
    for panel in heatmaps:
        colour = panel["options"]["color"]
        assert colour["mode"] == "opacity" or colour.get("scheme") in DENSITY_SCHEMES, (panel["title"], colour)


def _steps(thresholds: dict) -> list[tuple[float, str]]:
    return [(step["value"] or 0, step["color"]) for step in thresholds["steps"]]


def test_every_utilisation_colour_is_the_shared_one(dashboard, config):
    ctx = Context(config)

    def shared(unit: str) -> list[tuple[float, str]]:
        return [(value or 0, colour) for value, colour in common.utilization(ctx, unit)]

    checked = []
    for panel in every_panel(dashboard):
        defaults = panel["fieldConfig"]["defaults"]
        steps = _steps(defaults.get("thresholds", {"steps": []}))
        if len(steps) > 1 and ("tilisation" in panel["title"] or "SM active" in panel["title"]):
            checked.append(panel["title"])
            assert steps == shared(defaults["unit"]), panel["title"]
        for override in panel["fieldConfig"].get("overrides", []):
            names = override["matcher"]["options"].get("names", [])
            properties = {p["id"]: p["value"] for p in override["properties"]}
            if "thresholds" in properties and any("tilisation" in name for name in names):
                checked.append(f"{panel['title']}: {names[-1]}")
                assert _steps(properties["thresholds"]) == shared(properties.get("unit", defaults["unit"])), names
    assert len(checked) >= 3, checked


def test_the_secondary_rows_are_collapsed_so_not_queried_on_load(dashboard):
    headers = {panel["title"]: panel for panel in dashboard["panels"] if panel["type"] == "row"}
    usage = headers["Utilisation by partition and account"]
    assert usage.get("collapsed") and usage["panels"], "a collapsed row holds its panels"
