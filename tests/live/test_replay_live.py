"""The alert replay (hpcobs.proof.replay) on a small simulated cluster: the generated rules' alerts fire at the
times their `for:` gives after the fault, a real Alertmanager running the generated config notifies the right
receivers and not the inhibited alerts, and the compressed clock gives the notifications real time gives.

Three faults from the start of the 5th minute on a 3-node cluster: a GPU falls off the bus and an IB port goes
down on one node, a double-bit ECC error on another (whose GpuUncorrectableEcc inhibits the alerts the same
error raises on its GPU: Xid 48, health FAIL, row remap pending).
"""

import pytest
import yaml

from hpcobs.proof import alerting, replay
from hpcobs.proof.demo import rule_groups
from hpcobs.proof.simulate import Simulation
from tests.conftest import ROOT

STEP = 30
ONSET = 300
SCENARIOS = f"xid79:start={ONSET // 60}m,ib_port_down:start={ONSET // 60}m,dbe:start={ONSET // 60}m:node=gpu002"
RULE_FILES = sorted((ROOT / "out" / "prometheus" / "rules").glob("*.rules.yaml"))
ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"
K = 180  # the 30-minute window in 10 s
GROUP_WAIT = 30  # the generated root route's
LATE = 15  # replay seconds a notification may come after it is due (HTTP and scheduling latency, times K)
# Alerts the double-bit ECC error raises on its GPU beside GpuUncorrectableEcc, which inhibits them.
INHIBITED_BY_DBE = {"GpuXidDrainClass", "GpuHealthFail", "GpuRowRemapPending"}


def _half_hour(config, folder, scenarios: str, nodes: int = 3, hours: float = 0.5, k: float = K):
    """(start, end, the replay) of a simulated half hour of 3 nodes with `scenarios`, at K (or as given)."""
    sim = Simulation(config, nodes=nodes, hours=hours, scenarios=scenarios, seed=1)
    prometheus = replay.history(sim, rule_groups(config), folder)
    try:
        start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
        found = replay.replay(prometheus, RULE_FILES, ALERTMANAGER_YML, start, end, k, restarts=replay.restarts(sim))
        return start, end, found
    finally:
        prometheus.stop()


@pytest.fixture(scope="module")
def replayed(config, tmp_path_factory):
    return _half_hour(config, tmp_path_factory.mktemp("replay"), SCENARIOS)


def episodes(timelines, alertname: str, **labels) -> list[alerting.Episode]:
    return [
        e
        for t in timelines
        if t.labels["alertname"] == alertname and labels.items() <= t.labels.items()
        for e in t.episodes
    ]


@pytest.mark.parametrize(
    "alertname, labels, hold",
    [
        ("GpuFellOffBus", {"node": "gpu001", "gpu": "3"}, 60),
        ("IbPortLinkDown", {"node": "gpu001"}, 300),
        ("GpuUncorrectableEcc", {"node": "gpu002"}, 0),
    ],
)
def test_each_fault_fires_its_alert_its_for_after_the_fault_shows(replayed, alertname, labels, hold):
    start, _, found = replayed
    [episode] = episodes(found.timelines, alertname, **labels)
    assert ONSET <= episode.active_at - start <= ONSET + 2 * STEP  # the fault shows within two scrapes
    assert episode.fired_at == episode.active_at + hold


@pytest.mark.parametrize(
    "alertname, receivers",
    [
        ("GpuFellOffBus", {"gpu-ops", "gpu-ops-pager"}),
        ("GpuUncorrectableEcc", {"gpu-ops", "gpu-ops-pager"}),
        ("IbPortLinkDown", {"network"}),
    ],
)
def test_the_right_receivers_are_notified_a_group_wait_after_the_alert_fires(replayed, alertname, receivers):
    start, _, found = replayed
    fired = min(e.fired_at for e in episodes(found.timelines, alertname))
    mine = [n for n in found.notifications if any(a["alertname"] == alertname for a in n.alerts)]
    assert {n.receiver for n in mine} == receivers
    first = min(n.at for n in mine)
    assert fired + GROUP_WAIT <= first <= fired + GROUP_WAIT + LATE, (first - start, fired - start, found.lag)


def test_alerts_an_inhibition_covers_fire_but_are_not_notified(replayed):
    _, _, found = replayed
    fired = {n for n in INHIBITED_BY_DBE if any(e.fired_at for e in episodes(found.timelines, n, node="gpu002"))}
    assert fired == INHIBITED_BY_DBE
    notified = {a["alertname"] for n in found.notifications for a in n.alerts if a.get("node") == "gpu002"}
    assert "GpuUncorrectableEcc" in notified and not notified & INHIBITED_BY_DBE


# --------------------------------------------------------------------------- the compressed clock against real time

SHORT = {"group_wait": "2s", "group_interval": "6s", "repeat_interval": "10s"}  # what 25 s of real time can show


