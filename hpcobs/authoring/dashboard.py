"""Dashboards as Grafana 11.6 JSON, built with grafana-foundation-sdk: one Grafana model (docs/grafana-model.md).

The SDK's builders and models are generated from Grafana's own schemas (the ones schemas/grafana-v11.6 holds):
every option is a typed method, and an option left unset takes the schema's default. Content writes rows of
panels from the helpers below; each returns an SDK panel builder set up the hpcobs way (queries on the datasource
variable, unit, thresholds). Layout (gridPos) and panel ids are computed here, never typed:

    Row("Fleet", [stat("GPUs", "count(gpu:utilization:ratio)", unit="none", description="...")])

A panel that needs an option no helper sets chains the SDK method on `panel.builder`.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypedDict, TypeVar, Unpack
from urllib.parse import parse_qs, quote, urlsplit

import jsonschema
from grafana_foundation_sdk.builders import bargauge as bargauge_panel
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import heatmap as heatmap_panel
from grafana_foundation_sdk.builders import logs as logs_panel
from grafana_foundation_sdk.builders import loki as loki_query
from grafana_foundation_sdk.builders import prometheus as prometheus_query
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.builders import text as text_panel
from grafana_foundation_sdk.builders import timeseries as timeseries_panel
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as models
from grafana_foundation_sdk.models import dashboard as grafana
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models import loki as loki_models
from grafana_foundation_sdk.models import prometheus as prometheus_models
from grafana_foundation_sdk.models import text as text_models

from hpcobs.paths import ROOT

# The oldest Grafana the dashboards are for (docs/output.md#grafana-dashboards): the model they are built with and
# checked against (schemas/grafana-v<minimum>, the schemas grafana-foundation-sdk is generated from).
GRAFANA_MINIMUM = "11.6"
SCHEMA_DIR = ROOT / "schemas" / f"grafana-v{GRAFANA_MINIMUM}"
GRID_WIDTH = 24
DATASOURCE_VAR = "datasource"
LOKI_VAR = "loki"
PROMETHEUS = grafana.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")
LOKI = grafana.DataSourceRef(type_val="loki", uid=f"${{{LOKI_VAR}}}")
ALL = ".*"  # the value "All" stands for in multi-value variables (regex matchers)

Thresholds = tuple[tuple[float | None, str], ...]
BASE: Thresholds = ((None, "green"),)
# Limits are configured as ratios, per-second rates and bytes per second (thresholds: in config); a panel that
# shows another unit draws them scaled by this factor (a ratio 0.95 is 95 on a percent scale).
SCALE_FROM_CONFIG = {"percent": 100.0, "Gbit/s": 8 / 1e9}
PanelBuilder = Builder[grafana.Panel]
_Built = TypeVar("_Built", bound=Any)


# --------------------------------------------------------------------------------------------- content


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


# A value shown as a word: (value, text, colour), e.g. an InfiniBand port state 4 drawn "ACTIVE" in green.
Mappings = tuple[tuple[float | str, str, str], ...]


@dataclass(frozen=True)
class Column:
    """A value column of a table: one instant query, its header, unit and colours, its values' words, and links
    from its cells (e.g. the node dashboard from a node column; `${__data.fields.<label>}` names the row's value)."""

    expr: str
    name: str
    thresholds: Thresholds = ()
    cell: str = "auto"  # auto | color-text | color-background
    unit: str = ""  # the table's own unit when empty
    mappings: Mappings = ()


@dataclass(frozen=True)
class Link:
    """A dashboard link, or a data link (every cell of a table row opens it)."""

    title: str
    url: str


@dataclass(frozen=True)
class Panel:
    """A Grafana panel (an SDK builder) and the simulator's fault scenarios it is about (hpcobs.proof.simulate.kinds()):
    a panel that is empty on a healthy cluster names the fault that fills it; the live tests check it there."""

    builder: PanelBuilder
    shows: tuple[str, ...] = ()

    @property
    def title(self) -> str:
        return self.builder.build().title or ""


class FieldOptions(TypedDict, total=False):
    """What any panel with a query may set besides its kind's own options."""

    thresholds: Thresholds
    min: float  # the value range: colour scales, gauges, the time series' soft axis bounds
    max: float
    links: tuple[Link, ...]
    time_from: str  # panel-relative time, e.g. "now/d" (today so far)
    shows: tuple[str, ...]
    mappings: Mappings


def drawn(limit: float, unit: str) -> float:
    """A configured limit (ctx.thresholds) in the unit a panel draws it in: the one conversion panels use, so a
    panel's colour step or line moves with the alert that reads the same threshold."""
    return limit * SCALE_FROM_CONFIG.get(unit, 1.0)


def scaled(steps: Thresholds, unit: str) -> Thresholds:
    """Colour steps written in the config's units, drawn in `unit`."""
    return tuple((None if value is None else drawn(value, unit), color) for value, color in steps)


def _mappings(mappings: Mappings) -> list[grafana.ValueMap]:
    results = {
        str(value): grafana.ValueMappingResult(text=text, color=colour, index=index)
        for index, (value, text, colour) in enumerate(mappings)
    }
    return [grafana.ValueMap(options=results)] if results else []


def _thresholds(steps: Thresholds) -> dashboard_builders.ThresholdsConfig:
    """Grafana stores the base step as -Infinity (null); the dashboard schema wants a number, and Grafana resets
    the first step to -Infinity on load, so 0 is written for it."""
    values = [grafana.Threshold(value=0 if value is None else value, color=color) for value, color in steps]
    return dashboard_builders.ThresholdsConfig().mode(grafana.ThresholdsMode.ABSOLUTE).steps(values)


def _link(link: Link) -> dashboard_builders.DashboardLink:
    """A link leaving the dashboard: within Grafana it keeps the time range and variables, elsewhere a new tab."""
    internal = link.url.startswith("/d/")
    return (
        dashboard_builders.DashboardLink(link.title)
        .type(grafana.DashboardLinkType.LINK)
        .url(link.url)
        .tooltip(link.title)
        .icon("dashboard" if internal else "external link")
        .keep_time(internal)
        .include_vars(internal)
        .target_blank(not internal)
    )


def _data_link(link: Link) -> dashboard_builders.DashboardLink:
    """The schema types data links as dashboard links; time range and variables are in the URL itself."""
    return dashboard_builders.DashboardLink(link.title).url(link.url).tooltip(link.title).icon("external link")


def _queries(expr: str | Query | list[Query], legend: str, instant: bool) -> tuple[Query, ...]:
    if isinstance(expr, str):
        return (Query(expr, legend, instant),)
    if isinstance(expr, Query):
        return (expr,)
    return tuple(expr)


def _prometheus(queries: Sequence[Query], table: bool = False) -> list[Builder[Any]]:
    """Targets on the Prometheus datasource variable; a table's are instant queries in table format."""
    targets: list[Builder[Any]] = []
    for index, query in enumerate(queries):
        target = (
            prometheus_query.Dataquery()
            .ref_id(chr(ord("A") + index))
            .expr(query.expr)
            .legend_format(query.legend)
            .editor_mode(prometheus_models.QueryEditorMode.CODE)
            .datasource(PROMETHEUS)
            .format(prometheus_models.PromQueryFormat.TABLE if table else prometheus_models.PromQueryFormat.TIME_SERIES)
        )
        targets.append(target.instant() if query.instant or table else target.range())
    return targets


def _panel(builder: _Built, title: str, description: str, width: int, height: int) -> _Built:
    return builder.title(title).description(description).span(width).height(height)


def _with_fields(builder: _Built, unit: str, color: grafana.FieldColorModeId, options: FieldOptions) -> _Built:
    """The field defaults every panel with a query sets: unit, colours, thresholds, range, data links."""
    builder = builder.unit(unit).color_scheme(dashboard_builders.FieldColor().mode(color))
    builder = builder.thresholds(_thresholds(options.get("thresholds", BASE)))
    if "min" in options:
        builder = builder.min(options["min"])
    if "max" in options:
        builder = builder.max(options["max"])
    if options.get("links"):
        builder = builder.data_links([_data_link(link) for link in options["links"]])
    if options.get("mappings"):
        builder = builder.mappings(_mappings(options["mappings"]))
    if "time_from" in options:
        builder = builder.time_from(options["time_from"])
    return builder


def _legend(show: bool) -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .display_mode(models.LegendDisplayMode.LIST)
        .placement(models.LegendPlacement.BOTTOM)
        .show_legend(show)
        .calcs([])
    )


