"""Dashboard helpers over grafanalib, and the clean-up that turns its output into the Grafana 11 model.

Content writes rows of panels from small helpers; layout (gridPos) is computed here, never typed:

    Row("Fleet", [stat("GPUs", "count(gpu:utilization:ratio)", unit="none", description="...")])

grafanalib builds the dashboard shell (dashboard, rows, the tag link); panels are written here as the
Grafana 11 model directly, with `options` and `fieldConfig.defaults.custom` valid against the per-panel
schemas (schemas/grafana-v11.6/<panel>.jsonschema.json) and targets valid against the Prometheus and Loki
`dataquery` schemas; build() checks both, then prune() cleans the whole against the dashboard schema.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grafanalib.core as g
import jsonschema
from grafanalib._gen import DashboardEncoder

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "grafana-v11.6"
SCHEMA_VERSION = 39          # Grafana 11.0-11.6 read it without migration
GRID_WIDTH = 24
DATASOURCE_VAR = "datasource"
LOKI_VAR = "loki"
PROMETHEUS = {"type": "prometheus", "uid": "${%s}" % DATASOURCE_VAR}
LOKI = {"type": "loki", "uid": "${%s}" % LOKI_VAR}
ALL = ".*"                   # the value "All" stands for in multi-value variables (regex matchers)

Thresholds = tuple[tuple[float | None, str], ...]


# --------------------------------------------------------------------------------------------- content

@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Column:
    """A value column of a table: one instant query, its header (with the unit: tables have one unit, see
    _table_config) and colours."""
    expr: str
    name: str
    thresholds: Thresholds = ()
    cell: str = "auto"           # auto | color-text | color-background


@dataclass(frozen=True)
class Link:
    """A data link (panel field) or dashboard link. `field`: the table column whose value the link carries."""
    title: str
    url: str
    field: str | None = None


@dataclass(frozen=True)
class Panel:
    kind: str                   # timeseries | stat | table | heatmap | bargauge | logs | text
    title: str
    queries: tuple[Query, ...]
    unit: str
    description: str
    width: int = 12
    height: int = 8
    thresholds: Thresholds = ((None, "green"),)
    min: float | None = None
    max: float | None = None
    links: tuple[Link, ...] = ()
    mappings: tuple[dict, ...] = ()
    columns: tuple[Column, ...] = ()       # tables: one per query, same order
    labels: tuple[str, ...] = ()           # tables: label columns shown, in order (others hidden)
    stack: bool = False
    time_from: str | None = None           # panel-relative time, e.g. "now/d" (today so far)
    content: str = ""                      # text panels (markdown)
    text_mode: str = "auto"                # stat: auto | value_and_name | name
    # The simulator's fault scenarios this panel is about (hpcobs.simulate.kinds()): a panel that is empty
    # on a healthy cluster names the fault that fills it, and the live tests check it on that fault.
    shows: tuple[str, ...] = ()


def _queries(expr: str | Query | list[Query], legend: str, instant: bool) -> tuple[Query, ...]:
    if isinstance(expr, str):
        return (Query(expr, legend, instant),)
    if isinstance(expr, Query):
        return (expr,)
    return tuple(expr)


def timeseries(title: str, expr: str | list[Query], *, unit: str, description: str, legend: str = "",
               width: int = 12, height: int = 8, **kw: Any) -> Panel:
    return Panel("timeseries", title, _queries(expr, legend, False), unit, description, width, height, **kw)


def stat(title: str, expr: str | list[Query], *, unit: str, description: str, legend: str = "", width: int = 6,
         height: int = 4, **kw: Any) -> Panel:
    return Panel("stat", title, _queries(expr, legend, True), unit, description, width, height, **kw)


def bargauge(title: str, expr: str | list[Query], *, unit: str, description: str, legend: str = "",
             width: int = 12, height: int = 8, **kw: Any) -> Panel:
    """Current value per series as horizontal bars (instant query)."""
    return Panel("bargauge", title, _queries(expr, legend, True), unit, description, width, height, **kw)


def heatmap(title: str, expr: str, *, unit: str, description: str, legend: str, width: int = 24,
            height: int = 10, **kw: Any) -> Panel:
    """Grafana 11 heatmap of pre-bucketed data: one row per series (e.g. per node), calculate=false."""
    return Panel("heatmap", title, _queries(expr, legend, False), unit, description, width, height, **kw)


def table(title: str, columns: list[Column], *, labels: list[str], description: str, width: int = 24,
          height: int = 10, links: tuple[Link, ...] = (), **kw: Any) -> Panel:
    """Instant queries merged on their labels: label columns, then one column per query."""
    queries = tuple(Query(c.expr, "", True) for c in columns)
    return Panel("table", title, queries, "none", description, width, height, columns=tuple(columns),
                 labels=tuple(labels), links=links, **kw)


def logs(title: str, expr: str, *, description: str, width: int = 24, height: int = 10, **kw: Any) -> Panel:
    """Log lines from the Loki datasource variable (LogQL)."""
    return Panel("logs", title, (Query(expr),), "none", description, width, height, **kw)


def text(title: str, content: str, *, description: str, width: int = 24, height: int = 3) -> Panel:
    """Markdown help or links (variables such as $hpc_job are interpolated by Grafana)."""
    return Panel("text", title, (), "none", description, width, height, content=content)


def value_range(low: float | None, high: float | None, text_: str, color: str) -> dict:
    """A value mapping from a numeric range (inclusive) to a label and colour."""
    options: dict = {"result": {"text": text_, "color": color}}
    if low is not None:
        options["from"] = low
    if high is not None:
        options["to"] = high
    return {"type": "range", "options": options}


def dashboard_url(uid: str, **variables: str) -> str:
    """A link to a dashboard keeping the time range; variables as var-<name>=<value>."""
    query = "&".join(["${__url_time_range}"] + [f"var-{k}={v}" for k, v in variables.items()])
    return f"/d/{uid}?{query}"


def explore_url(datasource_uid: str, datasource_type: str, query: str, query_type: str) -> str:
    """Grafana Explore with one query on a datasource, over the dashboard's time range."""
    pane = {"datasource": datasource_uid,
            "queries": [{"refId": "A", "datasource": {"type": datasource_type, "uid": datasource_uid},
                         "queryType": query_type, "query": query}],
            "range": {"from": "${__from}", "to": "${__to}"}}
    state = json.dumps({"a": pane}, separators=(",", ":"))
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(state, safe="${}_")


