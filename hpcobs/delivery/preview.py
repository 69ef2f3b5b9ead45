"""A built dashboard drawn as Grafana draws it, from a running Prometheus, to PNG (docs/preview.md).

The queries are issued as Grafana 11.6 and its Prometheus data source issue them: variables resolved with
label_values() in order (All where the dashboard defaults to All, else the first value), `$__interval` from the
range and the panel's width, never under the scrape interval (the data source's timeInterval), `$__rate_interval`
from it, range queries aligned to their step, instant queries at the range's end. The answers become the data
frames Grafana's data source returns: one per series (Time, Value with its labels and the rendered legendFormat),
or one per query for a table (Time, a column per label, `Value`, or `Value #<refId>` beside other queries).

The page (preview/, bundled with Grafana's Apache-2.0 libraries) draws them and reports from its DOM what each
panel shows; headless Chromium (chromium.py) takes the picture.
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import re
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from hpcobs.authoring.dashboard import every_panel, query_result_line, variable_options
from hpcobs.delivery import chromium, preview_checks, preview_digests, prometheus_api
from hpcobs.errors import UserError
from hpcobs.lang.lint import GRAFANA_VARIABLE
from hpcobs.lang.promql import duration, duration_seconds
from hpcobs.paths import ROOT
from hpcobs.settings import config as config_module
from hpcobs.targets.dashboards import folder_dir

PAGE = ROOT / "preview" / "dist"
NOT_BUILT = "preview: the page is not built: npm ci --prefix preview && npm run build --prefix preview"
# The page: its input and Grafana's public path (icons under img/icons/) beside it, served from a scratch folder.
PAGE_HTML = (
    '<!doctype html><html><head><meta charset="utf-8"><script>window.__grafana_public_path__ = "/dist/";</script>'
    '<link rel="stylesheet" href="dist/preview.css"></head><body><div id="root"></div>'
    '<script src="input.js"></script><script src="dist/preview.js"></script></body></html>\n'
)
PAGE_WIDTH = 1600  # CSS pixels; Grafana's grid spreads its 24 columns over it
GRID_COLUMNS = 24
TIMEOUT = 30
ALL = "$__all"
STATES = ("drawn", "nodata", "placeholder", "error")  # what the page reports a panel shows
# Grafana rounds the raw interval (range / data points) to the nearest of these steps: (below, step) in seconds.
ROUNDED_INTERVALS = (
    (7.5, 5), (12.5, 10), (17.5, 15), (25, 20), (45, 30), (90, 60), (210, 120), (450, 300), (750, 600),
    (1050, 900), (1500, 1200), (2700, 1800), (5400, 3600), (9000, 7200), (16200, 10800), (32400, 21600),
    (86400, 43200), (604800, 86400),
)  # fmt: skip
_LEGEND = re.compile(r"\{\{\s*(.+?)\s*\}\}")
_LABEL_VALUES = re.compile(r"\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*", re.S)
_QUERY_RESULT = re.compile(r"\s*query_result\((.*)\)\s*", re.S)
_RELATIVE = re.compile(r"now-(\d+[smhdw])")
_REGEX_SPECIAL = re.compile(r"[\\^$*+?.()|{}\[\]]")


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> int:
        return round(self.end - self.start)


class QueryError(Exception):
    """Prometheus refused a query: the panel shows the error, as Grafana's would."""


class Prometheus:
    def __init__(self, url: str):
        self.url = prometheus_api.root_url(url, "preview")

    def get(self, path: str, params: dict[str, Any]) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(address, timeout=TIMEOUT) as response:
                return json.load(response)["data"]
        except urllib.error.HTTPError as exc:
            refused = prometheus_api.api_error(exc)
            if refused is None:
                raise UserError(
                    f"preview: {self.url} answered HTTP {exc.code} to {path}: no Prometheus API at that URL"
                ) from None
            raise QueryError(refused) from None
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"preview: cannot reach Prometheus at {self.url}: {getattr(exc, 'reason', exc)}") from None


def interval(window: Window, width_px: int, min_interval: int) -> int:
    """Grafana's $__interval in seconds: the range over one point per pixel, rounded, at least `min_interval`."""
    raw = window.seconds / max(width_px, 1)
    rounded = next((step for below, step in ROUNDED_INTERVALS if raw < below), 604800)
    return max(rounded, min_interval)