def _last_value() -> common_builders.ReduceDataOptions:
    return common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False).fields("")


def timeseries(
    title: str,
    expr: str | list[Query],
    *,
    unit: str,
    description: str,
    legend: str = "",
    width: int = 12,
    height: int = 8,
    stack: bool = False,
    series_words: Mappings = (),
    **options: Unpack[FieldOptions],
) -> Panel:
    """Series over time; `stack` stacks them (filled); min and max also bound the axis softly; thresholds beyond
    the base step are drawn as dashed lines (the limits an alert fires at, where a panel reads one).
    `series_words` names and colours series by their legend (a priority number drawn as its word): value
    mappings name values, not series."""
    stacking = models.StackingMode.NORMAL if stack else models.StackingMode.NONE
    builder = (
        _panel(timeseries_panel.Panel(), title, description, width, height)
        .datasource(PROMETHEUS)
        .targets(_prometheus(_queries(expr, legend, False)))
        .legend(_legend(True))
        .tooltip(
            common_builders.VizTooltipOptions().mode(models.TooltipDisplayMode.MULTI).sort(models.SortOrder.DESCENDING)
        )
        .fill_opacity(60 if stack else 10)
        .show_points(models.VisibilityMode.NEVER)
        .stacking(common_builders.StackingConfig().mode(stacking).group("A"))
    )
    if "min" in options:
        builder = builder.axis_soft_min(options["min"])
    if "max" in options:
        builder = builder.axis_soft_max(options["max"])
    if len(options.get("thresholds", BASE)) > 1:
        builder = builder.thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(models.GraphThresholdsStyleMode.DASHED)
        )
    for value, text, colour in series_words:
        matcher = grafana.MatcherConfig(id_val="byNames", options={"mode": "include", "names": [str(value)]})
        fixed = grafana.FieldColor(mode=grafana.FieldColorModeId.FIXED, fixed_color=colour)
        builder = builder.with_override(
            matcher,
            [
                grafana.DynamicConfigValue(id_val="displayName", value=text),
                grafana.DynamicConfigValue(id_val="color", value=fixed),
            ],
        )
    builder = _with_fields(builder, unit, grafana.FieldColorModeId.PALETTE_CLASSIC, options)
    return Panel(builder, options.get("shows", ()))


