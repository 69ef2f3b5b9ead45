"""The settings files written from declarations, as text: what config/schema.json, the `thresholds:` section of
config/default.yaml, the thresholds table of docs/configuration.md and hpcobs/settings/thresholds.py say about
the thresholds content declares (hpcobs.settings.declare), and the schema's enums of the exporter profiles,
node labels and version families the catalogue knows.

Each function takes the file as it is and returns it as it must be: the hand-written parts are kept, the
generated parts replaced whole. `python -m hpcobs.build.codegen` finds the declarations (it imports content,
which settings may not) and writes the files; tests/test_thresholds.py fails while one of them is stale.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from hpcobs.exporters import catalogue, releases
from hpcobs.exporters.sources import PROFILES
from hpcobs.settings.declare import Threshold

COMMAND = "python -m hpcobs.build.codegen"
# Declared thresholds by the content module that declares them ("alerts/gpu.py"), in the order of the files.
Declared = Mapping[str, Sequence[Threshold]]

YAML_BEGIN = (
    f"  # Generated from the THRESHOLDS of the content modules by `{COMMAND}`, down to the end marker:\n"
    "  # change a default or its comment where the threshold is declared (docs/configuration.md#thresholds).\n"
)
YAML_END = "  # End of the generated thresholds.\n"
DOC_BEGIN = f"<!-- Generated from the THRESHOLDS of the content modules by `{COMMAND}`, down to the end marker. -->\n"
DOC_END = "<!-- End of the generated thresholds. -->\n"
COMMENT_WIDTH = 116


def _all(declared: Declared) -> list[Threshold]:
    return [threshold for thresholds in declared.values() for threshold in thresholds]


def _replace_between(text: str, begin: str, end: str, generated: str, where: str) -> str:
    before, found_begin, rest = text.partition(begin)
    _, found_end, after = rest.partition(end)
    if not (found_begin and found_end):
        raise ValueError(f"{where}: the generated part's markers are missing; restore {begin.strip()!r} and {end!r}")
    return before + begin + generated + end + after


def schema(current: dict[str, Any], declared: Declared) -> str:
    """config/schema.json: its `thresholds` object, the enum of each key that picks a catalogue profile or the label
    a node is read from (the catalogue's `node_from`), and the items of each exporter's `versions`: a release
    string of the format that maps it to a family (checked by hpcobs.settings.config_checks with the catalogue's
    `releases_by_version`), the families as examples."""
    thresholds = _all(declared)
    out = json.loads(json.dumps(current))
    out["properties"]["thresholds"] = {
        "type": "object",
        "additionalProperties": False,
        "required": [threshold.name for threshold in thresholds],
        "properties": {threshold.name: threshold.schema for threshold in thresholds},
    }
    exporters = out["properties"]["exporters"]["properties"]
    for role, (key, profiles) in PROFILES.items():
        exporters[role]["properties"][key]["enum"] = list(profiles)
    for role, spec in exporters.items():
        if "node_from" in spec["properties"]:
            spec["properties"]["node_from"]["enum"] = list(catalogue.load()[role].node_from_choices())
        if "versions" in spec["properties"]:
            spec["properties"]["versions"]["items"] = {
                "type": "string",
                "format": releases.config_format(role),
                "examples": list(catalogue.load()[role].versions),
            }
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def _yaml_value(threshold: Threshold) -> str:
    value = threshold.default
    # Durations bare, as every duration of the file; other strings and lists quoted (a regex's |, a name's spaces).
    quoted = isinstance(value, list) or isinstance(value, str) and threshold.schema.get("format") != "duration"
    text = json.dumps(value, ensure_ascii=False) if quoted else str(value)
    if yaml.safe_load(text) != value:
        raise ValueError(f"{threshold.name}: the default {value!r} does not read back from YAML as itself ({text})")
    return text


def default_config(current: str, declared: Declared) -> str:
    """config/default.yaml with its `thresholds:` section between the markers: each default under its doc."""
    lines = [
        textwrap.fill(threshold.doc, COMMENT_WIDTH, initial_indent="  # ", subsequent_indent="  # ")
        + f"\n  {threshold.name}: {_yaml_value(threshold)}\n"
        for threshold in _all(declared)
    ]
    return _replace_between(current, YAML_BEGIN, YAML_END, "".join(lines), "config/default.yaml")


def _markdown_default(value: Any) -> str:
    text = f"[{', '.join(value)}]" if isinstance(value, list) else str(value)
    return f"`{text}`".replace("|", "\\|")


def _markdown_doc(doc: str, names: Sequence[str]) -> str:
    """The doc in docs/: other thresholds as code, paths under docs/ as links relative to it."""
    text = re.sub(rf"\b({'|'.join(map(re.escape, names))})\b", r"`\1`", doc)
    text = re.sub(r"\bdocs/([\w/-]+\.md)(#[\w-]+)?", r"[\1](\1\2)", text)
    return text.replace("|", "\\|")


def configuration_doc(current: str, declared: Declared) -> str:
    """docs/configuration.md with its thresholds table between the markers: key, default and doc of each."""
    thresholds = _all(declared)
    names = [threshold.name for threshold in thresholds]
    rows = [
        f"| `{threshold.name}` | {_markdown_default(threshold.default)} | {_markdown_doc(threshold.doc, names)} |\n"
        for threshold in thresholds
    ]
    table = "| key | default | meaning |\n|---|---|---|\n" + "".join(rows)
    return _replace_between(current, DOC_BEGIN, DOC_END, table, "docs/configuration.md")


def thresholds_module(declared: Declared) -> str:
    """hpcobs/settings/thresholds.py: a frozen dataclass with a typed field per threshold, so that a misspelt
    threshold in a rule or a panel is an AttributeError at import and a type error under mypy, not a KeyError at
    build time (or a silent default)."""
    fields = []
    for module, thresholds in declared.items():
        fields.append(f"    # {module}")
        for threshold in thresholds:
            expected = threshold.schema.get("x-expected")
            fields.append(f"    {threshold.name}: {threshold.python_type}" + (f"  # {expected}" if expected else ""))
    return "\n".join(
        [
            '"""The thresholds of the config (`thresholds:` in config/default.yaml and site files), typed.',
            "",
            f"Generated by `{COMMAND}` from the THRESHOLDS of the content modules named below; do not edit.",
            '"""',
            "",
            "from __future__ import annotations",
            "",
            "from dataclasses import dataclass",
            "from typing import Any",
            "",
            "Duration = str  # a Prometheus duration, validated at load (5m, 1h30m)",
            "Regex = str  # an RE2 regular expression, validated at load",
            "",
            "",
            "@dataclass(frozen=True)",
            "class Thresholds:",
            *fields,
            "",
            "    @classmethod",
            "    def from_config(cls, values: dict[str, Any]) -> Thresholds:",
            '        """From the validated `thresholds` mapping (lists as tuples: a threshold is never mutated)."""',
            "        arguments: dict[str, Any] = {",
            "            name: tuple(value) if isinstance(value, list) else value for name, value in values.items()",
            "        }",
            "        return cls(**arguments)",
            "",
        ]
    )
