"""Inhibitions proven against a real Alertmanager on loopback: post alerts, read back which are inhibited."""
import time

import pytest

from hpcobs.servers import Alertmanager

AM = "alertmanager/alertmanager.yml"
CLUSTER = {"cluster": "gpu-prod"}


def alert(name, severity, **labels):
    return {"alertname": name, "severity": severity, "team": "gpu-ops", **CLUSTER, **labels}


@pytest.fixture(scope="module")
def alertmanager(generated_tree):
    server = Alertmanager(generated_tree / AM).start()
    yield server
    server.stop()


def inhibited_after_posting(alertmanager, alerts):
    alertmanager.post(alerts)
    deadline = time.monotonic() + 20
    while True:
        state = {(a["labels"]["alertname"], a["labels"].get("node"), a["labels"].get("gpu"), a["labels"].get("hpc_job")):
                 bool(a["status"]["inhibitedBy"]) for a in alertmanager.alerts()}
        if len(state) >= len(alerts) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


@pytest.mark.live
def test_inhibitions(alertmanager):
    state = inhibited_after_posting(alertmanager, [
        # n1: the node is gone, so its GPU alerts are noise.
        alert("ExporterNodeExporterDown", "critical", node="n1"),
        alert("GpuThermalSlowdown", "warning", node="n1", gpu="0"),
        # n2 GPU 3 fell off the bus: its other alerts are symptoms; GPU 4 is unaffected.
        alert("GpuFellOffBus", "critical", node="n2", gpu="3"),
        alert("GpuXidDrainClass", "critical", node="n2", gpu="3"),
        alert("GpuPcieReplayRate", "warning", node="n2", gpu="4"),
        # n3 GPU 1 must be drained: its warnings wait; a critical on it still pages.
        alert("GpuXidDrainClass", "critical", node="n3", gpu="1"),
        alert("GpuNvlinkErrors", "warning", node="n3", gpu="1"),
        # Job 42 ended: its hang alert is a consequence; job 43's is real.
        {"alertname": "SlurmJobEnded", "severity": "info", "team": "none", "hpc_job": "42", **CLUSTER},
        {"alertname": "TrainingHang", "severity": "critical", "team": "job-owner", "hpc_job": "42", **CLUSTER},
        {"alertname": "TrainingHang", "severity": "critical", "team": "job-owner", "hpc_job": "43", **CLUSTER},
    ])
    assert state == {
        ("ExporterNodeExporterDown", "n1", None, None): False,
        ("GpuThermalSlowdown", "n1", "0", None): True,
        ("GpuFellOffBus", "n2", "3", None): False,
        ("GpuXidDrainClass", "n2", "3", None): True,
        ("GpuPcieReplayRate", "n2", "4", None): False,
        ("GpuXidDrainClass", "n3", "1", None): False,
        ("GpuNvlinkErrors", "n3", "1", None): True,
        ("SlurmJobEnded", None, None, "42"): False,
        ("TrainingHang", None, None, "42"): True,
        ("TrainingHang", None, None, "43"): False,
    }
