"""Every panel of every dashboard drawn with Grafana's own panel libraries in headless Chromium, from the fault cluster
`build.py preview` simulates (hpcobs/proof/fault_cluster.py) on a loopback Prometheus, every collapsed row opened:
- each panel draws data, without an error on the panel or the page;
- "No data" only on a panel about faults (DashboardSpec `shows=`) none of which the fault cluster places;
- a placeholder only where nothing can draw: a Loki panel (no Loki here), a text panel;
- nothing lost between the JSON and the drawing (hpcobs/delivery/preview_checks.py: units, thresholds and their
  colours, overrides, legends, merged table rows), read from the DOM and Grafana's display values.
And the checks find what a broken panel loses, on the same page: an override naming no column, a merge that does not
join its queries, a legend left to the raw labels."""

import copy
import json

import pytest

from hpcobs import dashboards as dashboard_modules
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import fault_panels
from hpcobs.delivery import preview
from hpcobs.proof import fault_cluster
from hpcobs.settings import config as config_module
from tests.conftest import MEASUREMENT, ROOT

pytestmark = pytest.mark.live

DASHBOARDS = sorted((ROOT / "out" / "grafana" / "dashboards").glob("*/*.json"))
NO_COMPONENT = {"text"}  # what no Apache-2.0 library draws; Loki panels are placeholders for want of a Loki


def _broken(dashboard: dict) -> dict:
    """Three panels of `dashboard` broken as a change could break them, alone on a dashboard of their own."""

    def panel(title: str) -> dict:
        return copy.deepcopy(next(p for p in dashboard["panels"] if p.get("title") == title))

    renamed = panel("Nodes, worst first")  # the Unhealthy column's colours, for a header that no longer exists
    unhealthy = next(o for o in renamed["fieldConfig"]["overrides"] if "Unhealthy" in o["matcher"]["options"]["names"])
    unhealthy["matcher"]["options"]["names"] = ["Value #Z", "Sick"]
    unjoined = {**panel("Nodes, worst first"), "id": 901, "title": "Nodes merged first"}
    unjoined["transformations"] = [unjoined["transformations"][i] for i in (1, 0, 2)]
    unnamed = {**panel("GPUs in the cluster: allocated, idle, unhealthy"), "id": 902}
    for target in unnamed["targets"]:
        target["legendFormat"] = ""
    return {**dashboard, "uid": "broken", "panels": [renamed, unjoined, unnamed]}


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    preview.preflight()  # `make setup` builds the page and the README's command installs Chromium: never skipped
    config = config_module.load(None)
    dashboards = {path.stem: preview.rows_opened(json.loads(path.read_text(encoding="utf-8"))) for path in DASHBOARDS}
    dashboards["broken"] = _broken(dashboards["hpcobs-gpu-cluster"])
    folder = tmp_path_factory.mktemp("preview")
    longest = max(preview.dashboard_window(d, 0).seconds for d in dashboards.values())
    with fault_cluster.serving(config, longest) as (url, end, focus):
        return {
            uid: (
                dashboard,
                preview.render(
                    dashboard, url, folder / f"{uid}.png", 30, preview.dashboard_window(dashboard, end), {}, focus
                ),
            )
            for uid, dashboard in dashboards.items()
        }


def _allowed_empty() -> dict[tuple[str, str], tuple[str, ...]]:
    """(dashboard uid, panel title) -> the faults it shows, for the panels about faults the cluster does not place."""
    ctx = Context(config_module.load(None))
    specs = [module.dashboard(ctx) for module in dashboard_modules.MODULES]
    return {
        (spec.uid, title): shows
        for spec in specs
        for title, shows in fault_panels(spec).items()
        if not set(shows) & set(fault_cluster.FAULTS)
    }


def test_every_panel_draws_its_data_with_nothing_lost(drawn, record_property):
    allowed_empty = _allowed_empty()
    failures, counts = [], {}
    for uid, (dashboard, rendered) in drawn.items():
        if uid == "broken":
            continue
        report = rendered.report
        expected = [p for p in dashboard["panels"] if p["type"] != "row"]
        assert len(report["panels"]) == len(expected), f"{uid}: {len(report['panels'])} of {len(expected)} drawn"
        failures += [f"{uid}: page error: {error}" for error in report["errors"]]
        failures += [f"{uid} / {problem}" for problem in rendered.problems]
        by_id = {p["id"]: p for p in expected}
        for shown in report["panels"]:
            panel, state = by_id[shown["id"]], shown["state"]
            counts[state] = counts.get(state, 0) + 1
            loki = panel.get("datasource", {}).get("type") == "loki"
            allowed = {
                "drawn": not loki and panel["type"] not in NO_COMPONENT,
                "placeholder": loki or panel["type"] in NO_COMPONENT,
                "nodata": (uid, panel["title"]) in allowed_empty,
                "error": False,
            }[state]
            if not allowed:
                failures.append(f"{uid} / {panel['title']} ({panel['type']}): {state} {shown.get('message', '')}")
    measured = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    record_property(MEASUREMENT, f"preview of every dashboard, every row opened: {measured}")
    assert not failures, "\n".join(failures)


def test_the_checks_find_an_override_a_merge_and_a_legend_lost(drawn):
    _, rendered = drawn["broken"]
    lost = "\n".join(rendered.problems)
    assert "the override for Value #Z / Sick matches no field" in lost
    assert "Nodes merged first: rows repeat for gpu001" in lost
    assert "GPUs in the cluster: allocated, idle, unhealthy: legend shows" in lost
    assert len(rendered.problems) == 3, lost