def stat(
    title: str,
    expr: str | list[Query],
    *,
    unit: str,
    description: str,
    legend: str = "",
    width: int = 6,
    height: int = 4,
    text_mode: models.BigValueTextMode = models.BigValueTextMode.AUTO,
    **options: Unpack[FieldOptions],
) -> Panel:
    """The last value, large (instant query); `text_mode` VALUE_AND_NAME also shows the series' legend."""
    builder = (
        _panel(stat_panel.Panel(), title, description, width, height)
        .datasource(PROMETHEUS)
        .targets(_prometheus(_queries(expr, legend, True)))
        .reduce_options(_last_value())
        .text_mode(text_mode)
    )
    builder = _with_fields(builder, unit, grafana.FieldColorModeId.THRESHOLDS, options)
    return Panel(builder, options.get("shows", ()))


def bargauge(
    title: str,
    expr: str | list[Query],
    *,
    unit: str,
    description: str,
    legend: str = "",
    width: int = 12,
    height: int = 8,
    **options: Unpack[FieldOptions],
) -> Panel:
    """Current value per series as horizontal bars (instant query)."""
    builder = (
        _panel(bargauge_panel.Panel(), title, description, width, height)
        .datasource(PROMETHEUS)
        .targets(_prometheus(_queries(expr, legend, True)))
        .reduce_options(_last_value())
        .orientation(models.VizOrientation.HORIZONTAL)
    )
    builder = _with_fields(builder, unit, grafana.FieldColorModeId.THRESHOLDS, options)
    return Panel(builder, options.get("shows", ()))


def heatmap(
    title: str,
    expr: str,
    *,
    unit: str,
    description: str,
    legend: str,
    width: int = 24,
    height: int = 10,
    counts: bool = False,
    **options: Unpack[FieldOptions],
) -> Panel:
    """Grafana 11 heatmap of series already bucketed: one row per series (e.g. per node), not calculated. Values
    good or bad (a utilisation) go red to green; `counts` (how many GPUs in a band) are one hue, darker where more:
    a count is neither good nor bad."""
    colour = (
        heatmap_panel.HeatmapColorOptions()
        .mode(heatmap_models.HeatmapColorMode.OPACITY if counts else heatmap_models.HeatmapColorMode.SCHEME)
        .scheme("" if counts else "RdYlGn")
        .fill("blue" if counts else "dark-orange")
        .scale(heatmap_models.HeatmapColorScale.EXPONENTIAL)
        .exponent(0.5)
        .steps(64)
    )
    if "min" in options:
        colour = colour.min(options["min"])
    if "max" in options:
        colour = colour.max(options["max"])
    builder = (
        _panel(heatmap_panel.Panel(), title, description, width, height)
        .datasource(PROMETHEUS)
        .targets(_prometheus(_queries(expr, legend, False)))
        .calculate(False)
        .color(colour)
        .rows_frame(heatmap_panel.RowsHeatmapOptions().layout(models.HeatmapCellLayout.AUTO))
        .show_value(models.VisibilityMode.NEVER)
        .cell_values(heatmap_panel.CellValues().unit(unit))
        .y_axis(heatmap_panel.YAxisConfig().axis_placement(models.AxisPlacement.LEFT).reverse(False))
        .show_color_scale(True)
    )
    builder = _with_fields(builder, unit, grafana.FieldColorModeId.THRESHOLDS, options)
    return Panel(builder, options.get("shows", ()))


