"""Check generated files before they reach out/: JSON schemas for shape, promtool and amtool for meaning."""
from __future__ import annotations

import json
import re
from functools import cache
from importlib import metadata
from pathlib import Path

import jsonschema

from . import tools
from .cache import Cache, digest
from .errors import UserError
from .render import load_yaml
from .timing import Timings

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
_BY_PATH = (
    ("prometheus/rules/", "schemastore/prometheus.rules.json"),
    ("prometheus/tests/rules/", "schemastore/prometheus.rules.json"),     # the rules a test file loads
    ("prometheus/tests/", "schemastore/prometheus.rules.test.json"),
    ("alertmanager/", "schemastore/prometheus-alertmanager.json"),
    ("grafana/dashboards/", "grafana-v11.6/dashboard.jsonschema.json"),
)
# Besides the file and the schema, the libraries that read and check them decide a schema validation.
_VALIDATORS = {name: metadata.version(name) for name in ("jsonschema", "PyYAML")}


@cache
def schema(relative: str) -> dict:
    return json.loads((SCHEMAS / relative).read_text(encoding="utf-8"))


@cache
def _schema_digest(relative: str) -> str:
    return digest((SCHEMAS / relative).read_bytes())


def schema_for(path: str) -> str | None:
    return next((s for prefix, s in _BY_PATH if path.startswith(prefix)), None)


def schema_errors(path: str, text: str, cache: Cache | None = None) -> list[str]:
    """Schema violations of one generated file, as `path: key.path: message` lines. A file found valid is
    remembered in cache, by its path and bytes, the schema's bytes and the validating libraries' versions."""
    relative = schema_for(path)
    if relative is None:
        return []
    key = None if cache is None else Cache.key({"schema": [relative, _schema_digest(relative)],
                                                "file": [path, digest(text.encode())], "validators": _VALIDATORS})
    if key and cache.get(key) is not None:
        return []
    data = json.loads(text) if path.endswith(".json") else load_yaml(text)
    validator = jsonschema.Draft7Validator(schema(relative))
    errors = [f"{path}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
              for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))]
    if key and not errors:
        cache.put(key, "valid")
    return errors


# (generated files, the tool run for one of them): one run per file, so every failure is reported under its name.
_TOOL_CHECKS = (
    ("prometheus/rules/", tools.rules_check),
    ("prometheus/tests/", tools.rules_test),
    ("alertmanager/alertmanager.yml", tools.config_check),
)


def check(root: Path, files: dict[str, str], with_tools: bool = True, cache: Cache | None = None,
          timings: Timings | None = None) -> None:
    """Validate files already written under root; raise with every problem found."""
    timings = timings or Timings()
    problems = [line for path, text in files.items() for line in schema_errors(path, text, cache)]
    timings.lap(f"schema validation ({len(files)} files)")
    if with_tools:
        problems += tool_errors(root, files, cache, timings)
    if problems:
        raise UserError(["build error: generated output is invalid, out/ left untouched:", *problems])


def tool_errors(root: Path, files: dict[str, str], cache: Cache | None = None,
                timings: Timings | None = None) -> list[str]:
    """promtool and amtool on each generated file, as many at once as there are cores, the longest rule tests
    first (they dominate a build); each failure is the file name, then the tool's own message indented under it."""
    commands = {path: command(path, cwd=root) for prefix, command in _TOOL_CHECKS for path in files
                if path.startswith(prefix) and not path.startswith("prometheus/tests/rules/")}
    longest_first = sorted(commands, key=lambda path: -commands[path].cost)
    with tools.pool() as pool:
        futures = {path: pool.submit(tools.run, commands[path], cache) for path in longest_first}
        results = {path: future.result() for path, future in futures.items()}
    timings = timings or Timings()
    timings.lap(f"promtool and amtool ({len(results)} runs, {sum(r.cached for r in results.values())} cached)")
    for path in longest_first:
        result = results[path]
        state = f"cached, ran {result.seconds:.2f} s when stored" if result.cached else f"{result.seconds:.2f} s"
        timings.detail(f"{commands[path].name} {path}: {state}")
    lines = []
    for path, command in commands.items():
        if not results[path].ok:
            lines.append(f"{path}: {command.name} failed:")
            lines += [f"    {line}" for line in _tool_message(results[path].output)]
    return lines


def _tool_message(output: str) -> list[str]:
    """The tool's output (tools run in the output directory, so paths are relative to it), once per line
    (promtool repeats a broken rule file for every test group), without the lines that only name the file being
    checked or say FAILED."""
    lines = dict.fromkeys(line.rstrip() for line in output.splitlines())
    return [line for line in lines if line.strip()
            and not re.fullmatch(r"\s*(FAILED:|(Checking|Unit Testing:)\s+\S+)", line)]