def test_a_slice_replayed_in_real_time_and_compressed_notifies_the_same(replayed, tmp_path):
    """25 replay seconds from just before the double-bit error's first evaluation, at k = 1 and k = 60, on the
    generated config with timings short enough to act in that time: each group is notified after group_wait and
    again after repeat_interval (the group_interval flush between sends nothing new)."""
    timelines = replayed[2].timelines
    fired = min(e.fired_at for e in episodes(timelines, "GpuUncorrectableEcc"))
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    config["route"] |= SHORT
    short = tmp_path / "alertmanager.yml"
    short.write_text(yaml.safe_dump(config))
    (tmp_path / "templates").symlink_to(ALERTMANAGER_YML.parent / "templates")

    def notified(k: float) -> list[tuple[str, tuple[str, ...], int]]:
        notifications, _ = replay.deliver(timelines, short, fired - 1, fired + 24, k)
        return sorted(
            (n.receiver, tuple(sorted(a["alertname"] for a in n.alerts)), round(n.at - fired)) for n in notifications
        )

    real_time = notified(1)
    assert {(receiver, when) for receiver, _, when in real_time} >= {("gpu-ops-pager", 2), ("gpu-ops-pager", 14)}
    compressed = notified(60)
    assert [(r, a) for r, a, _ in compressed] == [(r, a) for r, a, _ in real_time]
    assert all(abs(c[2] - r[2]) <= 1 for c, r in zip(compressed, real_time, strict=True))


# --------------------------------------------------------------------------- one fault, one notification per receiver


@pytest.mark.parametrize(
    "alertname, labels, receivers",
    [
        ("GpuFellOffBus", {"node": "gpu001", "gpu": "3"}, {"gpu-ops", "gpu-ops-pager"}),
        ("TrainingHang", {"hpc_job": "400001"}, {"job-owner"}),
    ],
)
def test_a_fault_that_lasts_keeps_its_alert_firing_and_notifies_each_receiver_once(
    replayed, alertname, labels, receivers
):
    """The first replay saw GpuFellOffBus resolve when the Xid left its 5-minute window (the GPU's series gone),
    and the job it hung resolve when a checkpoint the simulator wrote during the hang excused it: each fired again
    or left GpuSeriesMissing, which it inhibits, to notify for the same fault."""
    _, _, found = replayed
    [episode] = episodes(found.timelines, alertname, **labels)
    assert episode.fired_at and episode.resolved_at is None
    mine = [n.receiver for n in found.notifications if any(a["alertname"] == alertname for a in n.alerts)]
    assert sorted(mine) == sorted(receivers)


def test_the_gpu_that_fell_off_the_bus_is_not_notified_again_as_missing(replayed):
    _, _, found = replayed
    assert any(e.fired_at for e in episodes(found.timelines, "GpuSeriesMissing", node="gpu001"))
    assert not [n for n in found.notifications for a in n.alerts if a["alertname"] == "GpuSeriesMissing"]


# --------------------------------------------------------------------------- one fault, one notification (issue 28)

# Faults the week benchmark saw notify several times, one on each node of a cluster of their own: a drain-class Xid
# (paged again by SlurmNodeScheduledWithUnhealthyGpu), a GPU too hot and an HCA's symbol errors on one node (3 and 2
# chat notifications, one per alert name), a node powered off (one chat per exporter, 5).
ONE_PAGE = (
    f"xid95:start={ONSET // 60}m:node=gpu001,thermal:start={ONSET // 60}m:node=gpu002,"
    f"ib_symbol_errors:start={ONSET // 60}m:node=gpu002,slurm_nodes_down:start={ONSET // 60}m:node=gpu003"
)


@pytest.fixture(scope="module")
def one_page(config, tmp_path_factory):
    """(timelines, notifications) of the half hour of ONE_PAGE, at K."""
    _, _, found = _half_hour(config, tmp_path_factory.mktemp("one-page"), ONE_PAGE)
    return found.timelines, found.notifications


@pytest.mark.parametrize(
    "node, fired, notified",
    [
        # The GPU's page says to drain the node; Slurm still scheduling it is the same incident.
        (
            "gpu001",
            {"GpuXidDrainClass", "SlurmNodeScheduledWithUnhealthyGpu"},
            [("gpu-ops", "GpuXidDrainClass"), ("gpu-ops-pager", "GpuXidDrainClass")],
        ),
        # The temperature is the cause, the throttling its echo; the symbol errors cause the receive errors.
        (
            "gpu002",
            {"GpuTemperatureHigh", "GpuThermalViolation", "GpuThermalSlowdown", "IbSymbolErrors", "IbReceiveErrors"},
            [("gpu-ops", "GpuTemperatureHigh"), ("network", "IbSymbolErrors")],
        ),
        # Every exporter of the node stops: one notification for the host.
        (
            "gpu003",
            {"ExporterNodeDown", "ExporterDcgmDown", "ExporterNodeExporterDown", "ExporterFalcoDown"},
            [("gpu-ops", "ExporterNodeDown")],
        ),
    ],
)
def test_one_fault_notifies_each_receiver_once(one_page, node, fired, notified):
    """Each fault fires all its alerts (the inhibited ones are still listed in Alertmanager and on the dashboards),
    and its node gets one notification per receiver: the pager once, a chat channel once."""
    timelines, notifications = one_page
    assert all(any(e.fired_at for e in episodes(timelines, name, node=node)) for name in fired)
    mine = [(n.receiver, a["alertname"]) for n in notifications for a in n.alerts if a.get("node") == node]
    assert sorted(mine) == notified


