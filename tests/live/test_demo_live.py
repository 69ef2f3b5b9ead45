"""`python build.py demo` works first time: both servers come up on loopback, Prometheus scrapes the live cluster
through every generated scrape job, the fault's alert that needs no `for:` fires, Alertmanager notifies the loopback
webhook, no exporter looks absent, and nothing is left behind: no server process, no temp dir, after `--no-wait`
returns (at the first notification) or after a waiting demo gets SIGINT (as soon as its servers are up: it needs
no alert). That the live exporters serve the simulation's sample due at each scrape is tests/test_demo.py's.

Each run is the command as a user types it, with TMPDIR pointed at a test folder so that what it leaves there is
seen. docs/simulator.md's by-hand recipe simulates the same cluster (tests/live/test_local_trial_live.py)."""

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from itertools import takewhile

import pytest
import yaml

from hpcobs.proof import demo
from hpcobs.targets import scrape
from tests.conftest import ROOT

URL = re.compile(r"^(Prometheus|Alertmanager) +(http://127\.0\.0\.1:\d+)", re.M)


def run_demo(tmp: str, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "build.py", "demo", *options],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": tmp},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def section(output: str, title: str) -> list[list[str]]:
    """The words of each indented line under the line that starts with `title`."""
    lines = output.split(f"\n{title}", 1)[1].splitlines()[1:]
    return [line.split() for line in takewhile(lambda line: line.startswith("  "), lines)]


def assert_nothing_left(tmp, output: str) -> None:
    assert not os.listdir(tmp)
    urls = dict(URL.findall(output))
    assert set(urls) == {"Prometheus", "Alertmanager"}
    for url in urls.values():
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(url, timeout=5)


@pytest.fixture(scope="module")
def no_wait(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("demo"))
    process = run_demo(tmp, "--no-wait")
    out, err = process.communicate(timeout=600)
    return tmp, process.returncode, out, err


def test_the_faults_fire_and_are_notified_on_loopback(config, no_wait):
    _, returncode, out, err = no_wait
    assert returncode == 0, out + err
    firing = {line[0] for line in section(out, "Firing in Prometheus")}
    assert demo.expected_alerts(demo.rule_groups(config)) <= firing, out
    assert "ExporterGpuSeriesAbsent" not in out, out
    notified = section(out, "Notifications received by the loopback webhook")
    assert notified and {name for _, name, _ in notified} <= firing, out
    # Prometheus scrapes the stand-ins through every generated scrape job, with the cluster label they add.
    jobs = {
        job["job_name"] for job in yaml.safe_load((ROOT / "out" / scrape.PROMETHEUS_YML).read_text())["scrape_configs"]
    }
    scraped = section(out, "Scraped live by out/'s scrape jobs")
    assert {job for job, _, _, _ in scraped} == jobs, out
    assert all(up.split("/")[0] == up.split("/")[1] for _, up, _, _ in scraped), out
    assert {cluster for _, _, _, cluster in scraped} == {config.get("cluster", "name")}, out


def test_no_wait_leaves_no_process_and_no_temp_dir(no_wait):
    tmp, _, out, _ = no_wait
    assert_nothing_left(tmp, out)


def test_sigint_stops_a_waiting_demo_cleanly(tmp_path):
    process = run_demo(str(tmp_path), "--duration", demo.MIN_DURATION)  # the least history: the servers are what counts
    seen = ""
    for line in process.stdout:
        seen += line
        if line.startswith("Waiting for"):
            break
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGINT, seen + out + err
    assert "demo: interrupted by SIGINT, stopped cleanly" in err
    assert_nothing_left(tmp_path, seen + out)
