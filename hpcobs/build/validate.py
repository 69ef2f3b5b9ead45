"""Check generated files before they reach out/: JSON schemas for shape, promtool and amtool for meaning."""

from __future__ import annotations

import json
import posixpath
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import jsonschema

from hpcobs.build import tools
from hpcobs.build.cache import Cache, digest
from hpcobs.build.timing import Timings
from hpcobs.errors import UserError
from hpcobs.lang.render import load_yaml
from hpcobs.lang.sensor_values import OBJECT_NAME
from hpcobs.paths import ROOT
from hpcobs.targets import rule_targets

SCHEMAS = ROOT / "schemas"
RULES_SCHEMA = "schemastore/prometheus.rules.json"
# The Mimir ruler's namespace file: a Prometheus rule file naming, beside its groups, the namespace they load into.
MIMIR_SCHEMA = f"{RULES_SCHEMA}#mimir-namespace"
# The API server silently prunes fields the CRD's structural schema does not know; closed, the schema refuses them.
PROMETHEUS_RULE_SCHEMA = "prometheus-operator/prometheusrule.v1.openapi.json#closed"
# Tetragon's TracingPolicy CRD, closed the same way, with the object name the API server requires of it.
TRACING_POLICY_SCHEMA = "tetragon/tracingpolicy.v1alpha1.openapi.json#closed-named"
# (folder, file name ending, schema: a file under schemas/, with a #variant derived from it by schema())
_BY_PATH = (
    ("prometheus/rules/", "", RULES_SCHEMA),
    ("prometheus/tests/", ".rules.yaml", RULES_SCHEMA),  # the rules a test loads
    ("prometheus/tests/", ".tests.yaml", "schemastore/prometheus.rules.test.json"),
    ("alertmanager/", "", "schemastore/prometheus-alertmanager.json"),
    ("grafana/dashboards/", "", "grafana-v11.6/dashboard.jsonschema.json"),
    (rule_targets.PROMETHEUS_RULE, "", PROMETHEUS_RULE_SCHEMA),
    (f"{rule_targets.MIMIR_DIR}/", ".yaml", MIMIR_SCHEMA),
    # Loki's ruler reads Prometheus' rule-file format with LogQL in it: shape checked here, never by promtool
    # (_TOOL_CHECKS runs it on prometheus/ only); the LogQL is parsed by tests/test_loki_rules.py.
    ("loki/rules/", ".yaml", RULES_SCHEMA),
    ("falco/", ".yaml", "falco/rule_schema.json"),  # the schema Falco checks rules files with (its --rule-schema)
    ("tetragon/", ".yaml", TRACING_POLICY_SCHEMA),
)
# Besides the file and the schema, the libraries that read and check them decide a schema validation.
_VALIDATORS = {name: metadata.version(name) for name in ("jsonschema", "PyYAML")}


@cache
def schema(relative: str) -> dict:
    file, _, variant = relative.partition("#")
    loaded = json.loads((SCHEMAS / file).read_text(encoding="utf-8"))
    if variant == "mimir-namespace":
        namespace = {"type": "string", "minLength": 1}
        return {
            **loaded,
            "required": ["namespace", "groups"],
            "properties": {**loaded["properties"], "namespace": namespace},
        }
    if variant == "closed":
        return _closed(loaded)
    if variant == "closed-named":
        # A CRD's schema leaves metadata to the API server, which refuses a name that is not a DNS-1123 subdomain.
        name = {"type": "string", "maxLength": 253, "pattern": OBJECT_NAME}
        metadata = {"type": "object", "required": ["name"], "properties": {"name": name}}
        closed = _closed(loaded)
        return {**closed, "properties": {**closed["properties"], "metadata": metadata}}
    if variant:
        raise ValueError(f"unknown schema variant {relative!r}")
    return loaded