def _column_override(field_names: list[str], column: Column) -> tuple[grafana.MatcherConfig, list[Any]]:
    """A column's colours, matched by its raw and its renamed header (the schema types both as objects)."""
    properties = []
    if column.thresholds:
        properties += [
            grafana.DynamicConfigValue(id_val="thresholds", value=_thresholds(column.thresholds).build()),
            grafana.DynamicConfigValue(
                id_val="color", value=grafana.FieldColor(mode=grafana.FieldColorModeId.THRESHOLDS)
            ),
        ]
    if column.unit:
        properties.append(grafana.DynamicConfigValue(id_val="unit", value=column.unit))
    if column.mappings:
        properties.append(grafana.DynamicConfigValue(id_val="mappings", value=_mappings(column.mappings)))
    if column.cell == "color-text":
        properties.append(
            grafana.DynamicConfigValue(id_val="custom.cellOptions", value=models.TableColorTextCellOptions())
        )
    elif column.cell == "color-background":
        cell = models.TableColoredBackgroundCellOptions(mode=models.TableCellBackgroundDisplayMode.BASIC)
        properties.append(grafana.DynamicConfigValue(id_val="custom.cellOptions", value=cell))
    matcher = grafana.MatcherConfig(id_val="byNames", options={"mode": "include", "names": field_names})
    return matcher, properties


def _table_transformations(labels: Sequence[str], raw: list[str], columns: Sequence[Column]) -> list[Any]:
    """Keep the label columns asked for, merge the instant queries on them, order and rename the columns. The
    labels go first: a label one query keeps and another drops (`__name__` after `> 0`) would split a row in two."""
    order = {name: index for index, name in enumerate([*labels, *raw])}
    kept = f"^({'|'.join(labels)}|Value.*)$"
    renamed = {field: column.name for field, column in zip(raw, columns)}
    return [
        grafana.DataTransformerConfig(id_val="filterFieldsByName", options={"include": {"pattern": kept}}),
        grafana.DataTransformerConfig(id_val="merge", options={}),
        grafana.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {}, "indexByName": order, "renameByName": renamed}
        ),
    ]


def table(
    title: str,
    columns: list[Column],
    *,
    labels: list[str],
    description: str,
    width: int = 24,
    height: int = 10,
    label_links: Mapping[str, Link] = {},
    label_words: Mapping[str, Mappings] = {},
    sort_by: Sequence[str] = (),
    **options: Unpack[FieldOptions],
) -> Panel:
    """Instant queries merged on their labels: the label columns, then one column per query, sorted on the first
    (or on the columns `sort_by` names, in turn, largest first).
    `label_links` makes a label column's cells links (the node column to the node dashboard, the job to its view);
    `label_words` names and colours a label column's values (a severity, a Slurm state)."""
    # One query: Grafana names its value field "Value", not "Value #A".
    raw = ["Value"] if len(columns) == 1 else [f"Value #{chr(ord('A') + index)}" for index in range(len(columns))]
    builder = (
        _panel(table_panel.Panel(), title, description, width, height)
        .datasource(PROMETHEUS)
        .targets(_prometheus([Query(column.expr) for column in columns], table=True))
        .sort_by(
            [
                common_builders.TableSortByFieldState().display_name(name).desc(True)
                for name in (sort_by or [columns[0].name])
            ]
        )
        .filterable(True)
        .transformations(_table_transformations(labels, raw, columns))
    )
    for field, column in zip(raw, columns):
        matcher, properties = _column_override([field, column.name], column)
        if properties:
            builder = builder.with_override(matcher, properties)
    for label in sorted({*label_links, *label_words}):
        properties = []
        if label in label_links:
            properties.append(
                grafana.DynamicConfigValue(id_val="links", value=[_data_link(label_links[label]).build()])
            )
        if label in label_words:
            properties += [
                grafana.DynamicConfigValue(id_val="mappings", value=_mappings(label_words[label])),
                grafana.DynamicConfigValue(id_val="custom.cellOptions", value=models.TableColorTextCellOptions()),
            ]
        matcher = grafana.MatcherConfig(id_val="byNames", options={"mode": "include", "names": [label]})
        builder = builder.with_override(matcher, properties)
    builder = _with_fields(builder, "none", grafana.FieldColorModeId.THRESHOLDS, options)
    return Panel(builder, options.get("shows", ()))


