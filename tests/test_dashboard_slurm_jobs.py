"""The Slurm jobs dashboard as the on-call works from it (issue 30): what is wrong first, why the queue waits, one
colour scale for utilisation, every job panel on the owner variables, no graph whose lines grow with jobs or
users, and no annotation per finished job."""

import json
import re

import promql_parser
import pytest
import yaml

from dashboards import common
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel
from hpcobs.lang import lint
from hpcobs.settings.names import DashboardUid

DASHBOARD = f"grafana/dashboards/HPC/{DashboardUid.SLURM_JOBS}.json"
# Record levels (hpcobs.authoring.rules, level:metric:operations) with one series per entity of a growing set.
GROWING_LEVELS = {"gpu", "node", "job", "user", "account", "rank", "port"}
GROWING_LABELS = {"gpu", "node", "hpc_job", "user", "account", "rank", "port"}
OWNER_VARIABLES = ("partition", "account", "user", "hpc_job")
# The owner matchers a record of each level can take: a job's record has them all, a user's only the user.
FILTERS = {"job": OWNER_VARIABLES, "user": ("user",), "account": ("account", "user")}
RECORD = re.compile(r"\b(\w+):\w+:\w+")


@pytest.fixture(scope="module")
def slurm(generated):
    return json.loads(generated[DASHBOARD])


@pytest.fixture(scope="module")
def ctx(config):
    return Context(config)


def first_row(dashboard):
    top = dashboard["panels"]
    assert top[0]["type"] == "row"
    end = next((i for i, panel in enumerate(top[1:], 1) if panel["type"] == "row"), len(top))
    return top[1:end]


def field_names(override: dict) -> list[str]:
    options = override["matcher"]["options"]
    return options.get("names", []) if isinstance(options, dict) else [options]


def override(panel, field, prop):
    """A field override's property value (None when the panel has none)."""
    return next(
        (
            p["value"]
            for o in panel["fieldConfig"].get("overrides", [])
            if field in field_names(o)
            for p in o["properties"]
            if p["id"] == prop
        ),
        None,
    )


def words(mappings):
    return {key: (option["text"], option["color"]) for m in mappings for key, option in m["options"].items()}


def prometheus_targets(dashboard):
    return [
        (panel, target)
        for panel in every_panel(dashboard)
        for target in panel.get("targets", [])
        if target["datasource"]["type"] == "prometheus"
    ]


def test_the_first_row_is_the_slurm_alerts_firing_and_the_nodes_out_of_service(slurm):
    titles = [panel["title"] for panel in first_row(slurm)]
    assert titles[:1] == ["Firing alerts"], titles
    alerts, nodes = first_row(slurm)
    assert 'ALERTS{alertstate="firing", alertname=~"(Slurm).*"' in alerts["targets"][0]["expr"]
    assert "node:slurm_unschedulable:count" in nodes["targets"][0]["expr"]
    node_links = override(nodes, "node", "links")
    assert node_links and all(f"/d/{DashboardUid.NODE}?" in link["url"] for link in node_links)
    state_words = words(override(nodes, "state", "mappings"))
    assert {state: state_words[state] for state in ("down", "drain", "fail")} == {
        "down": ("down", "red"),
        "drain": ("drain", "orange"),
        "fail": ("fail", "red"),
    }
    organize = next(t for t in nodes["transformations"] if t["id"] == "organize")
    assert {"node", "state", "reason"} <= set(organize["options"]["indexByName"])


def test_pending_jobs_by_reason_on_the_partition_and_user_variables(slurm):
    reasons = [
        target["expr"]
        for panel, target in prometheus_targets(slurm)
        if "user:slurm_jobs_pending_by_reason:count" in target["expr"] and "by (reason)" in target["expr"]
    ]
    assert reasons
    assert all('partition=~"$partition"' in expr and 'user=~"$user"' in expr for expr in reasons)


def test_utilisation_is_graded_with_the_shared_levels(slurm, ctx):
    graded = []
    for panel in every_panel(slurm):
        for o in panel["fieldConfig"].get("overrides", []):
            names = field_names(o)
            properties = {p["id"]: p["value"] for p in o["properties"]}
            if any("utilisation" in name.lower() for name in names) and "thresholds" in properties:
                unit = properties.get("unit", panel["fieldConfig"]["defaults"].get("unit", ""))
                # The base step colours everything below the next, whatever value it is written with.
                base, *above = properties["thresholds"]["steps"]
                steps = [(None, base["color"]), *((s["value"], s["color"]) for s in above)]
                graded.append((panel["title"], steps, list(common.utilization(ctx, unit))))
    assert graded
    assert all(steps == shared for _, steps, shared in graded), graded


