"""Alerts on the simulated cluster in real Prometheus: each fault scenario fires the alerts that declare
it (`fired_by`), and a healthy cluster fires none.

The recording rules are replayed layer by layer; an alert counts as firing when its expression returns
the same series at every evaluation for its whole `for:` (what the rule manager does).
"""

from collections import defaultdict

import pytest

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import pipeline
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import Simulation, write
from hpcobs.proof.workload import recording_layer_files
from tests.live.conftest import raw_names_read

HOURS = 2.5
STEP = 30
SEED = 5


def all_groups(config):
    return [g for gs in pipeline.rule_groups(Context(config)).values() for g in gs]


def alerts_of(config):
    return [r for g in all_groups(config) for r in g.rules if isinstance(r, Alert)]


def loaded_prometheus(config, scenarios, folder, prometheus_factory):
    """Prometheus with the simulated history of the metrics the rules read and every record replayed."""
    groups = all_groups(config)
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=HOURS, scenarios=scenarios, seed=SEED)
    history = folder / "cluster.om"
    with open(history, "w") as out:
        write(sim, "openmetrics", out, names=raw_names_read(config, groups) | {"up"})
    layer_files = recording_layer_files(groups, folder)
    start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
    prometheus = prometheus_factory(openmetrics=history, lookback_delta=f"{STEP * 3 // 2}s")
    prometheus.replay_rules(layer_files, start, end, f"{STEP}s")
    return prometheus, start, end


def firing(prometheus, alert: Alert, start: float, end: float) -> list[dict]:
    """Label sets for which the alert's expression held for its whole `for:` at some point."""
    needed = duration_seconds(alert.for_) // STEP if alert.for_ else 0
    out = []
    for series in prometheus.query_range(alert.expr, start, end, STEP):
        run, last = 0, None
        for t, _ in series.points:
            run = run + 1 if last is not None and t - last == STEP else 1
            last = t
            if run > needed:
                out.append(series.labels)
                break
    return out


@pytest.fixture(scope="module")
def faults_prometheus(config, tmp_path_factory, prometheus_factory):
    scenarios = sorted({s for a in alerts_of(config) for s in a.fired_by})
    return scenarios, *loaded_prometheus(
        config, _schedule(scenarios), tmp_path_factory.mktemp("faults"), prometheus_factory
    )


def _schedule(scenarios: list[str]) -> str:
    """Faults of the hero training job take turns, as in tests/live/test_scenarios.py."""
    from tests.live.test_scenarios import HERO_JOB_SLOTS

    return ",".join(f"{s}:{HERO_JOB_SLOTS[s]}" if s in HERO_JOB_SLOTS else s for s in scenarios)


@pytest.mark.live
def test_every_fault_fires_its_alerts(config, faults_prometheus):
    scenarios, prometheus, start, end = faults_prometheus
    expected = defaultdict(list)
    for alert in alerts_of(config):
        for scenario in alert.fired_by:
            expected[scenario].append(alert)
    silent = [
        f"{a.alert} (scenario {s})"
        for s, alerts in expected.items()
        for a in alerts
        if not firing(prometheus, a, start, end)
    ]
    assert not silent, f"alerts that did not fire on their scenario: {silent}"
    assert len(expected) >= 15


@pytest.mark.live
def test_a_healthy_cluster_fires_no_alert(config, tmp_path_factory, prometheus_factory):
    prometheus, start, end = loaded_prometheus(
        config, "healthy", tmp_path_factory.mktemp("healthy"), prometheus_factory
    )
    fired = {a.alert: firing(prometheus, a, start, end)[:2] for a in alerts_of(config) if a.severity != "info"}
    fired = {name: labels for name, labels in fired.items() if labels}
    assert not fired, f"alerts firing on a healthy cluster: {fired}"