def builtins(window: Window, step: int, scrape: int) -> dict[str, str]:
    return {
        "__interval": duration(step),
        "__interval_ms": str(step * 1000),
        "__rate_interval": duration(max(step + scrape, 4 * scrape)),
        "__range": f"{window.seconds}s",
        "__range_s": str(window.seconds),
        "__range_ms": str(window.seconds * 1000),
    }


def substituted(expr: str, values: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        return values.get(name, match.group(0))

    return GRAFANA_VARIABLE.sub(value, expr)


@dataclass(frozen=True)
class Variables:
    """Each variable's text in a query (a regex for multi-value ones, as Grafana's Prometheus data source writes
    it) and as shown in titles."""

    query: dict[str, str]
    shown: dict[str, str]


def resolve(
    dashboard: dict,
    prometheus: Prometheus,
    window: Window,
    given: Mapping[str, str] = {},
    focus: Mapping[str, str] = {},
) -> Variables:
    """Each variable as Grafana opens the dashboard, or as `given` (a URL's var-<name>=<value>) sets it; `focus`
    sets a variable that picks one value (the job of a job view), never one that filters a list (All)."""
    query: dict[str, str] = {}
    shown: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        name, kind = variable["name"], variable["type"]
        if name in focus and name not in given and not (variable.get("multi") or variable.get("includeAll")):
            given = {**given, name: focus[name]}
        if kind == "textbox":
            query[name] = shown[name] = given.get(name, variable.get("query", ""))
        elif kind == "query":
            options = _options(variable, query, prometheus, window)
            current = given.get(name, (variable.get("current") or {}).get("value"))
            if variable.get("includeAll") and current in (ALL, [ALL]):
                query[name] = variable.get("allValue") or f"({'|'.join(map(_regex_escaped, options))})"
                shown[name] = "All"
            else:
                # A value given is kept even when the list lacks it, as Grafana keeps a URL's value.
                picked = str(current) if current in options or name in given else (options[0] if options else "")
                regex = variable.get("multi") or variable.get("includeAll")
                query[name] = _regex_escaped(picked) if regex else picked
                shown[name] = picked
    return Variables(query, shown)


def _regex_escaped(value: str) -> str:
    """A value inside a PromQL regex matcher's string: its regex metacharacters escaped, the backslash doubled."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value)


def _options(variable: dict, values: dict[str, str], prometheus: Prometheus, window: Window) -> list[str]:
    """What the variable lists, as Grafana asks for it: label_values() over the range, query_result() at its end."""
    text = variable["query"]
    if match := _QUERY_RESULT.fullmatch(text):
        found = prometheus.get("/api/v1/query", {"query": substituted(match.group(1), values), "time": window.end})
        lines = (query_result_line(s["metric"], float(s["value"][1]), window.end) for s in found["result"])
        return variable_options(variable, lines)
    match = _LABEL_VALUES.fullmatch(text)
    if not match:
        raise UserError(f"preview: variable query {text!r}: only label_values() and query_result() are supported")
    selector, label = match.groups()
    params: dict[str, Any] = {"start": window.start, "end": window.end}
    if selector:
        params["match[]"] = substituted(selector, values)
    return variable_options(variable, prometheus.get(f"/api/v1/label/{label}/values", params))


def legend(pattern: str, labels: dict[str, str]) -> str:
    """Grafana's renderLegendFormat: {{label}} becomes its value, or the label's name when the series lacks it."""
    return _LEGEND.sub(lambda m: labels.get(m.group(1)) or m.group(1), pattern)


def _number(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # JSON has no NaN or infinity; Grafana draws a gap


def _series_frames(target: dict, result: list[dict], step: int) -> list[dict]:
    frames = []
    for series in result:
        points = series.get("values") or [series["value"]]
        config = (
            {"displayNameFromDS": legend(target["legendFormat"], series["metric"])}
            if target.get("legendFormat")
            else {}
        )
        frames.append(
            {
                "refId": target["refId"],
                "fields": [
                    {
                        "name": "Time",
                        "type": "time",
                        "values": [t * 1000 for t, _ in points],
                        "config": {"interval": step * 1000},
                    },
                    {
                        "name": "Value",
                        "type": "number",
                        "values": [_number(v) for _, v in points],
                        "labels": series["metric"],
                        "config": config,
                    },
                ],
            }
        )
    return frames


def _table_frame(target: dict, result: list[dict], value_name: str) -> dict:
    names = sorted({k for series in result for k in series["metric"]})
    return {
        "refId": target["refId"],
        "fields": [
            {"name": "Time", "type": "time", "values": [series["value"][0] * 1000 for series in result]},
            *(
                {"name": name, "type": "string", "values": [series["metric"].get(name, "") for series in result]}
                for name in names
            ),
            {"name": value_name, "type": "number", "values": [_number(series["value"][1]) for series in result]},
        ],
    }


def panel_input(panel: dict, values: dict[str, str], prometheus: Prometheus, window: Window, scrape: int) -> dict:
    """The frames of one panel, or the error or placeholder it shows instead."""
    kind = panel.get("datasource", {}).get("type", "prometheus")
    if kind != "prometheus":
        queries = "; ".join(t.get("expr", "") for t in panel.get("targets", []))
        return {"frames": [], "placeholder": f"{kind} query, not run (no {kind} given): {queries}"}
    window = _panel_window(panel.get("timeFrom"), window)
    width = round(PAGE_WIDTH * panel["gridPos"]["w"] / GRID_COLUMNS)
    step = interval(window, width, duration_seconds(panel.get("interval") or f"{scrape}s"))
    targets = [t for t in panel.get("targets", []) if not t.get("hide")]
    frames: list[dict] = []
    for target in targets:
        expr = substituted(target["expr"], {**values, **builtins(window, step, scrape)})
        try:
            if target.get("instant") and not target.get("range"):
                result = prometheus.get("/api/v1/query", {"query": expr, "time": window.end})["result"]
            else:
                start, end = (math.floor(t / step) * step for t in (window.start, window.end))
                result = prometheus.get(
                    "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step}
                )["result"]
        except QueryError as exc:
            return {"frames": [], "error": f"query {target['refId']}: {exc}"}
        if target.get("format") == "table":
            value_name = f"Value #{target['refId']}" if len(targets) > 1 else "Value"
            frames.append(_table_frame(target, result, value_name))
        else:
            frames.extend(_series_frames(target, result, step))
    return {"frames": frames}


def _panel_window(time_from: str | None, window: Window) -> Window:
    """A panel's own relative time (`timeFrom`): a duration before the end, or `now/d`, since midnight (UTC)."""
    if not time_from:
        return window
    if time_from == "now/d":
        return Window(window.end - window.end % 86400, window.end)
    return Window(window.end - duration_seconds(time_from), window.end)


def dashboard_window(dashboard: dict, end: float) -> Window:
    match = _RELATIVE.fullmatch(dashboard["time"]["from"])
    if not match or dashboard["time"]["to"] != "now":
        raise UserError(f"preview: time range {dashboard['time']}: only now-<duration> to now is supported")
    return Window(end - duration_seconds(match.group(1)), end)


def find_panel(dashboard: dict, title: str) -> dict | None:
    """The panel titled `title`, on the grid or inside a collapsed row."""
    return next((p for p in every_panel(dashboard) if p.get("title") == title), None)


def panel_alone(dashboard: dict, title: str) -> dict:
    """The dashboard with only the panel titled `title`, at the top left at its own size: drawn so, it queries with
    the step it has on the dashboard, under the same variables."""
    found = find_panel(dashboard, title)
    if found is None:
        raise UserError(f"preview: no panel titled {title!r} in dashboard {dashboard.get('uid')}; check the title")
    return {**dashboard, "panels": [{**found, "gridPos": {**found["gridPos"], "x": 0, "y": 0}}]}


def rows_opened(dashboard: dict) -> dict:
    """The dashboard as a user sees it after opening every collapsed row: a row's panels under it, in their order,
    and what is below moved down by their height."""
    panels: list[dict] = []
    shift = 0
    for panel in dashboard["panels"]:
        moved = {**panel, "gridPos": {**panel["gridPos"], "y": panel["gridPos"]["y"] + shift}}
        inner = panel.get("panels", []) if panel["type"] == "row" and panel.get("collapsed") else []
        if not inner:
            panels.append(moved)
            continue
        top = min(p["gridPos"]["y"] for p in inner)
        first = moved["gridPos"]["y"] + 1
        panels.append({**moved, "collapsed": False, "panels": []})
        panels += [{**p, "gridPos": {**p["gridPos"], "y": first + p["gridPos"]["y"] - top}} for p in inner]
        shift += max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in inner) - top
    return {**dashboard, "panels": panels}