@dataclass(frozen=True)
class Row:
    title: str
    panels: list[Panel]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str                  # label_values(...) on a recorded series; a textbox's default value
    multi: bool = False
    include_all: bool = False
    kind: str = "query"         # query | textbox
    description: str = ""


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    links_tag: str = "hpcobs"
    time_from: str = "now-6h"
    refresh: str = "1m"
    links: tuple[Link, ...] = ()            # dashboard links (other dashboards, Explore)
    alerts: str = ""                        # PromQL matchers selecting this dashboard's ALERTS
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- layout

def _layout(rows: tuple[Row, ...]) -> list[tuple[Row, list[tuple[Panel, g.GridPos]]]]:
    """Pack each row's panels left to right, wrapping at the grid width; rows stack vertically."""
    out, y = [], 0
    for row in rows:
        y += 1                              # the row header
        x, line_height, placed = 0, 0, []
        for panel in row.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            placed.append((panel, g.GridPos(h=panel.height, w=panel.width, x=x, y=y)))
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
        out.append((row, placed))
    return out


# --------------------------------------------------------------------------------------------- panels

def _thresholds(steps: Thresholds) -> dict:
    """Grafana stores the base step as -Infinity (null); the schema wants a number, and Grafana resets
    the first step to -Infinity on load, so 0 is written for it."""
    return {"mode": "absolute",
            "steps": [{"color": color, "value": 0 if value is None else value} for value, color in steps]}


