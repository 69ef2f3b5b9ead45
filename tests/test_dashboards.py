"""Dashboards validate against the official Grafana 11.6 schemas (dashboard and per panel) and pass our lint."""

import json
import re

import pytest
import yaml

from hpcobs.authoring import dashboard as engine
from hpcobs.authoring.dashboard import every_panel
from hpcobs.build import tools, validate
from hpcobs.lang import lint
from hpcobs.settings.names import DashboardUid
from tests.test_catalogue import recorded_names

DASHBOARDS = "grafana/dashboards/"
UIDS = {str(uid) for uid in DashboardUid}
PROMETHEUS = {"type": "prometheus", "uid": "${datasource}"}
LOKI = {"type": "loki", "uid": "${loki}"}
# Values a Grafana variable takes when an expression is checked: ranges become durations, the rest a value
# (a multi-value variable renders as a regex alternation, as Grafana formats it for Prometheus and Loki).
DURATIONS = {
    "__range": "1h",
    "__interval": "1m",
    "__rate_interval": "2m",
    "__range_s": "3600",
    "__interval_ms": "60000",
}
_VARIABLE = lint.GRAFANA_VARIABLE


@pytest.fixture(scope="module")
def dashboards(generated):
    return {p: json.loads(t) for p, t in generated.items() if p.startswith(DASHBOARDS)}


@pytest.fixture(scope="module")
def recorded(generated):
    return recorded_names(generated)


def panels(dashboard):
    return every_panel(dashboard)


def variable_names(text):
    return {next(g for g in m.groups() if g) for m in _VARIABLE.finditer(text)}


def substitute(expr, dashboard):
    """Grafana's interpolation, with sample values: durations for $__range & co, textbox defaults, values."""
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}

    def value(match):
        name = next(g for g in match.groups() if g)
        if name in DURATIONS:
            return DURATIONS[name]
        v = variables.get(name)
        if v is not None and v["type"] == "textbox":
            return v["query"]
        if v is not None and v.get("multi"):
            return "n1|n2"
        return "n1"

    return _VARIABLE.sub(value, expr)


