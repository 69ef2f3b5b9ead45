"""Inhibitions proven against a real Alertmanager on loopback: post alerts, read back which are inhibited."""

import time
from typing import NamedTuple

import pytest

from hpcobs.proof.servers import Alertmanager

AM = "alertmanager/alertmanager.yml"
CLUSTER = {"cluster": "gpu-prod"}


def alert(name, severity, team="gpu-ops", **labels):
    return {"alertname": name, "severity": severity, "team": team, **CLUSTER, **labels}


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
        alert(
            "GpuHealthFail",
            "critical",
            node="n12",
            gpu="2",
            health_watch="MEM",
            health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED",
        ),
        ({"gpu": "5"}, {"health_watch": "PCIE", "health_error_code": "DCGM_FR_PCI_REPLAY_RATE"}),
    ),
    # A recovery action pages once: DCGM fails the DRIVER health watch for the same action; another watch still pages.
    Inhibition(
        alert("GpuRecoveryRebootRequired", "critical", node="n21", gpu="2"),
        alert(
            "GpuHealthFail",
            "critical",
            node="n21",
            gpu="2",
            health_watch="DRIVER",
            health_error_code="DCGM_FR_GPU_RECOVERY_REBOOT",
        ),
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


@pytest.fixture(scope="module")
def inhibited(generated_tree):
    """{alert labels: inhibited?} for every alert of INHIBITIONS, posted together to one real Alertmanager."""
    expected = {key(a): inhibited for case in INHIBITIONS for a, inhibited in case.expected()}
    server = Alertmanager(generated_tree / AM).start()
    try:
        server.post([a for case in INHIBITIONS for a, _ in case.expected()])
        # The inhibitor sees new alerts a moment after the API does: wait until every case holds (each case's
        # inhibited symptom proves its cause has been seen), then hand the last reading to the assertions.
        deadline = time.monotonic() + 20
        while True:
            state = {key(a["labels"]): bool(a["status"]["inhibitedBy"]) for a in server.alerts()}
            if state == expected or time.monotonic() > deadline:
                return state
            time.sleep(0.2)
    finally:
        server.stop()


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
