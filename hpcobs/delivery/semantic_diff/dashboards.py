"""Two versions of a Grafana dashboard compared as a reviewer reads them (docs/review.md).

Panels are matched by title: ids are computed in layout order, so one added panel renumbers every panel after it.
A panel whose title changed is matched, and reported renamed, when its type and queries are the same, or else its
id, type and row. Rows are matched by title too, and a row whose title changed by the panels it still holds. A
panel is under the row whose header precedes it (or inside a collapsed row); one under another row has moved,
one elsewhere in its row has only shifted, which is noise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpcobs.delivery.semantic_diff import queries
from hpcobs.delivery.semantic_diff.core import (
    Change,
    Section,
    by_name,
    code,
    count,
    is_under,
    leaf_changes,
    matched,
    moves,
    renames,
    section_lines,
    shown,
    value_change,
)

# Compared on their own below, or noise: every other leaf of a panel is compared by its path.
_PANEL_OWN = (
    "id",
    "gridPos",
    "title",
    "type",
    "datasource",
    "description",
    "targets",
    "fieldConfig.defaults.unit",
    "fieldConfig.defaults.thresholds",
    "fieldConfig.defaults.links",
    "fieldConfig.overrides",
    "links",
    "panels",
    "transformations",
)
# What a panel of another type sets differently anyway: counted in one line when the type changes.
_TYPE_SETTINGS = ("options", "fieldConfig.defaults.custom", "fieldConfig.defaults.color")
_DASHBOARD_OWN = ("id", "version", "uid", "title", "panels", "templating", "links", "annotations")
# A variable's name and query are compared on their own; current and options are what Grafana keeps of the last
# selection and of the values the query resolved to, not the definition.
_VARIABLE_OWN = ("name", "query", "current", "options")
NO_ROW = "(no row)"


def compare_dashboards(old: dict | None, new: dict | None) -> list[str]:
    """The Markdown lines of what changed in one dashboard (None: it is added or removed): a heading and a
    bullet per change; [] when only noise (ids, version, positions, formatting) differs."""
    section = dashboard_section(old, new, Counter())
    return section_lines(section) if section else []


def dashboard_section(
    old: dict | None, new: dict | None, noise: Counter[str], folders: tuple[str | None, str | None] = (None, None)
) -> Section | None:
    """The changes of one dashboard (matched by uid) between two builds; noise is counted into noise."""
    shown_one = new if new is not None else old
    assert shown_one is not None, "a dashboard compared with nothing"
    uid = str(shown_one.get("uid", ""))
    heading = f"{shown_one.get('title', uid)} ({code(uid)})"
    if old is None or new is None:
        action, folder = ("added", folders[1]) if old is None else ("removed", folders[0])
        return Section(
            "dashboards", uid, heading, (Change("dashboard", action=action, detail=_contents(shown_one, folder)),)
        )
    changes = _settings(old, new, noise, folders)
    changes += _variables(old, new, noise)
    changes += _keyed_leaves("link", _links(old), _links(new))
    changes += _annotations(old, new, noise)
    changes += _layout(old, new, noise)
    return Section("dashboards", uid, heading, tuple(changes)) if changes else None


def _contents(dashboard: dict, folder: str | None) -> str:
    rows, placed = _placed(dashboard)
    where = f" in folder {code(folder)}" if folder else ""
    return f"({count(len(rows), 'row')}, {count(len(placed), 'panel')}{where})"


def _settings(old: dict, new: dict, noise: Counter[str], folders: tuple[str | None, str | None]) -> list[Change]:
    noise["versions"] += old.get("version") != new.get("version")
    noise["ids"] += old.get("id") != new.get("id")
    changes = []
    if old.get("title") != new.get("title"):
        changes.append(Change("dashboard", action="renamed", old=old.get("title"), new=new.get("title")))
    if folders[0] != folders[1]:
        changes.append(Change("dashboard", field="folder", old=folders[0], new=folders[1]))
    return changes + leaf_changes("dashboard", "", old, new, skip=_DASHBOARD_OWN)


# --------------------------------------------------------------------------------------------- variables, links


def _variables(old: dict, new: dict, noise: Counter[str]) -> list[Change]:
    before = by_name(old.get("templating", {}).get("list", []), lambda variable: str(variable.get("name")))
    after = by_name(new.get("templating", {}).get("list", []), lambda variable: str(variable.get("name")))
    changes = _presence("variable", before, after, lambda variable: f"({variable.get('type')})")
    changes += moves("variable", list(before), list(after))
    for name in (key for key in after if key in before):
        was, now = before[name], after[name]
        language = "promql" if now.get("type") == "query" else ""
        changes += _query_change("variable", name, "query", _variable_query(was), _variable_query(now), language, noise)
        changes += leaf_changes("variable", name, was, now, skip=_VARIABLE_OWN)
    return changes


def _variable_query(variable: dict) -> str | None:
    query = variable.get("query")
    return query.get("query") if isinstance(query, dict) else query


def _links(dashboard: dict) -> dict[str, dict]:
    return by_name(dashboard.get("links", []), lambda link: str(link.get("title") or link.get("url", "")))


def _annotations(old: dict, new: dict, noise: Counter[str]) -> list[Change]:
    before = by_name(old.get("annotations", {}).get("list", []), lambda annotation: str(annotation.get("name")))
    after = by_name(new.get("annotations", {}).get("list", []), lambda annotation: str(annotation.get("name")))
    changes = _presence("annotation", before, after)
    for name in (key for key in after if key in before):
        was, now = before[name], after[name]
        changes += _query_change("annotation", name, "expr", was.get("expr"), now.get("expr"), "promql", noise)
        changes += leaf_changes("annotation", name, was, now, skip=("expr",))
    return changes


def _keyed_leaves(kind: str, before: dict[str, dict], after: dict[str, dict]) -> list[Change]:
    changes = _presence(kind, before, after)
    changes += moves(kind, list(before), list(after))
    for name in (key for key in after if key in before):
        changes += leaf_changes(kind, name, before[name], after[name])
    return changes


def _presence(
    kind: str, before: dict[str, Any], after: dict[str, Any], detail: Callable[[Any], str] = lambda item: ""
) -> list[Change]:
    """Added (in the new order), then removed (in the old order)."""
    return [Change(kind, name, "added", detail=detail(item)) for name, item in after.items() if name not in before] + [
        Change(kind, name, "removed", detail=detail(item)) for name, item in before.items() if name not in after
    ]


def _query_change(
    kind: str, name: str, field: str, old: str | None, new: str | None, language: str, noise: Counter[str]
) -> list[Change]:
    """The query's change in its normal form; a query only written differently counts as formatting noise."""
    normal = queries.promql if language == "promql" else queries.collapsed
    was, now = (None if text is None else normal(text) for text in (old, new))
    noise["formatting"] += old != new and was == now
    return value_change(kind, name, field, was, now, language)