_LEGEND = {"displayMode": "list", "placement": "bottom", "showLegend": True, "calcs": []}
_REDUCE = {"calcs": ["lastNotNull"], "fields": "", "values": False}
_HIDE = {"tooltip": False, "legend": False, "viz": False}


def _options(p: Panel) -> dict:
    if p.kind == "timeseries":
        return {"legend": _LEGEND, "tooltip": {"mode": "multi", "sort": "desc"}}
    if p.kind == "stat":
        return {"graphMode": "area", "colorMode": "value", "justifyMode": "auto", "textMode": p.text_mode,
                "wideLayout": True, "showPercentChange": False, "reduceOptions": _REDUCE,
                "percentChangeColorMode": "standard", "orientation": "auto"}
    if p.kind == "bargauge":
        return {"displayMode": "gradient", "valueMode": "color", "namePlacement": "auto", "showUnfilled": True,
                "sizing": "auto", "minVizWidth": 8, "minVizHeight": 16, "maxVizHeight": 300,
                "legend": dict(_LEGEND, showLegend=False), "reduceOptions": _REDUCE, "orientation": "horizontal"}
    if p.kind == "table":
        return {"frameIndex": 0, "showHeader": True, "cellHeight": "sm",
                "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": []},
                "sortBy": [{"displayName": p.columns[0].name, "desc": True}] if p.columns else []}
    if p.kind == "heatmap":
        return {"calculate": False, "cellGap": 1, "showValue": "never",
                "rowsFrame": {"layout": "auto"},
                "color": {"mode": "scheme", "scheme": "RdYlGn", "fill": "dark-orange", "scale": "exponential",
                          "exponent": 0.5, "steps": 64, "reverse": False,
                          **({"min": p.min} if p.min is not None else {}),
                          **({"max": p.max} if p.max is not None else {})},
                "yAxis": {"axisPlacement": "left", "reverse": False},
                "cellValues": {"unit": p.unit},
                "legend": {"show": True},
                "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "filterValues": {"le": 1e-9}}
    if p.kind == "logs":
        return {"showLabels": True, "showCommonLabels": False, "showTime": True, "showLogContextToggle": True,
                "wrapLogMessage": True, "prettifyLogMessage": False, "enableLogDetails": True,
                "sortOrder": "Descending", "dedupStrategy": "none"}
    if p.kind == "text":
        return {"mode": "markdown", "content": p.content,
                "code": {"language": "plaintext", "showLineNumbers": False, "showMiniMap": False}}
    raise ValueError(f"unsupported panel kind {p.kind!r}")


def _custom(p: Panel) -> dict | None:
    if p.kind == "timeseries":
        custom = {"drawStyle": "line", "lineInterpolation": "linear", "lineWidth": 1, "fillOpacity": 10,
                  "gradientMode": "none", "showPoints": "never", "pointSize": 4, "spanNulls": False,
                  "axisPlacement": "auto", "axisLabel": "", "axisBorderShow": False, "axisCenteredZero": False,
                  "axisColorMode": "text", "barAlignment": 0, "insertNulls": False,
                  "scaleDistribution": {"type": "linear"}, "hideFrom": _HIDE,
                  "thresholdsStyle": {"mode": "off"},
                  "stacking": {"mode": "normal" if p.stack else "none", "group": "A"}}
        if p.stack:
            custom["fillOpacity"] = 60
        if p.min is not None:
            custom["axisSoftMin"] = p.min
        if p.max is not None:
            custom["axisSoftMax"] = p.max
        return custom
    if p.kind == "heatmap":
        return {"scaleDistribution": {"type": "linear"}, "hideFrom": _HIDE}
    if p.kind == "table":
        # cellOptions is left to overrides: the schema's TableCellOptions oneOf matches any value several times.
        return {"align": "auto", "inspect": False, "filterable": True}
    return None


def _target(q: Query, index: int, p: Panel) -> dict:
    ref = chr(ord("A") + index)
    if p.kind == "logs":
        return {"refId": ref, "expr": q.expr, "queryType": "range", "editorMode": "code", "datasource": LOKI,
                "maxLines": 1000}
    instant = q.instant or p.kind == "table"
    return {"refId": ref, "expr": q.expr, "legendFormat": q.legend, "instant": instant, "range": not instant,
            "format": "table" if p.kind == "table" else "time_series", "editorMode": "code",
            "datasource": PROMETHEUS}


def _link(link: Link) -> dict:
    """A data link. The schema types field links as dashboard links, so their required keys are added
    (Grafana ignores them on a data link; keepTime/includeVars are carried by the URL itself)."""
    return {"title": link.title, "url": link.url, "targetBlank": False, "type": "link", "icon": "external link",
            "tooltip": link.title, "tags": [], "asDropdown": False, "includeVars": False, "keepTime": False}


def _table_config(p: Panel) -> tuple[list[dict], list[dict]]:
    """Overrides (per-column colours) and transformations (merge, keep, order and rename the columns).

    The official dashboard schema types an override's matcher options and property values as objects,
    so only object-valued overrides are written (byNames matcher; thresholds, color, cellOptions):
    headers are renamed by the organize transformation, a column's unit is part of its header and its
    query, and data links sit in the defaults (every cell of the row opens the same target)."""
    single = len(p.columns) == 1          # one query: Grafana names its value field "Value", not "Value #A"
    raw = ["Value"] if single else [f"Value #{chr(ord('A') + i)}" for i in range(len(p.columns))]
    overrides = []
    for field_name, column in zip(raw, p.columns):
        props: list[dict] = []
        if column.thresholds:
            props += [{"id": "thresholds", "value": _thresholds(column.thresholds)},
                      {"id": "color", "value": {"mode": "thresholds"}}]
        if column.cell != "auto":
            props.append({"id": "custom.cellOptions",
                          "value": {"type": column.cell, **({"mode": "basic"} if column.cell == "color-background" else {})}})
        if props:
            overrides.append({"matcher": {"id": "byNames", "options": {"mode": "include", "names": [field_name, column.name]}},
                              "properties": props})
    order = {name: i for i, name in enumerate([*p.labels, *raw])}
    transformations = [
        {"id": "merge", "options": {}},
        {"id": "filterFieldsByName", "options": {"include": {"pattern": "^(%s|Value.*)$" % "|".join(p.labels)}}},
        {"id": "organize", "options": {"excludeByName": {}, "indexByName": order,
                                       "renameByName": {f: c.name for f, c in zip(raw, p.columns)}}},
    ]
    return overrides, transformations


def _panel(p: Panel, grid: g.GridPos, panel_id: int) -> dict:
    out: dict[str, Any] = {"type": p.kind, "id": panel_id, "title": p.title, "description": p.description,
                           "gridPos": {"h": grid.h, "w": grid.w, "x": grid.x, "y": grid.y}, "options": _options(p)}
    if p.kind == "text":
        out["fieldConfig"] = {"defaults": {}, "overrides": []}
        return out
    out["datasource"] = LOKI if p.kind == "logs" else PROMETHEUS
    out["targets"] = [_target(q, i, p) for i, q in enumerate(p.queries)]
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": _thresholds(p.thresholds),
                                "mappings": list(p.mappings),
                                "color": {"mode": "palette-classic" if p.kind == "timeseries" else "thresholds"}}
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    custom = _custom(p)
    if custom is not None:
        defaults["custom"] = custom
    overrides: list[dict] = []
    if p.kind == "table":
        overrides, out["transformations"] = _table_config(p)
    defaults_links = [_link(link) for link in p.links]
    if defaults_links:
        defaults["links"] = defaults_links
    out["fieldConfig"] = {"defaults": defaults, "overrides": overrides}
    if p.time_from:
        out["timeFrom"] = p.time_from
    return out


