"""Write hpcobs/settings/thresholds.py from config/schema.json: the thresholds as a typed, frozen dataclass, so
that a misspelt threshold in a rule or a panel is an AttributeError at import and a type error under mypy, not a
KeyError at build time (or a silent default). Run `python -m hpcobs.settings.schema_codegen` after changing the
schema's thresholds; tests/test_thresholds.py fails while the module is stale."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hpcobs.paths import ROOT

SCHEMA = ROOT / "config" / "schema.json"
MODULE = Path(__file__).resolve().parent / "thresholds.py"


def _python_type(spec: dict) -> str:
    if spec["type"] == "array":
        return f"tuple[{_python_type(spec['items'])}, ...]"
    if spec["type"] == "string":
        return {"duration": "Duration", "re2": "Regex"}.get(spec.get("format", ""), "str")
    return {"number": "float", "integer": "int", "boolean": "bool"}[spec["type"]]


def thresholds_module(schema: dict) -> str:
    properties = schema["properties"]["thresholds"]["properties"]
    fields = []
    for name, spec in properties.items():
        explained = spec.get("description") or spec.get("x-expected")
        fields.append(f"    {name}: {_python_type(spec)}" + (f"  # {explained}" if explained else ""))
    return "\n".join(
        [
            '"""The thresholds of the config (`thresholds:` in config/default.yaml and site files), typed.',
            "",
            "Generated from config/schema.json by `python -m hpcobs.settings.schema_codegen`; do not edit.",
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


def main() -> int:
    MODULE.write_text(thresholds_module(json.loads(SCHEMA.read_text(encoding="utf-8"))), encoding="utf-8")
    print(f"wrote {MODULE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