# --------------------------------------------------------------------------------------------- rows and panels


@dataclass(frozen=True)
class _Placed:
    panel: dict
    row: str | None  # the title of the row it is under


def _placed(dashboard: dict) -> tuple[dict[str, dict], dict[str, _Placed]]:
    """Rows and panels by name. Grafana puts a panel under the last row header above it, in reading order (y, then
    x); a collapsed row carries its panels inside it."""
    ordered = sorted(dashboard.get("panels", []), key=lambda panel: (_grid(panel, "y"), _grid(panel, "x")))
    rows: list[dict] = []
    placed: list[_Placed] = []
    for panel in ordered:
        if panel.get("type") == "row":
            rows.append(panel)
            placed += [_Placed(inner, panel.get("title", "")) for inner in panel.get("panels", [])]
        else:
            placed.append(_Placed(panel, rows[-1].get("title", "") if rows else None))
    named_rows = by_name(rows, lambda row: str(row.get("title", "")))
    return named_rows, by_name(placed, lambda one: str(one.panel.get("title", "")))


def _grid(panel: dict, axis: str) -> int:
    return int(panel.get("gridPos", {}).get(axis, 0))


def _layout(old: dict, new: dict, noise: Counter[str]) -> list[Change]:
    old_rows, old_panels = _placed(old)
    new_rows, new_panels = _placed(new)
    panel_names = matched(
        old_panels,
        new_panels,
        renames(
            old_panels,
            new_panels,
            lambda was, now: _queries_alike(old_panels[was].panel, new_panels[now].panel),
            lambda was, now: _slot_alike(old_panels[was], new_panels[now]),
        ),
    )
    row_names = _row_names(old_rows, new_rows, old_panels, new_panels, panel_names)
    changes = _row_changes(old_rows, new_rows, row_names, noise)
    renamed_from = {now: was for was, now in panel_names.items()}
    for name, now in new_panels.items():
        was_name = renamed_from.get(name)
        if was_name is None:
            changes.append(Change("panel", name, "added", detail=f"({now.panel.get('type')}) in {_row(now.row)}"))
        else:
            changes += _panel_changes(was_name, name, old_panels[was_name], now, row_names, noise)
    changes += [
        Change("panel", name, "removed", detail=f"({was.panel.get('type')}) from {_row(was.row)}")
        for name, was in old_panels.items()
        if name not in panel_names
    ]
    return changes


def _row(title: str | None) -> str:
    return f"row {code(title)}" if title is not None else "no row"