def logs(title: str, expr: str, *, description: str, width: int = 24, height: int = 10) -> Panel:
    """Log lines from the Loki datasource variable (LogQL), newest first, with their labels."""
    target = (
        loki_query.Dataquery()
        .ref_id("A")
        .expr(expr)
        .query_type(loki_models.LokiQueryType.RANGE)
        .editor_mode(loki_models.QueryEditorMode.CODE)
        .max_lines(1000)
        .datasource(LOKI)
    )
    builder = (
        _panel(logs_panel.Panel(), title, description, width, height)
        .datasource(LOKI)
        .targets([target])
        .unit("none")
        .show_labels(True)
        .show_time(True)
        .show_log_context_toggle(True)
        .wrap_log_message(True)
        .enable_log_details(True)
    )
    return Panel(builder)


def text(title: str, content: str, *, description: str, width: int = 24, height: int = 3) -> Panel:
    """Markdown help or links (variables such as $hpc_job are interpolated by Grafana)."""
    builder = _panel(text_panel.Panel(), title, description, width, height)
    return Panel(builder.mode(text_models.TextMode.MARKDOWN).content(content))


def dashboard_url(uid: str, **variables: str) -> str:
    """A link to a dashboard keeping the time range; variables as var-<name>=<value>."""
    query = "&".join(["${__url_time_range}"] + [f"var-{name}={value}" for name, value in variables.items()])
    return f"/d/{uid}?{query}"


def explore_url(datasource_uid: str, datasource_type: str, query: str, query_type: str) -> str:
    """Grafana Explore with one query on a datasource, over the dashboard's time range. Grafana variables stay
    readable for Grafana to fill in: ${__from}, and ${name:format} (hpcobs.authoring.traceql)."""
    pane = {
        "datasource": datasource_uid,
        "queries": [
            {
                "refId": "A",
                "datasource": {"type": datasource_type, "uid": datasource_uid},
                "queryType": query_type,
                "query": query,
            }
        ],
        "range": {"from": "${__from}", "to": "${__to}"},
    }
    state = json.dumps({"a": pane}, separators=(",", ":"))
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(state, safe="${}_:")


@dataclass(frozen=True)
class Row:
    """A row of panels; a collapsed one holds its panels closed, not queried until a viewer opens it."""

    title: str
    panels: list[Panel]
    collapsed: bool = False


@dataclass(frozen=True)
class Variable:
    """A dashboard variable. `query` is label_values(...) on a recorded series, or query_result(...) (an instant
    query at the range's end, e.g. only what runs now) with `regex` taking the value out of each result line;
    a textbox's default value. `all_value` is what All stands for: a regex matching anything by default, or None
    for Grafana's own (every value the variable lists, as one regex: All stays within what it lists)."""

    name: str
    label: str
    query: str
    multi: bool = False
    include_all: bool = False
    kind: str = "query"  # query | textbox
    description: str = ""
    sort: grafana.VariableSort = grafana.VariableSort.ALPHABETICAL_ASC
    regex: str = ""
    all_value: str | None = ALL


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
    links: tuple[Link, ...] = ()  # dashboard links (other dashboards, Explore)
    alerts: str = ""  # PromQL matchers selecting this dashboard's ALERTS


# --------------------------------------------------------------------------------------------- dashboard


class _PanelModel(Builder[grafana.Panel]):
    """A panel model already built, handed back as a builder: a panel whose queries were narrowed."""

    def __init__(self, model: grafana.Panel):
        self._model = model

    def build(self) -> grafana.Panel:
        return self._model


def _links_to(url: str, uids: Collection[str]) -> bool:
    return any(url == f"/d/{uid}" or url.startswith(f"/d/{uid}?") for uid in uids)


def opens(url: str) -> set[str]:
    """The datasource kinds a link into Grafana Explore queries (explore_url); none for any other link."""
    if not url.startswith("/explore?"):
        return set()
    panes = json.loads(parse_qs(urlsplit(url).query)["panes"][0])
    return {query["datasource"]["type"] for pane in panes.values() for query in pane["queries"]}


# A link in a text panel's Markdown: [text](url).
_MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Off:
    """What a build leaves out of the dashboards: the Prometheus queries `reads_off` refuses (they read a disabled
    exporter), the dashboards `removed` and the datasource kinds not provisioned (grafana.datasources.<kind>)."""

    reads_off: Callable[[str], bool]
    removed: Collection[str]
    datasources: Collection[str]

    def query(self, target: Any) -> bool:
        kind = target.datasource.type_val if target.datasource else None
        return kind in self.datasources or (kind == "prometheus" and self.reads_off(target.expr or ""))

    def link(self, url: str) -> bool:
        return _links_to(url, self.removed) or not opens(url).isdisjoint(self.datasources)

    def text(self, model: grafana.Panel) -> bool:
        content = model.options.content if isinstance(model.options, text_models.Options) else None
        return any(self.link(url) for url in _MARKDOWN_LINK.findall(content or ""))


