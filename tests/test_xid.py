"""Xid as dcgm-exporter exports it (issue 26, points 1 and 3): a last value that a follow-on code overwrites, the
optional Xid count collector that still counts the overwritten code, and the classes NVIDIA's own tools use."""

import pytest

from hpcobs.authoring.context import Context
from hpcobs.exporters import catalogue
from hpcobs.proof.simulate import Simulation
from tests.conftest import firing_over_simulated

DRAIN, FOLLOW_ON = "48", "45"  # the codes of the xid_overwritten scenario
START = 120  # seconds: the scenario's start in these tests
TEST_FILES = "prometheus/tests/gpu/"


@pytest.fixture(scope="module")
def overwritten(config):
    """Two nodes for 20 minutes, Xid 48 overwritten by Xid 45 in one scrape on the first hero node's GPU 7."""
    return Simulation(config, nodes=2, gpus_per_node=8, hours=1 / 3, scenarios="xid_overwritten:start=2m", seed=3)


def _xid_series(sim, signal):
    name = sim.sources["dcgm"].name(signal, sim.sources["dcgm"].versions[0])
    return [
        (labels, values)
        for family in sim.families({name})
        for labels, values in family.series
        if labels.get("gpu") == "7" and any(v is not None for v in values)
    ]


def test_xid_109_is_an_application_error_as_nvidias_device_plugin_has_it():
    """k8s-device-plugin internal/rm/health.go ignores 13, 31, 43, 45, 68 and 109 for GPU health."""
    dcgm = catalogue.load()["dcgm"]
    assert 109 not in dcgm.xids("drain")
    assert set(dcgm.xids("application")) == {13, 31, 43, 45, 68, 109}


def test_the_last_value_never_shows_a_code_overwritten_within_one_scrape(overwritten):
    step = overwritten.window.step
    codes = {labels["err_code"] for labels, _ in _xid_series(overwritten, "xid")}
    hero = next(n for n in overwritten.cluster.nodes if n.index == overwritten.cluster.roles.hero[0])
    on_hero = [labels["err_code"] for labels, _ in _xid_series(overwritten, "xid") if hero.name in labels.values()]
    assert on_hero == [FOLLOW_ON], f"the last-value field shows {on_hero}, dcgm-exporter only the follow-on"
    assert DRAIN not in codes
    count_series = [
        (labels, values) for labels, values in _xid_series(overwritten, "xid_count") if hero.name in labels.values()
    ]
    counted = {labels.get("xid"): values for labels, values in count_series}
    window = int(count_series[0][0]["window_size_in_ms"]) // 1000 // step
    first = START // step
    # Both codes counted from the scrape of the Xids for one window, then gone: no series kept at 0.
    for code in (DRAIN, FOLLOW_ON):
        present = [i for i, v in enumerate(counted[code]) if v is not None]
        assert present == list(range(first, first + window)), code
        assert {counted[code][i] for i in present} == {1}
    # The series without `xid`, value 0, exactly while no Xid is in the window.
    assert [i for i, v in enumerate(counted[None]) if v is not None] == [
        i for i in range(len(counted[None])) if not first <= i < first + window
    ]
    assert {v for v in counted[None] if v is not None} == {0}


@pytest.mark.parametrize(
    ("alert", "firing"),
    [
        pytest.param("GpuXidDrainClass", [DRAIN], id="the drain alert pages with the code the last value never showed"),
        pytest.param("GpuXidApplicationClass", [], id="the job's owner is not told about the follow-on 45"),
    ],
)
def test_a_drain_xid_seen_only_by_the_count_collector(overwritten, generated, tmp_path, alert, firing):
    """The simulated exporter's series (Xid 48 then 45 in one scrape, on a GPU running the hero job) through the
    built alert in promtool, once its `for` has elapsed."""
    dcgm = overwritten.sources["dcgm"]
    series = overwritten.input_series({dcgm.name(s, v) for s in ("xid", "xid_count") for v in dcgm.versions})
    result = firing_over_simulated(
        generated, tmp_path, TEST_FILES, alert, overwritten, series, "err_code", START + 240, firing
    )
    assert result.ok, result.output


def test_a_drain_xid_is_read_from_the_last_value_and_the_count_collector(config):
    expr = Context(config).xids_reported((48,), keep=("err_code",))
    dcgm = Context(config).sources["dcgm"]
    assert dcgm.name("xid", dcgm.versions[0]) in expr
    assert dcgm.name("xid_count", dcgm.versions[0]) in expr
