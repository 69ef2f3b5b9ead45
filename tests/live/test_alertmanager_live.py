"""A real Alertmanager on loopback with the generated config and notification templates: inhibitions (post alerts,
read back which are inhibited), and notifications (every receiver pointed at a loopback HTTP server, which records
what Alertmanager sends: the rendered templates, and nothing from a route muted by a time interval)."""

import json
import shutil
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

import pytest
import yaml

from hpcobs.build import outdir, pipeline
from hpcobs.proof.servers import HTTP_TIMEOUT, Alertmanager
from hpcobs.settings import config as config_module

AM = "alertmanager/alertmanager.yml"
CLUSTER = {"cluster": "gpu-prod"}


def alert(name, severity, team="gpu-ops", **labels):
    return {"alertname": name, "severity": severity, "team": team, **CLUSTER, **labels}


def health_fail(node: str, watch: str, code: str) -> dict:
    """DCGM's health watch failing on GPU 2 of `node`."""
    return alert("GpuHealthFail", "critical", node=node, gpu="2", health_watch=watch, health_error_code=code)


class Inhibition(NamedTuple):
    cause: dict  # the source alert; never inhibited itself
    symptom: dict  # an alert it inhibits: same `equal` labels
    spared: tuple[dict, ...]  # label changes to the symptom that must leave it alone (another node, GPU, job)

    @property
    def id(self) -> str:
        return f"{self.cause['alertname']}>{self.symptom['alertname']}"

    def expected(self) -> list[tuple[dict, bool]]:
        """(alert, inhibited?) for every alert of the case."""
        return [
            (self.cause, False),
            (self.symptom, True),
            *(({**self.symptom, **change}, False) for change in self.spared),
        ]


