"""The fleet benchmark's central ruler (benchmarks/fleet.py, issue 32): vmalert's per-cycle evaluation times read
from its /metrics, and the results of a --central-only run merged into a size's full run. The live measurement
itself runs in the benchmark (docs/benchmarks.md, "Central ruler")."""

import pytest

from tests.test_fleet_bench import _fleet_module

GROUP = 'group="hpcobs-gpu-node", file="rules/gpu.rules.yaml"'


def _metrics(cycles: int, seconds: float) -> str:
    """vmalert 1.79's /metrics lines of one group after `cycles` cycles taking `seconds` in all."""
    return "\n".join(
        [
            f"vmalert_iteration_duration_seconds_sum{{{GROUP}}} {seconds}",
            f"vmalert_iteration_duration_seconds_count{{{GROUP}}} {cycles}",
            f'vmalert_iteration_duration_seconds{{{GROUP},quantile="0.5"}} 9',
            f"vmalert_iteration_missed_total{{{GROUP}}} 0",
            f"vmalert_iteration_interval_seconds{{{GROUP}}} 30",
            "vmalert_execution_total 12",
        ]
    )


def test_each_cycle_is_timed_from_the_summary_sum_and_count():
    """Not from the quantiles, which vmalert refreshes only now and then (the 9 above is stale)."""
    fleet = _fleet_module()
    cycles = fleet.CycleTimes()
    for count, total in ((1, 0.5), (1, 0.5), (2, 0.7), (3, 1.0), (5, 1.2)):
        cycles.add(_metrics(count, total))
    (group,) = cycles.groups().values()
    assert cycles.seconds["hpcobs-gpu-node"] == pytest.approx([0.5, 0.2, 0.3, 0.1, 0.1])
    assert group == pytest.approx({"interval": 30, "cycles": 5, "missed": 0, "seconds": 0.2, "max_seconds": 0.5})


def test_central_only_adds_the_central_ruler_and_keeps_the_full_run():
    fleet = _fleet_module()
    groups = {"hpcobs-gpu-node": {"interval": 30, "cycles": 4, "missed": 0, "seconds": 3.0, "max_seconds": 4.0}}

    def used(cores: float) -> dict:
        return {
            "cpu_seconds": 120 * cores,
            "wall_seconds": 120,
            "cores": cores,
            "memory_mib": {"VmRSS": 50, "VmHWM": 60},
        }

    earlier = {
        "gpus": 1024,
        "victoriametrics": {"memory_mib": {"VmRSS": 320}},
        "prometheus": {"live_rules": {"groups": {"hpcobs-gpu-node": {"seconds": 1.5, "interval": 30}}}},
    }
    central = {
        "groups": groups,
        "resources": {"vmalert": used(0.1), "victoriametrics": used(0.5)},
        "victoriametrics_before": used(0.05),
    }
    run = {"date": "2026-12-05", "elapsed": 300.0, "phases": [["central ruler live (vmalert)", 150.0]]}
    merged = fleet.with_central_of(earlier, {**run, "central": central, "prometheus": "not kept"})
    assert merged["prometheus"] == earlier["prometheus"] and merged["victoriametrics"] == earlier["victoriametrics"]
    assert merged["central"]["run"] == run
    (row,) = fleet.central_summary({"sizes": {"1024": merged}})[2:]
    assert row.startswith("| 1,024 | 1.50 / 3.00 | hpcobs-gpu-node: 10.0% | - / 0.10 (12 s) / 0.50 (60 s) | 0.05 |")
