"""A change of what a training job does is not a fault: in real Prometheus, on the simulated cluster, an evaluation
pass (its NCCL buckets change, no collective is slower) leaves TrainingNcclCollectiveSlow silent, and a long
checkpoint still writing leaves TrainingHang silent, where the rules before them (a mean over NCCL buckets; no step
for training_hang_for, whatever the job writes) fired. The faults that must fire them are in test_alerts_live.py.
"""

import dataclasses

import pytest

from hpcobs.authoring.context import Context
from tests.live.test_alerts_live import STEP, alerts_of, firing, loaded_prometheus

# After a whole baseline window (training_baseline_window, 1h) of training; the checkpoint lasts longer than
# training_hang_for (10m) and shorter than it plus training_checkpoint_window (20m).
SCENARIOS = "evaluation_pass:start=70m:duration=8m,checkpoint_long:start=90m:duration=25m"


@pytest.fixture(scope="module")
def changes(config, tmp_path_factory, prometheus_factory):
    return loaded_prometheus(config, SCENARIOS, tmp_path_factory.mktemp("changes"), prometheus_factory)


def _alert(config, name):
    return next(a for a in alerts_of(config) if a.alert == name)


def _old_nccl_rule(ctx: Context) -> str:
    """TrainingNcclCollectiveSlow as it was: the job's mean time of a collective over every bucket and communicator."""
    t = ctx.thresholds
    mean = ctx.select("nccl_inspector", ["coll_exec_time"], ("hpc_job", "collective"), op="avg")
    window = t.training_baseline_window
    return f"{mean} > {t.training_nccl_slowdown_factor} * quantile_over_time(0.5, ({mean})[{window}:{STEP}s])"


@pytest.mark.live
def test_an_evaluation_pass_is_no_nccl_slowdown(config, changes):
    prometheus, start, end = changes
    alert = _alert(config, "TrainingNcclCollectiveSlow")
    assert not firing(prometheus, alert, start, end)
    # The same data read as before: AllGather's mean over its buckets, 4x, paged.
    old = firing(prometheus, dataclasses.replace(alert, expr=_old_nccl_rule(Context(config))), start, end)
    assert {labels["collective"] for labels in old} == {"AllGather"}, old


@pytest.mark.live
def test_a_long_checkpoint_still_writing_is_no_hang(config, changes):
    prometheus, start, end = changes
    alert = _alert(config, "TrainingHang")
    assert not firing(prometheus, alert, start, end)
    cluster = Context(config).cluster
    old = f"job:gpus_allocated:count > 0 and on ({cluster}, hpc_job) job:training_steps:rate == 0"
    assert firing(prometheus, dataclasses.replace(alert, expr=old), start, end)
