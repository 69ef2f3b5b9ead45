"""promtool and amtool through subprocess: timeouts, parsed results, clear errors when missing or too old."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolError

# (env var, binary, Debian package, minimum version)
PROMTOOL = ("PROMTOOL", "promtool", "prometheus", (2, 42))
AMTOOL = ("AMTOOL", "amtool", "prometheus-alertmanager", (0, 25))
TIMEOUT = 300


@dataclass(frozen=True)
class Result:
    ok: bool
    output: str

    def failures(self) -> list[str]:
        """Lines that report a problem (promtool and amtool print FAILED/error lines)."""
        return [line for line in self.output.splitlines() if re.search(r"FAILED|[Ee]rror|SUCCESS: 0", line)]


def find(tool: tuple[str, str, str, tuple[int, int]]) -> str:
    """Path of the tool, honouring its environment override; ToolError when missing or too old."""
    env, binary, package, minimum = tool
    path = os.environ.get(env) or shutil.which(binary)
    if not path or not Path(path).exists():
        raise ToolError(f"{binary} not found: apt-get install {package}, or set {env}")
    version = _version(path)
    if version is not None and version < minimum:
        found = ".".join(map(str, version))
        raise ToolError(f"{binary} {found} at {path} is too old: need >= {'.'.join(map(str, minimum))} "
                        f"(apt-get install {package}, or set {env})")
    return path


def _version(path: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{path} cannot run: {exc}")
    match = re.search(r"version (\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _run(tool: tuple, *args: str, cwd: Path | None = None) -> Result:
    path = find(tool)
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{tool[1]} {' '.join(args)} did not finish in {TIMEOUT}s")
    return Result(out.returncode == 0, (out.stdout + out.stderr).strip())


def check_rules(*files: Path) -> Result:
    return _run(PROMTOOL, "check", "rules", *map(str, files))


def test_rules(*files: Path) -> Result:
    """Run rule tests; files' rule_files are resolved relative to each test file, so run from its folder."""
    return _run(PROMTOOL, "test", "rules", *map(str, files))


def check_config(file: Path) -> Result:
    return _run(AMTOOL, "check-config", str(file))


def routes_test(config: Path, labels: dict[str, str], expected: list[str]) -> Result:
    """`amtool config routes test`: does this label set reach exactly these receivers?"""
    args = ["config", "routes", "test", f"--config.file={config}"]
    if expected:
        args.append(f"--verify.receivers={','.join(expected)}")
    args += [f"{k}={v}" for k, v in sorted(labels.items())]
    return _run(AMTOOL, *args)
