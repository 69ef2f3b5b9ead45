"""promtool and amtool through subprocess: located once per process, timeouts, parsed results, clear errors
when missing or too old, and successful results cached by a hash of everything that decides them."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from hpcobs.build.cache import Cache, digest
from hpcobs.errors import ToolError
from hpcobs.lang import promql
from hpcobs.lang.render import load_yaml

# (env var, binary, Debian package, minimum version)
Tool = tuple[str, str, str, tuple[int, int]]
PROMTOOL = ("PROMTOOL", "promtool", "prometheus", (2, 42))
AMTOOL = ("AMTOOL", "amtool", "prometheus-alertmanager", (0, 25))
TIMEOUT = 300


@dataclass(frozen=True)
class Result:
    ok: bool
    output: str
    seconds: float = 0.0  # how long the tool ran; for a cached result, how long it ran when it was stored
    cached: bool = False

    def failures(self) -> list[str]:
        """Lines that report a problem (promtool and amtool print FAILED/error lines)."""
        return [line for line in self.output.splitlines() if re.search(r"FAILED|[Ee]rror|SUCCESS: 0", line)]


@dataclass(frozen=True)
class Located:
    path: str  # absolute: the environment override, or the first on PATH
    real: str  # with symlinks resolved
    version: str  # the tool's whole `--version` output


# `--version` output by (resolved path, file identity): probed once per process, again only if the file changes.
_versions: dict[tuple, str] = {}
_versions_lock = threading.Lock()


def find(tool: Tool) -> str:
    """Path of the tool, honouring its environment override; ToolError when missing or too old."""
    return locate(tool).path


def locate(tool: Tool) -> Located:
    """The tool's path and `--version` output, probed once per process (again only if the file changes);
    ToolError when missing or too old."""
    env, binary, package, minimum = tool
    path = os.environ.get(env) or shutil.which(binary)
    if not path or not Path(path).exists():
        raise ToolError(f"{binary} not found: apt-get install {package}, or set {env}")
    path = os.path.abspath(path)
    real = os.path.realpath(path)
    status = os.stat(real)
    identity = (real, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    with _versions_lock:
        if identity not in _versions:
            _versions[identity] = _version_output(path)
    version = _versions[identity]
    match = re.search(r"version (\d+)\.(\d+)", version)
    if match and (int(match.group(1)), int(match.group(2))) < minimum:
        raise ToolError(
            f"{binary} {match.group(1)}.{match.group(2)} at {path} is too old: need >= "
            f"{'.'.join(map(str, minimum))} (apt-get install {package}, or set {env})"
        )
    return Located(path, real, version)


def _version_output(path: str) -> str:
    try:
        return _execute([path, "--version"], timeout=30)[1].strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{path} cannot run: {exc}") from None


@dataclass(frozen=True)
class Command:
    """One tool run: `tool kind... operands...` in cwd, operand paths relative to cwd. inputs: every file besides
    the tool whose bytes decide the result, relative to cwd; None when they cannot be known, and then the result
    is never cached."""

    tool: Tool
    kind: tuple[str, ...]
    operands: tuple[str, ...] = ()
    cwd: Path | None = None
    inputs: tuple[str, ...] | None = None
    cost: float = 0.0  # estimated run time, only to start the longest runs first

    @property
    def name(self) -> str:
        return " ".join((self.tool[1], *self.kind))


def rules_check(*files: Path | str, cwd: Path | None = None) -> Command:
    names = tuple(map(str, files))
    return Command(PROMTOOL, ("check", "rules"), names, cwd, names)


RULES_TEST = ("test", "rules")


def rules_test(*files: Path | str, cwd: Path | None = None) -> Command:
    """Rule tests. Each test file loads its rule_files, globs resolved relative to the test file as promtool
    does; its cost is the rule evaluations promtool makes: every loaded rule at every evaluation step up to
    each test's last eval_time."""
    names = tuple(map(str, files))
    inputs = list(names)
    cost = 0.0
    for name in names:
        spec = _yaml(cwd, name)
        loaded = _globbed(cwd, name, spec.get("rule_files") if isinstance(spec, dict) else None)
        if loaded is None:
            return Command(PROMTOOL, RULES_TEST, names, cwd)
        inputs += loaded
        cost += evaluation_steps(spec) * sum(_rule_count(_yaml(cwd, rule_file)) for rule_file in loaded)
    return Command(PROMTOOL, RULES_TEST, names, cwd, tuple(inputs), cost)


