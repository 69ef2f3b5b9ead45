"""GPU fleet signals (issue 26, missing signals, and point 13's hostname label family): the simulated exporter's
series through the built fleet alerts in promtool, their routing, and the host label of the 4.5.x images."""

import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.build import tools
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import Simulation
from hpcobs.proof.simulate.scenarios import OLD_DRIVER
from hpcobs.settings import config as config_module
from tests.conftest import firing_over_simulated

TEST_FILES = "prometheus/tests/gpu/"
START = 600  # seconds: every scenario starts at 10m


def _fires(config, generated, tmp_path, alert, scenario, hours, signals, at, entity, nodes=3):
    """Whether the built alert fires at `at` seconds, exactly on the scenario's `entity` (its node, or the driver it
    runs for the cluster-level GpuDriverDrift), over the simulated series of `signals` of a small cluster running
    `scenario` from START on."""
    sim = Simulation(config, nodes=nodes, gpus_per_node=2, hours=hours, scenarios=f"{scenario}:start=10m", seed=2)
    dcgm = sim.sources["dcgm"]
    series = sim.input_series({dcgm.name(s, v) for s in signals for v in dcgm.versions})
    expected = FAULTY[entity](sim)
    return firing_over_simulated(generated, tmp_path, TEST_FILES, alert, sim, series, entity, at, expected)


def sim_target(sim):
    return [fault.target["node"] for fault in sim.faults.faults if "node" in fault.target]


FAULTY = {"node": sim_target, "driver": lambda sim: [OLD_DRIVER]}  # the label an alert fires on -> its values


@pytest.mark.parametrize(
    ("alert", "scenario", "signals", "after", "entity"),
    [
        ("GpuFabricNotReady", "fabric_not_ready", ("fabric_manager_status",), "gpu_fabric_not_ready_for", "node"),
        ("GpuEccDisabled", "ecc_disabled", ("ecc_mode", "ecc_pending"), None, "node"),
        ("ExporterDcgmValuesFrozen", "dcgm_values_frozen", ("energy",), "gpu_values_frozen_window", "node"),
        ("GpuDriverDrift", "driver_drift", ("gpu_utilization",), "gpu_driver_drift_for", "driver"),
    ],
)
def test_each_simulated_fault_fires_its_fleet_alert_in_promtool(
    config, generated, tmp_path, alert, scenario, signals, after, entity
):
    """The simulator's emulation of the exporter (fabric state, pending ECC mode, frozen output, another driver
    label) through the built rule and the records it reads, on the scenario's node only, once its threshold has
    passed."""
    thresholds = Context(config).thresholds
    wait = duration_seconds(getattr(thresholds, after)) if after else 60
    at = START + wait + 180
    result = _fires(config, generated, tmp_path, alert, scenario, (at + 600) / 3600, signals, at, entity)
    assert result.ok, result.output


def test_routing_of_the_fleet_alerts(generated_tree):
    """The fabric page reaches gpu-ops' pager; the drift and frozen-values warnings gpu-ops alone."""
    am = generated_tree / "alertmanager/alertmanager.yml"
    page = {"alertname": "GpuFabricNotReady", "team": "gpu-ops", "severity": "critical", "node": "n1"}
    assert tools.routes_test(am, page, ["gpu-ops-pager", "gpu-ops"]).ok
    for alert in ("GpuEccDisabled", "GpuDriverDrift", "ExporterDcgmValuesFrozen"):
        result = tools.routes_test(am, {"alertname": alert, "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"])
        assert result.ok, result.output


def test_exporter_dcgm_down_inhibits_the_fleet_alerts_that_read_dcgm_only(generated):
    """A node whose dcgm-exporter is down has no fabric, ECC or energy values: ExporterDcgmDown explains them."""
    inhibitions = yaml.safe_load(generated["alertmanager/alertmanager.yml"])["inhibit_rules"]
    down = next(rule for rule in inhibitions if rule["source_matchers"] == ['alertname="ExporterDcgmDown"'])
    for alert in ("GpuFabricNotReady", "GpuEccDisabled", "ExporterDcgmValuesFrozen"):
        assert alert in down["target_matchers"][0]


@pytest.mark.parametrize(
    ("release", "host_label"),
    [
        ("4.5.1-4.8.0", "Hostname"),
        ("4.5.2-4.8.1", "Hostname"),
        ("4.5.3-4.8.2", "Hostname"),
        ("4.5.3-4.8.2-ubuntu22.04", "Hostname"),
        ("4.5", "Hostname"),  # DCGM 4.5.x: the 4.5.x images
        ("4.6.0-4.8.3", "hostname"),  # the first release with PR 655
        ("4.8.4", "hostname"),
    ],
)
def test_the_4_5_images_keep_the_hostname_label_hostname_renames_after(tmp_path, release, host_label):
    """dcgm-exporter's render_metrics.go writes `Hostname` up to tag 4.5.3-4.8.2 and `hostname` from d5e5f510 (PR 655,
    released in 4.6.0-4.8.3): a site naming its 4.5.x image reads the node from `Hostname`, and nothing else."""
    site = tmp_path / "site.yaml"
    site.write_text(f'exporters:\n  dcgm:\n    versions: ["{release}"]\n', encoding="utf-8")
    expr = Context(config_module.load(site)).gpu("utilization")
    other = {"Hostname": "hostname", "hostname": "Hostname"}[host_label]
    assert f'"{host_label}"' in expr and f'"{other}"' not in expr