# --------------------------------------------------------------------------------------------- dashboard

def _variables(spec: DashboardSpec, uses_loki: bool) -> list[dict]:
    out = [{"name": DATASOURCE_VAR, "label": "Data source", "type": "datasource", "query": "prometheus",
            "hide": 0, "refresh": 1}]
    if uses_loki:
        out.append({"name": LOKI_VAR, "label": "Logs", "type": "datasource", "query": "loki", "hide": 0, "refresh": 1})
    for v in spec.variables:
        if v.kind == "textbox":
            out.append({"name": v.name, "label": v.label, "type": "textbox", "query": v.query, "hide": 0,
                        "current": {"text": v.query, "value": v.query}, "description": v.description})
            continue
        item = {"name": v.name, "label": v.label, "type": "query", "datasource": PROMETHEUS, "query": v.query,
                "refresh": 2, "sort": 1, "multi": v.multi, "includeAll": v.include_all, "hide": 0, "regex": "",
                "description": v.description}
        if v.include_all:
            item["allValue"] = ALL
            item["current"] = {"text": "All", "value": "$__all"}
        out.append(item)
    return out


def _links(spec: DashboardSpec) -> list[dict]:
    out = [{"title": "hpcobs", "type": "dashboards", "tags": [spec.links_tag], "asDropdown": True, "keepTime": True,
            "includeVars": True, "icon": "external link", "targetBlank": False, "tooltip": "hpcobs dashboards"}]
    for link in spec.links:
        internal = link.url.startswith("/d/")
        out.append({"title": link.title, "type": "link", "url": link.url, "tags": [], "asDropdown": False,
                    "keepTime": internal, "includeVars": internal, "icon": "dashboard" if internal else "external link",
                    "targetBlank": not internal, "tooltip": link.title})
    return out