def _queries_alike(old: dict, new: dict) -> bool:
    signature = _signature(old)
    return bool(signature[1]) and signature == _signature(new)


def _signature(panel: dict) -> tuple[Any, ...]:
    """What a panel shows, whatever its title: its type and queries (spacing collapsed), or a text's content."""
    exprs = tuple(queries.collapsed(str(target.get("expr", ""))) for target in panel.get("targets", []))
    return panel.get("type"), exprs or panel.get("options", {}).get("content")


def _slot_alike(old: _Placed, new: _Placed) -> bool:
    same = ("id", "type")
    return old.row == new.row and all(old.panel.get(key) == new.panel.get(key) for key in same)


def _row_names(
    old_rows: dict[str, dict],
    new_rows: dict[str, dict],
    old_panels: dict[str, _Placed],
    new_panels: dict[str, _Placed],
    panel_names: dict[str, str],
) -> dict[str, str]:
    """Old row title -> new row title; a row renamed is the one holding at least half of its matched panels."""
    held_before = {
        row: {panel_names[name] for name, one in old_panels.items() if one.row == row and name in panel_names}
        for row in old_rows
    }
    held_after = {row: {name for name, one in new_panels.items() if one.row == row} for row in new_rows}

    def holds_the_same(was: str, now: str) -> bool:
        shared = held_before[was] & held_after[now]
        return bool(shared) and 2 * len(shared) >= len(held_before[was])

    return matched(old_rows, new_rows, renames(old_rows, new_rows, holds_the_same))


def _row_changes(
    old_rows: dict[str, dict], new_rows: dict[str, dict], row_names: dict[str, str], noise: Counter[str]
) -> list[Change]:
    renamed_from = {now: was for was, now in row_names.items()}
    changes = [Change("row", now, "renamed", old=was, new=now) for was, now in row_names.items() if was != now]
    changes += [Change("row", name, "added") for name in new_rows if name not in renamed_from]
    changes += [Change("row", name, "removed") for name in old_rows if name not in row_names]
    changes += moves("row", [row_names.get(name, name) for name in old_rows], list(new_rows))
    for now, was in renamed_from.items():
        before, after = old_rows[was], new_rows[now]
        noise["ids"] += before.get("id") != after.get("id")
        noise["positions"] += before.get("gridPos") != after.get("gridPos")
        changes += leaf_changes("row", now, before, after, skip=("id", "gridPos", "title", "panels"))
    return changes


def _panel_changes(
    was_name: str, name: str, was: _Placed, now: _Placed, row_names: dict[str, str], noise: Counter[str]
) -> list[Change]:
    before, after = was.panel, now.panel
    noise["ids"] += before.get("id") != after.get("id")
    changes = []
    if was_name != name:
        changes.append(Change("panel", name, "renamed", old=was_name, new=name))
    if (None if was.row is None else row_names.get(was.row, was.row)) != now.row:
        changes.append(Change("panel", name, "moved", "row", was.row or NO_ROW, now.row or NO_ROW))
    else:
        noise["positions"] += _position(before) != _position(after)
    for field, value in _PANEL_FIELDS.items():
        changes += value_change("panel", name, field, value(before), value(after))
    changes += _target_changes(name, before, after, noise)
    changes += _override_changes(name, before, after)
    changes += _transformation_changes(name, before, after)
    rest = leaf_changes("panel", name, before, after, skip=_PANEL_OWN)
    if before.get("type") != after.get("type"):
        settings = sum(is_under(change.field, _TYPE_SETTINGS) for change in rest)
        rest = [change for change in rest if not is_under(change.field, _TYPE_SETTINGS)]
        note = f"options and field settings of the new type not listed ({settings})"
        rest += [Change("panel", name, detail=note)] if settings else []
    return changes + rest


def _position(panel: dict) -> tuple[int, int]:
    return _grid(panel, "x"), _grid(panel, "y")


def _defaults(panel: dict) -> dict:
    return panel.get("fieldConfig", {}).get("defaults", {})


def _optional(value: Any) -> str | None:
    return None if value is None else shown(value)


def _datasource(value: Any) -> str | None:
    if isinstance(value, dict):
        return "/".join(str(value[key]) for key in ("type", "uid") if key in value)
    return _optional(value)


def _thresholds(value: Any) -> str | None:
    """`0 green, 0.6 red` (a step without a value is Grafana's base step); `(percentage)` in that mode."""
    if not isinstance(value, dict):
        return _optional(value)
    steps = ", ".join(
        f"{'base' if step.get('value') is None else shown(step['value'])} {step.get('color')}"
        for step in value.get("steps", [])
    )
    return steps + (" (percentage)" if value.get("mode") == "percentage" else "")