# One case per inhibition rule (and target). Every case has its own nodes and jobs, so all of them are posted
# to one Alertmanager at once without inhibiting each other (test_cases_are_independent).
INHIBITIONS = [
    # dcgm-exporter is silent on the node: its GPU count drops with it. Evidence from elsewhere still pages: the
    # kernel's Xid line (Loki) and the node's InfiniBand port (node_exporter).
    Inhibition(
        alert("ExporterDcgmDown", "warning", node="n1"),
        alert("GpuSeriesMissing", "warning", node="n1"),
        (
            {"node": "n1b"},
            {"alertname": "GpuXidDrainClassLogged", "severity": "critical", "err_code": "79"},
            {"alertname": "IbPortNotActive", "severity": "critical", "team": "network"},
        ),
    ),
    # node_exporter is silent on the node: its InfiniBand alerts have no data; the GPUs' own alerts still page.
    Inhibition(
        alert("ExporterNodeExporterDown", "warning", node="n9"),
        alert("IbLinkFlapping", "warning", team="network", node="n9"),
        ({"node": "n9b"}, {"alertname": "GpuThermalSlowdown", "team": "gpu-ops", "gpu": "0"}),
    ),
    # Falco is silent on the node: the foreign checkpoint read Tetragon also sees still pages.
    Inhibition(
        alert("ExporterFalcoDown", "warning", team="security", node="n10"),
        alert("SecurityFalcoCritical", "critical", team="security", node="n10", rule_name="Terminal shell"),
        ({"node": "n10b"}, {"alertname": "SecurityCheckpointForeignRead"}),
    ),
    # A GPU that fell off the bus: its other alerts are symptoms; another GPU is unaffected.
    Inhibition(
        alert("GpuFellOffBus", "critical", node="n2", gpu="3"),
        alert("GpuXidDrainClass", "critical", node="n2", gpu="3"),
        ({"gpu": "4"},),
    ),
    # One double-bit ECC error pages once: the Xid 48 and the MEM health failure it also raises on that GPU are
    # echoes; another Xid, another watch's failure or another GPU's still page.
    Inhibition(
        alert("GpuUncorrectableEcc", "critical", node="n11", gpu="2"),
        alert("GpuXidDrainClass", "critical", node="n11", gpu="2", err_code="48"),
        ({"gpu": "5"}, {"err_code": "79"}),
    ),
    Inhibition(
        alert("GpuUncorrectableEcc", "critical", node="n12", gpu="2"),
        health_fail("n12", "MEM", "DCGM_FR_VOLATILE_DBE_DETECTED"),
        ({"gpu": "5"}, {"health_watch": "PCIE", "health_error_code": "DCGM_FR_PCI_REPLAY_RATE"}),
    ),
    # Once the ECC counter's window has passed, the Xid 48 still standing for that error stands for its health failure
    # too; another watch's failure still pages.
    Inhibition(
        alert("GpuXidDrainClass", "critical", node="n33", gpu="2", err_code="48"),
        health_fail("n33", "MEM", "DCGM_FR_VOLATILE_DBE_DETECTED"),
        ({"gpu": "5"}, {"health_watch": "PCIE", "health_error_code": "DCGM_FR_PCI_REPLAY_RATE"}),
    ),
    # A failed row remap pages once: its Xid 64 is the echo; another drain-class Xid on the GPU still pages.
    Inhibition(
        alert("GpuRowRemapFailure", "critical", node="n34", gpu="4"),
        alert("GpuXidDrainClass", "critical", node="n34", gpu="4", err_code="64"),
        ({"gpu": "5"}, {"err_code": "79"}),
    ),
    # A recovery action pages once: DCGM fails the DRIVER health watch for the same action; another watch still pages.
    Inhibition(
        alert("GpuRecoveryRebootRequired", "critical", node="n21", gpu="2"),
        health_fail("n21", "DRIVER", "DCGM_FR_GPU_RECOVERY_REBOOT"),
        ({"gpu": "5"}, {"health_watch": "THERMAL", "health_error_code": "DCGM_FR_CLOCKS_EVENT_THERMAL"}),
    ),
    # A GPU that must be drained: its warnings wait; another GPU's, or a critical on it, still go out.
    Inhibition(
        alert("GpuXidDrainClass", "critical", node="n3", gpu="1"),
        alert("GpuNvlinkErrors", "warning", node="n3", gpu="1"),
        ({"gpu": "2"}, {"severity": "critical"}),
    ),
    # dcgm-exporter's drain-class Xid already pages for the node: the kernel's line about it (Loki) does not again.
    Inhibition(
        alert("GpuXidDrainClass", "critical", node="n8", gpu="1"),
        alert("GpuXidDrainClassLogged", "critical", node="n8", pci_address="0000:91:00", err_code="79"),
        ({"node": "n8b"},),
    ),
    # A job that ended: its hang alert is a consequence; another job's is real.
    # ... but the application Xid that killed it is why it ended, and a security event in it still matters. (Hardware
    # alerts carry no hpc_job: a GPU that failed under the job pages whatever the job does.)
    Inhibition(
        alert("SlurmJobEnded", "info", team="none", hpc_job="42"),
        alert("TrainingHang", "critical", team="job-owner", hpc_job="42"),
        (
            {"hpc_job": "43"},
            {"alertname": "GpuXidApplicationClass", "severity": "warning", "node": "n13", "gpu": "1", "err_code": "13"},
            {"alertname": "SecurityCheckpointForeignRead", "team": "security", "node": "n14"},
        ),
    ),
    # A GPU that fell off the bus stops reporting: its node's GPU count drops (that alert has no gpu label).
    Inhibition(
        alert("GpuFellOffBus", "critical", node="n4", gpu="3"),
        alert("GpuSeriesMissing", "warning", node="n4"),
        ({"node": "n4b"},),
    ),
    # A job holding idle GPUs explains each node where it holds them.
    Inhibition(
        alert("SlurmJobHoldingIdleGpus", "warning", team="job-owner", hpc_job="44", user="alice"),
        alert("GpuAllocatedIdle", "info", team="job-owner", node="n5", hpc_job="44"),
        ({"hpc_job": "45"},),
    ),
    # An InfiniBand port not ACTIVE explains the node's low link rate and transmit discards (per-node alerts).
    Inhibition(
        alert("IbPortNotActive", "critical", team="network", node="n6"),
        alert("IbLinkRateBelowNominal", "warning", team="network", node="n6"),
        ({"node": "n6b"},),
    ),
    Inhibition(
        alert("IbPortNotActive", "critical", team="network", node="n7"),
        alert("IbTransmitDiscards", "warning", team="network", node="n7"),
        ({"node": "n7b"},),
    ),
    # Every exporter naming its node localhost (a standalone hostengine): the nodes' GPUs seem absent everywhere.
    # Scoped by cluster, so this case is the only one in a cluster of its own.
    Inhibition(
        alert("ExporterGpuNodeNameShared", "critical", node="localhost", cluster="gpu-lab"),
        alert("ExporterGpuSeriesAbsent", "warning", node="n15", cluster="gpu-lab"),
        ({"cluster": "gpu-lab2"},),
    ),
    # One fault, one page (the week benchmark, issue 28): the GPU's page for a drain-class Xid explains Slurm still
    # scheduling its node; another node's is its own fault.
    Inhibition(
        alert("GpuXidDrainClass", "critical", node="n22", gpu="0", err_code="95"),
        alert("SlurmNodeScheduledWithUnhealthyGpu", "critical", node="n22"),
        ({"node": "n22b"},),
    ),
    # A GPU at its temperature limit explains its thermal throttling; a power brake on it is another fault.
    Inhibition(
        alert("GpuTemperatureHigh", "warning", node="n23", gpu="1"),
        alert("GpuThermalViolation", "warning", node="n23", gpu="1"),
        ({"gpu": "2"},),
    ),
    Inhibition(
        alert("GpuTemperatureHigh", "warning", node="n24", gpu="1"),
        alert("GpuThermalSlowdown", "warning", node="n24", gpu="1", clock_event="hw_slowdown"),
        ({"gpu": "2"}, {"clock_event": "hw_power_brake"}),
    ),
    # Bad lanes explain the malformed packets the node's ports receive.
    Inhibition(
        alert("IbSymbolErrors", "warning", team="network", node="n25"),
        alert("IbReceiveErrors", "warning", team="network", node="n25"),
        ({"node": "n25b"},),
    ),
    # A host down is one notification: its exporters' down alerts, whatever their team, wait.
    Inhibition(
        alert("ExporterNodeDown", "warning", node="n26"),
        alert("ExporterLustreDown", "warning", team="storage", node="n26"),
        ({"node": "n26b"}, {"alertname": "ExporterFalcoDown", "team": "security", "node": "n26b"}),
    ),
    Inhibition(
        alert("ExporterNodeDown", "warning", node="n28"),
        alert("ExporterFalcoDown", "warning", team="security", node="n28"),
        ({"node": "n28b"},),
    ),
    # A node Slurm drained (rebooting, powered down) is quiet on purpose: sinfo shows it, nobody is notified of its
    # exporters' silence; what an exporter still reports from it is evidence and still notifies.
    Inhibition(
        alert("SlurmNodeOutOfService", "info", team="none", node="n27"),
        alert("ExporterNodeDown", "warning", node="n27"),
        ({"node": "n27b"},),
    ),
    Inhibition(
        alert("SlurmNodeOutOfService", "info", team="none", node="n29"),
        alert("ExporterDcgmDown", "warning", node="n29"),
        ({"node": "n29b"}, {"alertname": "IbPortNotActive", "severity": "critical", "team": "network"}),
    ),
    # A job stuck writing its checkpoint makes no step: the storage stall explains the hang.
    Inhibition(
        alert("StorageCheckpointWriteStalled", "critical", team="storage", hpc_job="46"),
        alert("TrainingHang", "critical", team="job-owner", hpc_job="46"),
        ({"hpc_job": "47"},),
    ),
]
SCOPES = ("node", "hpc_job")  # the labels the rules' `equal` compare besides the cluster


