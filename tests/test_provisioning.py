"""Grafana provisioning fits a site's Grafana: a datasource left out takes with it whatever reads it, names and the
default datasource are the site's, and the dashboards need no Grafana newer than the one they are modelled on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from hpcobs.authoring import dashboard
from hpcobs.authoring.dashboard import every_panel
from hpcobs.build import pipeline, validate
from hpcobs.settings import config as config_module
from hpcobs.settings.names import DashboardUid
from hpcobs.targets.dashboards import DASHBOARDS_DIR
from hpcobs.targets.provisioning import DATASOURCES_FILE

# A site with no log or trace store: Prometheus and Alertmanager only.
METRICS_ONLY = "grafana:\n  datasources:\n    loki: {enabled: false}\n    tempo: {enabled: false}\n"
# A site whose own Prometheus is Grafana's default: ours renamed (with a `$`, which Grafana would expand), not default.
RENAMED = (
    "grafana:\n  datasources:\n    prometheus: {name: 'HPC $metrics', is_default: false}\n    loki: {name: HPC logs}\n"
)


def _build(tmp_path_factory, text: str) -> dict[str, str]:
    site = tmp_path_factory.mktemp("site") / "site.yaml"
    site.write_text(text)
    return pipeline.generate(config_module.load(site))


@pytest.fixture(scope="module")
def metrics_only(tmp_path_factory) -> dict[str, str]:
    return _build(tmp_path_factory, METRICS_ONLY)


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> dict[str, str]:
    return _build(tmp_path_factory, RENAMED)


def provisioned(files: dict[str, str]) -> list[dict]:
    return yaml.safe_load(files[DATASOURCES_FILE])["datasources"]


def dashboards(files: dict[str, str]) -> list[dict]:
    return [json.loads(text) for path, text in files.items() if path.startswith(f"{DASHBOARDS_DIR}/")]


def walk(node: Any) -> Iterator[Any]:
    """Every value of a JSON document, containers included."""
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from walk(child)


def datasource_refs(board: dict) -> list[dict]:
    """Every datasource reference of a dashboard: panels', targets', variables', annotations'."""
    return [node["datasource"] for node in walk(board) if isinstance(node, dict) and "datasource" in node]


# --- datasources left out ----------------------------------------------------------------------------------


def test_a_metrics_only_site_provisions_prometheus_and_alertmanager_alone(metrics_only):
    assert [(d["type"], d["uid"]) for d in provisioned(metrics_only)] == [
        ("prometheus", "hpcobs-prometheus"),
        ("alertmanager", "hpcobs-alertmanager"),
    ]


def test_no_dashboard_reads_or_links_a_datasource_left_out(metrics_only, config):
    """Log panels, the Loki datasource variable and the variables only log queries read, the Tempo text panel and
    dashboard link: gone, whatever refers to them (a walk of every value, Explore URLs included)."""
    uids = {config.get("grafana", "datasources")[kind]["uid"] for kind in ("loki", "tempo")}
    boards = dashboards(metrics_only)
    assert {board["uid"] for board in boards} == set(DashboardUid)  # every dashboard has metrics: none is left out
    for board in boards:
        strings = [value for value in walk(board) if isinstance(value, str)]
        assert not [s for s in strings if any(uid in s for uid in uids)], board["uid"]
        assert not [s for s in strings if dashboard.opens(s) & {"loki", "tempo"}], board["uid"]
        assert {ref["type"] for ref in datasource_refs(board)} <= {"prometheus", "grafana"}, board["uid"]
        names = {variable["name"] for variable in board["templating"]["list"]}
        assert not names & {dashboard.LOKI_VAR, "log_selector", "log_node_label"}, board["uid"]
        assert not [p for p in board["panels"] if p["type"] in ("logs", "text")], board["uid"]


def test_a_metrics_only_site_changes_nothing_but_grafana(metrics_only, generated):
    """The rules, Loki rules, Alertmanager config and promtool tests are the default build's, byte for byte: what
    promtool and amtool prove of those holds here. Loki's rules stay: Loki's ruler loads them, not Grafana. The
    dashboards left still pass Grafana 11.6's schema."""
    outside = {path for path in generated if not path.startswith("grafana/")}
    assert {path: metrics_only[path] for path in outside} == {path: generated[path] for path in outside}
    for path in set(metrics_only) - outside:
        assert validate.schema_errors(path, metrics_only[path]) == [], path


# --- names, the default, by uid ----------------------------------------------------------------------------


def test_names_and_the_default_are_the_sites(renamed):
    by_type = {d["type"]: d for d in provisioned(renamed)}
    assert by_type["prometheus"]["name"] == "HPC $$metrics"  # Grafana expands $NAME in provisioning files
    assert [kind for kind, d in by_type.items() if d["isDefault"]] == []
    assert by_type["loki"]["name"] == "HPC logs"


def test_dashboards_select_a_renamed_non_default_datasource_by_uid(renamed):
    """Each datasource variable starts on the provisioned datasource's uid (not on Grafana's default of its kind),
    and every reference goes through those variables: no dashboard knows a datasource by name."""
    uids = {d["type"]: d["uid"] for d in provisioned(renamed)}
    for board in dashboards(renamed):
        variables = {v["name"]: v for v in board["templating"]["list"] if v["type"] == "datasource"}
        for variable in variables.values():
            assert variable["current"]["value"] == uids[variable["query"]], board["uid"]
        refs = {(ref["type"], ref["uid"]) for ref in datasource_refs(board)}
        by_variable = {(v["query"], f"${{{name}}}") for name, v in variables.items()}
        assert refs <= by_variable | {("grafana", "-- Grafana --")}, board["uid"]


# --- the Grafana the dashboards need -----------------------------------------------------------------------


def test_the_dashboards_need_no_grafana_newer_than_the_minimum(generated):
    """Every panel type, datasource type, variable type and the schemaVersion are ones the Grafana 11.6 model
    (schemas/grafana-v11.6, the schemas grafana-foundation-sdk is generated from) knows."""
    schema = validate.schema(f"grafana-v{dashboard.GRAFANA_MINIMUM}/dashboard.jsonschema.json")["definitions"]
    plugins = {path.name.removesuffix(".jsonschema.json") for path in dashboard.SCHEMA_DIR.iterdir()}
    for board in dashboards(generated):
        assert board["schemaVersion"] <= schema["Dashboard"]["properties"]["schemaVersion"]["default"]
        assert {p["type"] for p in every_panel(board)} <= plugins, board["uid"]
        assert {ref["type"] for ref in datasource_refs(board)} - {"grafana"} <= plugins, board["uid"]
        assert {v["type"] for v in board["templating"]["list"]} <= set(schema["VariableType"]["enum"]), board["uid"]