def narrowed(spec: DashboardSpec, off: Off) -> DashboardSpec | None:
    """The dashboard without the queries, links and text panels `off` refuses, and without the variables nothing
    left refers to. A panel that had queries and has none left goes, then a row left with no panel; a dashboard left
    with no Prometheus query is not generated (None). Layout and ids are computed from what is left; the queries
    kept keep their refIds, which a table's columns are named by."""
    rows = []
    for row in spec.rows:
        panels = []
        for panel in row.panels:
            model = copy.deepcopy(panel.builder.build())
            targets = model.targets or []
            kept = [target for target in targets if not off.query(target)]
            if (targets and not kept) or off.text(model):
                continue
            if not _unlinked(model, off) and len(kept) == len(targets):
                panels.append(panel)
                continue
            model.targets = kept
            panels.append(Panel(_PanelModel(model), panel.shows))
        if panels:
            rows.append(dataclasses.replace(row, panels=panels))
    metrics = [t for row in rows for panel in row.panels for t in panel.builder.build().targets or []]
    if not any(isinstance(target, prometheus_models.Dataquery) for target in metrics):
        return None  # log panels alone show the lines around metrics that are no longer collected
    links = tuple(link for link in spec.links if not off.link(link.url))
    narrow = dataclasses.replace(spec, rows=tuple(rows), links=links)
    return dataclasses.replace(narrow, variables=_referred_to(narrow))


def _unlinked(model: grafana.Panel, off: Off) -> bool:
    """Takes the data links `off` refuses out of a panel's fields and its overrides' (a table's label column links);
    whether there were any."""
    config = model.field_config
    if config is None:
        return False
    dropped = False

    def kept(links: list[Any]) -> list[Any]:
        nonlocal dropped
        left = [link for link in links if not off.link(link.url or "")]
        dropped |= len(left) != len(links)
        return left

    if config.defaults is not None and config.defaults.links:
        config.defaults.links = kept(config.defaults.links)
    for override in config.overrides or []:
        for prop in override.properties:
            if prop.id_val == "links" and isinstance(prop.value, list):
                prop.value = kept(prop.value)
    return dropped


def _referred_to(spec: DashboardSpec) -> tuple[Variable, ...]:
    """The variables that the panels, links, alert matchers or the variables kept refer to ($name or ${name})."""
    panels = [panel.builder.build() for row in spec.rows for panel in row.panels]
    text = " ".join([json.dumps(panels, cls=JSONEncoder), *(link.url for link in spec.links), spec.alerts])
    kept: list[Variable] = []
    while True:
        left = [v for v in spec.variables if v not in kept and re.search(rf"\$\{{?{v.name}\b", text)]
        if not left:
            return tuple(v for v in spec.variables if v in kept)
        kept += left
        text += " ".join(v.query for v in left)


def _layout(rows: tuple[Row, ...]) -> list[grafana.Panel | grafana.RowPanel]:
    """Each row's header, then its panels packed left to right, wrapping before one would cross the grid's edge
    (the SDK's own packing only wraps after); ids in order. A collapsed row holds its panels at the places they
    take when it is opened, and the next row follows its header. Panels are copies: a spec can be built again."""
    out: list[grafana.Panel | grafana.RowPanel] = []
    ids = itertools.count(1)
    y = 0
    for row in rows:
        header = grafana.RowPanel(title=row.title, id_val=next(ids), grid_pos=grafana.GridPos(h=1, w=GRID_WIDTH, y=y))
        top, y = y, y + 1
        inside: list[grafana.Panel] = []
        x, line_height = 0, 0
        for panel in row.panels:
            model = copy.deepcopy(panel.builder.build())
            size = model.grid_pos or grafana.GridPos()
            if x + size.w > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            model.id_val = next(ids)
            model.grid_pos = grafana.GridPos(h=size.h, w=size.w, x=x, y=y)
            inside.append(model)
            x += size.w
            line_height = max(line_height, size.h)
        y += line_height
        if row.collapsed:
            header.collapsed, header.panels = True, inside
            out.append(header)
            y = top + 1
        else:
            out += [header, *inside]
    return out


