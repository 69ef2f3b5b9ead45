"""docs/simulator.md's "Try it locally" works first time: its first step, run as written, gives a Prometheus
whose generated rules fire the faults' alerts at once and no ExporterGpuSeriesAbsent.

Step 1's shell block runs verbatim from the repository root (`python` is this interpreter, `mktemp -d` makes the
trial directory under a test folder). Prometheus is the live harness's (a free loopback port, stopped at the end)
on the recipe's blocks and rule files; the recipe's prometheus.yml, which also points at Alertmanager, is checked
by `promtool check config`.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from glob import glob

import pytest
import yaml

from hpcobs.build import tools
from hpcobs.lang.promql import duration_seconds
from tests.conftest import ROOT
from tests.live.test_alerts_live import alerts_of

DOC = ROOT / "docs" / "simulator.md"
# An alert whose `for:` is longer has not fired yet when the backfilled series leave the 5-minute lookback.
FIRES_WITHIN = 60
WAIT = 180  # a `for: 1m` alert fires after two or three evaluations of 30 s; the rest is a loaded machine


def recipe_steps() -> list[str]:
    """The shell blocks of the "Try it locally" section, in order."""
    section = DOC.read_text(encoding="utf-8").split("## Try it locally\n", 1)[1].split("\n## ", 1)[0]
    return [re.sub(r"^ {3}", "", block, flags=re.M) for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def scenarios_of(step: str) -> set[str]:
    (argument,) = re.findall(r"--scenario (\S+)", step)
    return {item.split(":")[0] for item in argument.split(",")}


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


@pytest.mark.live
def test_the_faults_fire_at_once_and_no_exporter_looks_absent(config, trial, prometheus_factory):
    recipe = yaml.safe_load((trial / "prometheus.yml").read_text())
    rule_files = sorted(f for pattern in recipe["rule_files"] for f in glob(pattern))
    assert rule_files, recipe["rule_files"]
    prometheus = prometheus_factory(rule_files=rule_files)
    prometheus.add_blocks(trial / "data")  # moves the recipe's blocks in and restarts on them

    faults = scenarios_of(recipe_steps()[0])
    expected = {
        a.alert
        for a in alerts_of(config)
        if faults & set(a.fired_by) and duration_seconds(a.for_ or "0s") <= FIRES_WITHIN
    }
    assert len(expected) >= 2, expected
    deadline, firing, seen, alerts = time.monotonic() + WAIT, set(), set(), []
    while time.monotonic() < deadline and not expected <= firing:
        time.sleep(5)
        with urllib.request.urlopen(f"{prometheus.url}/api/v1/alerts", timeout=10) as response:
            alerts = json.load(response)["data"]["alerts"]
        seen |= {a["labels"]["alertname"] for a in alerts}
        firing |= {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}
    assert expected <= firing, f"not firing after {WAIT}s: {sorted(expected - firing)}"
    # Until the group recording node:gpus:count has run once after a start, every GPU node looks absent: the
    # alert may go pending then (its `for:` is 10 minutes), but never fires and is gone by the faults' firing.
    assert "ExporterGpuSeriesAbsent" not in firing | {a["labels"]["alertname"] for a in alerts}, seen
