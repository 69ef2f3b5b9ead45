"""Two builds (every file of out/, by path) compared for a reviewer, as Markdown or JSON (docs/review.md).

Each file goes to the area its target names (hpcobs.targets.registry): dashboards, rule groups, the Alertmanager
configuration, Grafana provisioning; any other file is compared leaf by leaf when it is JSON or YAML. What changes
nothing a server does (ids, versions, positions, formatting, the copies of the rule groups) is counted in the first
line, not listed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from hpcobs.build.outdir import MARKER
from hpcobs.delivery.semantic_diff.alertmanager import alertmanager_section
from hpcobs.delivery.semantic_diff.core import NOISE_KINDS, Change, Section, code, count, leaf_changes, section_lines
from hpcobs.delivery.semantic_diff.dashboards import compare_dashboards, dashboard_section
from hpcobs.delivery.semantic_diff.provisioning import provisioning_section
from hpcobs.delivery.semantic_diff.rules import rule_sections
from hpcobs.lang.render import SafeLoader
from hpcobs.targets import registry
from hpcobs.targets.base import DiffSection
from hpcobs.targets.dashboards import DASHBOARDS_DIR
from hpcobs.targets.provisioning import DATASOURCES_DIR, PROVIDERS_DIR

__all__ = ["Report", "Side", "compare", "compare_dashboards", "markdown", "as_json"]

# In report order: area, its heading, and what the summary line counts in it ("": it names the area).
AREAS = (
    ("dashboards", "Dashboards", "dashboard"),
    ("rules", "Rule groups", "rule group"),
    ("alertmanager", "Alertmanager", ""),
    ("provisioning", "Grafana provisioning", ""),
    ("files", "Other files", "other file"),
)
# Files counted as copies of the rule files, never read: the rule tests follow the rules they test.
COPIES: DiffSection = "rule copies"


@dataclass(frozen=True)
class Side:
    """One of the two builds compared, as the report names it: `abc1234` (merge-base with main)."""

    name: str
    note: str = ""
    commit: str | None = None

    def markdown(self) -> str:
        return code(self.name) + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "note": self.note, "commit": self.commit}


@dataclass(frozen=True)
class Report:
    sections: tuple[Section, ...]
    noise: Counter[str] = field(default_factory=Counter)

    @property
    def changed(self) -> bool:
        return bool(self.sections)


def compare(old: Mapping[str, str], new: Mapping[str, str]) -> Report:
    """What changed from the build old to the build new (file texts by path under out/)."""
    noise: Counter[str] = Counter()
    # Only files that differ are read: one written alike in both builds holds no change.
    differing = sorted(path for path in {*old, *new} if old.get(path) != new.get(path))
    read = [path for path in differing if section_of(path) != COPIES]
    old_docs = _parsed({path: old[path] for path in read if path in old})
    new_docs = _parsed({path: new[path] for path in read if path in new})

    def parsed(section: DiffSection) -> tuple[str, ...]:
        return tuple(path for path in read if (path in old_docs or path in new_docs) and section_of(path) == section)

    dashboards = tuple(path for path in parsed("dashboards") if _is_dashboard(path))
    rules = parsed("rules")
    alertmanager = parsed("alertmanager")
    provisioning = parsed("provisioning")
    datasources = tuple(path for path in provisioning if path.startswith(f"{DATASOURCES_DIR}/"))
    providers = tuple(path for path in provisioning if path.startswith(f"{PROVIDERS_DIR}/"))
    sections = _dashboard_sections(_of(old_docs, dashboards), _of(new_docs, dashboards), noise)
    sections += rule_sections(_of(old_docs, rules), _of(new_docs, rules), noise)
    sections += [alertmanager_section(old_docs.get(path), new_docs.get(path)) for path in alertmanager]
    sections.append(
        provisioning_section(
            (_of(old_docs, datasources), _of(new_docs, datasources)),
            (_of(old_docs, providers), _of(new_docs, providers)),
            (_folders(old), _folders(new)),
        )
    )
    covered = {*dashboards, *rules, *alertmanager, *datasources, *providers}
    # Read the same, written otherwise: JSON indentation or key order, YAML style.
    noise["formatting"] += sum(
        path in old_docs and path in new_docs and old_docs[path] == new_docs[path] for path in covered
    )
    sections.append(_other_files(old, new, old_docs, new_docs, covered, noise))
    return Report(tuple(section for section in sections if section is not None), noise)


def section_of(path: str) -> DiffSection:
    """Where the diff compares a file: its target's section, or among the other files when no target owns it."""
    target = registry.owner(path)
    return target.diff if target else "files"