def _query_variable(variable: Variable) -> Builder[grafana.VariableModel]:
    builder = (
        dashboard_builders.QueryVariable(variable.name)
        .label(variable.label)
        .description(variable.description)
        .datasource(PROMETHEUS)
        .query(variable.query)
        .refresh(grafana.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(variable.sort)
        .multi(variable.multi)
        .include_all(variable.include_all)
        .regex(variable.regex)
    )
    if variable.include_all:
        builder = builder.current(grafana.VariableOption(text="All", value="$__all"))
        if variable.all_value is not None:
            builder = builder.all_value(variable.all_value)
    return builder


def query_result_line(labels: Mapping[str, str], value: float, at: float) -> str:
    """One result of a query_result() variable as Grafana writes it before applying the variable's regex
    (public/app/plugins/datasource/prometheus metric_find_query: name{label="value",...} value timestamp_ms)."""
    inside = ",".join(f'{name}="{text}"' for name, text in labels.items() if name != "__name__")
    return f"{labels.get('__name__', '')}{{{inside}}} {value} {int(at * 1000)}"


def variable_options(variable: Mapping[str, Any], texts: Iterable[str]) -> list[str]:
    """The options Grafana lists for a query variable from its raw texts: the regex's first group where it has
    one (texts it does not match are dropped), distinct, in the variable's sort order (Grafana's
    sortVariableValues: numerical orders on the first number, a text without one first; disabled keeps the
    query's order, the first occurrence of each)."""
    pattern = str(variable.get("regex") or "").strip("/")
    values = list(texts)
    if pattern:
        found = (re.search(pattern, text) for text in values)
        values = [match.group(1) if match.groups() else match.group(0) for match in found if match]
    sort = grafana.VariableSort(variable.get("sort", grafana.VariableSort.ALPHABETICAL_ASC))
    if sort == grafana.VariableSort.DISABLED:
        return list(dict.fromkeys(values))
    options = sorted(set(values))
    if sort in (grafana.VariableSort.NUMERICAL_ASC, grafana.VariableSort.NUMERICAL_DESC):
        options.sort(key=lambda text: int(number.group(1)) if (number := re.search(r"(\d+)", text)) else -1)
    return options[::-1] if sort.name.endswith("_DESC") else options


@dataclass(frozen=True)
class Provisioned:
    """A datasource as provisioned (hpcobs.targets.provisioning): the one a datasource variable starts on."""

    name: str
    uid: str


def _datasource_variable(name: str, label: str, kind: str, datasource: Provisioned) -> Builder[grafana.VariableModel]:
    """A datasource variable starting on the provisioned datasource by uid, not on whichever datasource of its kind
    is Grafana's default: a renamed or non-default datasource is still the one read. Grafana's dashboards (scenes)
    offer a datasource variable's options as {label: name, value: uid}: grafana/scenes
    packages/scenes/src/variables/variants/DataSourceVariable.tsx, getValueOptions (commit 4e24d8d)."""
    current = grafana.VariableOption(text=datasource.name, value=datasource.uid)
    return dashboard_builders.DatasourceVariable(name).label(label).type(kind).current(current)


def _variables(
    spec: DashboardSpec, uses_loki: bool, datasources: Mapping[str, Provisioned]
) -> list[Builder[grafana.VariableModel]]:
    """The datasource variables, then the spec's (a textbox's query is its default value)."""
    out = [_datasource_variable(DATASOURCE_VAR, "Data source", "prometheus", datasources["prometheus"])]
    if uses_loki:
        out.append(_datasource_variable(LOKI_VAR, "Logs", "loki", datasources["loki"]))
    for variable in spec.variables:
        if variable.kind == "textbox":
            default = grafana.VariableOption(text=variable.query, value=variable.query)
            out.append(
                dashboard_builders.TextBoxVariable(variable.name)
                .label(variable.label)
                .description(variable.description)
                .default_value(variable.query)
                .current(default)
            )
        else:
            out.append(_query_variable(variable))
    return out


def _annotations(spec: DashboardSpec) -> list[Builder[grafana.AnnotationQuery]]:
    """Grafana's own annotations, and this dashboard's firing alerts from Prometheus' ALERTS series."""
    builtin = (
        dashboard_builders.AnnotationQuery()
        .name("Annotations & Alerts")
        .built_in(1)
        .type("dashboard")
        .datasource(grafana.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
    )
    if not spec.alerts:
        return [builtin]
    firing = (
        dashboard_builders.AnnotationQuery()
        .name("Firing alerts")
        .datasource(PROMETHEUS)
        .enable(True)
        .hide(False)
        .icon_color("red")
        .expr(f'ALERTS{{alertstate="firing", {spec.alerts}}}')
    )
    return [builtin, firing]


def _links(spec: DashboardSpec) -> list[Builder[grafana.DashboardLink]]:
    """A drop-down of every dashboard with the hpcobs tag, then the spec's links."""
    tagged = (
        dashboard_builders.DashboardLink("hpcobs")
        .type(grafana.DashboardLinkType.DASHBOARDS)
        .tags([spec.links_tag])
        .as_dropdown(True)
        .keep_time(True)
        .include_vars(True)
        .icon("external link")
        .tooltip("hpcobs dashboards")
    )
    return [tagged, *(_link(link) for link in spec.links)]


def build(spec: DashboardSpec, datasources: Mapping[str, Provisioned]) -> dict:
    """The dashboard as Grafana 11.6 JSON (a dict), on the `datasources` provisioned (by kind); its panels checked
    against the per-panel schemas."""
    panels = _layout(spec.rows)
    # A collapsed row's log panel needs the Loki variable as much as one on the grid.
    models = [panel.builder.build() for row in spec.rows for panel in row.panels]
    uses_loki = any(model.datasource is not None and model.datasource.type_val == "loki" for model in models)
    dashboard = (
        dashboard_builders.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(list(spec.tags))
        .time(spec.time_from, "now")
        .refresh(spec.refresh)
        .timezone("browser")
        .tooltip(grafana.DashboardCursorSync.CROSSHAIR)
        .editable()
        .variables(_variables(spec, uses_loki, datasources))
        .annotations(_annotations(spec))
        .links(_links(spec))
        .build()
    )
    dashboard.panels = panels
    data: dict = json.loads(json.dumps(dashboard, cls=JSONEncoder))
    problems = [f"{spec.uid}: {line}" for panel in every_panel(data) for line in panel_schema_errors(panel)]
    if problems:
        raise ValueError(
            f"dashboard panels invalid against the Grafana {GRAFANA_MINIMUM} panel schemas:\n" + "\n".join(problems)
        )
    return data


def every_panel(dashboard: dict) -> list[dict]:
    """Every panel of a built dashboard but the row headers: those on the grid and those a collapsed row holds."""
    inside = (panel for row in dashboard["panels"] if row["type"] == "row" for panel in row.get("panels", []))
    return [panel for panel in (*dashboard["panels"], *inside) if panel["type"] != "row"]


def panel_queries(dashboard: dict) -> list[tuple[str, str, str, str]]:
    """Every (dashboard uid, panel title, query expr, datasource kind) of a built dashboard; kind is
    "prometheus" or "loki". Expressions still hold Grafana variables ($cluster, $__range, ...)."""
    return [
        (dashboard["uid"], panel["title"], target["expr"], panel["datasource"]["type"])
        for panel in every_panel(dashboard)
        for target in panel.get("targets", [])
    ]


def fault_panels(spec: DashboardSpec) -> dict[str, tuple[str, ...]]:
    """Title -> the fault scenarios it shows, for the panels that are about a fault."""
    return {panel.title: panel.shows for row in spec.rows for panel in row.panels if panel.shows}


# --------------------------------------------------------------------------------------------- schemas


@cache
def _panel_schema(name: str) -> dict | None:
    path = SCHEMA_DIR / f"{name}.jsonschema.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _errors(schema_name: str, definition: str, value: Any) -> list[str]:
    root = _panel_schema(schema_name)
    if root is None or definition not in root.get("definitions", {}):
        return []
    validator = jsonschema.Draft7Validator({"$ref": f"#/definitions/{definition}", "definitions": root["definitions"]})
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message[:200]}"
        for error in validator.iter_errors(value)
    ]