def _link_list(links: Any) -> str | None:
    """`title → url` of each link (a dashboards drop-down names its tags)."""
    if not links:
        return None
    return "; ".join(
        f"{link.get('title', '')} → {link.get('url') or 'dashboards tagged ' + ', '.join(link.get('tags', []))}"
        for link in links
    )


def _size(panel: dict) -> str:
    return f"{_grid(panel, 'w')}×{_grid(panel, 'h')}"


_PANEL_FIELDS = {
    "type": lambda panel: _optional(panel.get("type")),
    "datasource": lambda panel: _datasource(panel.get("datasource")),
    "description": lambda panel: _optional(panel.get("description")),
    "unit": lambda panel: _optional(_defaults(panel).get("unit")),
    "thresholds": lambda panel: _thresholds(_defaults(panel).get("thresholds")),
    "links": lambda panel: _link_list(panel.get("links")),
    "data links": lambda panel: _link_list(_defaults(panel).get("links")),
    "size": _size,
}


def _target_changes(name: str, old: dict, new: dict, noise: Counter[str]) -> list[Change]:
    """Queries by refId: the expression in its normal form, the legend, the rest leaf by leaf."""
    before = by_name(old.get("targets", []), lambda target: str(target.get("refId", "")))
    after = by_name(new.get("targets", []), lambda target: str(target.get("refId", "")))
    changes = []
    for ref in [*after, *(key for key in before if key not in after)]:
        was, now = before.get(ref, {}), after.get(ref, {})
        language = _language(now or was, new if now else old)
        changes += _query_change("panel", name, f"query {ref}", was.get("expr"), now.get("expr"), language, noise)
        # No legend and an empty one are the same: Grafana names the series by its labels.
        legend = f"query {ref} legend"
        changes += value_change("panel", name, legend, was.get("legendFormat") or None, now.get("legendFormat") or None)
        if was and now:
            skip = ("expr", "legendFormat", "refId")
            changes += leaf_changes("panel", name, was, now, skip=skip, label=f"query {ref}")
    return changes


def _transformation_changes(name: str, old: dict, new: dict) -> list[Change]:
    """Transformations in order, each as one value: they are read as a whole, and a change shows where it is."""
    before, after = (panel.get("transformations", []) for panel in (old, new))

    def at(side: list, index: int) -> str | None:
        return shown(side[index]) if index < len(side) else None

    return [
        change
        for index in range(max(len(before), len(after)))
        for change in value_change("panel", name, f"transformation {index + 1}", at(before, index), at(after, index))
    ]


def _language(target: dict, panel: dict) -> str:
    """PromQL ("promql") unless the target's datasource, else the panel's, has another type (Loki: ""). An
    expression the PromQL parser refuses is compared with its spacing collapsed anyway."""
    datasource = target.get("datasource") or panel.get("datasource")
    kind = datasource.get("type") if isinstance(datasource, dict) else None
    return "promql" if kind in ("prometheus", None) else ""


def _override_changes(name: str, old: dict, new: dict) -> list[Change]:
    """Field overrides by what they match; their properties by id (thresholds written like the panel's)."""
    before = by_name(old.get("fieldConfig", {}).get("overrides", []), _matcher)
    after = by_name(new.get("fieldConfig", {}).get("overrides", []), _matcher)
    changes = []
    for matcher in [*after, *(key for key in before if key not in after)]:
        was, now = _properties(before.get(matcher)), _properties(after.get(matcher))
        if not was or not now:
            changes += value_change("panel", name, f"override {matcher}", _joined(was), _joined(now))
            continue
        for property_id in [*now, *(key for key in was if key not in now)]:
            changes += value_change(
                "panel", name, f"override {matcher} {property_id}", was.get(property_id), now.get(property_id)
            )
    return changes


def _matcher(override: dict) -> str:
    """`"Value #C", "GPU (%)"` for a match by field names, else `<matcher id> <options>`."""
    matcher = override.get("matcher", {})
    options = matcher.get("options")
    names = options.get("names") if isinstance(options, dict) else None
    if matcher.get("id") in ("byName", "byNames") and (names or isinstance(options, str)):
        return ", ".join(f'"{field}"' for field in (names or [options]))
    return f"{matcher.get('id')} {shown(options)}"


def _properties(override: dict | None) -> dict[str, str | None]:
    if override is None:
        return {}
    return {
        str(prop.get("id")): _thresholds(prop.get("value"))
        if prop.get("id") == "thresholds"
        else _optional(prop.get("value"))
        for prop in override.get("properties", [])
    }


def _joined(properties: dict[str, str | None]) -> str | None:
    return "; ".join(f"{key} {value}" for key, value in properties.items()) if properties else None