def prometheus_config_check(file: Path | str, cwd: Path | None = None) -> Command:
    """promtool check config reads the config, its rule files and its file_sd files (globs relative to it)."""
    name = str(file)
    spec = _yaml(cwd, name)
    try:
        sd_files = [path for job in spec["scrape_configs"] for sd in job["file_sd_configs"] for path in sd["files"]]
        rules, sd = _globbed(cwd, name, spec.get("rule_files", [])), _globbed(cwd, name, sd_files)
    except (KeyError, TypeError, AttributeError):  # not the shape promtool reads: it fails, never cached
        rules = sd = None
    inputs = None if rules is None or sd is None else (name, *rules, *sd)
    return Command(PROMTOOL, ("check", "config"), (name,), cwd, inputs)


def config_check(file: Path | str, cwd: Path | None = None) -> Command:
    """amtool check-config reads the config and its templates (globs relative to it), not the *_file secrets."""
    name = str(file)
    spec = _yaml(cwd, name)
    templates = _globbed(cwd, name, spec.get("templates", []) if isinstance(spec, dict) else None)
    return Command(AMTOOL, ("check-config",), (name,), cwd, None if templates is None else (name, *templates))


def template_render(file: Path | str, cwd: Path | None = None) -> Command:
    """amtool template render executes every template the file defines with amtool's example notification data:
    a parse error, an unknown function or a wrong argument fails it (check-config only parses)."""
    name = str(file)
    try:
        defined = re.findall(r'{{-? *define "([^"]+)"', Path(cwd or ".", name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        defined = []
    text = "".join(f'{{{{ template "{template}" . }}}}' for template in defined)
    return Command(AMTOOL, ("template", "render"), (f"--template.glob={name}", f"--template.text={text}"), cwd, (name,))


def _yaml(cwd: Path | None, name: str):
    try:
        return load_yaml(Path(cwd or ".", name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _globbed(cwd: Path | None, owner: str, patterns) -> list[str] | None:
    """The files patterns name, resolved relative to owner's directory; None when patterns is not a list of
    paths (the tool then fails, or reads what we cannot predict: never cached)."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        return None
    found = []
    for pattern in patterns:
        joined = os.path.normpath(os.path.join(os.path.dirname(owner), pattern))
        # A pattern that matches nothing stays named: an unreadable input makes the run uncacheable.
        found += sorted(glob.glob(joined, root_dir=cwd, include_hidden=True)) or [joined]
    return found


def evaluation_steps(spec: dict) -> int:
    """The rule evaluation steps of a promtool test file: each test runs from 0 to its last eval_time at the
    evaluation interval (1m when unset); 0 when the file is not a readable test file (promtool then fails)."""
    try:
        interval = promql.duration_ms(spec.get("evaluation_interval", "1m"))
        return sum(
            max(
                (
                    promql.duration_ms(case["eval_time"])
                    for case in test.get("alert_rule_test", []) + test.get("promql_expr_test", [])
                ),
                default=0,
            )
            // interval
            + 1
            for test in spec.get("tests", [])
        )
    except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError):
        return 0


def _rule_count(spec) -> int:
    try:
        return sum(len(group.get("rules") or []) for group in spec["groups"])
    except (TypeError, KeyError, AttributeError):
        return 0


def run(command: Command, cache: Cache | None = None) -> Result:
    """Run the command, or take its result from the cache; only a success is stored."""
    located = locate(command.tool)
    if cache is not None and command.kind == RULES_TEST and len(command.operands) > 1:
        return _run_each_test_file(command, cache, located)
    key = _key(command, located) if cache is not None else None
    if cache is not None and key is not None:
        stored = cache.get(key)
        if stored is not None:
            return Result(True, stored["output"], stored["seconds"], cached=True)
    began = time.monotonic()
    try:
        returncode, output = _execute([located.path, *command.kind, *command.operands], TIMEOUT, command.cwd)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{command.name} {' '.join(command.operands)} did not finish in {TIMEOUT}s") from None
    result = Result(returncode == 0, output.strip(), time.monotonic() - began)
    if cache is not None and key is not None and result.ok:
        cache.put(key, {"output": result.output, "seconds": result.seconds})
    return result


def _run_each_test_file(command: Command, cache: Cache, located: Located) -> Result:
    """promtool test rules on several files, each file's result cached as if it ran alone (its own bytes and the
    rules it loads decide it: promtool tests each file on its own), the files without one in a single process. A
    change to one rule test of a folder reruns that file, not the folder. The output is each file's section
    (`Unit Testing: <file>` then its result), in the operands' order."""
    alone = {name: rules_test(name, cwd=command.cwd) for name in command.operands}
    keys = {name: _key(single, located) for name, single in alone.items()}
    stored = {name: cache.get(key) for name, key in keys.items() if key is not None}
    found = {name: entry for name, entry in stored.items() if entry is not None}
    missing = [name for name in command.operands if name not in found]
    if not missing:
        joined = "\n\n".join(found[name]["output"] for name in command.operands)
        return Result(True, joined, sum(entry["seconds"] for entry in found.values()), cached=True)
    ran = run(Command(command.tool, RULES_TEST, tuple(missing), command.cwd))
    sections = test_sections(ran.output)
    if set(sections) != set(missing):  # not one section per file (promtool stopped early): its output as it is
        return ran
    # A file's share of the run's time, by its estimated cost (only to order and profile later runs).
    cost = sum(alone[name].cost for name in missing) or 1.0
    for name in missing:
        key = keys[name]
        if key is not None and sections[name][1]:
            cache.put(key, {"output": sections[name][0], "seconds": ran.seconds * alone[name].cost / cost})
    outputs = {**{name: entry["output"] for name, entry in found.items()}, **{n: s[0] for n, s in sections.items()}}
    return Result(ran.ok, "\n\n".join(outputs[name] for name in command.operands), ran.seconds)


def test_sections(output: str) -> dict[str, tuple[str, bool]]:
    """promtool test rules' output by file: (the file's section, whether it passed). promtool prints
    `Unit Testing:  <file>`, then SUCCESS or FAILED and the failures, for each file."""
    parts = re.split(r"^(?=Unit Testing:\s)", output, flags=re.MULTILINE)
    sections = {}
    for part in parts:
        match = re.match(r"Unit Testing:\s+(\S+)[ \t]*\n\s*(\S+)", part)
        if match:
            sections[match.group(1)] = (part.strip(), match.group(2) == "SUCCESS")
    return sections


def _key(command: Command, located: Located) -> str | None:
    """Everything that decides the result: the tool (path, resolved path, whole version output), the exact
    arguments, and the bytes of every input; None when an input is unknown or unreadable."""
    if command.inputs is None:
        return None
    inputs = {}
    for name in command.inputs:
        try:
            inputs[name] = digest(Path(command.cwd or ".", name).read_bytes())
        except OSError:
            return None
    return Cache.key(
        {
            "tool": [located.path, located.real, located.version],
            "args": [*command.kind, *command.operands],
            "inputs": inputs,
        }
    )


# Every tool process still running, so that an interrupted build stops them all; while _stopping, none starts.
_children_lock = threading.Lock()
_children: set[subprocess.Popen] = set()
_stopping = False
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _execute(argv: list[str], timeout: float, cwd: Path | None = None) -> tuple[int, str]:
    """Run a tool to completion; (exit code, stdout and stderr interleaved). It is killed if this call is
    left early (timeout, signal) and, through PR_SET_PDEATHSIG, if this process dies, even by SIGKILL.
    (The kernel sends that signal when the starting thread ends; it waits here until the tool has ended.)"""
    parent = os.getpid()
    with _children_lock:
        if _stopping:
            raise ToolError(f"{Path(argv[0]).name} not started: the build is stopping")
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            preexec_fn=lambda: _die_with(parent),
        )
        _children.add(process)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        process.kill()  # a no-op once it has exited
        process.wait()
        if process.stdout is not None:  # always (stdout=PIPE); still open when communicate() was cut short
            process.stdout.close()
        with _children_lock:
            _children.discard(process)
    return process.returncode, output


def _die_with(parent: int) -> None:
    """In the child, before exec: get SIGKILL when the parent dies, and exit if it already has."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


@contextmanager
def pool() -> Iterator[ThreadPoolExecutor]:
    """Threads to run tools in parallel, one per core. Leaving the block by an exception (a signal, a
    failure) kills the tools still running and starts no more, instead of waiting for them all."""
    global _stopping
    executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    try:
        yield executor
    except BaseException:
        with _children_lock:
            _stopping = True
            for process in _children:
                process.kill()
        raise
    finally:
        executor.shutdown(cancel_futures=True)
        _stopping = False


def check_rules(*files: Path) -> Result:
    return run(rules_check(*files))


def test_rules(*files: Path) -> Result:
    return run(rules_test(*files))


def check_config(file: Path) -> Result:
    return run(config_check(file))


def routes_test(config: Path, labels: dict[str, str], expected: list[str]) -> Result:
    """`amtool config routes test`: does this label set reach exactly these receivers?"""
    args = [f"--config.file={config}"]
    if expected:
        args.append(f"--verify.receivers={','.join(expected)}")
    args += [f"{k}={v}" for k, v in sorted(labels.items())]
    return run(Command(AMTOOL, ("config", "routes", "test"), tuple(args)))
