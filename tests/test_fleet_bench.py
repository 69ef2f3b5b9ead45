"""The fleet benchmark's smoke run (`benchmarks/fleet.py --quick`): a small simulated fleet on a real
Prometheus, every dashboard loaded as Grafana loads it. Only the direction of the costs is checked, never a
time: recording rules make each dashboard cheaper than the same panels on raw series, the GPU cluster
dashboard is cheaper than NVIDIA's (grafana.com 12239) on the same fleet, and no dashboard's cost is one
query's. docs/benchmarks.md ("Fleet scale") has the numbers at 1k-16k GPUs."""

import json
import subprocess
import sys

import pytest

from hpcobs.settings.names import DashboardUid
from tests.conftest import MEASUREMENT, ROOT

HPCOBS = tuple(str(uid) for uid in DashboardUid)
NVIDIA = "nvidia-12239"
# Above this share of a dashboard's samples, one query is the dashboard's cost (the forecast panel was 97%).
ONE_QUERY_SHARE = 0.5


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "results.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"].values()
    return size


def test_recording_rules_make_every_dashboard_cheaper(measured, record_property):
    dashboards = measured["prometheus"]["dashboards"]
    assert set(dashboards) == {*HPCOBS, NVIDIA}
    costs = {uid: (dashboards[uid]["a"]["samples"], dashboards[uid]["b"]["samples"]) for uid in HPCOBS}
    record_property(
        MEASUREMENT,
        f"fleet --quick ({measured['gpus']} GPUs): samples per load, hpcobs / without records: "
        + ", ".join(f"{uid.removeprefix('hpcobs-')} {own:,} / {raw:,}" for uid, (own, raw) in costs.items())
        + f"; NVIDIA 12239 {dashboards[NVIDIA]['c']['samples']:,}",
    )
    assert all(own < raw for own, raw in costs.values()), costs


def test_the_gpu_cluster_dashboard_is_cheaper_than_nvidias(measured):
    dashboards = measured["prometheus"]["dashboards"]
    assert dashboards["hpcobs-gpu-cluster"]["a"]["samples"] < dashboards[NVIDIA]["c"]["samples"]
    assert dashboards["hpcobs-gpu-cluster"]["a"]["series"] < dashboards[NVIDIA]["c"]["series"]


def test_no_dashboard_is_one_query(measured):
    heavy = {}
    for uid in HPCOBS:
        own = measured["prometheus"]["dashboards"][uid]["a"]
        top = max(own["per_query"], key=lambda query: query["samples"])
        if own["samples"] and top["samples"] > ONE_QUERY_SHARE * own["samples"]:
            heavy[uid] = f"{top['panel']}: {top['samples']:,} of {own['samples']:,}"
    assert not heavy, heavy


def test_without_records_the_panels_show_the_same(measured):
    """The raw variant is the same dashboard: each query returns series exactly where the recorded one does
    (counts differ only where backfilled records linger without staleness markers)."""
    differ = []
    for uid in HPCOBS:
        pair = measured["prometheus"]["dashboards"][uid]
        for own, raw in zip(pair["a"]["per_query"], pair["b"]["per_query"]):
            if bool(own["series_returned"]) != bool(raw["series_returned"]):
                differ.append(f"{uid} / {own['panel']}: {own['series_returned']} vs {raw['series_returned']}")
    assert not differ, differ


def test_every_rule_group_was_measured(measured):
    groups = measured["prometheus"]["rule_queries"]
    assert groups and all(group["rules"] and group["interval"] > 0 for group in groups.values())


def _size(gpus: int, gpu_cluster: int, nvidia: int, network_before: int, slowest_seconds: float) -> dict:
    def load(samples: int) -> dict:
        return {"samples": samples}

    dashboards = {uid: {"a": load(1000), "b": load(10**9)} for uid in HPCOBS}
    dashboards["hpcobs-gpu-cluster"]["a"] = load(gpu_cluster)
    dashboards["hpcobs-network-storage"]["0"] = load(network_before)
    dashboards[NVIDIA] = {"c": load(nvidia)}
    groups = {"slow": {"seconds": slowest_seconds, "interval": 30}, "fast": {"seconds": 0.01, "interval": 30}}
    return {"gpus": gpus, "range_hours": 6, "prometheus": {"dashboards": dashboards, "live_rules": {"groups": groups}}}


def test_goals_are_judged_per_size_and_extrapolated_from_the_two_largest():
    """The report's goal table (benchmarks/fleet.py goal_lines): each quantity extrapolated on the line through
    the two largest sizes, then judged; 12239 growing with the GPUs and the GPU cluster dashboard with the nodes
    and jobs, the ratio crosses 50x between the sizes measured and 16,384."""
    fleet = _fleet_module()
    results = {
        "sizes": {
            "1024": _size(1024, 200_000, 5_000_000, 100_000_000, 0.6),
            "2048": _size(2048, 250_000, 10_000_000, 200_000_000, 0.9),
        }
    }
    lines = fleet.goal_lines(results)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert lines[0].endswith("| 16,384 GPUs (extrapolated) |")
    # 12239: 5 M + 5 M per 1,024 GPUs -> 80 M at 16,384; hpcobs: 250 k + 50 k per 1,024 GPUs -> 950 k.
    assert rows["GPU cluster: 12239 (c) / hpcobs (a) samples"].endswith(
        "| 25.0x (NOT met) | 40.0x (NOT met) | 84.2x (met) |"
    )
    # The slowest group: 0.9 s + 0.3 s per 1,024 GPUs -> 5.1 s of 30 s at 16,384.
    assert rows["slowest rule group, share of its interval"].endswith("| 2.0% (met) | 3.0% (met) | 17.0% (NOT met) |")
    growth = {
        line.split(" | ")[0].lstrip("| ") + line.split(" | ")[1]: line for line in fleet.growth_lines(results)[2:]
    }
    assert growth["nvidia-12239(c)"].endswith("| x2.00 | 1.00 |")
    assert growth["hpcobs-gpu-cluster(a)"].endswith("| x1.25 | 0.32 |")


def test_rules_only_replaces_the_rule_groups_and_keeps_the_dashboards():
    """`--rules-only` after a rule change: the rule groups of the new run, the dashboards of the full run, and
    the report says which run measured what."""
    fleet = _fleet_module()
    earlier = _size(1024, 200_000, 5_000_000, 100_000_000, 0.6)
    again = {"slow": {"seconds": 0.3, "interval": 30}}
    measured = {
        "date": "2026-12-04",
        "elapsed": 840.0,
        "phases": [["live rule evaluation", 120.0]],
        "prometheus": {"live_rules": {"groups": again}, "rule_queries": {"slow": {"seconds": 0.2, "interval": 30}}},
    }
    merged = fleet.with_rules_of(earlier, measured)
    assert merged["prometheus"]["dashboards"] == earlier["prometheus"]["dashboards"]
    assert merged["prometheus"]["live_rules"]["groups"] == again
    assert earlier["prometheus"]["live_rules"]["groups"]["slow"]["seconds"] == 0.6
    assert "(2026-12-04, --rules-only" in fleet._remeasured_note(merged)
    assert fleet._goal_values(merged)["slowest_group"] == 0.01


def test_rules_only_refuses_a_size_never_measured_in_full(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fleet.py"), "--rules-only", "--sizes", "1024"]
        + ["--out", str(tmp_path / "none.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "run [1024] in full first" in done.stderr, done.stderr


def _fleet_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fleet", ROOT / "benchmarks" / "fleet.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
