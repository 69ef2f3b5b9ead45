"""Dashboard helpers over grafanalib, and the clean-up that turns its output into the Grafana 11 model.

Content writes rows of panels from small helpers; layout (gridPos) is computed here, never typed:

    Row("Fleet", [stat("GPUs", "count(gpu:utilization:ratio)", unit="none", description="...")])
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "grafana-v11.6"
SCHEMA_VERSION = 39          # Grafana 11.0-11.6 read it without migration
GRID_WIDTH = 24
DATASOURCE_VAR = "datasource"
PROMETHEUS = {"type": "prometheus", "uid": "${%s}" % DATASOURCE_VAR}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    kind: str                   # timeseries | stat | table | heatmap | bargauge | ...
    title: str
    queries: tuple[Query, ...]
    unit: str
    description: str
    width: int = 12
    height: int = 8
    thresholds: tuple[tuple[float | None, str], ...] = ((None, "green"),)
    min: float | None = None
    max: float | None = None


def _queries(expr: str | Query | list[Query], legend: str, instant: bool) -> tuple[Query, ...]:
    if isinstance(expr, str):
        return (Query(expr, legend, instant),)
    if isinstance(expr, Query):
        return (expr,)
    return tuple(expr)


def timeseries(title: str, expr: str | list[Query], *, unit: str, description: str, legend: str = "",
               width: int = 12, height: int = 8, **kw: Any) -> Panel:
    return Panel("timeseries", title, _queries(expr, legend, False), unit, description, width, height, **kw)


def stat(title: str, expr: str, *, unit: str, description: str, width: int = 6, height: int = 4, **kw: Any) -> Panel:
    return Panel("stat", title, _queries(expr, "", True), unit, description, width, height, **kw)


@dataclass(frozen=True)
class Row:
    title: str
    panels: list[Panel]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str                  # label_values(...) on a recorded series
    multi: bool = False
    include_all: bool = False


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
    extra: dict = field(default_factory=dict)


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


def _grafanalib_panel(panel: Panel, grid: g.GridPos, panel_id: int):
    targets = [g.Target(expr=q.expr, legendFormat=q.legend, refId=chr(ord("A") + i), instant=q.instant,
                        datasource=PROMETHEUS) for i, q in enumerate(panel.queries)]
    common = dict(title=panel.title, description=panel.description, dataSource=PROMETHEUS, targets=targets,
                  gridPos=grid, id=panel_id)
    if panel.kind == "timeseries":
        return g.TimeSeries(unit=panel.unit, axisSoftMin=panel.min, axisSoftMax=panel.max, **common)
    if panel.kind == "stat":
        return g.Stat(format=panel.unit, reduceCalc="lastNotNull", **common)
    raise ValueError(f"unsupported panel kind {panel.kind!r}")


def _thresholds(panel: Panel) -> dict:
    """Grafana stores the base step as -Infinity (null); the schema wants a number, and Grafana resets
    the first step to -Infinity on load, so 0 is written for it."""
    return {"mode": "absolute",
            "steps": [{"color": color, "value": 0 if value is None else value} for value, color in panel.thresholds]}


def _variables(spec: DashboardSpec) -> list[dict]:
    out = [{"name": DATASOURCE_VAR, "label": "Data source", "type": "datasource", "query": "prometheus",
            "hide": 0, "refresh": 1}]
    for v in spec.variables:
        out.append({"name": v.name, "label": v.label, "type": "query", "datasource": PROMETHEUS, "query": v.query,
                    "refresh": 2, "sort": 1, "multi": v.multi, "includeAll": v.include_all, "hide": 0, "regex": ""})
    return out


def build(spec: DashboardSpec) -> dict:
    """The dashboard as Grafana 11 JSON (a dict), clean against the official schema."""
    panels, specs, next_id = [], {}, 1
    for row, placed in _layout(spec.rows):
        header_y = placed[0][1].y - 1 if placed else 0
        panels.append(g.RowPanel(title=row.title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=header_y), id=next_id))
        next_id += 1
        for panel, grid in placed:
            panels.append(_grafanalib_panel(panel, grid, next_id))
            specs[next_id] = panel
            next_id += 1
    dashboard = g.Dashboard(
        title=spec.title, uid=spec.uid, description=spec.description, tags=list(spec.tags), panels=panels,
        time=g.Time(spec.time_from, "now"), refresh=spec.refresh, timezone="browser", editable=True,
        links=[g.DashboardLink(title="hpcobs", type="dashboards", tags=[spec.links_tag],
                               asDropdown=True, keepTime=True, includeVars=True, icon="external link", targetBlank=False)],
    )
    data = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    data["templating"] = {"list": _variables(spec)}
    data["annotations"] = {"list": [{
        "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]}
    data["schemaVersion"] = SCHEMA_VERSION
    for panel in data["panels"]:
        if panel["type"] == "row":
            panel["collapsed"] = False
            panel["panels"] = []
        else:
            panel["fieldConfig"]["defaults"]["thresholds"] = _thresholds(specs[panel["id"]])
    data.update(spec.extra)
    return prune(data, _schema(), _schema()["definitions"]["Dashboard"])


@cache
def _schema() -> dict:
    return json.loads((SCHEMA_DIR / "dashboard.jsonschema.json").read_text(encoding="utf-8"))


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