def panel_schema_errors(panel: dict) -> list[str]:
    """A panel's options, custom field config and targets checked against the per-panel schemas."""
    if panel.get("type") == "row":
        return []
    kind, title = panel["type"], panel.get("title", "")
    problems = [f"{title}: options.{error}" for error in _errors(kind, "Options", panel.get("options", {}))]
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
    if custom is not None or kind == "table":
        problems += [
            f"{title}: fieldConfig.defaults.custom.{error}" for error in _errors(kind, "FieldConfig", custom or {})
        ]
    for target in panel.get("targets", []):
        datasource = target.get("datasource", panel.get("datasource", {})).get("type")
        if datasource in ("prometheus", "loki"):
            problems += [
                f"{title}: target {target.get('refId')}.{error}" for error in _errors(datasource, "dataquery", target)
            ]
        else:
            problems.append(f"{title}: target {target.get('refId')} has no Prometheus or Loki datasource")
    return problems


def known_units() -> set[str]:
    """Unit ids Grafana 11.6 knows (schemas/grafana-v11.6/units.jsonschema.json)."""
    root = _panel_schema("units") or {"definitions": {}}
    out = set()
    for definition in root["definitions"].values():
        if "const" in definition:
            out.add(definition["const"])
        out.update(definition.get("enum", []))
    return out