def prometheus_expressions(dashboard):
    """(where, expr) of every PromQL expression: panel targets, variable queries, alert annotations."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if target["datasource"]["type"] == "prometheus":
                yield f"{dashboard['uid']} / {panel['title']}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(
                r"\s*(?:label_values\((.*),\s*\w+|query_result\((.*))\s*\)\s*", variable["query"], re.S
            )
            expr = next((group for group in inner.groups() if group), None) if inner else None
            yield f"{dashboard['uid']} / variable {variable['name']}", expr or variable["query"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield f"{dashboard['uid']} / annotation {annotation['name']}", annotation["expr"]


# ----------------------------------------------------------------------------------------- shape


def test_dashboards_match_the_grafana_schema(generated, dashboards):
    assert dashboards
    for path in dashboards:
        assert validate.schema_errors(path, generated[path]) == []


def test_the_builders_defaults_are_valid_for_every_panel_kind():
    """Why grafana-foundation-sdk builds the panels: an option left unset takes a default that the Grafana 11.6
    per-panel schema accepts, so no panel needs hand-written filler (docs/grafana-model.md)."""
    import importlib

    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    for kind in ("timeseries", "stat", "table", "heatmap", "bargauge", "logs", "text"):
        model = importlib.import_module(f"grafana_foundation_sdk.models.{kind}")
        options = json.loads(json.dumps(model.Options(), cls=JSONEncoder))
        assert engine._errors(kind, "Options", options) == [], kind


def test_the_six_dashboards_with_stable_uids_and_file_names(dashboards, config):
    assert {d["uid"] for d in dashboards.values()} == UIDS
    for path, dashboard in dashboards.items():
        assert path == f"{DASHBOARDS}{config.get('grafana', 'folder')}/{dashboard['uid']}.json"
        assert dashboard["schemaVersion"] >= 39
        assert "hpcobs" in dashboard["tags"]


def test_panel_options_match_the_per_panel_schemas(dashboards):
    kinds = set()
    for dashboard in dashboards.values():
        for panel in panels(dashboard):
            kinds.add(panel["type"])
            assert engine.panel_schema_errors(panel) == [], panel["title"]
    assert {"timeseries", "stat", "table", "heatmap", "bargauge", "logs", "text"} <= kinds


def test_the_panel_schema_check_catches_a_bad_option(dashboards):
    panel = json.loads(json.dumps(next(p for d in dashboards.values() for p in panels(d) if p["type"] == "heatmap")))
    panel["options"]["legend"] = {"show": "yes"}
    panel["targets"][0]["legacyField"] = 1
    errors = engine.panel_schema_errors(panel)
    assert any("options.legend" in e for e in errors) and any("target A" in e for e in errors)


def test_heatmap_is_the_modern_one_on_pre_bucketed_series(dashboards):
    heatmaps = [p for d in dashboards.values() for p in panels(d) if p["type"] == "heatmap"]
    assert heatmaps
    for panel in heatmaps:
        assert panel["options"]["calculate"] is False
        # one row per series (node, rank), named by its label
        assert all(
            t["format"] == "time_series" and re.search(r"\{\{\w+\}\}", t["legendFormat"]) for t in panel["targets"]
        )


def test_panel_ids_are_unique(dashboards):
    for dashboard in dashboards.values():
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids))


def test_panels_do_not_overlap(dashboards):
    for dashboard in dashboards.values():
        cells = {}
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                    cells[(x, y)] = panel["title"]


def test_every_panel_has_description_unit_and_the_datasource_variable(dashboards):
    units = engine.known_units()
    for dashboard in dashboards.values():
        for panel in panels(dashboard):
            assert panel.get("description"), panel["title"]
            if panel["type"] == "text":  # markdown: no query, no unit
                assert "targets" not in panel, panel["title"]
                continue
            unit = panel["fieldConfig"]["defaults"].get("unit")
            assert unit in units, f"{panel['title']}: unit {unit!r} unknown to Grafana"
            expected = LOKI if panel["type"] == "logs" else PROMETHEUS
            assert panel["datasource"] == expected, panel["title"]
            assert panel["targets"]
            for target in panel["targets"]:
                assert target["datasource"] == expected


def test_variables_are_defined_and_used(dashboards):
    for dashboard in dashboards.values():
        defined = {v["name"] for v in dashboard["templating"]["list"]}
        text = json.dumps(
            [
                dashboard["panels"],
                dashboard["links"],
                dashboard["annotations"],
                [v.get("query") for v in dashboard["templating"]["list"]],
            ]
        )
        used = {name for name in variable_names(text) if not name.startswith("__")}
        assert used <= defined, f"{dashboard['uid']}: undefined variables {used - defined}"
        assert defined <= used, f"{dashboard['uid']}: unused variables {defined - used}"


def test_variables_chain_on_recorded_series(dashboards, recorded, config):
    cluster = config.get("cluster", "label")
    for dashboard in dashboards.values():
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            assert variable["query"].startswith(("label_values(", "query_result(")), variable["name"]
            # Raw series only in a drill-down on the selected job (the raw-series test checks the pinning).
            raw = lint.metric_names(variable["query"]) - recorded
            assert not raw or 'hpc_job="$hpc_job"' in variable["query"], variable["name"]
            if variable["name"] != cluster:
                assert f'{cluster}="${cluster}"' in variable["query"], variable["name"]


# ----------------------------------------------------------------------------------------- queries


def test_every_promql_expression_parses(dashboards, tmp_path):
    """promtool parses PromQL for real: every expression, variables substituted, as a recording rule."""
    rules, where = [], {}
    for dashboard in dashboards.values():
        for place, expr in prometheus_expressions(dashboard):
            record = f"hpcobs:dashboard_check_{len(rules)}"
            rules.append({"record": record, "expr": substitute(expr, dashboard)})
            where[record] = place
    assert len(rules) > 100
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    result = tools.check_rules(path)
    assert result.ok, result.output


def test_promql_check_rejects_a_broken_expression(tmp_path):
    path = tmp_path / "bad.rules.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "a:b", "expr": "sum(x[$__range])"}]}]})
    )
    assert not tools.check_rules(path).ok


def test_logql_queries_are_well_formed(dashboards):
    """No Loki parser here (the live test runs them in Loki): a stream selector once the variables are
    substituted, balanced quotes, and the job log lines the seed's correlation needs."""
    found = []
    for dashboard in dashboards.values():
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if target["datasource"]["type"] != "loki":
                    continue
                expr = substitute(target["expr"], dashboard)
                found.append(expr)
                assert re.match(
                    r'^\{[a-zA-Z_]\w*\s*(=|=~|!=|!~)\s*"[^"]*"(\s*,\s*[a-zA-Z_]\w*\s*(=|=~|!=|!~)\s*"[^"]*")*\}', expr
                ), expr
                assert expr.count("`") % 2 == 0 and re.sub(r"`[^`]*`", "", expr).count('"') % 2 == 0, expr
    training = [e for e in found if "NVRM: Xid" in e]
    assert training and all(
        s in training[0] for s in (" NCCL WARN ", "Watchdog caught collective operation timeout", "oom")
    )


