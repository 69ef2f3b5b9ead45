"""The security dashboard an on-call engineer works from (issue 30): who and where first, $node honoured, nothing
over time that grows with the fleet, Falco priorities as words."""

import itertools
import json
import re

import pytest
from hpcobs.dashboards import common, security

from hpcobs.authoring.dashboard import every_panel

PATH = "grafana/dashboards/HPC/hpcobs-security.json"
# Records with one series per node or per job: over time they grow with the fleet unless aggregated away.
PER_ENTITY_RECORD = re.compile(r"\b(?:node|job):[a-z_]+:[a-z_]+\{")
# The outermost aggregation of an expression and its grouping labels.
AGGREGATION = re.compile(r"^\s*(?:sum|max|min|avg|count)\s*(?:by\s*\(([^)]*)\))?\s*\(")


@pytest.fixture(scope="module")
def dashboard(generated):
    return json.loads(generated[PATH])


def prometheus_targets(panel):
    return [target for target in panel.get("targets", []) if target["datasource"]["type"] == "prometheus"]


def test_the_first_row_says_what_fired_where_and_whose_jobs(dashboard):
    first_row, *rest = dashboard["panels"]
    first = list(itertools.takewhile(lambda panel: panel["type"] != "row", rest))
    assert first_row["type"] == "row" and not first_row["collapsed"]
    assert [p["title"] for p in first][0] == "Firing alerts"
    assert "ALERTS{" in first[0]["targets"][0]["expr"]
    nodes = first[1]
    exprs = " ".join(target["expr"] for target in nodes["targets"])
    assert "gpu:job:info" in exprs and "job:slurm_job_info:max" in exprs and "group_left (user)" in exprs
    kept = nodes["transformations"][0]["options"]["include"]["pattern"]
    assert all(label in kept for label in ("node", "hpc_job", "user"))
    linked = {o["matcher"]["options"]["names"][0] for o in nodes["fieldConfig"]["overrides"] for p in o["properties"]}
    assert {"node", "hpc_job"} <= linked


def test_every_panel_honours_the_node_variable_or_says_it_is_fleet_wide(dashboard):
    titles = {panel["title"] for panel in every_panel(dashboard)}
    assert set(security.FLEET_WIDE) <= titles
    for panel in every_panel(dashboard):
        if panel["title"] in security.FLEET_WIDE:
            if panel["title"] != "Firing alerts":  # every alert of the domain: common.firing_alerts' own words
                assert "fleet-wide" in panel["description"].lower(), panel["title"]
            continue
        for target in prometheus_targets(panel):
            assert 'node=~"$node"' in target["expr"], f"{panel['title']} ignores $node: {target['expr']}"
        if panel["type"] == "logs":
            assert '=~"$node"' in panel["targets"][0]["expr"]


def test_no_query_over_time_grows_with_nodes_or_jobs(dashboard):
    for panel in every_panel(dashboard):
        if panel["type"] not in ("timeseries", "heatmap"):
            continue
        for target in prometheus_targets(panel):
            expr = target["expr"]
            assert not re.search(r"\b(?:topk|bottomk)\s*\(", expr), f"{panel['title']}: top-N over time: {expr}"
            if not PER_ENTITY_RECORD.search(expr):
                continue
            aggregation = AGGREGATION.match(expr)
            assert aggregation, f"{panel['title']}: a line per node or job: {expr}"
            grouped = {label.strip() for label in (aggregation.group(1) or "").split(",")}
            assert not grouped & {"node", "hpc_job", "gpu"}, f"{panel['title']}: a line per node or job: {expr}"


def test_falco_priorities_are_shown_as_words(dashboard):
    words = {text for _, text, _ in common.FALCO_PRIORITY}
    shown = 0
    for panel in every_panel(dashboard):
        legends = [target.get("legendFormat", "") for target in prometheus_targets(panel)]
        table_labels = panel.get("transformations", [{}])[0].get("options", {}).get("include", {}).get("pattern", "")
        by_priority = any("{{priority}}" in legend for legend in legends)
        priority_column = bool(re.search(r"\bpriority\b", table_labels))
        assert not any("priority {{" in legend for legend in legends), panel["title"]
        if not (by_priority or priority_column):
            continue
        shown += 1
        overrides = panel["fieldConfig"]["overrides"]
        if by_priority:  # each priority's series renamed to its word
            named = {p["value"] for o in overrides for p in o["properties"] if p["id"] == "displayName"}
            assert named == words, panel["title"]
        else:  # the priority column's numbers mapped to words
            mapped = [
                {result["text"] for result in p["value"][0]["options"].values()}
                for o in overrides
                if o["matcher"]["options"]["names"] == ["priority"]
                for p in o["properties"]
                if p["id"] == "mappings"
            ]
            assert mapped == [words], panel["title"]
    assert shown >= 3


def test_secondary_rows_are_collapsed(dashboard):
    rows = {p["title"]: p for p in dashboard["panels"] if p["type"] == "row"}
    assert rows["Tetragon"]["collapsed"] and rows["Logs"]["collapsed"]
    assert not rows["Who and where"]["collapsed"]