# --------------------------------------------------------------------------- one incident over its repair (issue 28)

# What the week benchmark saw page again hours into a fault, each on its own node, until repaired: a double-bit error
# outlasting the ECC counter's hour (its Xid 48 and health failure then notified), a failed row remap (its Xid 64
# paged beside it), a drain-class Xid whose node Slurm kept scheduling (its alert outlived the GPU's page by an
# evaluation at the repair, and paged), and a leaf switch: the same rail port down on every node (one chat each).
REPAIRS = ",".join(
    [
        "dbe:start=5m:duration=75m:node=gpu001",
        "row_remap_failure:start=5m:duration=20m:node=gpu002",
        "xid74:start=5m:duration=20m:node=gpu003",
        *(f"ib_port_down:start=5m:duration=20m:node=gpu00{n}:hca=mlx5_1" for n in range(1, 5)),
    ]
)


@pytest.fixture(scope="module")
def repaired(config, tmp_path_factory):
    """The notifications of REPAIRS over an hour and a half of 4 nodes, at 4 x K."""
    _, _, found = _half_hour(config, tmp_path_factory.mktemp("repairs"), REPAIRS, nodes=4, hours=1.5, k=4 * K)
    return found


@pytest.mark.parametrize(
    "node, echoes",
    [
        # Past the ECC counter's hour the Xid 48 stands for the error (and its health failure) in the same group.
        ("gpu001", {"GpuHealthFail", "GpuRowRemapPending"}),
        ("gpu002", {"GpuXidDrainClass"}),
        ("gpu003", {"SlurmNodeScheduledWithUnhealthyGpu"}),
    ],
)
def test_a_gpu_fault_is_one_incident_until_repaired(repaired, node, echoes):
    """The node's pager notifications all belong to one group (one PagerDuty incident: the dedup key is the group's),
    and the alerts that echo the fault fire but notify no one, the pager or the chat channel."""
    assert all(any(e.fired_at for e in episodes(repaired.timelines, name, node=node)) for name in echoes)
    mine = [n for n in repaired.notifications if any(a.get("node") == node for a in n.alerts)]
    assert len({n.group_key for n in mine if n.receiver == "gpu-ops-pager"}) == 1
    assert not {a["alertname"] for n in mine for a in n.alerts} & echoes


def test_a_leaf_switch_down_is_one_message_naming_its_nodes(repaired):
    ports = [n for n in repaired.notifications if any(a["alertname"] == "IbPortLinkDown" for a in n.alerts)]
    assert {n.receiver for n in ports} == {"network"}
    assert len({n.group_key for n in ports}) == 1
    assert {a["node"] for a in ports[0].alerts} == {f"gpu00{n}" for n in range(1, 5)}


# --------------------------------------------------------------------------- a Prometheus restart (issue 28)

RESTART = 15 * 60


@pytest.fixture(scope="module")
def restarted(config, tmp_path_factory):
    """A node down from ONSET, and Prometheus restarting at RESTART (down 90 s) while its alert fires."""
    scenarios = f"slurm_nodes_down:start={ONSET // 60}m:node=gpu003,prometheus_restart:start={RESTART // 60}m"
    return _half_hour(config, tmp_path_factory.mktemp("restart"), scenarios)


def test_a_restart_stops_the_sends_and_starts_a_short_for_over(restarted):
    """Nothing is evaluated or sent while Prometheus is down (not even the resolution of what it last saw), and
    Prometheus 2.42 does not restore a `for:` under the grace period (10m): ExporterNodeDown (5m) is pending again
    after the restart, Alertmanager resolves it once its last send's endsAt passes, and it notifies anew."""
    start, _, found = restarted
    down = (start + RESTART, start + RESTART + 90)
    assert not [p for t in found.timelines for p in t.posts if down[0] <= p.at < down[1]]
    [before, after] = episodes(found.timelines, "ExporterNodeDown", node="gpu003")
    assert before.fired_at and before.resolved_at == down[0]
    assert after.active_at >= down[1] and after.fired_at - after.active_at >= 300
    notified = [n.at for n in found.notifications for a in n.alerts if a["alertname"] == "ExporterNodeDown"]
    assert len(notified) == 2 and notified[1] > after.fired_at
