"""Grafana provisioning compared as a reviewer reads it (docs/review.md): datasources by uid (a dashboard refers to
a datasource by uid), dashboard providers by name, and the dashboard folders, which are the directories under
grafana/dashboards/ (the provider creates one folder per directory). Settings that look like credentials, and
everything under secureJsonData, are named, never shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hpcobs.delivery.semantic_diff.core import Change, Section, by_name, leaf_changes


def provisioning_section(
    datasources: tuple[Mapping[str, Any], Mapping[str, Any]],
    providers: tuple[Mapping[str, Any], Mapping[str, Any]],
    folders: tuple[set[str], set[str]],
) -> Section | None:
    """The changes of every provisioning file (parsed, by path) of each kind, and of the set of folders."""
    changes = _listed("datasource", "datasources", datasources, lambda item: str(item.get("uid") or item.get("name")))
    changes += _listed("dashboard provider", "providers", providers, lambda item: str(item.get("name")))
    old_folders, new_folders = folders
    changes += [Change("folder", name, "added") for name in sorted(new_folders - old_folders)]
    changes += [Change("folder", name, "removed") for name in sorted(old_folders - new_folders)]
    return Section("provisioning", "", "", tuple(changes)) if changes else None


def _listed(kind: str, key: str, files: tuple[Mapping[str, Any], Mapping[str, Any]], name) -> list[Change]:
    before, after = (by_name(_items(side, key), name) for side in files)
    changes = [Change(kind, item, "added", detail=_what(after[item])) for item in after if item not in before]
    changes += [Change(kind, item, "removed", detail=_what(before[item])) for item in before if item not in after]
    for item in (one for one in after if one in before):
        changes += leaf_changes(kind, item, before[item], after[item])
    old_files, new_files = files
    for path in sorted(set(old_files) | set(new_files)):
        changes += leaf_changes("file", path, old_files.get(path) or {}, new_files.get(path) or {}, skip=(key,))
    return changes


def _items(files: Mapping[str, Any], key: str) -> Iterable[dict]:
    return (item for path in sorted(files) for item in (files[path] or {}).get(key, []) or [])


def _what(item: dict) -> str:
    """`(prometheus, http://prometheus:9090)`: the type and where it points, as far as the item says."""
    parts = [str(item[key]) for key in ("type", "url") if item.get(key)]
    path = (item.get("options") or {}).get("path")
    return f"({', '.join(parts + ([str(path)] if path else []))})" if parts or path else ""