def _annotations(spec: DashboardSpec) -> list[dict]:
    out = [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]
    if spec.alerts:
        out.append({"name": "Firing alerts", "datasource": PROMETHEUS, "enable": True, "hide": False,
                    "iconColor": "red", "expr": 'ALERTS{alertstate="firing", %s}' % spec.alerts})
    return out


def build(spec: DashboardSpec) -> dict:
    """The dashboard as Grafana 11 JSON (a dict), clean against the official schema."""
    panels: list = []
    next_id = 1
    for row, placed in _layout(spec.rows):
        header_y = placed[0][1].y - 1 if placed else 0
        panels.append(g.RowPanel(title=row.title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=header_y), id=next_id))
        next_id += 1
        for panel, grid in placed:
            panels.append(_panel(panel, grid, next_id))
            next_id += 1
    dashboard = g.Dashboard(
        title=spec.title, uid=spec.uid, description=spec.description, tags=list(spec.tags), panels=panels,
        time=g.Time(spec.time_from, "now"), refresh=spec.refresh, timezone="browser", editable=True,
    )
    data = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    uses_loki = any(p.get("datasource") == LOKI for p in data["panels"])
    data["templating"] = {"list": _variables(spec, uses_loki)}
    data["annotations"] = {"list": _annotations(spec)}
    data["links"] = _links(spec)
    data["schemaVersion"] = SCHEMA_VERSION
    for panel in data["panels"]:
        if panel["type"] == "row":
            panel["collapsed"] = False
            panel["panels"] = []
    data.update(spec.extra)
    problems = [f"{spec.uid}: {line}" for panel in data["panels"] for line in panel_schema_errors(panel)]
    if problems:
        raise ValueError("dashboard panels invalid against the Grafana 11.6 panel schemas:\n" + "\n".join(problems))
    return prune(data, _schema(), _schema()["definitions"]["Dashboard"])


