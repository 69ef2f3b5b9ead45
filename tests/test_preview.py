"""`build.py preview` without a Prometheus or a browser: the intervals, variables and frames Grafana's Prometheus
data source would use, the one line a machine without Chromium or the built page gets, and docs/img's pictures
drawn from the dashboards out/ holds now, and which panel --panel draws. (A picture itself is drawn by the live test
of tests/test_diff_images.py.)"""

from pathlib import Path

import pytest

from hpcobs import cli
from hpcobs.delivery import chromium, preview, preview_digests
from hpcobs.delivery.preview import Window
from tests.conftest import ROOT

SIX_HOURS = Window(0, 6 * 3600)


@pytest.mark.parametrize(
    ("width", "scrape", "interval", "rate_interval"),
    [
        (1600, 30, "30s", "2m"),  # 13.5 s a pixel: rounded to 15 s, below the scrape interval
        (267, 30, "1m", "2m"),  # a quarter-width panel: 81 s a pixel, rounded to 1 m
        (267, 120, "2m", "8m"),  # a 2 m scrape: never under it, and $__rate_interval four scrapes
    ],
)
def test_intervals_follow_the_width_and_never_go_under_the_scrape(width, scrape, interval, rate_interval):
    step = preview.interval(SIX_HOURS, width, scrape)
    values = preview.builtins(SIX_HOURS, step, scrape)
    assert (values["__interval"], values["__rate_interval"], values["__range"]) == (interval, rate_interval, "21600s")


def test_legend_format_renders_as_grafana_does():
    # A label the series lacks is written as its name (Grafana's renderLegendFormat).
    assert preview.legend("GPU {{gpu}} {{ clock_event }}", {"gpu": "3"}) == "GPU 3 clock_event"


class _Prometheus:
    """Answers label values and queries from fixed results, recording what was asked."""

    def __init__(self, labels: dict[str, list[str]], results: dict[str, list[dict]]):
        self.labels, self.results, self.asked = labels, results, []

    def get(self, path, params):
        self.asked.append((path, params))
        if path.startswith("/api/v1/label/"):
            return self.labels[path.split("/")[4]]
        return {"result": self.results[params["query"]]}


def test_variables_default_to_all_or_the_first_value_in_order():
    dashboard = {
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource"},
                {"name": "cluster", "type": "query", "query": "label_values(cluster:gpus:count, cluster)"},
                {
                    "name": "node",
                    "type": "query",
                    "query": 'label_values(node:gpus:count{cluster="$cluster"}, node)',
                    "multi": True,
                    "includeAll": True,
                    "allValue": ".*",
                    "current": {"value": "$__all"},
                },
                {"name": "log_selector", "type": "textbox", "query": '{job="node-journal"}'},
            ]
        }
    }
    prometheus = _Prometheus({"cluster": ["b", "a"], "node": ["gpu1"]}, {})
    variables = preview.resolve(dashboard, prometheus, SIX_HOURS)
    assert variables.query == {"cluster": "a", "node": ".*", "log_selector": '{job="node-journal"}'}
    assert variables.shown["node"] == "All"
    assert prometheus.asked[1][1]["match[]"] == 'node:gpus:count{cluster="a"}'


def _target(ref_id, expr, **keywords):
    return {"refId": ref_id, "expr": expr, "legendFormat": "", "format": "time_series", **keywords}


def _panel(*targets):
    return {"type": "table", "datasource": {"type": "prometheus"}, "gridPos": {"w": 24}, "targets": list(targets)}


def test_a_table_of_two_queries_has_a_frame_per_query_with_value_columns_named_by_ref_id():
    series = [{"metric": {"__name__": "up", "node": "gpu1"}, "value": [100, "1"]}]
    prometheus = _Prometheus({}, {"up": series, "down": [{"metric": {"node": "gpu1"}, "value": [100, "NaN"]}]})
    panel = _panel(_target("A", "up", format="table", instant=True), _target("B", "down", format="table", instant=True))
    frames = preview.panel_input(panel, {}, prometheus, SIX_HOURS, 30)["frames"]
    assert [[f["name"] for f in frame["fields"]] for frame in frames] == [
        ["Time", "__name__", "node", "Value #A"],
        ["Time", "node", "Value #B"],
    ]
    assert frames[1]["fields"][-1]["values"] == [None]  # NaN is a gap, as in Grafana


def test_a_range_query_is_aligned_to_its_step_with_one_frame_per_series_named_by_its_legend():
    series = [{"metric": {"gpu": "0"}, "values": [[0, "1"], [30, "2"]]}]
    prometheus = _Prometheus({}, {"rate(x[2m])": series})
    panel = {**_panel(_target("A", "rate(x[$__rate_interval])", legendFormat="GPU {{gpu}}")), "type": "timeseries"}
    (frame,) = preview.panel_input(panel, {}, prometheus, Window(7, 6 * 3600 + 7), 30)["frames"]
    assert prometheus.asked[0][1] == {"query": "rate(x[2m])", "start": 0, "end": 21600, "step": 30}
    assert frame["fields"][1]["config"] == {"displayNameFromDS": "GPU 0"}
    assert frame["fields"][0]["values"] == [0, 30000]


