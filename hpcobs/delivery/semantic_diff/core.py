"""What `build.py diff` says and how (docs/review.md): a change, the section it belongs to, the noise counted instead
of listed, the comparisons every area shares (leaf by leaf, items by name, order) and a section as Markdown.

Every area (dashboards, rule groups, Alertmanager, provisioning, other files) turns two parsed documents into
sections of changes with these; the report renders them as Markdown or JSON.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from hpcobs.delivery.semantic_diff import queries

Item = TypeVar("Item")

# Differences that do not change what Grafana, Prometheus or Alertmanager do, counted in one line instead:
# panel and row ids (computed in layout order, so one added panel renumbers the ones after it), dashboard
# versions, positions within a row, a file written differently with the same content (JSON indentation, key
# order, PromQL spacing), and the copies of the rule groups under prometheus/tests/, kubernetes/ and mimir/.
# Areas count them in a Counter by kind.
NOISE_KINDS = ("ids", "versions", "positions", "formatting", "rule copies")

# A PromQL change longer than this on one line is shown as a diff of the parser's indented form, whole when it has
# at most WHOLE_DIFF lines; a longer one-line text only where it differs, with about CONTEXT characters around.
LONG_QUERY = 100
WHOLE_DIFF = 30
LONG_TEXT = 100
CONTEXT = 20
_SECRET = re.compile(r"password|secret|token|credentials?$|api_?key|api_url|routing_key|service_key|bearer", re.I)
_ABSENT = object()


@dataclass(frozen=True)
class Change:
    """One line of the report: `{kind} {name}: {field} {old} → {new}`, or an added / removed / renamed /
    moved thing. old and new are already rendered as text; None is "not there"."""

    kind: str
    name: str = ""
    action: str = "changed"  # added | removed | renamed | moved | changed
    field: str = ""
    old: str | None = None
    new: str | None = None
    detail: str = ""  # Markdown after an added or removed subject, e.g. "(timeseries) in row `Fleet`"
    language: str = ""  # "promql": a long value is shown as a diff of the parser's indented form
    secret: bool = False  # the value looks like a secret: the field is named, the values are not shown

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "action": self.action,
            "field": self.field,
            "old": None if self.secret else self.old,
            "new": None if self.secret else self.new,
            "detail": self.detail,
            "secret": self.secret,
        }


@dataclass(frozen=True)
class Section:
    """The changes of one thing: a dashboard, a rule group; or of a whole area (subject "")."""

    area: str
    subject: str
    heading: str
    changes: tuple[Change, ...]


# --------------------------------------------------------------------------------------------- values


def shown(value: Any) -> str:
    """A value as the report writes it: text as it is, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def count(number: int, noun: str) -> str:
    """`1 panel`, `3 panels`."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def looks_secret(path: str) -> bool:
    """A leaf whose value may be a credential (Alertmanager and datasource settings). A `*_file` setting names a
    file, which is safe to show."""
    leaf = re.sub(r"\[\d+\]$", "", path.rsplit(".", 1)[-1])
    return "secureJsonData" in path.split(".") or (bool(_SECRET.search(leaf)) and not leaf.endswith("_file"))


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves by path (`options.legend.placement`, `transformations[1].id`). A list of scalars is one leaf."""
    if isinstance(value, dict) and value:
        return {path: leaf for key, item in value.items() for path, leaf in flatten(item, _joined(prefix, key)).items()}
    if isinstance(value, list) and value and any(isinstance(item, dict | list) for item in value):
        return {
            path: leaf for index, item in enumerate(value) for path, leaf in flatten(item, f"{prefix}[{index}]").items()
        }
    return {prefix: value}


def _joined(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def is_under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == prefix or path.startswith((f"{prefix}.", f"{prefix}[")) for prefix in prefixes)


def leaf_changes(
    kind: str, name: str, old: Mapping, new: Mapping, skip: Iterable[str] = (), label: str = ""
) -> list[Change]:
    """A change per leaf that differs, by path (prefixed by label), secrets named without their values."""
    skipped = tuple(skip)
    before, after = (flatten(dict(side)) if side else {} for side in (old, new))
    changes = []
    for path in sorted(set(before) | set(after)):
        was, now = before.get(path, _ABSENT), after.get(path, _ABSENT)
        if was == now or is_under(path, skipped):
            continue
        changes.append(
            Change(
                kind,
                name,
                field=f"{label} {path}".strip() if path else label,
                old=None if was is _ABSENT else shown(was),
                new=None if now is _ABSENT else shown(now),
                secret=looks_secret(path),
            )
        )
    return changes


def value_change(
    kind: str, name: str, field: str, old: str | None, new: str | None, language: str = ""
) -> list[Change]:
    """[the change] when old and new differ, else []."""
    return [] if old == new else [Change(kind, name, field=field, old=old, new=new, language=language)]


# --------------------------------------------------------------------------------------------- matching


def by_name(items: Iterable[Item], name: Callable[[Item], str]) -> dict[str, Item]:
    """Items by name; a name seen again is numbered (`Logs #2`), so that repeated names pair up in order."""
    named: dict[str, Item] = {}
    for item in items:
        base = name(item)
        key, seen = base, 1
        while key in named:
            seen += 1
            key = f"{base} #{seen}"
        named[key] = item
    return named


def renames(old: Iterable[str], new: Iterable[str], *alike: Callable[[str, str], bool]) -> dict[str, str]:
    """Old name -> new name for things found under another name: each old name missing from new is paired with the
    first new name missing from old that the first test of alike able to pair it accepts."""
    before, after = list(old), list(new)
    gone = [key for key in before if key not in after]
    fresh = [key for key in after if key not in before]
    paired: dict[str, str] = {}
    for same in alike:
        for was in gone:
            if was not in paired:
                match = next((now for now in fresh if now not in paired.values() and same(was, now)), None)
                if match is not None:
                    paired[was] = match
    return paired


