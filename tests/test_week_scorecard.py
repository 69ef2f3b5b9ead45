"""The week scorecard's matching and counting (hpcobs.proof.scorecard) on a hand-made replay: no servers."""

import pytest
import yaml

from hpcobs.proof.alerting import Episode, Timeline
from hpcobs.proof.replay import Notification
from hpcobs.proof.scorecard import declared_firings, on_entity, receiver_kinds, score
from hpcobs.proof.simulate.model import Job
from hpcobs.proof.simulate.scenarios import Spec
from hpcobs.proof.simulate.week import Plan, Truth
from hpcobs.settings import config as config_module
from tests.conftest import ROOT

ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"
ORIGIN = 1_700_000_000  # the window's start, Unix time: the replay's times are absolute, the plan's relative
KINDS = {"gpu-ops-pager": "pager", "gpu-ops": "chat", "owners": "job_owner"}
GROUP_BY = ("alertname", "node", "hpc_job")  # the generated routes' group_by, cluster aside
# The alerts' declarations the hand-made replays need (alerts/slurm.py declares these).
FIRED_BY = {"SlurmNodesDown": ("slurm_nodes_down",), "SlurmQueueBacklog": ("queue_backlog",)}


def test_receiver_kinds_come_from_the_integrations_and_the_job_owner_route_not_the_names():
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    kinds = receiver_kinds(config)
    assert {name: kinds[name] for name in ("gpu-ops-pager", "gpu-ops", "network", "job-owner")} == {
        "gpu-ops-pager": "pager",
        "gpu-ops": "chat",
        "network": "chat",
        "job-owner": "job_owner",
    }
    # Renamed, the job owner's webhook is still found through its route; another webhook is not a job owner's.
    text = ALERTMANAGER_YML.read_text().replace("receiver: job-owner", "receiver: owners-hook")
    renamed = receiver_kinds(yaml.safe_load(text.replace("name: job-owner", "name: owners-hook")))
    assert renamed["owners-hook"] == "job_owner"
    config["receivers"].append({"name": "job-owner-2", "webhook_configs": [{"url": "http://x"}]})
    assert receiver_kinds(config)["job-owner-2"] == "webhook"


@pytest.mark.parametrize(
    "labels, entity, on",
    [
        ({"node": "gpu001", "gpu": "2"}, {"node": "gpu001", "gpu": "2"}, True),
        ({"node": "gpu001", "gpu": "3"}, {"node": "gpu001", "gpu": "2"}, False),
        ({"node": "gpu001"}, {"node": "gpu001", "gpu": "2"}, True),  # a node-level alert on a GPU's fault
        ({"node": "gpu002", "device": "mlx5_1"}, {"node": "gpu001,gpu002", "hca": "mlx5_1"}, True),  # a leaf
        ({"node": "gpu002", "device": "mlx5_0"}, {"node": "gpu001,gpu002", "hca": "mlx5_1"}, False),
        ({"hpc_job": "7"}, {"node": "gpu001", "gpu": "2", "job": "7"}, True),  # the job the fault interrupts
        ({"node": "gpu003", "hpc_job": "7"}, {"node": "gpu001", "gpu": "2", "job": "7"}, False),
        ({"node": "gpu003", "hpc_job": "7"}, {"job": "7"}, True),  # a job's fault: any node of it
        ({"partition": "gpu"}, {}, True),  # a cluster-wide event: alerts on no entity only
        ({"node": "gpu001"}, {}, False),
    ],
)
def test_an_alert_is_on_an_entity_by_node_gpu_hca_or_job(labels, entity, on):
    assert on_entity(labels, entity) is on


def timeline(alertname: str, active_at: float, fired_at: float | None, **labels) -> Timeline:
    return Timeline({"alertname": alertname, **labels}, [Episode(ORIGIN + active_at, fired_at and ORIGIN + fired_at)])


def notify(receiver: str, at: float, *timelines: Timeline) -> Notification:
    """A notification with a group key as Alertmanager writes one (route, then the group's labels): the first
    alert's labels of GROUP_BY."""
    group = ", ".join(f'{k}="{v}"' for k, v in sorted(timelines[0].labels.items()) if k in GROUP_BY)
    return Notification(receiver, ORIGIN + at, tuple(t.labels for t in timelines), f"{{}}/{receiver}:{{{group}}}")