def key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


class Received(ThreadingHTTPServer):
    """A loopback HTTP server standing in for Slack, PagerDuty and the webhook: it records every POST (path, JSON)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict]] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.posts.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


# The live config: the default site's routes, each notifying a second after its first alert, and the network team's
# muted by a time interval that always holds (a maintenance window at "now").
MUTED_TEAM = "network"
ALWAYS = {"always": [{"times": [{"start_time": "00:00", "end_time": "24:00"}]}]}


def live_site(routes: list[dict]) -> dict:
    return {
        "alertmanager": {
            "time_intervals": ALWAYS,
            "routes": [
                {
                    **route,
                    "group_wait": "1s",
                    **({"mute_time_intervals": ["always"]} if route["receiver"] == MUTED_TEAM else {}),
                }
                for route in routes
            ],
        }
    }


def to_loopback(config: dict, url: str, secrets) -> dict:
    """Every integration of the generated config pointed at the loopback server, one path per receiver; the secret
    files a deployment provides written with placeholders (PagerDuty's `url` is Alertmanager's own override)."""
    key, token = secrets / "routing-key", secrets / "token"
    key.write_text("0123456789abcdef0123456789abcdef")
    token.write_text("token")
    for receiver in config["receivers"]:
        name = receiver["name"]
        for block in receiver.get("slack_configs", []):
            block["api_url_file"] = str(secrets / f"slack-{name}")
            (secrets / f"slack-{name}").write_text(f"{url}/slack/{name}")
        for block in receiver.get("pagerduty_configs", []):
            block |= {"url": f"{url}/pagerduty/{name}", "routing_key_file": str(key)}
        for block in receiver.get("webhook_configs", []):
            block |= {"url": f"{url}/webhook/{name}"}
            block["http_config"]["authorization"]["credentials_file"] = str(token)
    return config


@pytest.fixture(scope="module")
def receiver():
    server = Received()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory, receiver):
    """One Alertmanager for the module, with the generated config of live_site and its templates."""
    root = tmp_path_factory.mktemp("alertmanager")
    site = root / "site.yaml"
    site.write_text(yaml.safe_dump(live_site(config_module.load().get("alertmanager", "routes"))))
    files = pipeline.generate(config_module.load(site))
    outdir.write_tree(root / "out", files)
    live = root / "out" / AM
    live.write_text(yaml.safe_dump(to_loopback(yaml.safe_load(files[AM]), receiver.url, root)))
    shutil.rmtree(root / "out" / "prometheus")
    started = Alertmanager(live).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def inhibited(server):
    """{alert labels: inhibited?} for every alert of INHIBITIONS, posted together to one real Alertmanager."""
    expected = {key(a): inhibited for case in INHIBITIONS for a, inhibited in case.expected()}
    server.post([a for case in INHIBITIONS for a, _ in case.expected()])
    # The inhibitor sees new alerts a moment after the API does: wait until every case holds (each case's
    # inhibited symptom proves its cause has been seen), then hand the last reading to the assertions.
    deadline = time.monotonic() + 20
    while True:
        state = {key(a["labels"]): bool(a["status"]["inhibitedBy"]) for a in server.alerts()}
        if state == expected or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def test_cases_are_independent():
    seen: dict[tuple[str, str], str] = {}
    for case in INHIBITIONS:
        for a, _ in case.expected():
            for scope in SCOPES:
                if scope in a:
                    assert seen.setdefault((scope, a[scope]), case.id) == case.id, f"{scope}={a[scope]} in two cases"


@pytest.mark.live
@pytest.mark.parametrize("case", INHIBITIONS, ids=[case.id for case in INHIBITIONS])
def test_inhibitions(inhibited, case):
    assert {key(a): inhibited.get(key(a)) for a, _ in case.expected()} == {key(a): want for a, want in case.expected()}


# Notifications: alerts of a cluster of their own (no inhibition case touches it), with the annotations the rules give.
NOTIFY = {"cluster": "notify-test"}
STARTED = "2026-01-02T03:04:05Z"  # when the notified alerts started (.StartsAt): the dashboard link is centred on it
AROUND_START = "&time=1767323045000&time.window=7200000"


def annotated(name: str, team: str, severity: str, **labels) -> dict:
    return {
        "labels": {"alertname": name, "team": team, "severity": severity, **NOTIFY, **labels},
        "annotations": {
            "summary": f"{name} summary",
            "description": f"{name} on {labels.get('node', 'the cluster')}",
            "runbook_url": f"https://runbooks.example.org/{name}.md",
            "dashboard_url": f"https://grafana.example.org/d/{name}?var-cluster={NOTIFY['cluster']}",
        },
        "startsAt": STARTED,
    }


NOTIFIED = [
    annotated("GpuThermalSlowdown", "gpu-ops", "warning", node="n30", gpu="0"),
    annotated("GpuThermalSlowdown", "gpu-ops", "warning", node="n30", gpu="1"),
    annotated("GpuFellOffBus", "gpu-ops", "critical", node="n31", gpu="2"),
    annotated("TrainingHang", "job-owner", "critical", hpc_job="901"),
    annotated("IbPortNotActive", MUTED_TEAM, "critical", node="n32"),
]


@pytest.fixture(scope="module")
def notifications(server, receiver):
    """{path: [payload, ...]} of what Alertmanager sent for NOTIFIED, once the unmuted receivers all got theirs."""
    request = urllib.request.Request(
        server.url + "/api/v2/alerts",
        data=json.dumps(NOTIFIED).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=HTTP_TIMEOUT).read()
    expected = {"/slack/gpu-ops", "/pagerduty/gpu-ops-pager", "/webhook/job-owner"}

    def ours() -> dict[str, list[dict]]:
        found: dict[str, list[dict]] = {}
        for path, body in list(receiver.posts):
            if NOTIFY["cluster"] in json.dumps(body):
                found.setdefault(path, []).append(body)
        return found

    deadline = time.monotonic() + 30
    while not expected <= set(ours()) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # the muted route's group is due by now too (group_wait 1s): it must stay silent
    return ours()


@pytest.mark.live
def test_slack_shows_the_group_and_each_alerts_summary_and_links(notifications):
    thermal = [
        attachment
        for body in notifications["/slack/gpu-ops"]
        for attachment in body["attachments"]
        if "GpuThermalSlowdown" in attachment["title"]
    ]
    assert thermal, notifications["/slack/gpu-ops"]
    assert thermal[0]["title"] == "[FIRING:2] GpuThermalSlowdown notify-test n30"
    for gpu in ("0", "1"):  # both alerts of the group listed
        assert f"GpuThermalSlowdown summary, node n30, GPU {gpu}\n" in thermal[0]["text"]
    assert "Runbook: https://runbooks.example.org/GpuThermalSlowdown.md" in thermal[0]["text"]
    dashboard = f"https://grafana.example.org/d/GpuThermalSlowdown?var-cluster=notify-test{AROUND_START}\n"
    assert f"Dashboard: {dashboard}" in thermal[0]["text"]


@pytest.mark.live
def test_pagerduty_and_the_webhook_get_the_alerts(notifications):
    paged = notifications["/pagerduty/gpu-ops-pager"][0]
    assert paged["payload"]["summary"] == "[FIRING:1] GpuFellOffBus notify-test n31"
    assert "Runbook: https://runbooks.example.org/GpuFellOffBus.md" in paged["payload"]["custom_details"]["alerts"]
    # The webhook's payload is Alertmanager's fixed JSON: every label and annotation, nothing templated.
    hook = notifications["/webhook/job-owner"][0]
    assert hook["alerts"][0]["annotations"]["runbook_url"] == "https://runbooks.example.org/TrainingHang.md"
    assert hook["alerts"][0]["annotations"]["dashboard_url"].endswith("var-cluster=notify-test")


@pytest.mark.live
def test_a_route_muted_by_a_time_interval_sends_nothing(server, notifications):
    assert f"/slack/{MUTED_TEAM}" not in notifications
    muted = [
        a
        for a in server.alerts()
        if a["labels"]["alertname"] == "IbPortNotActive" and a["labels"] | NOTIFY == a["labels"]
    ]
    assert muted and muted[0]["status"]["state"] == "active"
