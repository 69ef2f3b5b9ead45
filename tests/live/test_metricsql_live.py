"""Every rule through VictoriaMetrics (vmalert's replay, MetricsQL) and through Prometheus, on the same simulated
faults cluster: each record's series and each alert's firing label sets must agree, except for the differences
ALLOWED lists (docs/scale-out.md, MetricsQL differences, explains each), within their bounds. A new difference
fails the test.

Both servers get the same raw history and the same lookback; Prometheus replays the recording layers through range
queries at exactly the instants vmalert's replay evaluates (Prometheus.replay_rules), and the samples each one
stored are compared at every evaluation. An alert fires for a label set where its expression returned it at every
evaluation of its `for:`, counted the same way on both.
"""

import math
from collections import defaultdict
from dataclasses import dataclass

import pytest

from hpcobs.authoring.rules import Alert, Record
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import Simulation, write
from hpcobs.proof.workload import recording_layer_files
from tests.live.conftest import raw_names_read
from tests.live.test_alerts_live import _schedule, all_groups, firing

HOURS = 2.5
STEP = 30
SEED = 5
# Two values are the same when within REL_TOL of each other or ABS_TOL apart: VictoriaMetrics stores about 12
# significant decimal digits and the engines add floats in their own order; anything beyond a part per million is a
# difference.
REL_TOL = 1e-6
ABS_TOL = 1e-9
RATE_WINDOW = 120  # the rules' rate() window, 2m


@dataclass(frozen=True)
class Difference:
    """Why both engines' answers are acceptable where they differ, and for how many evaluations in a row a series
    may differ for that reason."""

    why: str
    evaluations: int


COUNTER_EDGE = Difference(
    "rate() over a window holding a counter's first or last sample: Prometheus extrapolates towards the window's "
    "edges and divides by the window, MetricsQL takes the increase from the sample before the window over the time "
    "the samples cover, and still answers 0 for a window left with only that sample",
    RATE_WINDOW // STEP + 1,
)
WINDOW_START = Difference(
    "a sample exactly at the start of a range window: Prometheus 2.42 counts it, MetricsQL does not (Prometheus 3 "
    "does not either), so a 1h condition holds one evaluation earlier on VictoriaMetrics",
    1,
)
ONE_SAMPLE_FORECAST = Difference(
    "predict_linear() over a single sample: MetricsQL answers (a flat forecast, the current value), Prometheus needs "
    "two samples; only a series' first evaluation has one",
    1,
)
TOPK_TIE = Difference("topk() between ranks with the same excess or step time: each engine keeps a different rank", 1)

_RATES = (
    "account:gpu_power:watts",
    "cluster:ib_receive_bytes_per_node:quantile",
    "cluster:ib_transmit_bytes:rate",
    "cluster:ib_transmit_bytes_per_node:quantile",
    "cluster:ib_transmit_wait_per_node:quantile",
    "fs:lustre_read_bytes:rate",
    "fs:lustre_write_bytes:rate",
    "fs:nfs_read_bytes:rate",
    "fs:nfs_write_bytes:rate",
    "job:gpu_power:watts",
    "job:lustre_read_bytes:rate",
    "job:lustre_write_bytes:rate",
    "job:training_model_flops:rate",
    "job:training_phase_seconds:median",
    "job:training_straggler_rank:phase_seconds",
    "job:training_step_seconds:max",
    "job:training_step_seconds:median",
    "job:training_step_seconds:min",
    "job:training_steps:rate",
    "job:training_straggler:ratio",
    "job:training_tokens:rate",
    "node:ib_receive_bytes:rate",
    "node:ib_receive_errors:rate",
    "node:ib_symbol_errors:rate",
    "node:ib_transmit_bytes:rate",
    "node:ib_transmit_discards:rate",
    "node:ib_transmit_wait:rate",
    "node:nfs_retransmissions:rate",
    "partition:gpu_power:watts",
)
# Record -> the differences it may show on this cluster. Any other record must agree at every evaluation.
ALLOWED: dict[str, tuple[Difference, ...]] = {
    **{record: (COUNTER_EDGE,) for record in _RATES},
    "job:training_straggler_rank:excess_seconds": (COUNTER_EDGE, TOPK_TIE),
    "job:training_straggler_rank:step_seconds": (COUNTER_EDGE, TOPK_TIE),
    "job:gpus_allocated_idle:count": (WINDOW_START,),
    "node:gpus_allocated_idle:count": (WINDOW_START,),
    "node:gpus_allocated_idle_by_job:count": (WINDOW_START,),
    "node:filesystem_used_forecast:ratio": (ONE_SAMPLE_FORECAST,),
    "fs:lustre_used_forecast:ratio": (ONE_SAMPLE_FORECAST,),
}