def test_a_loki_panel_is_a_placeholder_naming_its_query():
    panel = {"type": "logs", "datasource": {"type": "loki"}, "targets": [{"expr": '{job="x"} |= "Xid"'}]}
    shown = preview.panel_input(panel, {}, _Prometheus({}, {}), SIX_HOURS, 30)
    assert shown == {"frames": [], "placeholder": 'loki query, not run (no loki given): {job="x"} |= "Xid"'}


def test_a_panel_of_today_reads_since_midnight():
    prometheus = _Prometheus({}, {"sum_over_time(x[3600s])": []})
    panel = {**_panel(_target("A", "sum_over_time(x[$__range])", instant=True)), "timeFrom": "now/d"}
    preview.panel_input(panel, {}, prometheus, Window(3 * 86400 - 6 * 3600, 3 * 86400 + 3600), 30)
    assert prometheus.asked == [("/api/v1/query", {"query": "sum_over_time(x[3600s])", "time": 3 * 86400 + 3600})]


DOCS_IMAGES = ROOT / "docs" / "img"
REGENERATE = "python build.py preview --nodes 128 --range 90m --images docs/img"


def test_docs_images_were_drawn_from_the_dashboards_out_holds():
    dashboards = sorted((ROOT / "out" / "grafana" / "dashboards").glob("*/*.json"))
    stale = preview_digests.stale(DOCS_IMAGES, dashboards)
    assert not stale, f"docs/img is older than the dashboards {', '.join(stale)} in out/: {REGENERATE}"


def test_a_digest_names_the_dashboards_changed_since_their_picture(tmp_path):
    drawn, changed = tmp_path / "a.json", tmp_path / "b.json"
    for path in (drawn, changed):
        path.write_text("{}")
        (tmp_path / f"{path.stem}.png").write_bytes(b"")
    preview_digests.record(tmp_path, [drawn, changed])
    changed.write_text('{"title": "new"}')
    assert preview_digests.stale(tmp_path, [drawn, changed]) == ["b"]


@pytest.mark.parametrize("missing", ["page", "chromium"])
def test_a_machine_without_chromium_or_the_built_page_gets_one_line_naming_the_install(missing, monkeypatch, tmp_path):
    monkeypatch.setattr(preview, "PAGE", tmp_path)
    if missing == "chromium":  # the page built (CI has none), Chromium nowhere
        (tmp_path / "preview.js").write_text("")
        monkeypatch.setattr(chromium.shutil, "which", lambda name: None)
    with pytest.raises(preview.UserError) as raised:
        preview.preflight()
    expected = preview.NOT_BUILT if missing == "page" else chromium.MISSING
    assert raised.value.lines == [expected]


def test_preview_without_the_built_page_says_so_in_one_line_before_simulating(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(preview, "PAGE", tmp_path)
    monkeypatch.setattr(preview, "_prometheus", None)  # reached only past the check: it would fail loudly
    assert cli.main(["preview", "--images", str(tmp_path / "img")]) == 2
    assert capsys.readouterr().err == preview.NOT_BUILT + "\n"


def test_preview_panel_draws_that_panel_alone_from_each_dashboard_that_has_it():
    stat = {"type": "stat", "title": "Up", "id": 4, "gridPos": {"x": 8, "y": 2, "w": 6, "h": 4}}
    dashboards = {Path("a.json"): {"uid": "a", "panels": [stat]}, Path("b.json"): {"uid": "b", "panels": []}}
    drawings = preview._drawings(dashboards, "Up")
    assert list(drawings) == ["a-panel4.png"]
    assert drawings["a-panel4.png"]["panels"] == [{**stat, "gridPos": {"x": 0, "y": 0, "w": 6, "h": 4}}]
    assert list(preview._drawings(dashboards, None)) == ["a.png", "b.png"]
    with pytest.raises(preview.UserError, match="no panel titled 'Down' in a, b; check the title"):
        preview._drawings(dashboards, "Down")


def test_rows_opened_puts_a_collapsed_rows_panels_under_it_and_moves_the_rest_down():
    def at(y, h=4, **keywords):
        return {"gridPos": {"x": 0, "y": y, "w": 12, "h": h}, **keywords}

    inner = [at(40, type="stat", id=3), at(44, h=6, type="table", id=4)]  # where they were when the row was open
    dashboard = {
        "panels": [
            at(0, type="stat", id=1),
            at(4, h=1, type="row", id=2, collapsed=True, panels=inner),
            at(5, h=1, type="row", id=5, collapsed=False, panels=[]),
        ]
    }
    opened = preview.rows_opened(dashboard)["panels"]
    assert [(p["id"], p["gridPos"]["y"]) for p in opened] == [(1, 0), (2, 4), (3, 5), (4, 9), (5, 15)]
    assert opened[1]["collapsed"] is False and opened[1]["panels"] == []
