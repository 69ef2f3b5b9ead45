"""docs/new-site.md, run as written: a new site's repository goes from nothing to a loaded Prometheus, Alertmanager
and Grafana with the page's commands only. Each line of its `sh` blocks runs with bash, in document order, in the
directory the last `cd` left; its `yaml` block is the site file. What a test machine cannot do is changed, and the
page lists each change under "How the test runs this page": the submodule comes from this checkout, the virtualenv
lines are this Python, the servers start on free loopback ports, deploy goes to a Grafana stand-in."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from hpcobs.paths import ROOT
from hpcobs.proof.servers import HTTP_TIMEOUT, Alertmanager, Prometheus, free_port
from hpcobs.settings.names import DashboardUid
from tests.grafana_fake import FakeGrafana

pytestmark = pytest.mark.live

PAGE = ROOT / "docs" / "new-site.md"
UPSTREAM = "https://github.com/hpcobs/hpcobs"
GRAFANA_URL = "https://grafana.example.org"
PROMETHEUS_URL = "http://localhost:9090"
ALERTMANAGER_ADDRESS = "localhost:9093"
SKIPPED = ("python3 -m venv ", ".venv/bin/pip ")  # this Python has hpcobs' dependencies; PyPI may be unreachable
EXIT_STATUS = {"doctor": 1}  # no exporter answers on the page's nodes: doctor names each and exits 1
TOKEN = "glsa_new_site_walkthrough"
WAIT = 30.0


def page_blocks() -> Iterator[tuple[str, str]]:
    """The page's fenced `sh` and `yaml` blocks, in order: (kind, text)."""
    yield from re.findall(r"^```(sh|yaml)\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), flags=re.M | re.S)


def api(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as response:
        return json.loads(response.read())


def eventually(read, done, what: str):
    deadline = time.monotonic() + WAIT
    while not done(value := read()):
        assert time.monotonic() < deadline, f"{what} after {WAIT:.0f}s: {value}"
        time.sleep(0.5)
    return value


class Walkthrough:
    """The page's commands against this machine's stand-ins, and the servers they start."""

    def __init__(self, home: Path, stack: ExitStack, grafana: FakeGrafana) -> None:
        self.cwd, self.stack, self.grafana = home, stack, grafana
        self.prometheus_port, self.alertmanager_port = free_port(), free_port()
        self.prometheus: Prometheus | None = None
        self.alertmanager: Alertmanager | None = None
        self.env = {
            **os.environ,
            "GRAFANA_TOKEN": TOKEN,
            # The submodule is a local clone; git refuses file:// submodules unless told (CVE-2022-39253).
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "protocol.file.allow",
            "GIT_CONFIG_VALUE_0": "always",
            **{
                f"GIT_{who}_{field}": value
                for who in ("AUTHOR", "COMMITTER")
                for field, value in (("NAME", "Site Admin"), ("EMAIL", "hpc-team@example.org"))
            },
        }

    def site_file(self, text: str) -> None:
        (self.cwd / "site.yaml").write_text(
            text.replace(ALERTMANAGER_ADDRESS, f"127.0.0.1:{self.alertmanager_port}"), encoding="utf-8"
        )

    def run(self, line: str) -> None:
        words = shlex.split(line)
        if line.startswith(SKIPPED):
            return
        if words[0] == "cd":
            self.cwd = self.cwd / words[1]
        elif words[0] == "prometheus":
            self.prometheus = self.start(
                Prometheus(config_file=self.cwd / self.config_file(words)), self.prometheus_port
            )
        elif words[0] == "prometheus-alertmanager":
            self.alertmanager = self.start(Alertmanager(self.cwd / self.config_file(words)), self.alertmanager_port)
        else:
            self.command(line, words)

    def command(self, line: str, words: list[str]) -> None:
        line = (
            line.replace(UPSTREAM, str(ROOT))
            .replace(".venv/bin/python", shlex.quote(sys.executable))
            .replace(GRAFANA_URL, self.grafana.url)
            .replace(PROMETHEUS_URL, f"http://127.0.0.1:{self.prometheus_port}")
        )
        result = subprocess.run(
            ["bash", "-c", line], cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=900
        )
        expected = next((status for word, status in EXIT_STATUS.items() if word in words), 0)
        assert result.returncode == expected, f"{line}\nexit {result.returncode}\n{result.stdout}\n{result.stderr}"

    @staticmethod
    def config_file(words: list[str]) -> str:
        [path] = [word.split("=", 1)[1] for word in words if word.startswith("--config.file=")]
        return path

    def start(self, server, port: int):
        server.port = port
        self.stack.callback(server.stop)
        return server.start()


def test_a_new_site_goes_from_nothing_to_a_loaded_stack(tmp_path):
    with ExitStack() as stack:
        grafana = stack.enter_context(FakeGrafana(TOKEN))
        walk = Walkthrough(tmp_path, stack, grafana)
        for kind, text in page_blocks():
            if kind == "yaml":
                walk.site_file(text)
                continue
            for line in filter(None, text.splitlines()):
                walk.run(line)
        repo, prometheus, alertmanager = walk.cwd, walk.prometheus, walk.alertmanager
        assert prometheus is not None and alertmanager is not None, "the page starts both servers"
        out = repo / "out"

        # Prometheus: every rule group of out/, every target of the target files, the site's Alertmanager.
        rule_files = sorted((out / "prometheus" / "rules").glob("*.rules.yaml"))
        groups = api(prometheus.url + "/api/v1/rules")["data"]["groups"]
        assert {group["file"] for group in groups} == {str(path) for path in rule_files}
        targets = [
            target
            for path in (out / "prometheus" / "scrape" / "targets").glob("*.json")
            for group in json.loads(path.read_text())
            for target in group["targets"]
        ]
        assert sum(target.startswith("gpu0") for target in targets) >= 64 * 3, "dcgm, node and training per node"
        eventually(
            lambda: api(prometheus.url + "/api/v1/targets")["data"]["activeTargets"],
            lambda active: len(active) == len(targets),
            "Prometheus has not discovered every target of out/prometheus/scrape/targets/",
        )
        eventually(
            lambda: api(prometheus.url + "/api/v1/alertmanagers")["data"]["activeAlertmanagers"],
            lambda active: [am["url"] for am in active] == [alertmanager.url + "/api/v2/alerts"],
            "Prometheus does not send to the site's Alertmanager",
        )

        # Alertmanager: a critical GPU alert pages and reaches the channel.
        alertmanager.post(
            [
                {
                    "alertname": "GpuFellOffBus",
                    "team": "gpu-ops",
                    "severity": "critical",
                    "cluster": "h100-a",
                    "node": "gpu001",
                    "gpu": "0",
                }
            ]
        )
        [alert] = alertmanager.alerts()
        assert sorted(receiver["name"] for receiver in alert["receivers"]) == ["hpc-pager", "hpc-slack"]

        # Grafana: every dashboard in the site's folder, the site's datasources, no Tempo anywhere.
        assert len(grafana.dashboards) == len(DashboardUid)
        assert sorted(source["type"] for source in grafana.datasources.values()) == [
            "alertmanager",
            "loki",
            "prometheus",
        ]
        provisioned = (out / "grafana" / "provisioning" / "datasources" / "hpcobs.yaml").read_text()
        dashboards = "".join(path.read_text() for path in (out / "grafana" / "dashboards").rglob("*.json"))
        assert "prometheus.example.org:9090" in provisioned and "tempo" not in (provisioned + dashboards).lower()
