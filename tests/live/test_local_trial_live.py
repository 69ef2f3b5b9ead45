"""docs/simulator.md's "Try it locally" by hand: its first step, run as written, simulates the cluster
`build.py demo` runs, and writes a valid prometheus.yml.

Step 1's shell block runs verbatim from the repository root (`python` is this interpreter, `mktemp -d` makes the
trial directory under a test folder); its prometheus.yml, which also points at Alertmanager, is checked by
`promtool check config`. That the faults' alerts then fire within a minute or two, are notified and that no
ExporterGpuSeriesAbsent fires is what tests/live/test_demo_live.py proves on the same simulation, the same rule
files and the same Prometheus: the demo replaced this module's own wait for them (about 75 s).
"""

import os
import re
import shlex
import subprocess
import sys

import pytest

from hpcobs.build import tools
from hpcobs.proof import demo
from tests.conftest import ROOT

DOC = ROOT / "docs" / "simulator.md"


def recipe_steps() -> list[str]:
    """The shell blocks of "Try it locally", "By hand", in order."""
    section = DOC.read_text(encoding="utf-8").split("### By hand\n", 1)[1].split("\n## ", 1)[0]
    return [re.sub(r"^ {3}", "", block, flags=re.M) for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def simulate_arguments(step: str) -> list[str]:
    (command,) = re.findall(r"python build\.py simulate (.*) --out ", step)
    return shlex.split(command)


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """The trial directory after step 1, run as written."""
    temp, bin_dir = tmp_path_factory.mktemp("trial"), tmp_path_factory.mktemp("bin")
    python = bin_dir / "python"  # a script, not a symlink: a symlinked interpreter would lose its venv
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(temp)}
    step = recipe_steps()[0]
    result = subprocess.run(["bash", "-euc", step], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (folder,) = temp.iterdir()
    return folder


def test_the_recipe_simulates_the_demo_cluster():
    assert simulate_arguments(recipe_steps()[0]) == demo.simulate_arguments("1h")


def test_the_recipe_starts_prometheus_and_alertmanager_on_loopback_and_stops_them():
    start, stop = recipe_steps()[1:3]
    assert "prometheus --config.file=" in start and "alertmanager --config.file=out/alertmanager/" in start
    assert set(re.findall(r"listen-address=(\S+)", start)) == {"127.0.0.1:9090", "127.0.0.1:9093"}
    assert 'kill "$(cat "$trial/prometheus.pid")" "$(cat "$trial/alertmanager.pid")"' in stop


@pytest.mark.live
def test_the_recipe_config_is_valid_prometheus_config(trial):
    result = subprocess.run(
        [tools.find(tools.PROMTOOL), "check", "config", str(trial / "prometheus.yml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
