"""The replay's compressed clock (hpcobs.proof.replay): Alertmanager's timings divided by k, the defaults
included, what is posted at a slice's start, and when the simulated Prometheus is down."""

import subprocess

import yaml

from hpcobs.build import tools
from hpcobs.proof import replay
from hpcobs.proof.alerting import Post, Timeline
from hpcobs.proof.simulate import Simulation
from hpcobs.settings import config as config_module
from tests.conftest import ROOT

ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"


def test_every_timing_alertmanager_counts_is_divided_and_the_rest_is_kept():
    config = {
        "route": {
            "receiver": "a",
            "group_wait": "1m",
            "routes": [
                {"receiver": "b", "repeat_interval": "2h", "routes": [{"receiver": "c", "group_interval": "1s"}]}
            ],
        },
        "receivers": [{"name": n} for n in "abc"],
    }
    fast = replay.scaled(config, 120)
    assert fast["global"] == {"resolve_timeout": "2500ms"}  # Alertmanager's default 5m
    assert fast["route"] | {"routes": None} == {
        "receiver": "a",
        "group_wait": "500ms",
        "group_interval": "2500ms",  # the defaults of the root route, 5m and 4h
        "repeat_interval": "120000ms",
        "routes": None,
    }
    [child] = fast["route"]["routes"]
    assert child["repeat_interval"] == "60000ms" and child["routes"] == [{"receiver": "c", "group_interval": "8ms"}]
    assert config["route"]["group_wait"] == "1m"  # the caller's config is left as it was


def test_the_generated_config_scaled_is_still_valid(tmp_path):
    fast = replay.scaled(yaml.safe_load(ALERTMANAGER_YML.read_text()), 1000)
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(fast))
    (tmp_path / "templates").symlink_to(ALERTMANAGER_YML.parent / "templates")
    done = subprocess.run(
        [tools.find(tools.AMTOOL), "check-config", "alertmanager.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_slice_starts_with_the_last_send_of_each_alert_still_active():
    still = Timeline({"alertname": "A"}, posts=[Post(0, 0, 240), Post(90, 0, 330), Post(180, 0, 420)])
    over = Timeline({"alertname": "B"}, posts=[Post(0, 0, 60)])  # resolved at 60, before the slice
    sends = replay._sends([still, over], 100, 200)
    assert sends == [(100, [({"alertname": "A"}, Post(90, 0, 330))]), (180, [({"alertname": "A"}, Post(180, 0, 420))])]


def test_the_clock_maps_replay_time_to_wall_time_and_back():
    clock = replay.Clock(start=1000, origin=50, k=60)
    assert clock.wall(1600) == 60 and clock.replay(60) == 1600


def test_the_simulated_prometheus_restarts_are_when_the_evaluator_is_down():
    sim = Simulation(config_module.load(), nodes=2, hours=1, scenarios="prometheus_restart:start=20m", seed=1)
    assert replay.restarts(sim) == [(sim.window.start + 1200, sim.window.start + 1290)]


def test_resolutions_are_posted_after_those_of_the_alerts_they_inhibit():
    """With the generated inhibit rules: a host's exporters, then ExporterNodeDown; Xid 64, then the failed row remap
    it echoes; alerts that inhibit nothing and every firing send first (SOURCES_RESOLVED_AFTER)."""
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    node, gpu = {"cluster": "c", "node": "n1", "team": "gpu-ops"}, {"gpu": "1", "severity": "critical"}
    instances = [
        {"alertname": "ExporterNodeDown", "severity": "warning", **node},
        {"alertname": "ExporterDcgmDown", "severity": "warning", **node},
        {"alertname": "GpuSeriesMissing", "severity": "warning", **node},
        {"alertname": "GpuRowRemapFailure", **gpu, **node},
        {"alertname": "GpuXidDrainClass", "err_code": "64", **gpu, **node},
        {"alertname": "IbReceiveErrors", "severity": "warning", **node, "team": "network"},
    ]
    ranks = replay.resolution_ranks(config, instances)
    assert ranks["ExporterNodeDown"] > ranks["ExporterDcgmDown"] > ranks["GpuSeriesMissing"] == 0
    assert ranks["GpuRowRemapFailure"] > ranks["GpuXidDrainClass"]
    assert "IbReceiveErrors" not in ranks or ranks["IbReceiveErrors"] == 0
    resolved, firing = Post(at=60, starts_at=0, ends_at=60), Post(at=60, starts_at=0, ends_at=240)
    sends = [(i, resolved) for i in instances] + [(instances[0], firing)]
    batches = [[labels["alertname"] for labels, _ in batch] for batch in replay._by_rank(sends, ranks)]
    assert {"GpuSeriesMissing", "IbReceiveErrors", "ExporterNodeDown"} <= set(batches[0])  # the last one firing
    assert batches[-1] == ["ExporterNodeDown"]
    batch_of = {name: i for i, batch in enumerate(batches) for name in batch if i or name != "ExporterNodeDown"}
    assert batch_of["GpuSeriesMissing"] < batch_of["ExporterDcgmDown"] < batch_of["ExporterNodeDown"]
    assert batch_of["GpuXidDrainClass"] < batch_of["GpuRowRemapFailure"]
