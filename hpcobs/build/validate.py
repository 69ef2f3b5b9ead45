"""Check generated files before they reach out/: JSON schemas for shape, promtool and amtool for meaning, each file
as the target that owns it declares (hpcobs.targets.registry)."""

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
from hpcobs.lang.render import GENERATED, load_yaml, yaml_text
from hpcobs.lang.sensor_values import OBJECT_NAME
from hpcobs.paths import ROOT
from hpcobs.targets import registry
from hpcobs.targets.base import Tool

SCHEMAS = ROOT / "schemas"
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
    if variant == "any-override-value":
        # Grafana's dashboard kind types an override property's value as anything (`value?: _`); the schema generated
        # from it says object, yet Grafana stores an override's data links and value mappings as lists.
        definitions = {**loaded["definitions"]}
        config_value = definitions["DynamicConfigValue"]
        definitions["DynamicConfigValue"] = {**config_value, "properties": {**config_value["properties"], "value": {}}}
        return {**loaded, "definitions": definitions}
    if variant == "file-sd":
        # A file_sd target file holds what a scrape job's static_configs holds (Prometheus' file_sd_config).
        return {"definitions": loaded["definitions"], "$ref": "#/definitions/static_configs"}
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
    """The schema the target owning path checks it against (hpcobs.targets.registry), None when it has none."""
    target = registry.owner(path)
    return next((check.schema for check in target.checks_of(path) if check.schema), None) if target else None


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


_TOOLS: dict[Tool, Callable[..., tools.Command]] = {
    "promtool check rules": tools.rules_check,
    "promtool test rules": tools.rules_test,
    "promtool check config": tools.prometheus_config_check,
    "amtool check-config": tools.config_check,
    "amtool template render": tools.template_render,
}
# Tools run on a folder at a time (a domain of rule tests): starting promtool costs about as much as a small test.
_PER_FOLDER: set[Tool] = {"promtool test rules"}


def _tools_of(path: str) -> list[Tool]:
    target = registry.owner(path)
    return [check.tool for check in target.checks_of(path) if check.tool] if target else []


def _on_copied_groups(path: str, tool: Tool) -> bool:
    """Whether the tool checks the rule groups the file copies rather than the file (see _groups_only_runs)."""
    target = registry.owner(path)
    return tool == "promtool check rules" and target is not None and bool(target.rule_groups_at)


def _tool_runs(root: Path, files: dict[str, str]) -> dict[str, tools.Command]:
    """Each tool run the targets ask for, by what it checks (a file, or a folder ending in /)."""
    operands: dict[tuple[str, Tool], list[str]] = defaultdict(list)
    for path in files:
        for tool in (tool for tool in _tools_of(path) if not _on_copied_groups(path, tool)):
            operands[f"{posixpath.dirname(path)}/" if tool in _PER_FOLDER else path, tool].append(path)
    return {name: _TOOLS[tool](*paths, cwd=root) for (name, tool), paths in operands.items()}


def _groups_only_runs(scratch: Path, files: dict[str, str]) -> dict[str, tools.Command]:
    """promtool check rules on the rule groups a target's file holds a copy of (Target.rule_groups_at), which
    promtool cannot read as it is: the groups alone are written to scratch under the file's own path, so promtool's
    messages name the file, and the run is cached by those bytes like any other. A file holding no list of groups
    where its target keeps them gets no run: its schema check reports that."""
    runs = {}
    for path, text in files.items():
        target = registry.owner(path)
        if target is None or not any(_on_copied_groups(path, tool) for tool in _tools_of(path)):
            continue
        groups = target.copied_groups(load_yaml(text))
        if isinstance(groups, list):
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_text(yaml_text({"groups": groups}, GENERATED), encoding="utf-8")
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
    failed = [(path, part) for path, (part, passed) in tools.test_sections(output).items() if not passed]
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
