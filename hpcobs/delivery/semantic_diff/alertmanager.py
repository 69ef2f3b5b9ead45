"""The Alertmanager configuration compared as a reviewer reads it (docs/review.md).

A route is named by the matchers on its way down the tree (`team="gpu-ops" › severity="critical"`), so a change
reads as "alerts matching this now go elsewhere"; the order of routes is compared because the first match wins.
Receivers are matched by name and compared setting by setting; a setting that looks like a credential is named,
never shown (hpcobs itself only writes `*_file` paths). Inhibition rules have no name: one is added or removed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hpcobs.delivery.semantic_diff.core import Change, Section, by_name, code, leaf_changes, moves, shown

_ROUTE_TREE = ("routes", "matchers", "match", "match_re")
_OWN = ("route", "receivers", "inhibit_rules")


def alertmanager_section(old: dict | None, new: dict | None) -> Section | None:
    """The changes of the Alertmanager configuration; None when there are none."""
    if old is None or new is None:
        action = "added" if old is None else "removed"
        return Section("alertmanager", "", "", (Change("Alertmanager configuration", action=action),))
    changes = _route_changes(old.get("route", {}), new.get("route", {}))
    changes += _receiver_changes(old.get("receivers", []), new.get("receivers", []))
    changes += _inhibition_changes(old.get("inhibit_rules", []), new.get("inhibit_rules", []))
    changes += leaf_changes("setting", "", old, new, skip=_OWN)
    return Section("alertmanager", "", "", tuple(changes)) if changes else None


def _routes(route: dict, path: tuple[str, ...] = ()) -> Iterator[tuple[str, dict]]:
    """Every route below route, depth first in evaluation order, named by the matchers from the top."""
    for child in route.get("routes", []) or []:
        inner = (*path, _matchers(child))
        yield " › ".join(inner), child
        yield from _routes(child, inner)


def _matchers(route: dict) -> str:
    return _written(route.get("matchers"), route.get("match"), route.get("match_re"))


def _written(matchers: list | None, equal: dict | None, regex: dict | None) -> str:
    """`team="gpu-ops", severity="critical"`: matchers as written, then those of the older match / match_re maps."""
    written = [str(matcher) for matcher in matchers or []]
    written += [f'{label}="{value}"' for label, value in (equal or {}).items()]
    written += [f'{label}=~"{value}"' for label, value in (regex or {}).items()]
    return ", ".join(written) or "(any alert)"


def _route_changes(old: dict, new: dict) -> list[Change]:
    before = by_name(_routes(old), lambda named: named[0])
    after = by_name(_routes(new), lambda named: named[0])
    changes = leaf_changes("root route", "", old, new, skip=_ROUTE_TREE)
    changes += [
        Change("route", name, "added", detail=_to(route)) for name, (_, route) in after.items() if name not in before
    ]
    changes += [
        Change("route", name, "removed", detail=_to(route)) for name, (_, route) in before.items() if name not in after
    ]
    changes += moves("route", list(before), list(after))
    for name in (key for key in after if key in before):
        changes += leaf_changes("route", name, before[name][1], after[name][1], skip=_ROUTE_TREE)
    return changes


def _to(route: dict) -> str:
    return f"→ {code(str(route['receiver']))}" if route.get("receiver") else "(inherits its receiver)"


def _receiver_changes(old: list[dict], new: list[dict]) -> list[Change]:
    before = by_name(old, lambda receiver: str(receiver.get("name")))
    after = by_name(new, lambda receiver: str(receiver.get("name")))
    changes = [
        Change("receiver", name, "added", detail=_integrations(item))
        for name, item in after.items()
        if name not in before
    ]
    changes += [
        Change("receiver", name, "removed", detail=_integrations(item))
        for name, item in before.items()
        if name not in after
    ]
    for name in (key for key in after if key in before):
        changes += leaf_changes("receiver", name, before[name], after[name], skip=("name",))
    return changes


def _integrations(receiver: dict) -> str:
    kinds = sorted(key for key in receiver if key != "name")
    return f"({', '.join(kinds)})" if kinds else "(discards what it gets)"


def _inhibition_changes(old: list[dict], new: list[dict]) -> list[Change]:
    before = [_inhibition(rule) for rule in old]
    after = [_inhibition(rule) for rule in new]
    return [Change("inhibition", rule, "added") for rule in after if rule not in before] + [
        Change("inhibition", rule, "removed") for rule in before if rule not in after
    ]


def _inhibition(rule: dict[str, Any]) -> str:
    """`alertname="A" mutes severity="warning" (equal: cluster, node)`."""
    source, target = (
        _written(rule.get(f"{side}_matchers"), rule.get(f"{side}_match"), rule.get(f"{side}_match_re"))
        for side in ("source", "target")
    )
    equal = f" (equal: {', '.join(shown(label) for label in rule.get('equal', []))})" if rule.get("equal") else ""
    return f"{source} mutes {target}{equal}"
