"""`exporters.<id>.enabled: false` removes exactly what reads the exporter (docs/configuration.md#what-enabled-does).

What an exporter feeds is derived here from the default build's generated files and the PromQL each of them
reads (hpcobs.lang.lint.metric_names), not from the build's own pruning: the exporter's raw metric names, then
every record reading one of them or a record already taken, transitively; the alerts, dashboard queries,
dashboards left with no metric query, inhibitions and Alertmanager routes that follow; the Falco rules or the
Tetragon policies of those two sensors. A build with the exporter disabled must lack exactly those, and
nothing else may change.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from hpcobs.authoring.dashboard import panel_queries
from hpcobs.build import pipeline
from hpcobs.delivery import preview
from hpcobs.errors import UserError
from hpcobs.exporters import catalogue
from hpcobs.exporters.sources import GPU_ROLES, Sources
from hpcobs.lang import lint
from hpcobs.settings import config as config_module
from hpcobs.settings.names import Team
from hpcobs.targets import alertmanager, falco, tetragon
from hpcobs.targets.dashboards import DASHBOARDS_DIR
from hpcobs.targets.loki import RULES_FILE as LOKI_RULES
from hpcobs.targets.prometheus import RULES_DIR
from tests.conftest import ROOT, run_build

# Every exporter a site may disable on its own: the GPU exporters replace each other (an AMD-only fleet builds other
# content, not less of it), and the default config already leaves AMD's off.
OPTIONAL = [role for role in config_module.load()["exporters"] if role not in GPU_ROLES]


def site(tmp_path, exporters: list[str], extra: str = ""):
    path = tmp_path / "site.yaml"
    lines = "".join(f"  {role}: {{enabled: false}}\n" for role in exporters)
    path.write_text(("exporters:\n" + lines if lines else "") + extra, encoding="utf-8")
    return config_module.load(path)


def rules(files: dict[str, str]) -> list[tuple[str, str, str]]:
    """(kind, name, expr) of every Prometheus record and alert written."""
    return [
        ("record", rule["record"], rule["expr"]) if "record" in rule else ("alert", rule["alert"], rule["expr"])
        for path, text in files.items()
        if path.startswith(RULES_DIR)
        for group in yaml.safe_load(text)["groups"]
        for rule in group["rules"]
    ]


def items(files: dict[str, str]) -> dict[str, set]:
    """What a build holds that an exporter can feed, by kind."""
    dashboards = [json.loads(text) for path, text in files.items() if path.startswith(DASHBOARDS_DIR)]
    am = yaml.safe_load(files[alertmanager.PATH])
    written = rules(files)
    return {
        "records": {name for kind, name, _ in written if kind == "record"},
        # by expression: the scrape-health alert of a job that two exporters share is named after the first one
        # enabled (alerts/exporters.py), and keeps its expression when that one is disabled
        "alerts": {expr for kind, _, expr in written if kind == "alert"},
        "dashboards": {d["uid"] for d in dashboards},
        "panel queries": {q for d in dashboards for q in panel_queries(d)},
        "falco rules": {item["rule"] for item in yaml.safe_load(files.get(falco.PATH, "[]")) or [] if "rule" in item},
        "tetragon policies": {path for path in files if path.startswith(tetragon.FOLDER + "/")},
        "inhibitions": {json.dumps(rule, sort_keys=True) for rule in am["inhibit_rules"]},
        "teams": teams_and_alerts(files)[0],
    }


def fed_by(
    exporter: str, config, disabled, files: dict[str, str], disabled_files: dict[str, str]
) -> tuple[dict[str, set], dict[str, str]]:
    """What of the default build (`config`, `files`) reads the exporter that `disabled` turns off, from the
    dependency graph of the generated files: its raw names that no exporter left on exposes, and its `up` series
    when no exporter left on is scraped with its selector (Exporter*Down). Second, the alerts narrowed rather than
    removed: written without the clause that read the exporter (`disabled_files` has them under the same name and
    reading nothing off), old expression -> new (TrainingHang without Lustre loses its checkpoint clause)."""
    before_sources, after_sources = Sources(config), Sources(disabled)
    on = {m.name for s in after_sources.enabled() for m in s.metrics()}
    off = {m.name for m in before_sources[exporter].metrics()} - on
    scraped = {s.selector() for s in after_sources.enabled()}
    selector = before_sources[exporter].selector()
    up = f"{catalogue.up_name()}{selector}" if selector not in scraped else None
    written = rules(files)
    while True:  # records reading what is off are off, transitively
        more = {name for kind, name, e in written if kind == "record" and lint.metric_names(e) & off} - off
        if not more:
            break
        off |= more

    def reads_off(expr: str, kind: str = "prometheus") -> bool:
        return kind == "prometheus" and (bool(lint.metric_names(expr) & off) or (up is not None and up in expr))

    before = items(files)
    queries = {q for q in before["panel queries"] if reads_off(q[2], q[3])}
    metric_queries = {q for q in before["panel queries"] - queries if q[3] == "prometheus"}
    dashboards = before["dashboards"] - {q[0] for q in metric_queries}
    alerts = {(name, e) for kind, name, e in written if kind == "alert" and reads_off(e)}
    kept = {name for kind, name, e in written if kind == "alert" and not reads_off(e)}
    after = {name: e for kind, name, e in rules(disabled_files) if kind == "alert" and not reads_off(e)}
    narrowed = {e: after[name] for name, e in alerts if name in after and name not in kept}
    names = {name for name, _ in alerts} - kept - set(after)
    return {
        "records": {n for n in before["records"] if n in off},
        "alerts": {expr for _, expr in alerts} - set(narrowed),
        "dashboards": dashboards,
        # a dashboard not generated takes its other queries (its log panels) with it
        "panel queries": queries | {q for q in before["panel queries"] if q[0] in dashboards},
        "falco rules": before["falco rules"] if exporter == "falco" else set(),
        "tetragon policies": before["tetragon policies"] if exporter == "tetragon" else set(),
        "teams": before["teams"] - teams_and_alerts(files, frozenset(names))[0],
    }, narrowed


def teams_and_alerts(files: dict[str, str], removed: frozenset[str] = frozenset()) -> tuple[set[str], set[str]]:
    """The teams and names of the alerts of a build, Prometheus' and Loki's, but the removed ones."""
    prometheus = [
        rule
        for path in files
        if path.startswith(RULES_DIR)
        for group in yaml.safe_load(files[path])["groups"]
        for rule in group["rules"]
        if "alert" in rule and rule["alert"] not in removed
    ]
    loki = [r for g in yaml.safe_load(files[LOKI_RULES])["groups"] for r in g["rules"] if "alert" in r]
    return {rule["labels"]["team"] for rule in prometheus + loki}, {rule["alert"] for rule in prometheus + loki}


@pytest.mark.parametrize("exporter", OPTIONAL)
def test_disabling_an_exporter_removes_exactly_what_reads_it(tmp_path, config, generated, exporter):
    disabled = site(tmp_path, [exporter])
    disabled_files = pipeline.generate(disabled)
    expected, narrowed = fed_by(exporter, config, disabled, generated, disabled_files)
    before, after = items(generated), items(disabled_files)
    assert any(expected.values()), f"the default build reads nothing of {exporter}"
    for kind, removed in expected.items():
        old, new = (set(narrowed), set(narrowed.values())) if kind == "alerts" else (set(), set())
        assert before[kind] - after[kind] == removed | old, f"{exporter}: {kind}"
        assert after[kind] - before[kind] == new, f"{exporter}: {kind} added"
    # Inhibitions name alerts, and keep those written: unchanged where they name nothing else.
    written = teams_and_alerts(pipeline.generate(disabled))[1]
    assert all(named(rule) <= written for rule in after["inhibitions"]), exporter
    assert {rule for rule in before["inhibitions"] if named(rule) <= written} <= after["inhibitions"], exporter


def named(inhibition: str) -> set[str]:
    """The alerts the positive alertname matchers of an inhibition (as items() holds it) name."""
    rule = json.loads(inhibition)
    matchers = rule["source_matchers"] + rule["target_matchers"]
    return {name for m in matchers for names in re.findall(r'^alertname=~?"(.*)"$', m) for name in names.split("|")}


def test_no_link_to_a_dashboard_not_generated(tmp_path):
    """Alerts and dashboards link only to dashboards the build writes (dashboard_url, links, data links)."""
    files = pipeline.generate(site(tmp_path, OPTIONAL))
    uids = {json.loads(text)["uid"] for path, text in files.items() if path.startswith(DASHBOARDS_DIR)}
    assert uids, "a GPU exporter alone still has dashboards"
    linked = {uid for text in files.values() for uid in re.findall(r"/d/(hpcobs-[a-z-]+)", text)}
    assert linked <= uids


def test_a_route_no_alert_can_reach_is_not_required(tmp_path):
    """Without Falco, Tetragon and Lustre, no alert goes to the security team: a site needs no route for it. With
    them, the same routes are refused, naming the team."""
    routes = "".join(
        f"    - {{receiver: default, match: {{team: {team}}}}}\n"
        for team in Team
        if team not in (Team.NONE, Team.SECURITY)
    )
    extra = "alertmanager:\n  receivers: [{name: default}]\n  routes:\n" + routes
    model = pipeline.model(site(tmp_path, ["falco", "tetragon", "lustre"], extra))
    assert not model.falco_rules and not model.tetragon_policies
    with pytest.raises(UserError, match=r"alertmanager.routes: no route for team 'security'"):
        pipeline.model(site(tmp_path, [], extra))


def test_every_gpu_exporter_disabled_is_refused(tmp_path):
    with pytest.raises(UserError) as caught:
        site(tmp_path, ["dcgm"])
    assert caught.value.lines == [
        f"config error: {tmp_path / 'site.yaml'}: exporters.dcgm.enabled: every GPU exporter is disabled (dcgm, amd); "
        "enable the one the fleet runs (dcgm for NVIDIA, amd for AMD)"
    ]


def test_all_optional_exporters_disabled_build_and_pass_promtool(tmp_path):
    """Every exporter but dcgm-exporter off: the build writes, validates and runs every promtool test of what is
    left (build.py exits non-zero on a failing one)."""
    config_path = tmp_path / "site.yaml"
    site(tmp_path, OPTIONAL)
    result = run_build("--config", str(config_path), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    left = {p.name for p in (tmp_path / "out" / RULES_DIR).iterdir()}
    assert left and all(not p.startswith(("training", "storage", "security")) for p in left), left


@pytest.mark.parametrize("exporters", [[role] for role in OPTIONAL] + [OPTIONAL], ids=lambda e: "+".join(e))
def test_dashboards_left_are_laid_out_whole(tmp_path, exporters):
    """Panels narrowed to the queries left keep a valid layout: ids 1..n in order, no overlap once every collapsed
    row is opened, no empty row, no panel without a query but text."""
    files = pipeline.generate(site(tmp_path, exporters))
    for path, text in files.items():
        if not path.startswith(DASHBOARDS_DIR):
            continue
        panels = preview.rows_opened(json.loads(text))["panels"]
        assert [p["id"] for p in panels] == list(range(1, len(panels) + 1)), path
        kinds = [p["type"] for p in panels]
        assert all(a != "row" or b != "row" for a, b in zip(kinds, kinds[1:], strict=False)), path
        assert kinds[-1] != "row", path
        assert all(p.get("targets") for p in panels if p["type"] not in ("row", "text")), path
        cells: set[tuple[int, int]] = set()
        for panel in panels:
            grid = panel["gridPos"]
            area = {
                (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
            }
            assert grid["x"] + grid["w"] <= 24 and not area & cells, f"{path}: {panel['title']}"
            cells |= area


def test_an_inhibition_naming_several_alerts_keeps_those_left(tmp_path):
    """node_exporter off: a node gone is still told by dcgm-exporter's scrape, so the inhibition stays for it."""
    inhibitions = yaml.safe_load(pipeline.generate(site(tmp_path, ["node_exporter"]))[alertmanager.PATH])[
        "inhibit_rules"
    ]
    assert ['alertname="ExporterDcgmDown"'] in [rule["source_matchers"] for rule in inhibitions]


def test_configuration_doc_counts_what_each_exporter_feeds(tmp_path, config, generated):
    """docs/configuration.md#what-enabled-does: its table's counts are those derived here."""
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = doc.partition("| disabled role | records | alerts | dashboard queries | inhibitions changed or dropped |")[
        2
    ]
    rows = {
        cells[0]: [int(c) for c in cells[1:5]]
        for line in table.split("\n\n")[0].splitlines()[2:]
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }
    derived = {}
    for exporter in OPTIONAL:
        disabled = site(tmp_path, [exporter])
        disabled_files = pipeline.generate(disabled)
        fed, _ = fed_by(exporter, config, disabled, generated, disabled_files)
        inhibitions = items(generated)["inhibitions"] - items(disabled_files)["inhibitions"]
        derived[exporter] = [len(fed[k]) for k in ("records", "alerts", "panel queries")] + [len(inhibitions)]
    assert rows == derived