def panel_queries(dashboard: dict) -> list[tuple[str, str, str, str]]:
    """Every (dashboard uid, panel title, query expr, datasource kind) of a built dashboard; kind is
    "prometheus" or "loki". Expressions still hold Grafana variables ($cluster, $__range, ...)."""
    return [(dashboard["uid"], panel["title"], target["expr"], panel["datasource"]["type"])
            for panel in dashboard["panels"] if panel["type"] != "row"
            for target in panel.get("targets", [])]


def fault_panels(spec: DashboardSpec) -> dict[str, tuple[str, ...]]:
    """Title -> the fault scenarios it shows, for the panels that are about a fault."""
    return {panel.title: panel.shows for row in spec.rows for panel in row.panels if panel.shows}


# --------------------------------------------------------------------------------------------- schemas

@cache
def _schema() -> dict:
    return json.loads((SCHEMA_DIR / "dashboard.jsonschema.json").read_text(encoding="utf-8"))


@cache
def _panel_schema(name: str) -> dict | None:
    path = SCHEMA_DIR / f"{name}.jsonschema.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _errors(schema_name: str, definition: str, value: Any) -> list[str]:
    root = _panel_schema(schema_name)
    if root is None or definition not in root.get("definitions", {}):
        return []
    validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": root["definitions"]})
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}" for e in validator.iter_errors(value)]


def panel_schema_errors(panel: dict) -> list[str]:
    """A panel's options, custom field config and targets checked against the per-panel schemas."""
    if panel.get("type") == "row":
        return []
    kind, title = panel["type"], panel.get("title", "")
    problems = [f"{title}: options.{e}" for e in _errors(kind, "Options", panel.get("options", {}))]
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
    if custom is not None or kind in ("table",):
        problems += [f"{title}: fieldConfig.defaults.custom.{e}" for e in _errors(kind, "FieldConfig", custom or {})]
    for target in panel.get("targets", []):
        ds = target.get("datasource", panel.get("datasource", {})).get("type")
        if ds in ("prometheus", "loki"):
            problems += [f"{title}: target {target.get('refId')}.{e}" for e in _errors(ds, "dataquery", target)]
        else:
            problems.append(f"{title}: target {target.get('refId')} has no Prometheus or Loki datasource")
    return problems


_UNIT_SCHEMA = "units"


def known_units() -> set[str]:
    """Unit ids Grafana 11.6 knows (schemas/grafana-v11.6/units.jsonschema.json)."""
    root = _panel_schema(_UNIT_SCHEMA) or {"definitions": {}}
    out = set()
    for definition in root["definitions"].values():
        if "const" in definition:
            out.add(definition["const"])
        out.update(definition.get("enum", []))
    return out


def _resolve(node: dict, root: dict) -> dict:
    while "$ref" in node:
        node = root["definitions"][node["$ref"].split("/")[-1]]
    return node


def prune(value: Any, root: dict, node: dict) -> Any:
    """Drop nulls and the keys the schema does not allow (grafanalib's legacy fields), recursively."""
    node = _resolve(node, root)
    if isinstance(value, dict):
        for key in ("oneOf", "anyOf"):
            if key in node:
                branches = [_resolve(b, root) for b in node[key]]
                typed = [b for b in branches if b.get("type") == "object"]
                if isinstance(value.get("type"), str) and value.get("type") == "row":
                    node = next(b for b in typed if "collapsed" in b.get("properties", {}))
                elif typed:
                    node = next((b for b in typed if "collapsed" not in b.get("properties", {})), typed[0])
        props = node.get("properties", {})
        closed = node.get("additionalProperties") is False
        out = {}
        for key, item in value.items():
            if item is None or (closed and key not in props):
                continue
            out[key] = prune(item, root, props[key]) if key in props else item
        return out
    if isinstance(value, list):
        items = node.get("items", {})
        return [prune(v, root, items) for v in value if v is not None]
    return value


GRAFANA_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")
