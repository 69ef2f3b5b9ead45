"""Prometheus rule groups compared as a reviewer reads them (docs/review.md).

Groups are matched by name across every file of prometheus/rules/ (a name is unique in a build, and a group may
move to another file). Within a group an alert is keyed by its name and severity, since an alert's warning and
critical levels share a name; a record by its name and labels. A rule found under another name with the same kind
and expression is renamed. The order of a group's rules is compared because Prometheus evaluates them in order,
a record reading another of the same group in the same evaluation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from hpcobs.delivery.semantic_diff import queries
from hpcobs.delivery.semantic_diff.core import (
    Change,
    Section,
    by_name,
    code,
    count,
    leaf_changes,
    matched,
    moves,
    renames,
    value_change,
)
from hpcobs.targets.prometheus import RULES_DIR


@dataclass(frozen=True)
class _Rule:
    kind: str  # "record", or "<severity> alert"
    name: str  # the alert's or record's name, a record's labels after it
    rule: dict

    @property
    def key(self) -> str:
        return f"{self.kind} {self.name}"


def rule_sections(old: Mapping[str, Any], new: Mapping[str, Any], noise: Counter[str]) -> list[Section]:
    """A section per group that changed; old and new are the parsed rule files by path."""
    before, after = _groups(old), _groups(new)
    sections = []
    for name in [*after, *(key for key in before if key not in after)]:
        changes = _group_changes(before.get(name), after.get(name), noise)
        if changes:
            path = (after.get(name) or before[name])[0]
            sections.append(Section("rules", name, f"{code(name)} ({code(_file(path))})", tuple(changes)))
    return sections


def _file(path: str) -> str:
    """A Prometheus rule file by its name (`gpu.rules.yaml`), any other (Loki's) by its path under out/."""
    return path.removeprefix(f"{RULES_DIR}/")


def _groups(files: Mapping[str, Any]) -> dict[str, tuple[str, dict]]:
    """(file, group) by group name, files in path order."""
    return {
        str(group.get("name")): (path, group)
        for path in sorted(files)
        for group in (files[path] or {}).get("groups", [])
    }


def _rules(group: dict) -> dict[str, _Rule]:
    rules = [_rule(rule) for rule in group.get("rules", [])]
    return by_name(rules, lambda rule: rule.key)


def _rule(rule: dict) -> _Rule:
    if "alert" in rule:
        severity = rule.get("labels", {}).get("severity")
        return _Rule(f"{severity} alert" if severity else "alert", str(rule["alert"]), rule)
    labels = ", ".join(f'{key}="{value}"' for key, value in sorted(rule.get("labels", {}).items()))
    return _Rule("record", f"{rule.get('record')}{{{labels}}}" if labels else str(rule.get("record")), rule)


def _group_changes(old: tuple[str, dict] | None, new: tuple[str, dict] | None, noise: Counter[str]) -> list[Change]:
    if old is None:
        return _whole_group("added", new[1]) if new else []
    if new is None:
        return _whole_group("removed", old[1])
    (old_path, old_group), (new_path, new_group) = old, new
    changes = value_change("group", "", "file", _file(old_path), _file(new_path))
    changes += leaf_changes("group", "", old_group, new_group, skip=("name", "rules"))
    before, after = _rules(old_group), _rules(new_group)
    names = matched(before, after, renames(before, after, lambda was, now: _alike(before[was], after[now])))
    renamed_from = {now: was for was, now in names.items()}
    for key, rule in after.items():
        if key in renamed_from:
            changes += _rule_changes(before[renamed_from[key]], rule, noise)
        else:
            changes.append(Change(rule.kind, rule.name, "added"))
    changes += [Change(rule.kind, rule.name, "removed") for key, rule in before.items() if key not in names]
    order = moves("rule", [names.get(key, key) for key in before], list(after))
    return changes + [replace(move, kind=after[move.name].kind, name=after[move.name].name) for move in order]


def _whole_group(action: str, group: dict) -> list[Change]:
    """A group added or removed: how many rules of each kind, then each rule."""
    rules = _rules(group).values()
    alerts = sum(rule.kind.endswith("alert") for rule in rules)
    kinds = ((len(rules) - alerts, "record"), (alerts, "alert"))
    counts = ", ".join(count(number, noun) for number, noun in kinds if number) or "no rules"
    return [Change("group", action=action, detail=f"({counts})")] + [
        Change(rule.kind, rule.name, action) for rule in rules
    ]


def _alike(old: _Rule, new: _Rule) -> bool:
    """Of the same kind, with the same expression."""
    expressions = (queries.promql(str(rule.rule.get("expr"))) for rule in (old, new))
    return old.kind == new.kind and len(set(expressions)) == 1


def _rule_changes(old: _Rule, new: _Rule, noise: Counter[str]) -> list[Change]:
    changes = [Change(new.kind, new.name, "renamed", old=old.name, new=new.name)] if old.name != new.name else []
    was, now = str(old.rule.get("expr")), str(new.rule.get("expr"))
    noise["formatting"] += was != now and queries.promql(was) == queries.promql(now)
    changes += value_change(new.kind, new.name, "expr", queries.promql(was), queries.promql(now), "promql")
    return changes + leaf_changes(new.kind, new.name, old.rule, new.rule, skip=("alert", "record", "expr"))