def test_every_job_panel_filters_on_the_owner_variables(slurm):
    unfiltered = []
    for panel, target in prometheus_targets(slurm):
        # The firing alerts join job-info only to name an alert's user: the alerts themselves are not jobs.
        if panel["title"] == "Firing alerts":
            continue
        for selector in re.finditer(r"\b((\w+):\w+:\w+)\{([^}]*)\}", target["expr"]):
            record, level, matchers = selector.groups()
            missing = [v for v in FILTERS.get(level, ()) if f'{v}=~"${v}"' not in matchers]
            if missing:
                unfiltered.append((panel["title"], record, missing))
    assert not unfiltered


def output_labels(node) -> set[str]:
    """The labels an expression's series can differ by: an aggregation's `by` labels, a record's level."""
    if isinstance(node, promql_parser.ParenExpr):
        return output_labels(node.expr)
    if isinstance(node, promql_parser.AggregateExpr):
        if str(node.op) in ("topk", "bottomk"):  # a new top set at every step of a range query
            return output_labels(node.expr)
        if node.modifier is None:
            return set()
        if node.modifier.type == promql_parser.AggModifierType.Without:
            return GROWING_LABELS
        return set(node.modifier.labels)
    if isinstance(node, promql_parser.BinaryExpr):
        return output_labels(node.lhs) | output_labels(node.rhs)
    if isinstance(node, promql_parser.Call):
        return set().union(*(output_labels(arg) for arg in node.args if arg is not None))
    if isinstance(node, promql_parser.MatrixSelector):
        return output_labels(node.vector_selector)
    if isinstance(node, promql_parser.VectorSelector):
        level = RECORD.match(node.name or "")
        return GROWING_LABELS if level is None or level.group(1) in GROWING_LEVELS else set()
    return set()


def test_output_labels_see_a_line_per_user():
    assert output_labels(promql_parser.parse("sum by (user) (job:gpus_allocated:count)")) == {"user"}
    assert output_labels(promql_parser.parse("topk(10, sum by (reason) (x:y:z))")) == {"reason"}
    assert output_labels(promql_parser.parse("sum(job:gpus_allocated:count) or vector(0)")) == set()
    assert "hpc_job" in output_labels(promql_parser.parse("job:gpus_allocated:count"))


def test_no_graph_draws_a_line_per_job_user_account_or_node(slurm):
    growing = [
        (panel["title"], target["expr"])
        for panel, target in prometheus_targets(slurm)
        if not target.get("instant")
        and output_labels(promql_parser.parse(lint.promql_text(target["expr"]))) & GROWING_LABELS
    ]
    assert not growing


def selected(expr: str, labels: dict[str, str]) -> bool:
    """Whether an ALERTS selector of a dashboard (variables as their sample value) selects an alert's labels."""
    tree = promql_parser.parse(lint.promql_text(expr.replace("$cluster", "c1")))
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector) and node.name == "ALERTS":
            found.append(node.matchers.matchers)

    promql_parser.walk(tree, visit)
    assert found

    def matches(matcher) -> bool:
        value = labels.get(matcher.name, "")
        op = matcher.op
        if op in (promql_parser.MatchOp.Equal, promql_parser.MatchOp.NotEqual):
            hit = value == matcher.value
        else:
            hit = re.fullmatch(matcher.value, value) is not None
        return hit if op in (promql_parser.MatchOp.Equal, promql_parser.MatchOp.Re) else not hit

    return all(all(matches(m) for m in matchers) for matchers in found)


def test_finished_jobs_draw_no_annotation_nor_firing_row(slurm, generated):
    alerts = {
        rule["alert"]: {"alertname": rule["alert"], "alertstate": "firing", "cluster": "c1", **rule["labels"]}
        for path, text in generated.items()
        if path.startswith("prometheus/rules/") and path.endswith(".rules.yaml")
        for group in yaml.safe_load(text)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    annotation = next(a["expr"] for a in slurm["annotations"]["list"] if "ALERTS" in a.get("expr", ""))
    firing = [t["expr"] for p, t in prometheus_targets(slurm) if p["title"] == "Firing alerts"]
    for expr in (annotation, *firing):
        assert not selected(expr, alerts["SlurmJobEnded"]), expr
        assert selected(expr, alerts["SlurmNodesDown"]) and selected(expr, alerts["SlurmJobHoldingIdleGpus"])
    assert firing