def matched(old: Iterable[str], new: Iterable[str], renamed: Mapping[str, str]) -> dict[str, str]:
    """Old name -> new name of everything in both: same name, or renamed."""
    after = set(new)
    return {key: renamed.get(key, key) for key in old if key in renamed or key in after}


def moves(kind: str, old_order: list[str], new_order: list[str]) -> list[Change]:
    """Things present in both orders that changed place relative to the others (where order matters: routes,
    rules of a group, variables, rows), the fewest such moves by the longest common subsequence; each says what it
    now precedes, and its old and new positions (from 1) for tools."""
    common = set(old_order) & set(new_order)
    before = [key for key in old_order if key in common]
    after = [key for key in new_order if key in common]
    blocks = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_matching_blocks()
    stayed = {before[block.a + offset] for block in blocks for offset in range(block.size)}
    changes = []
    for key in (key for key in after if key not in stayed):
        position = new_order.index(key)
        following = new_order[position + 1] if position + 1 < len(new_order) else None
        where = f"before {code(following)}" if following is not None else "to the end"
        changes.append(
            Change(kind, key, "moved", old=str(old_order.index(key) + 1), new=str(position + 1), detail=where)
        )
    return changes


# --------------------------------------------------------------------------------------------- Markdown


def code(text: str) -> str:
    """An inline code span holding text as it is, backticks included; "(empty)" for an empty string."""
    if text == "":
        return "(empty)"
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    padded = text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" "))
    pad = " " if padded else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _value(text: str | None) -> str:
    return "(none)" if text is None else code(text)


def change_lines(change: Change, within: bool = False) -> list[str]:
    """The change as a Markdown bullet, with a ```diff block under it for a long query or a multi-line text;
    within a bullet naming its subject, without the subject."""
    subject = f"{change.kind} {code(change.name)}" if change.name else change.kind
    detail = f" {change.detail}" if change.detail else ""
    if change.action in ("added", "removed"):
        return [f"- {change.action} {subject}{detail}"]
    if change.action == "renamed":
        return [f"- renamed {change.kind} {_value(change.old)} → {_value(change.new)}{detail}"]
    if not change.field:
        words = (["moved"] if change.action == "moved" else []) + ([] if within else [subject]) + [change.detail]
        return [f"- {' '.join(word for word in words if word)}"]
    lead = "moved " if change.action == "moved" else ""
    head = f"- {lead}{change.field}" if within else f"- {lead}{subject}: {change.field}"
    if change.secret:
        return [f"{head} changed (not shown: it looks like a secret)"]
    block = _diff_block(change)
    if block:
        return [f"{head}:", *(f"  {line}" for line in block)]
    if change.old is not None and change.new is not None and max(len(change.old), len(change.new)) > LONG_TEXT:
        return [f"{head} {' → '.join(code(part) for part in _excerpts(change.old, change.new))}"]
    return [f"{head} {_value(change.old)} → {_value(change.new)}"]


def _diff_block(change: Change) -> list[str]:
    """A long query as a diff of the parser's indented form, a multi-line text as a diff of its lines: the whole
    of a short one, the changed lines and three around them of a long one."""
    old, new = change.old or "", change.new or ""
    if change.language == "promql" and max(len(old), len(new)) > LONG_QUERY:
        old, new = queries.promql(old, pretty=True) if old else "", queries.promql(new, pretty=True) if new else ""
    elif "\n" not in old + new:
        return []
    before, after = old.splitlines(), new.splitlines()
    whole = max(len(before), len(after)) <= WHOLE_DIFF
    lines = list(difflib.unified_diff(before, after, lineterm="", n=WHOLE_DIFF if whole else 3))[2:]
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", old + new)), default=0) + 1)
    return [f"{fence}diff", *(line for line in lines if not (whole and line.startswith("@@"))), fence]


def _excerpts(old: str, new: str) -> tuple[str, str]:
    """The part of two long one-line texts that differs, with a few words around it (`… below 0.75 a …`)."""
    start = len(os.path.commonprefix([old, new]))
    end = len(os.path.commonprefix([old[start:][::-1], new[start:][::-1]]))
    start = max(0, old.rfind(" ", 0, max(0, start - CONTEXT)) + 1) if start > CONTEXT else 0

    def excerpt(text: str) -> str:
        stop = len(text) - end
        if end > CONTEXT:
            found = text.find(" ", stop + CONTEXT)
            stop = len(text) if found < 0 else found
        else:
            stop = len(text)
        return f"{'…' if start else ''}{text[start:stop]}{'…' if stop < len(text) else ''}"

    return excerpt(old), excerpt(new)


def section_lines(section: Section) -> list[str]:
    """The section's heading (when it has one), then a bullet per change; several changes of one thing (a panel,
    an alert) as bullets under one naming it, after its rename when it was renamed."""
    lines = [f"#### {section.heading}", ""] if section.heading else []
    for _, grouped in itertools.groupby(section.changes, key=lambda change: (change.kind, change.name)):
        changes = list(grouped)
        first = changes[0]
        parts = changes[1:] if first.action == "renamed" else changes
        if len(changes) < 2 or not all(part.action in ("changed", "moved") for part in parts):
            lines += [line for change in changes for line in change_lines(change)]
            continue
        subject = f"{first.kind} {code(first.name)}" if first.name else first.kind
        lines.append(f"{change_lines(first)[0]}:" if parts is not changes else f"- {subject}:")
        lines += [f"  {line}" for part in parts for line in change_lines(part, within=True)]
    return lines