def labels_key(labels: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


@pytest.fixture(scope="module")
def loaded(config, tmp_path_factory, prometheus_factory, victoria_factory):
    """The faults cluster of the alerts' live test in both servers, every recording layer replayed on both."""
    folder = tmp_path_factory.mktemp("metricsql")
    groups = all_groups(config)
    scenarios = sorted({s for g in groups for r in g.rules if isinstance(r, Alert) for s in r.fired_by})
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=HOURS, scenarios=_schedule(scenarios), seed=SEED)
    names = raw_names_read(config, groups) | {"up"}
    openmetrics, jsonl = folder / "cluster.om", folder / "cluster.jsonl"
    with open(openmetrics, "w") as out:
        write(sim, "openmetrics", out, names=names)
    with open(jsonl, "w") as out:
        write(sim, "vm", out, names=names)
    layer_files = recording_layer_files(groups, folder)
    start, end = sim.window.start, sim.window.start + sim.window.duration - STEP
    # Backfilled history has no staleness markers; a lookback of 1.5 scrape intervals gives Prometheus the view a
    # live server's markers give. VictoriaMetrics gets the same lookback, as the central store must (docs/scale-out.md,
    # MetricsQL differences): left to infer it from the gaps between samples, it reads a record that comes and goes
    # as always there.
    lookback = f"{STEP * 3 // 2}s"
    prometheus = prometheus_factory(openmetrics=openmetrics, lookback_delta=lookback)
    prometheus.replay_rules(layer_files, start, end, f"{STEP}s")
    victoria = victoria_factory(jsonl=jsonl, lookback_delta=lookback)
    victoria.backfill_rules(layer_files, start, end, f"{STEP}s")
    return groups, prometheus, victoria, start, end


def recorded(server, record: str, start: float, end: float) -> dict[tuple, dict[float, float]]:
    """Each series' recorded samples, at every evaluation of the replay."""
    return {labels_key(s.labels): dict(s.points) for s in server.stored(record, start - 1, end)}


def differing(ours: dict[float, float], theirs: dict[float, float]) -> list[float]:
    return [
        t
        for t in sorted(set(ours) | set(theirs))
        if t not in ours or t not in theirs or not math.isclose(ours[t], theirs[t], rel_tol=REL_TOL, abs_tol=ABS_TOL)
    ]


def longest_run(instants: list[float]) -> int:
    """The most consecutive evaluations among these instants."""
    longest = run = 0
    for previous, t in zip([None, *instants], instants, strict=False):
        run = run + 1 if previous is not None and t - previous == STEP else 1
        longest = max(longest, run)
    return longest


@pytest.mark.live
def test_every_record_has_the_same_series_and_values_on_both_engines(loaded):
    groups, prometheus, victoria, start, end = loaded
    records = sorted({r.record for g in groups for r in g.rules if isinstance(r, Record)})
    compared, differed, new = 0, defaultdict(int), []
    for record in records:
        ours, theirs = recorded(prometheus, record, start, end), recorded(victoria, record, start, end)
        bound = max((d.evaluations for d in ALLOWED.get(record, ())), default=0)
        for labels in sorted(set(ours) | set(theirs)):
            mine, other = ours.get(labels, {}), theirs.get(labels, {})
            compared += len(set(mine) | set(other))
            instants = differing(mine, other)
            if longest_run(instants) > bound:
                t = instants[0]
                new.append(
                    f"{record}{dict(labels)}: {len(instants)} evaluations differ (allowed {bound} in a row), first "
                    f"+{t - start:.0f}s: Prometheus {mine.get(t)}, VictoriaMetrics {other.get(t)}"
                )
            if instants:
                differed[record] += len(instants)
    print(f"compared {compared} samples of {len(records)} records; evaluations that differ (allowed): {dict(differed)}")
    assert compared > 100_000
    assert not new, (
        "new differences (explain them in docs/scale-out.md, MetricsQL differences and ALLOWED, or fix the rule):\n"
        + "\n".join(new[:30])
    )


def held_at_instants(server, alert: Alert, instants: set[float], start: float, end: float) -> set[tuple]:
    """The label sets `alert` fires for when evaluated by instant queries, as vmalert does live (`firing`'s counting).
    Asked only at `instants`, where the range answer returned anything: a range evaluation adds label sets, it was
    not seen to drop any."""
    needed = duration_seconds(alert.for_) // STEP if alert.for_ else 0
    runs: dict[tuple, int] = defaultdict(int)
    fired = set()
    t = start
    while t <= end:
        present = {labels_key(s.labels) for s in server.query(alert.expr, t)} if t in instants else set()
        for key in list(runs):
            if key not in present:
                del runs[key]
        for key in present:
            runs[key] += 1
            if runs[key] > needed:
                fired.add(key)
        t += STEP
    return fired


@pytest.mark.live
def test_every_alert_fires_for_the_same_label_sets_on_both_engines(loaded):
    """Compared by range queries; where VictoriaMetrics' range answer differs, its instant answers (what a live
    vmalert asks) must agree: MetricsQL's `or` fills every left-hand series of a group over a range, so a range
    evaluation may return a label set no instant does (docs/scale-out.md, MetricsQL differences)."""
    groups, prometheus, victoria, start, end = loaded
    alerts = [r for g in groups for r in g.rules if isinstance(r, Alert)]
    differences, range_only = [], []
    for alert in alerts:
        ours = {labels_key(labels) for labels in firing(prometheus, alert, start, end)}
        theirs = {labels_key(labels) for labels in firing(victoria, alert, start, end)}
        if ours == theirs:
            continue
        returned = {t for s in victoria.query_range(alert.expr, start, end, STEP) for t, _ in s.points}
        if held_at_instants(victoria, alert, returned, start, end) == ours:
            range_only.append(alert.alert)
            continue
        differences.append(
            f"{alert.alert}: only Prometheus {sorted(ours - theirs)}, only VictoriaMetrics {sorted(theirs - ours)}"
        )
    print(f"{len(alerts)} alerts compared; differing only in a range evaluation: {range_only}")
    assert not differences, "\n".join(differences)
