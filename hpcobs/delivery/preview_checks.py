"""What a drawn panel must show of its JSON, read from the page's report of it (preview/src/report.ts): the fields as
Grafana's field config left them, the values a stat or bar gauge shows, the legend and the table's cells as the DOM
holds them, colours in the browser's terms. A unit, a threshold, an override or a legend lost between the JSON and
the drawing (an override naming a column a transformation renamed, a merge that did not join its queries, a series
named by its raw labels) is a problem here, one line each, whatever the panel looks like in pixels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

COLOURED_CELLS = {"color-text": "color", "color-background": "background"}


@dataclass(frozen=True)
class Drawn:
    """One panel: its JSON, the frames preview sent it, what the page reported of it, the threshold colours."""

    panel: dict
    sent: dict
    shown: dict
    palette: dict[str, str]

    @property
    def fields(self) -> list[dict]:
        return self.shown["drawn"]["fields"]

    def declared(self, name: str) -> dict[str, Any]:
        """The field config the JSON gives the field `name`: the defaults, then each override naming it."""
        config = {key: value for key, value in self.panel["fieldConfig"]["defaults"].items() if key != "custom"}
        for override in self.panel["fieldConfig"]["overrides"]:
            if name in _names(override):
                config.update({p["id"]: p["value"] for p in override["properties"]})
        return config

    def expected_colour(self, name: str, value: float | None) -> str | None:
        """The colour of `value` in field `name` by the JSON: a value mapping's colour where one maps it (Grafana
        lets a mapping's colour win), else its thresholds' step; None where neither colours it."""
        config = self.declared(name)
        if value is None:
            return None
        key = str(int(value)) if value == int(value) else str(value)
        for mapping in config.get("mappings", []):
            mapped = mapping.get("options", {}).get(key, {}) if mapping.get("type") == "value" else {}
            if mapped.get("color"):
                return self.palette.get(mapped["color"], mapped["color"])
        if config.get("color", {}).get("mode") != "thresholds":
            return None
        steps = config["thresholds"]["steps"]
        colour = steps[0]["color"]  # the base step holds from minus infinity, whatever its value says
        for step in steps[1:]:
            if value >= step["value"]:
                colour = step["color"]
        return self.palette.get(colour, colour)


def _names(override: dict) -> list[str]:
    """The fields an override names: hpcobs writes only byNames matchers (a test of the dashboards holds to it)."""
    matcher = override["matcher"]
    if matcher["id"] != "byNames":
        raise ValueError(f"preview checks: override matcher {matcher['id']!r} not understood")
    return matcher["options"]["names"]


Check = Callable[[Drawn], Iterator[str]]


def overrides_match_a_field(drawn: Drawn) -> Iterator[str]:
    """An override of a table's value column must find its column, under its query's name or its header: a
    transformation that renames it loses its unit and colours. (An override of a label column or of one series
    may find none: a label or a series shows only where the data has it.)"""
    names = {field["name"] for field in drawn.fields}
    for override in drawn.panel["fieldConfig"]["overrides"]:
        named = _names(override)
        if any(name.startswith("Value") for name in named) and not names.intersection(named):
            lost = ", ".join(p["id"] for p in override["properties"])
            drawn_names = ", ".join(sorted(names))
            yield f"the override for {' / '.join(named)} matches no field (drawn: {drawn_names}): {lost} lost"


def units_kept(drawn: Drawn) -> Iterator[str]:
    for field in drawn.fields:
        unit = drawn.declared(field["name"]).get("unit")
        if field["type"] == "number" and field.get("unit") != unit:
            yield f"{field['name']}: drawn in unit {field.get('unit')!r}, the JSON says {unit!r}"


def thresholds_kept(drawn: Drawn) -> Iterator[str]:
    for field in drawn.fields:
        steps = drawn.declared(field["name"]).get("thresholds", {}).get("steps", [])
        declared = [(None, s["color"]) for s in steps[:1]] + [(s["value"], s["color"]) for s in steps[1:]]
        kept = [(s["value"], s["color"]) for s in field.get("thresholds") or []]
        if kept != declared:
            yield f"{field['name']}: drawn with thresholds {kept}, the JSON says {declared}"


def values_coloured_by_thresholds(drawn: Drawn) -> Iterator[str]:
    shown = [(v["name"], v["value"], v["text"], v["color"]) for v in drawn.shown["drawn"].get("values") or []]
    shown += [(f["name"], c["value"], c["text"], c["color"]) for f in drawn.fields for c in f.get("shown") or []]
    for name, value, text, colour in shown:
        expected = drawn.expected_colour(name, value)
        if expected and colour != expected:
            yield f"{name}: {text} drawn in {colour}, its threshold's colour is {expected}"


def stat_values_in_the_page(drawn: Drawn) -> Iterator[str]:
    if drawn.panel.get("options", {}).get("textMode") in ("name", "none"):  # the value is not written
        return
    page = drawn.shown["text"]
    for value in drawn.shown["drawn"].get("values") or []:
        if len(page) < 400 and value["text"] not in page:  # the report keeps the first 400 characters
            yield f"{value['name']}: {value['text']!r} computed but not in the page ({page!r})"


def table_cells_coloured(drawn: Drawn) -> Iterator[str]:
    headers = drawn.shown["headers"]
    for field in drawn.fields:
        style = COLOURED_CELLS.get(field.get("cell") or "")
        if not style or field["name"] not in headers:
            continue
        column = headers.index(field["name"])
        colours: dict[str, set[str]] = {}
        for cell in field.get("shown") or []:
            colours.setdefault(cell["text"], set()).add(cell["color"])
        for row in drawn.shown["rows"]:
            cell = row[column]
            if cell["text"] and cell["text"] in colours and cell[style] not in colours[cell["text"]]:
                yield f"{field['name']}: cell {cell['text']!r} has {style} {cell[style]}, not {colours[cell['text']]}"


def merged_rows_join(drawn: Drawn) -> Iterator[str]:
    if not any(t["id"] == "merge" for t in drawn.panel.get("transformations", [])):
        return
    labels = [i for i, h in enumerate(drawn.shown["headers"]) if _is_label(drawn, h)]
    keys = Counter(tuple(row[i]["text"] for i in labels) for row in drawn.shown["rows"])
    repeated = sorted(key for key, count in keys.items() if count > 1)
    if repeated:
        yield (
            f"rows repeat for {', '.join('/'.join(k) for k in repeated[:3])}: the merge did not join its queries "
            "(they differ in a label, e.g. __name__)"
        )


def _is_label(drawn: Drawn, header: str) -> bool:
    return any(f["name"] == header and f["type"] == "string" for f in drawn.fields)


def legend_names_the_series(drawn: Drawn) -> Iterator[str]:
    legend = drawn.panel.get("options", {}).get("legend", {})
    if drawn.panel["type"] != "timeseries" or legend.get("showLegend") is False:
        return
    renamed = {
        name: prop["value"]
        for override in drawn.panel["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "displayName"
        for name in _names(override)
    }
    sent = drawn.sent["frames"]
    expected = sorted(
        renamed.get(name, name)
        for name in (f["config"].get("displayNameFromDS", "") for s in sent for f in s["fields"][1:])
    )
    if sorted(drawn.shown["legend"]) != expected:
        yield f"legend shows {sorted(drawn.shown['legend'])[:5]}, the queries' legends are {expected[:5]}"


CHECKS: tuple[Check, ...] = (
    overrides_match_a_field,
    units_kept,
    thresholds_kept,
    values_coloured_by_thresholds,
    stat_values_in_the_page,
    table_cells_coloured,
    merged_rows_join,
    legend_names_the_series,
)


def problems(panel: dict, sent: dict, shown: dict, palette: dict[str, str]) -> list[str]:
    """Every check's problems with one panel drawn with data (none for a panel shown as no data or placeholder)."""
    if shown["state"] != "drawn" or not shown.get("drawn"):
        return []
    drawn = Drawn(panel, sent, shown, palette)
    return [problem for check in CHECKS for problem in check(drawn)]
