"""Check generated files before they reach out/: JSON schemas for shape, promtool and amtool for meaning."""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from . import tools
from .errors import UserError

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
_BY_PATH = (
    ("prometheus/rules/", "schemastore/prometheus.rules.json"),
    ("prometheus/tests/", "schemastore/prometheus.rules.test.json"),
    ("alertmanager/", "schemastore/prometheus-alertmanager.json"),
    ("grafana/dashboards/", "grafana-v11.6/dashboard.jsonschema.json"),
)


@cache
def schema(relative: str) -> dict:
    return json.loads((SCHEMAS / relative).read_text(encoding="utf-8"))


def schema_for(path: str) -> str | None:
    return next((s for prefix, s in _BY_PATH if path.startswith(prefix)), None)


def schema_errors(path: str, text: str) -> list[str]:
    """Schema violations of one generated file, as `path: key.path: message` lines."""
    relative = schema_for(path)
    if relative is None:
        return []
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    validator = jsonschema.Draft7Validator(schema(relative))
    return [f"{path}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
            for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]


def check(root: Path, files: dict[str, str], with_tools: bool = True) -> None:
    """Validate files already written under root; raise with every problem found."""
    problems = [line for path, text in files.items() for line in schema_errors(path, text)]
    if with_tools:
        rules = sorted(root / p for p in files if p.startswith("prometheus/rules/"))
        tests = sorted(root / p for p in files if p.startswith("prometheus/tests/"))
        # One promtool per test file, as many at once as there are cores: the rule tests dominate a build.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            test_results = list(pool.map(tools.test_rules, tests))
        for name, result in (("promtool check rules", tools.check_rules(*rules)),
                             *(("promtool test rules", r) for r in test_results),
                             ("amtool check-config", tools.check_config(root / "alertmanager/alertmanager.yml"))):
            if not result.ok:
                problems.append(f"{name} failed:\n{result.output}")
    if problems:
        raise UserError(["build error: generated output is invalid, out/ left untouched:", *problems])