def _parsed(files: Mapping[str, str]) -> dict[str, Any]:
    """The JSON and YAML files, parsed, by path; a file that does not parse is left out (it is compared as text)."""
    parsed = {}
    for path, text in files.items():
        try:
            if path.endswith(".json"):
                parsed[path] = json.loads(text)
            elif path.endswith((".yaml", ".yml")):
                documents = list(yaml.load_all(text, Loader=SafeLoader))
                parsed[path] = documents[0] if len(documents) == 1 else documents
        except (ValueError, yaml.YAMLError):
            continue
    return parsed


def _of(docs: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    return {path: docs[path] for path in sorted(paths) if path in docs}


def _is_dashboard(path: str) -> bool:
    return section_of(path) == "dashboards" and path.endswith(".json")


def _folder(path: str) -> str:
    return path.removeprefix(f"{DASHBOARDS_DIR}/").rpartition("/")[0] or "(General)"


def _folders(files: Mapping[str, str]) -> set[str]:
    return {_folder(path) for path in files if _is_dashboard(path)}


def _dashboard_sections(old: dict[str, Any], new: dict[str, Any], noise: Counter[str]) -> list[Section | None]:
    """Dashboards matched by uid, wherever their file is; in the new build's order, then the removed ones."""
    before = {str(doc.get("uid")): (path, doc) for path, doc in old.items() if isinstance(doc, dict)}
    after = {str(doc.get("uid")): (path, doc) for path, doc in new.items() if isinstance(doc, dict)}
    sections = []
    for uid in [*after, *(key for key in before if key not in after)]:
        was_path, was = before.get(uid, ("", None))
        now_path, now = after.get(uid, ("", None))
        folders = (_folder(was_path) if was else None, _folder(now_path) if now else None)
        sections.append(dashboard_section(was, now, noise, folders))
    return sections


def _other_files(
    old: Mapping[str, str],
    new: Mapping[str, str],
    old_docs: Mapping[str, Any],
    new_docs: Mapping[str, Any],
    covered: set[str],
    noise: Counter[str],
) -> Section | None:
    """Files no area covers: added, removed, or changed leaf by leaf (a list of items that name themselves, such
    as Falco rules, by name). The rule test files and the groups other targets copy (Target.rule_groups_at: the
    PrometheusRule, the Mimir namespace file) follow the rule files: they count as rule copies."""
    changes: list[Change] = []
    for path in sorted(set(old) | set(new)):
        if path in covered or path == MARKER or old.get(path) == new.get(path):
            continue
        if section_of(path) == COPIES:
            noise["rule copies"] += 1
        elif path not in old or path not in new:
            changes.append(Change("file", path, "added" if path not in old else "removed"))
        elif path in old_docs and path in new_docs:
            (was, was_copy), (now, now_copy) = (_without_rule_copy(path, docs[path]) for docs in (old_docs, new_docs))
            found = leaf_changes("file", path, _named(was), _named(now))
            noise["rule copies"] += was_copy != now_copy
            noise["formatting"] += not found and was_copy == now_copy
            changes += found
        else:
            changes.append(Change("file", path, detail="differs (not one JSON or YAML document: compare the files)"))
    return Section("files", "", "", tuple(changes)) if changes else None


def _without_rule_copy(path: str, doc: Any) -> tuple[Any, Any]:
    """(the document without the rule groups its target copies, those groups); (doc, None) for other files."""
    target = registry.owner(path)
    if target is None or not target.rule_groups_at:
        return doc, None
    return _without(doc, target.rule_groups_at), target.copied_groups(doc)


def _without(doc: Any, keys: tuple[str, ...]) -> Any:
    """The document without what it holds under these keys."""
    if not isinstance(doc, dict) or keys[0] not in doc:
        return doc
    if len(keys) == 1:
        return {key: value for key, value in doc.items() if key != keys[0]}
    return {**doc, keys[0]: _without(doc[keys[0]], keys[1:])}


def _named(doc: Any) -> dict:
    """The document as a mapping: a list whose items each carry a distinct name (`rule`, `macro`, `list`, `name`,
    or a Kubernetes object's kind and metadata.name) by that name, any other list or value under ""."""
    if isinstance(doc, dict):
        return doc
    names = [_name(item) for item in doc] if isinstance(doc, list) else []
    if names and all(names) and len(set(names)) == len(names):
        return dict(zip(names, doc))
    return {"": doc}


def _name(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    metadata = item.get("metadata")
    if isinstance(metadata, dict) and "kind" in item and "name" in metadata:
        return f"{item['kind']} {metadata['name']}"
    key = next((key for key in ("rule", "macro", "list", "name") if isinstance(item.get(key), str)), None)
    return f"{key} {item[key]}" if key else None


# --------------------------------------------------------------------------------------------- output


def summary(report: Report, base: Side, new: Side | None = None) -> str:
    """The first line: against what, how many changes where, how much noise was left out."""
    against = (
        f"hpcobs diff of {new.markdown()} against {base.markdown()}"
        if new
        else f"hpcobs diff against {base.markdown()}"
    )
    changes = sum(len(section.changes) for section in report.sections)
    said = f"{count(changes, 'change')} in {_areas(report)}" if changes else "no changes"
    total = sum(report.noise.values())
    kinds = [kind for kind in NOISE_KINDS if report.noise[kind]]
    noise = f"; {count(total, 'noise-only difference')} ({', '.join(kinds)}) not listed" if total else ""
    return f"{against}: {said}{noise}"


def _areas(report: Report) -> str:
    """`2 dashboards, 1 rule group and Alertmanager`: the things changed, per area."""
    parts = []
    for area, title, noun in AREAS:
        sections = [section for section in report.sections if section.area == area]
        things = {section.subject or change.name for section in sections for change in section.changes}
        if sections:
            parts.append(count(len(things), noun) if noun else title)
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else parts[0]


def markdown(report: Report, base: Side, new: Side | None = None) -> str:
    """The report as Markdown for a pull-request comment: the summary line, then a heading per area with a
    heading per dashboard or rule group, and a bullet per change."""
    lines = [summary(report, base, new)]
    for area, title, _ in AREAS:
        sections = [section for section in report.sections if section.area == area]
        if sections:
            lines += ["", f"### {title}"]
        for section in sections:
            lines += ["", *section_lines(section)]
    return "\n".join(lines) + "\n"


def as_json(report: Report, base: Side, new: Side | None = None) -> str:
    """The same changes for tools: stable keys, sections in report order."""
    document = {
        "base": base.as_dict(),
        "new": new.as_dict() if new else {"name": "working tree", "note": "", "commit": None},
        "changed": report.changed,
        "summary": summary(report, base, new),
        "noise": {kind: report.noise[kind] for kind in NOISE_KINDS if report.noise[kind]},
        "sections": [
            {
                "area": section.area,
                "subject": section.subject,
                "heading": section.heading,
                "changes": [change.as_dict() for change in section.changes],
            }
            for section in report.sections
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