@dataclass(frozen=True)
class Rendered:
    report: dict  # per panel: state (drawn, nodata, placeholder, error), message, text; the page's errors
    problems: list[str]  # what a drawn panel lost of its JSON (preview_checks), "title: problem"
    query_seconds: float
    render_seconds: float


def preflight() -> None:
    """One line naming the install command when the page is not built or Chromium is missing, before any work."""
    if not (PAGE / "preview.js").exists():
        raise UserError(NOT_BUILT)
    chromium.find()


def render(
    dashboard: dict,
    prometheus_url: str,
    png: Path,
    scrape: int,
    window: Window,
    given: Mapping[str, str] = {},
    focus: Mapping[str, str] = {},
) -> Rendered:
    """Query, draw and photograph one dashboard over `window`, its variables as `given`, `focus` (see resolve) or
    at their defaults."""
    prometheus = Prometheus(prometheus_url)
    began = time.monotonic()
    variables = resolve(dashboard, prometheus, window, given, focus)
    panels = {
        # A collapsed row holds its panels, which stay hidden: only the panels on the grid are queried.
        str(p["id"]): panel_input(p, variables.query, prometheus, window, scrape)
        for p in dashboard["panels"]
        if p["type"] != "row"
    }
    queried = time.monotonic()
    page_input = {
        "dashboard": dashboard,
        "width": PAGE_WIDTH,
        "from": window.start * 1000,
        "to": window.end * 1000,
        "variables": variables.shown,
        "panels": panels,
    }
    with tempfile.TemporaryDirectory(prefix="hpcobs-preview-") as scratch:
        folder = Path(scratch)
        (folder / "input.js").write_text(f"window.PREVIEW_INPUT = {json.dumps(page_input)};\n", encoding="utf-8")
        (folder / "index.html").write_text(PAGE_HTML, encoding="utf-8")
        (folder / "dist").symlink_to(PAGE)
        with _served(folder) as url, chromium.Browser(folder / "chromium.log") as browser:
            report = browser.screenshot(f"{url}/index.html", PAGE_WIDTH, "window.previewReport", png)
    by_id = {str(p["id"]): p for p in dashboard["panels"]}
    problems = [
        f"{shown['title']}: {problem}"
        for shown in report["panels"]
        for problem in preview_checks.problems(
            by_id[str(shown["id"])], panels[str(shown["id"])], shown, report["palette"]
        )
    ]
    return Rendered(report, problems, queried - began, time.monotonic() - queried)