@pytest.fixture(scope="module")
def card():
    """Half a day: a GPU falls off the bus (paged twice, chat once, its job's owner once); an HBM fault nothing
    sees; silent data corruption; a fault the plan could not place; a thermal burst that pages chat; a pager page
    nothing explains; a pending alert that never fires on the HBM fault's GPU."""
    xid79 = Spec("xid79", start=600, duration=3600, node="gpu001", gpu=2)
    dbe = Spec("dbe", start=7200, duration=3600, node="gpu002", gpu=0)
    burst = Spec("thermal_burst", start=20000, duration=120, node="gpu002", gpu=1)
    plan = Plan(
        (
            Truth("faulty GPU", "xid79", 600, 4200, {"node": "gpu001", "gpu": "2", "job": "7"}, (xid79,)),
            Truth("GPU HBM3 memory", "dbe", 7200, 10800, {"node": "gpu002", "gpu": "0"}, (dbe,)),
            Truth("silent data corruption", None, 9000, 9000, {}),
            Truth("NIC", None, 12000, 15000, {"unplaced": "ib_port_down"}),
        ),
        {burst: "a two-minute thermal excursion"},
    )
    off_bus = timeline("GpuFellOffBus", 660, 720, node="gpu001", gpu="2")
    missing = timeline("GpuSeriesMissing", 660, 960, node="gpu001")
    hang = timeline("TrainingHang", 900, 1200, hpc_job="7", user="alice")
    pending = timeline("GpuRowRemapPending", 7260, None, node="gpu002", gpu="0")
    hot = timeline("GpuTemperatureHigh", 20040, 20100, node="gpu002", gpu="1")
    stray = timeline("GpuPcieReplayRate", 30000, 30000, node="gpu003", gpu="5")
    timelines = [off_bus, missing, hang, pending, hot, stray]
    notifications = [
        notify("gpu-ops-pager", 750, off_bus),
        notify("gpu-ops", 990, missing),
        notify("owners", 1230, hang),
        notify("gpu-ops-pager", 15150, off_bus),  # 4 h later: a repeat
        notify("gpu-ops", 20130, hot),
        notify("gpu-ops-pager", 30030, stray),
    ]
    return score(plan, timelines, notifications, KINDS, ORIGIN, days=0.5, fired_by=FIRED_BY)


def by_class(card, name: str) -> dict:
    return next(c for c in card["classes"] if c["class"] == name)


def test_a_fault_is_detected_by_the_first_firing_on_its_entity_and_its_pages_counted_per_kind(card):
    gpu = by_class(card, "faulty GPU")
    assert (gpu["injected"], gpu["detected"], gpu["detect_seconds"]) == (1, 1, {"median": 120, "p95": 120})
    assert gpu["pages_per_incident"] == {"pager": 1, "chat": 1, "job_owner": 1}
    assert gpu["repeats_per_incident"] == {"pager": 1, "chat": 0, "job_owner": 0}  # 4 h later, still firing
    [incident] = [i for i in card["incidents"] if i["kind"] == "xid79"]
    assert incident["alerts"] == ["GpuFellOffBus", "GpuSeriesMissing", "TrainingHang"]


def test_a_fault_nothing_fires_for_is_missed_and_no_signal_and_unplaced_are_kept_apart(card):
    hbm = by_class(card, "GPU HBM3 memory")
    assert (hbm["injected"], hbm["detected"], hbm["detect_seconds"]) == (1, 0, None)  # pending is not detected
    sdc = by_class(card, "silent data corruption")
    assert (sdc["signal"], sdc["injected"], sdc["detected"]) == (False, 1, 0)
    nic = by_class(card, "NIC")
    assert (nic["injected"], nic["unplaced"], nic["detected"], nic["pages_per_incident"]) == (0, 1, 0, None)


