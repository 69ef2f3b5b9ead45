"""Dashboards validate against the official Grafana 11.6 schema and pass our lint."""
import json
import re

import pytest

from hpcobs import validate

DASHBOARDS = "grafana/dashboards/"


@pytest.fixture(scope="module")
def dashboards(generated):
    return {p: json.loads(t) for p, t in generated.items() if p.startswith(DASHBOARDS)}


def panels(dashboard):
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboards_match_the_grafana_schema(generated, dashboards):
    assert dashboards
    for path in dashboards:
        assert validate.schema_errors(path, generated[path]) == []


def test_raw_grafanalib_output_would_not_validate():
    """Why the clean-up exists: grafanalib emits legacy and null fields."""
    import grafanalib.core as g
    from grafanalib._gen import DashboardEncoder
    raw = json.loads(json.dumps(g.Dashboard(title="t", uid="u").to_json_data(), cls=DashboardEncoder))
    assert validate.schema_errors("grafana/dashboards/x/u.json", json.dumps(raw))


def test_stable_uid_and_file_name(dashboards):
    for path, dashboard in dashboards.items():
        assert path.endswith(f"/{dashboard['uid']}.json")
        assert dashboard["uid"].startswith("hpcobs-")
        assert dashboard["schemaVersion"] >= 39


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
    for dashboard in dashboards.values():
        for panel in panels(dashboard):
            assert panel.get("description"), panel["title"]
            assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"]


def test_variables_are_defined_and_used(dashboards):
    for dashboard in dashboards.values():
        defined = {v["name"] for v in dashboard["templating"]["list"]}
        text = json.dumps(dashboard["panels"]) + json.dumps([v.get("query") for v in dashboard["templating"]["list"]])
        used = set(re.findall(r"\$\{?(\w+)", text)) - {"__rate_interval", "__interval", "__range"}
        assert used <= defined, f"undefined variables {used - defined}"
        assert defined <= used, f"unused variables {defined - used}"


def test_dashboards_link_to_each_other(dashboards):
    for dashboard in dashboards.values():
        assert any(link["type"] == "dashboards" and "hpcobs" in link["tags"] for link in dashboard["links"])
        assert "hpcobs" in dashboard["tags"]