@contextmanager
def _served(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on loopback while the page is taken: @grafana/ui fetches its icons, and a page opened
    from file:// may not fetch."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="a site's Prometheus, e.g. http://127.0.0.1:9090 (default: a simulated cluster with faults, on a "
        "loopback Prometheus started and stopped by this command)",
    )
    parser.add_argument("--dashboard", action="append", metavar="UID", help="only this dashboard (repeatable)")
    parser.add_argument(
        "--panel",
        metavar="TITLE",
        help="only the panel with this title, drawn alone at its own size, to <uid>-panel<id>.png (in every "
        "dashboard chosen that has it)",
    )
    parser.add_argument(
        "--open-rows",
        action="store_true",
        help="draw every collapsed row opened, so that every panel is queried and drawn (default: as the dashboard "
        "opens)",
    )
    parser.add_argument("--images", required=True, metavar="DIR", help="where the PNGs go, one per dashboard")
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="nodes of 8 GPUs in the simulated cluster (at least and by default 5; 128 is 1,024 GPUs); not with "
        "--prometheus",
    )
    parser.add_argument(
        "--var",
        action="append",
        metavar="NAME=VALUE",
        help="a variable's value, as var-NAME=VALUE in a Grafana URL (repeatable; default: the dashboard's own, and "
        "on the simulated cluster its training job)",
    )
    parser.add_argument("--range", metavar="DURATION", help="the range ending now (default: the dashboard's own)")


class Served(NamedTuple):
    """A Prometheus to draw from, the end of the window it holds (a site's: now) and the one-value variables that
    show what it holds (the simulated cluster's training job: the newest running job, Training's default, has no
    training metrics)."""

    url: str
    end: float
    variables: dict[str, str]


# The simulated cluster (hpcobs.proof.fault_cluster.serving, which cli passes in: delivery does not import proof):
# given the config and a window in seconds, a loopback Prometheus' URL, the end of its window and the variables that
# show its faults, while the block runs.
Simulated = Callable[[config_module.Config, int], AbstractContextManager[tuple[str, float, dict[str, str]]]]