def _closed(node: Any) -> Any:
    """The schema with every object that lists its properties refusing any other (unless it says otherwise)."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    closed = {key: _closed(value) for key, value in node.items()}
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        closed["additionalProperties"] = False
    return closed


@cache
def _schema_digest(relative: str) -> str:
    # The schema as validation uses it: a variant derived by code changes the key when that code changes it.
    return digest(json.dumps(schema(relative), sort_keys=True).encode())


def schema_for(path: str) -> str | None:
    return next((s for folder, ending, s in _BY_PATH if path.startswith(folder) and path.endswith(ending)), None)


def schema_errors(path: str, text: str, cache: Cache | None = None) -> list[str]:
    """Schema violations of one generated file, as `path: key.path: message` lines. A file found valid is
    remembered in cache, by its path and bytes, the schema's bytes and the validating libraries' versions."""
    relative = schema_for(path)
    if relative is None:
        return []
    # Computed with or without a cache: hashing a generated file costs microseconds.
    key = Cache.key(
        {
            "schema": [relative, _schema_digest(relative)],
            "file": [path, digest(text.encode())],
            "validators": _VALIDATORS,
        }
    )
    if cache is not None and cache.get(key) is not None:
        return []
    data = json.loads(text) if path.endswith(".json") else load_yaml(text)
    validator = jsonschema.Draft7Validator(schema(relative))
    errors = [
        f"{path}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
        for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if cache is not None and not errors:
        cache.put(key, "valid")
    return errors


# (folder, file name ending, the tool run for such files, one run per file or per folder). Rule tests run a
# folder (a domain) at a time: starting promtool costs about as much as a small test.
_TOOL_CHECKS = (
    ("prometheus/rules/", "", tools.rules_check, "file"),
    ("prometheus/tests/", ".tests.yaml", tools.rules_test, "folder"),
    ("alertmanager/", "alertmanager.yml", tools.config_check, "file"),
)


def _tool_runs(root: Path, files: dict[str, str]) -> dict[str, tools.Command]:
    """Each tool run, by what it checks (a file, or a folder ending in /)."""
    operands: dict[tuple[str, Callable[..., tools.Command]], list[str]] = defaultdict(list)
    for folder, ending, command, unit in _TOOL_CHECKS:
        for path in files:
            if path.startswith(folder) and path.endswith(ending):
                operands[path if unit == "file" else f"{posixpath.dirname(path)}/", command].append(path)
    return {name: command(*paths, cwd=root) for (name, command), paths in operands.items()}


def _groups_only_runs(scratch: Path, files: dict[str, str]) -> dict[str, tools.Command]:
    """promtool check rules on the groups of each rule target file (hpcobs.targets.rule_targets), which promtool cannot
    read as they are: their groups-only form is written to scratch under the file's own path, so promtool's
    messages name the file, and the run is cached by those bytes like any other."""
    runs = {}
    for path, text in files.items():
        groups = rule_targets.groups_only(path, text) if rule_targets.is_target(path) else None
        if groups is not None:
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_text(groups, encoding="utf-8")
            runs[path] = tools.rules_check(path, cwd=scratch)
    return runs


def check(
    root: Path,
    files: dict[str, str],
    with_tools: bool = True,
    cache: Cache | None = None,
    timings: Timings | None = None,
) -> None:
    """Validate files already written under root; raise with every problem found."""
    timings = timings or Timings()
    problems = [line for path, text in files.items() for line in schema_errors(path, text, cache)]
    timings.lap(f"schema validation ({len(files)} files)")
    if with_tools:
        problems += tool_errors(root, files, cache, timings)
    if problems:
        raise UserError(["build error: generated output is invalid, out/ left untouched:", *problems])


def tool_errors(
    root: Path, files: dict[str, str], cache: Cache | None = None, timings: Timings | None = None
) -> list[str]:
    """promtool and amtool on each generated file, as many at once as there are cores, the longest rule tests
    first (they dominate a build); each failure is the file name, then the tool's own message indented under it."""
    return trees_tool_errors({root: files}, cache, timings)[root]


def trees_tool_errors(
    trees: dict[Path, dict[str, str]], cache: Cache | None = None, timings: Timings | None = None
) -> dict[Path, list[str]]:
    """tool_errors of several written trees (root -> files) through one pool, so that the longest runs of all
    of them start first and no core waits for another tree's last run."""
    with tempfile.TemporaryDirectory(prefix="hpcobs-groups-") as scratch:
        commands = {
            (root, name): command
            for index, (root, files) in enumerate(trees.items())
            for name, command in {
                **_tool_runs(root, files),
                **_groups_only_runs(Path(scratch, str(index)), files),
            }.items()
        }
        longest_first = sorted(commands, key=lambda run: -commands[run].cost)
        with tools.pool() as pool:
            futures = {run: pool.submit(tools.run, commands[run], cache) for run in longest_first}
            results = {run: future.result() for run, future in futures.items()}
    timings = timings or Timings()
    timings.lap(f"promtool and amtool ({len(results)} runs, {sum(r.cached for r in results.values())} cached)")
    for run in longest_first:
        result = results[run]
        state = f"cached, ran {result.seconds:.2f} s when stored" if result.cached else f"{result.seconds:.2f} s"
        count = len(commands[run].operands)
        files = f" ({count} file{'s' * (count != 1)})" if run[1].endswith("/") else ""
        timings.detail(f"{commands[run].name} {run[1]}{files}: {state}")
    errors: dict[Path, list[str]] = {root: [] for root in trees}
    for (root, name), command in commands.items():
        if not results[root, name].ok:
            for path, output in _failures(name, results[root, name].output):
                errors[root].append(f"{path}: {command.name} failed:")
                errors[root] += [f"    {line}" for line in _tool_message(output)]
    return errors


def _failures(name: str, output: str) -> list[tuple[str, str]]:
    """(file, its part of the output) for each file a failed run names as failing (promtool test rules prints
    `Unit Testing: <file>` then SUCCESS or FAILED for each); the whole output under the run's name otherwise."""
    parts = re.split(r"^Unit Testing:\s+(\S+)[ \t]*$", output, flags=re.MULTILINE)
    failed = [(path, part) for path, part in zip(parts[1::2], parts[2::2]) if "SUCCESS" not in part.split()[:1]]
    return failed or [(name, output)]


def _tool_message(output: str) -> list[str]:
    """The tool's output (tools run in the output directory, so paths are relative to it), once per line
    (promtool repeats a broken rule file for every test group), without the lines that only name the file being
    checked or say FAILED."""
    lines = dict.fromkeys(line.rstrip() for line in output.splitlines())
    return [
        line
        for line in lines
        if line.strip() and not re.fullmatch(r"\s*(FAILED:|(Checking|Unit Testing:)\s+\S+)", line)
    ]