def test_every_raw_metric_is_in_the_catalogue_and_only_drill_downs_read_raw_series(dashboards, recorded, config):
    from hpcobs.exporters.sources import Sources

    known = Sources(config).metric_names()
    for dashboard in dashboards.values():
        for place, expr in prometheus_expressions(dashboard):
            names = lint.metric_names(expr) - {"ALERTS"}
            raw = names - recorded
            assert raw <= known, f"{place}: reads {raw - known}, neither in the catalogue nor recorded"
            for name in raw:  # raw series only for ONE node or ONE job, in every selector that reads them
                for selector in re.finditer(rf"\b{re.escape(name)}\{{([^}}]*)\}}", expr):
                    assert re.search(r'="\$(node|hpc_job)"|=~"\(\$node\)', selector.group(1)), (
                        f"{place} reads raw {name} across the cluster"
                    )


def test_panel_titles_are_unique_per_dashboard(dashboards):
    """Titles name panels in the live report and in fault_panels()."""
    for dashboard in dashboards.values():
        titles = [panel["title"] for panel in panels(dashboard)]
        assert len(titles) == len(set(titles)), (
            f"{dashboard['uid']}: {sorted(t for t in titles if titles.count(t) > 1)}"
        )


def test_panel_queries_lists_every_target(dashboards):
    for dashboard in dashboards.values():
        listed = engine.panel_queries(dashboard)
        assert len(listed) == sum(len(p.get("targets", [])) for p in panels(dashboard))
        assert {kind for *_, kind in listed} <= {"prometheus", "loki"}
        assert all(uid == dashboard["uid"] and title and expr for uid, title, expr, _ in listed)


# ----------------------------------------------------------------------------------------- links


def links_in(dashboard):
    yield from (link["url"] for link in dashboard["links"] if link["type"] == "link")
    for panel in panels(dashboard):
        yield from (link["url"] for link in panel.get("fieldConfig", {}).get("defaults", {}).get("links", []))
        yield from re.findall(r"\]\(([^)]+)\)", panel.get("options", {}).get("content", ""))


def test_dashboards_link_to_each_other(dashboards):
    for dashboard in dashboards.values():
        assert any(link["type"] == "dashboards" and "hpcobs" in link["tags"] for link in dashboard["links"])
        targets = {m.group(1) for url in links_in(dashboard) if (m := re.match(r"/d/([\w-]+)", url))}
        assert UIDS - {dashboard["uid"]} <= targets, dashboard["uid"]