def run(args: argparse.Namespace, simulated: Simulated) -> int:
    config = config_module.load(args.config)
    folder = Path(args.out) / folder_dir(config)
    paths = sorted(folder.glob("*.json"))
    chosen = [p for p in paths if not args.dashboard or p.stem in args.dashboard]
    if not chosen:
        raise UserError(
            f"preview: no dashboard {args.dashboard} in {folder}; build first, or pick one of "
            f"{', '.join(p.stem for p in paths)}"
        )
    preflight()
    images = Path(args.images)
    images.mkdir(parents=True, exist_ok=True)
    loaded = {path: json.loads(path.read_text(encoding="utf-8")) for path in chosen}
    if args.open_rows:
        loaded = {path: rows_opened(dashboard) for path, dashboard in loaded.items()}
    dashboards = _drawings(loaded, args.panel)
    longest = max(_range_seconds(args.range, dashboard) for dashboard in dashboards.values())
    with _prometheus(args.prometheus, simulated, config, longest) as served:
        given = _given(args.var)
        failed = sum(
            _drawn(images / name, dashboard, served, config, _window(args.range, dashboard, served.end), given)
            for name, dashboard in dashboards.items()
        )
    if not args.panel and not args.open_rows:  # a digest stands for a dashboard's picture as it opens
        preview_digests.record(images, chosen)
    return 1 if failed else 0


def _drawings(dashboards: dict[Path, dict], panel: str | None) -> dict[str, dict]:
    """What is drawn, by PNG name: each dashboard whole, or with --panel that panel alone where it is found."""
    if not panel:
        return {f"{path.stem}.png": dashboard for path, dashboard in dashboards.items()}
    drawings = {
        f"{path.stem}-panel{found['id']}.png": panel_alone(dashboard, panel)
        for path, dashboard in dashboards.items()
        if (found := find_panel(dashboard, panel))
    }
    if not drawings:
        raise UserError(
            f"preview: no panel titled {panel!r} in {', '.join(p.stem for p in dashboards)}; check the title"
        )
    return drawings


def _range_seconds(range_: str | None, dashboard: dict) -> int:
    return _window(range_, dashboard, 0).seconds


def _window(range_: str | None, dashboard: dict, end: float) -> Window:
    """`--range` ending at `end`, else the dashboard's own range."""
    return Window(end - duration_seconds(range_), end) if range_ else dashboard_window(dashboard, end)


@contextmanager
def _prometheus(
    url: str | None, simulated: Simulated, config: config_module.Config, window_seconds: int
) -> Iterator[Served]:
    """The site's Prometheus up to now, or the simulated fault cluster's for the window."""
    if url:
        yield Served(url, time.time(), {})
        return
    print("Simulating a cluster with faults on a loopback Prometheus (docs/preview.md)...", flush=True)
    with simulated(config, window_seconds) as (served, end, variables):
        yield Served(served, end, variables)


def _given(pairs: list[str] | None) -> dict[str, str]:
    """--var NAME=VALUE, as a Grafana URL's var-NAME=VALUE."""
    given = {}
    for pair in pairs or []:
        name, equals, value = pair.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise UserError(f"preview: --var {pair!r}: write NAME=VALUE, e.g. --var hpc_job=400001")
        given[name] = value
    return given


def _drawn(
    png: Path, dashboard: dict, served: Served, config: config_module.Config, window: Window, given: Mapping[str, str]
) -> int:
    """Draw one dashboard to `png`, print its summary and panels not drawn; the count of errors."""
    scrape = duration_seconds(config["scrape_interval"])
    rendered = render(dashboard, served.url, png, scrape, window, given, served.variables)
    panels, errors = rendered.report["panels"], rendered.report["errors"]
    states = {state: sum(1 for p in panels if p["state"] == state) for state in STATES}
    print(
        f"{png}: {len(panels)} panels, "
        + ", ".join(f"{n} {state}" for state, n in states.items())
        + f"; queries {rendered.query_seconds:.1f} s, drawing {rendered.render_seconds:.1f} s"
    )
    for panel in panels:
        if panel["state"] != "drawn":
            print(f"  {panel['state']:11} {panel['title']} ({panel['type']}): {panel['message'][:160]}")
    for error in errors:
        print(f"  page error: {error[:200]}")
    for problem in rendered.problems:
        print(f"  lost: {problem[:300]}")
    return states["error"] + len(errors) + len(rendered.problems)