def test_false_pages_are_listed_per_day_with_the_background_event_that_caused_them_or_none(card):
    chat, pager = card["false_pages"]["chat"], card["false_pages"]["pager"]
    assert chat["per_day"] == 2 and pager["per_day"] == 2  # one each in half a day
    [hot] = chat["pages"]
    assert hot["cause"] == {
        "event": "thermal_burst",
        "entity": {"node": "gpu002", "gpu": "1"},
        "why": "a two-minute thermal excursion",
    }
    [stray] = pager["pages"]
    assert (stray["at"], stray["cause"], stray["alerts"]) == (
        30030,
        None,
        [{"alertname": "GpuPcieReplayRate", "node": "gpu003", "gpu": "5"}],
    )


def test_job_owner_notifications_are_counted_per_owner_per_day(card):
    assert card["job_owner_notifications_per_day"] == {"alice": 2}


def test_firing_episodes_are_counted_per_alert_notified_or_not(card):
    assert card["alerts_fired"] == {
        "GpuFellOffBus": 1,
        "GpuPcieReplayRate": 1,
        "GpuSeriesMissing": 1,
        "GpuTemperatureHigh": 1,
        "TrainingHang": 1,
    }


def test_firings_no_fault_caused_are_counted_by_their_background_cause(card):
    assert card["fired_without_fault"] == {
        "GpuPcieReplayRate": {"nothing": 1},
        "GpuTemperatureHigh": {"thermal_burst": 1},
    }


def test_each_incident_lists_the_notifications_counted_for_it(card):
    [incident] = [i for i in card["incidents"] if i["kind"] == "xid79"]
    assert [(n["at"], n["receiver"], n["repeat"]) for n in incident["notifications"]] == [
        (750, "gpu-ops-pager", False),
        (990, "gpu-ops", False),
        (1230, "owners", False),
        (15150, "gpu-ops-pager", True),
    ]


def test_notifications_are_counted_per_receiver_per_day(card):
    assert card["notifications_per_day"] == {"gpu-ops": 4, "gpu-ops-pager": 6, "owners": 2}


def test_a_group_that_stays_firing_repeats_and_one_that_closed_pages_again():
    """One GPU's fault on gpu001 for most of the day: its drain alert fires, a second GPU's alert joins the same
    group (alertname, node) while the first fires, both resolve, and the first fires again hours later."""
    xid79 = Spec("xid79", start=0, duration=30000, node="gpu001", gpu=2)
    plan = Plan((Truth("faulty GPU", "xid79", 0, 30000, {"node": "gpu001"}, (xid79,)),), {})
    first = Timeline(
        {"alertname": "GpuXidDrainClass", "node": "gpu001", "gpu": "2"},
        [Episode(ORIGIN + 60, ORIGIN + 120, ORIGIN + 3000), Episode(ORIGIN + 6000, ORIGIN + 6060)],
    )
    joins = Timeline(
        {"alertname": "GpuXidDrainClass", "node": "gpu001", "gpu": "3"},
        [Episode(ORIGIN + 1000, ORIGIN + 1060, ORIGIN + 2000)],
    )
    notifications = [
        notify("gpu-ops-pager", 150, first),  # a page
        notify("gpu-ops-pager", 1100, first, joins),  # a repeat: joined a firing group
        notify("gpu-ops-pager", 6090, first),  # a page: the group closed at 3000
        notify("gpu-ops-pager", 6090 + 4 * 3600, first),  # a repeat: repeat_interval
    ]
    card = score(plan, [first, joins], notifications, KINDS, ORIGIN, days=0.5, fired_by=FIRED_BY)
    [incident] = card["incidents"]
    assert (incident["pages"]["pager"], incident["repeats"]["pager"]) == (2, 2)
    assert [n["repeat"] for n in incident["notifications"]] == [False, True, False, True]


def test_a_repeated_false_page_is_counted_beside_the_pages_not_among_them():
    stray = timeline("GpuPcieReplayRate", 100, 160, node="gpu003", gpu="5")
    notifications = [notify("gpu-ops-pager", 200, stray), notify("gpu-ops-pager", 200 + 4 * 3600, stray)]
    card = score(Plan((), {}), [stray], notifications, KINDS, ORIGIN, days=1, fired_by=FIRED_BY)
    pager = card["false_pages"]["pager"]
    assert (pager["per_day"], pager["repeats_per_day"]) == (1, 1)
    assert [p["repeat"] for p in pager["pages"]] == [False, True]


