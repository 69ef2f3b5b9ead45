"""The week scorecard's matching and counting (hpcobs.proof.scorecard) on a hand-made replay: no servers."""

import pytest
import yaml

from hpcobs.proof.alerting import Episode, Timeline
from hpcobs.proof.replay import Notification
from hpcobs.proof.scorecard import on_entity, receiver_kinds, score
from hpcobs.proof.simulate.scenarios import Spec
from hpcobs.proof.simulate.week import Plan, Truth
from tests.conftest import ROOT

ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"
ORIGIN = 1_700_000_000  # the window's start, Unix time: the replay's times are absolute, the plan's relative
KINDS = {"gpu-ops-pager": "pager", "gpu-ops": "chat", "owners": "job_owner"}


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
    return Notification(receiver, ORIGIN + at, tuple(t.labels for t in timelines))


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
    return score(plan, timelines, notifications, KINDS, ORIGIN, days=0.5)


def by_class(card, name: str) -> dict:
    return next(c for c in card["classes"] if c["class"] == name)


def test_a_fault_is_detected_by_the_first_firing_on_its_entity_and_its_pages_counted_per_kind(card):
    gpu = by_class(card, "faulty GPU")
    assert (gpu["injected"], gpu["detected"], gpu["detect_seconds"]) == (1, 1, {"median": 120, "p95": 120})
    assert gpu["pages_per_incident"] == {"pager": 2, "chat": 1, "job_owner": 1}  # the repeat counts
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
    assert [(n["at"], n["receiver"]) for n in incident["notifications"]] == [
        (750, "gpu-ops-pager"),
        (990, "gpu-ops"),
        (1230, "owners"),
        (15150, "gpu-ops-pager"),
    ]


def test_notifications_are_counted_per_receiver_per_day(card):
    assert card["notifications_per_day"] == {"gpu-ops": 4, "gpu-ops-pager": 6, "owners": 2}