def test_links_and_uids_resolve(dashboards):
    for dashboard in dashboards.values():
        defined = {v["name"] for v in dashboard["templating"]["list"]}
        for url in links_in(dashboard):
            if url.startswith("/d/"):
                uid = re.match(r"/d/([\w-]+)", url).group(1)
                assert uid in UIDS, url
                target = next(d for d in dashboards.values() if d["uid"] == uid)
                target_vars = {v["name"] for v in target["templating"]["list"]}
                passed = set(re.findall(r"var-(\w+)=", url))
                assert passed <= target_vars, f"{url} sets variables {passed - target_vars} {uid} lacks"
            else:
                assert url.startswith("/explore?"), url
            used = {n for n in variable_names(url) if not n.startswith("__")}
            assert used <= defined, url


def test_job_and_node_tables_link_to_their_views(dashboards):
    by_uid = {d["uid"]: d for d in dashboards.values()}
    jobs = next(p for p in panels(by_uid[DashboardUid.SLURM_JOBS]) if p["title"] == "Running jobs with GPUs")
    job_links = [
        link
        for o in jobs["fieldConfig"]["overrides"]
        if o["matcher"]["options"].get("names") == ["hpc_job"]
        for prop in o["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    assert any(
        f"/d/{DashboardUid.TRAINING}?" in link["url"] and "var-hpc_job=${__data.fields.hpc_job}" in link["url"]
        for link in job_links
    )
    nodes = next(p for p in panels(by_uid[DashboardUid.GPU_CLUSTER]) if p["title"] == "Nodes, worst first")
    node_links = [
        link
        for o in nodes["fieldConfig"]["overrides"]
        if o["matcher"]["options"].get("names") == ["node"]
        for prop in o["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    assert any(
        f"/d/{DashboardUid.NODE}?" in link["url"] and "var-node=${__data.fields.node}" in link["url"]
        for link in node_links
    )


def test_training_links_to_the_job_traces_in_tempo(dashboards, config):
    training = next(d for d in dashboards.values() if d["uid"] == DashboardUid.TRAINING)
    tempo = config.get("grafana", "datasources")["tempo"]["uid"]
    explore = [url for url in links_in(training) if url.startswith("/explore?")]
    assert explore and all(tempo in url and "${hpc_job:percentencode}" in url for url in explore)


def test_every_dashboard_annotates_its_firing_alerts(dashboards):
    for dashboard in dashboards.values():
        alerts = [a for a in dashboard["annotations"]["list"] if "ALERTS" in a.get("expr", "")]
        assert len(alerts) == 1, dashboard["uid"]
        assert alerts[0]["datasource"] == PROMETHEUS
        assert 'alertstate="firing"' in alerts[0]["expr"] and "alertname=~" in alerts[0]["expr"]


# A label matched against a list of names: a Falco rule's or a Tetragon policy's.
SENSOR_SELECTION = re.compile(r'\b(?:rule_name|policy)=~"(?:[^"\\]|\\.)*"')


def test_the_checkpoint_panel_reads_the_sensors_its_alert_reads(dashboards, generated):
    """SecurityCheckpointForeignRead pages on a Falco rule or a Tetragon policy; its panel shows the same rules
    and policies, so a site running only Tetragon sees the reads too."""
    security = next(d for d in dashboards.values() if d["uid"] == DashboardUid.SECURITY)
    panel = next(p for p in panels(security) if p["title"] == "Checkpoint reads by foreign processes")
    panel_exprs = " ".join(target["expr"] for target in panel["targets"])
    rules = yaml.safe_load(generated["prometheus/rules/security.rules.yaml"])["groups"]
    alert_expr = next(r["expr"] for g in rules for r in g["rules"] if r.get("alert") == "SecurityCheckpointForeignRead")
    assert "cluster:falco_events:rate{" in panel_exprs and "cluster:tetragon_policy_events:rate{" in panel_exprs
    assert set(SENSOR_SELECTION.findall(panel_exprs)) == set(SENSOR_SELECTION.findall(alert_expr))
    assert len(set(SENSOR_SELECTION.findall(alert_expr))) == 2