def test_a_cluster_wide_alert_is_tied_to_a_fault_whose_scenario_its_declaration_says_fires_it():
    """A node goes down: SlurmNodesDown (per partition, no node label) fires and is told to chat. Later it fires
    with no fault; SlurmQueueBacklog, also on no node, fires during the fault but is not declared fired by it."""
    down = Spec("slurm_nodes_down", start=1000, duration=7000, node="gpu003")
    plan = Plan((Truth("host maintenance", "slurm_nodes_down", 1000, 8000, {"node": "gpu003"}, (down,)),), {})
    nodes_down = Timeline(
        {"alertname": "SlurmNodesDown", "partition": "batch", "state": "down"},
        [Episode(ORIGIN + 1060, ORIGIN + 1360, ORIGIN + 8100), Episode(ORIGIN + 20000, ORIGIN + 20300)],
    )
    backlog = timeline("SlurmQueueBacklog", 1100, 1400, partition="batch")
    notifications = [notify("gpu-ops", 1400, nodes_down)]
    card = score(plan, [nodes_down, backlog], notifications, KINDS, ORIGIN, days=0.5, fired_by=FIRED_BY)
    [incident] = card["incidents"]
    assert (incident["detected_after"], incident["alerts"], incident["pages"]["chat"]) == (360, ["SlurmNodesDown"], 1)
    assert card["false_pages"]["chat"]["pages"] == []
    assert card["fired_without_fault"] == {"SlurmNodesDown": {"nothing": 1}, "SlurmQueueBacklog": {"nothing": 1}}


def test_a_cluster_wide_alert_declared_fired_by_a_node_event_is_not_put_on_a_cluster_wide_one():
    """GpuDriverDrift (per driver, no node) fires during the peak-hour queue (cluster-wide) after the rolling update
    reached a node: its cause is the update, as declared (the full week had listed the queue)."""
    queue, drift = Spec("queue_backlog", start=0, duration=7200), Spec("driver_drift", start=600, node="gpu009")
    plan = Plan((), {queue: "long queues at peak hours", drift: "a rolling driver update reaches the node"})
    drifting = timeline("GpuDriverDrift", 700, 4300, driver="535.183.01")
    notifications = [notify("gpu-ops", 4330, drifting)]
    card = score(plan, [drifting], notifications, KINDS, ORIGIN, days=1, fired_by={"GpuDriverDrift": ("driver_drift",)})
    [page] = card["false_pages"]["chat"]["pages"]
    assert page["cause"]["event"] == "driver_drift"
    assert card["fired_without_fault"] == {"GpuDriverDrift": {"driver_drift": 1}}


def test_the_declarations_scored_by_default_are_the_builds_and_the_hand_made_ones_match_them():
    """What the benchmark scores by when it passes none: every alert's `fired_by` as built for the config."""
    declared = declared_firings(config_module.load())
    assert {name: declared[name] for name in FIRED_BY} == FIRED_BY


def job(id: str, user: str) -> Job:
    return Job(id, "train", user, "research", "batch", "normal", 0, 86400, ((0, 0),))


def test_job_owner_notifications_are_counted_per_user_the_simulation_ran_the_job_for_and_per_job():
    """Xid 13 in two of bob's jobs and one of carol's: GpuXidApplicationClass names the job, not its user."""
    xids = [
        timeline("GpuXidApplicationClass", 60 * i, 60 * i + 60, node="gpu001", gpu=str(i), hpc_job=j)
        for i, j in enumerate(("9", "11", "12"))
    ]
    notifications = [notify("owners", 60 * i + 90, t) for i, t in enumerate(xids)]
    jobs = [job("9", "bob"), job("11", "bob"), job("12", "carol")]
    card = score(Plan((), {}), xids, notifications, KINDS, ORIGIN, days=1, jobs=jobs, fired_by=FIRED_BY)
    assert card["job_owner_notifications_per_day"] == {"bob": 2, "carol": 1}
    assert card["job_owner_notifications_per_job_per_day"] == {"11": 1, "12": 1, "9": 1}
