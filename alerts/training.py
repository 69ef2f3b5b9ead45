"""Training alerts, on the per-job records of recording_rules/training.py.

Each job is compared with itself (its own best step time, its own recent collective time and
throughput), never with a fleet-wide constant: models, batch sizes and scales differ too much.
A job's own symptoms (straggler, hang, regression, throughput) go to its owner (team job-owner);
slow NCCL collectives are usually the fabric or the NCCL setup, so they go to ml-platform
(docs/runbooks/training.md says why).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, partial

from hpcobs.authoring.alert_cases import Timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Sample, Series, alert
from hpcobs.authoring.synthetic import (
    JOB_OWNER,
    gpu_utilization,
    job_info,
    nccl_collective,
    phase_counters,
    series,
)
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

OWNER = tuple(JOB_OWNER)
TOKENS_PER_STEP = 750  # per rank

THRESHOLDS = (
    declare.fraction(
        "training_straggler_ratio",
        0.75,
        "Straggler ratio below which a job has a straggler, TrainingStraggler (nvidia-resiliency-ext's straggler "
        "score threshold): median rank step time / slowest rank step time, or 1 - the straggler's excess over the "
        "median rank (seconds per step, over its phases) / the job's step time when lower.",
    ),
    declare.duration("training_straggler_for", "10m", "How long a straggler must persist before TrainingStraggler."),
    declare.factor(
        "training_step_time_regression_factor",
        1.5,
        "Median step time above this multiple of the job's own best over training_step_time_baseline_window "
        "(TrainingStepTimeRegression).",
    ),
    declare.duration(
        "training_step_time_baseline_window",
        "6h",
        "Window of the job's own best median step time (TrainingStepTimeRegression).",
    ),
    declare.duration(
        "training_step_time_regression_for",
        "15m",
        "How long a step time regression must last before TrainingStepTimeRegression.",
    ),
    declare.duration(
        "training_hang_for",
        "10m",
        "How long a job holding GPUs may make no step before TrainingHang (PyTorch's NCCL watchdog default).",
    ),
    declare.duration(
        "training_checkpoint_window",
        "20m",
        "How long after its steps stopped a job that keeps writing to Lustre at "
        "storage_checkpoint_stalled_bytes_per_second or more is taken to be writing a checkpoint, not hanging "
        "(TrainingHang fires training_hang_for after it): a large model's checkpoint with its optimizer state is "
        "terabytes, 10-20 min at a few GB/s.",
    ),
    declare.factor(
        "training_nccl_slowdown_factor",
        3,
        "Mean collective time of a group of like collectives (collective, message-size bucket, communicator shape) "
        "above this multiple of the group's own median over training_baseline_window (TrainingNcclCollectiveSlow).",
    ),
    declare.duration(
        "training_baseline_window",
        "1h",
        "Window of a job's own recent level for NCCL collective time and throughput (TrainingNcclCollectiveSlow, "
        "TrainingThroughputDrop).",
    ),
    declare.duration(
        "training_nccl_slow_for", "5m", "How long collectives must stay slow before TrainingNcclCollectiveSlow."
    ),
    declare.fraction(
        "training_throughput_drop_ratio",
        0.8,
        "Tokens/s below this fraction of the job's own recent level (90th percentile over training_baseline_window) "
        "is a throughput drop (TrainingThroughputDrop).",
    ),
    declare.duration(
        "training_throughput_drop_for",
        "10m",
        "How long a throughput drop must last before TrainingThroughputDrop (a checkpoint pauses training ~1-2 min).",
    ),
)


def owned(ctx: Context, expr: str) -> str:
    """The job alert `expr` with its owner's labels from the job-info record; a job without job-info
    (prolog broken: ExporterJobInfoMissing's case) still alerts, without them."""
    cluster = ctx.cluster
    return (
        f"({expr}) * on ({cluster}, hpc_job) group_left ({', '.join(OWNER)}) job:slurm_job_info:max "
        f"or on ({cluster}, hpc_job) ({expr})"
    )


def counter(parts: list[tuple[float, int]]) -> str:
    """promtool values of a counter growing by `increment` for `count` scrapes, phase after phase."""
    out, value = [], 0.0
    for i, (increment, count) in enumerate(parts):
        if i == 0:
            out.append(f"0+{increment:.12g}x{count}")
            value = increment * count
        elif count > 0:
            value += increment
            out.append(f"{value:.12g}+{increment:.12g}x{count - 1}")
            value += increment * (count - 1)
    return " ".join(out)


def rank_series(
    ctx: Context,
    step_times: Mapping[tuple[str, str], float | tuple[float, ...]],
    job: str = "42",
    length: int = 40,
    stop_after: int | None = None,
    phases: list[tuple[int, float]] | None = None,
) -> list[Series]:
    """Per-rank training counters of one job. Phases are (scrapes, steps per scrape); a rank's step time is
    one number or one per phase. stop_after: the job makes no step after that many scrapes."""
    if phases is None:
        phases = [(length, 4.0)] if stop_after is None else [(stop_after, 4.0), (length - stop_after, 0.0)]
    out = []
    for (rank, node), seconds in step_times.items():
        times = seconds if isinstance(seconds, tuple) else (seconds,) * len(phases)
        labels = dict(node=node, hpc_job=job, rank=rank)
        out += [
            series(ctx, "training", "steps", counter([(sps, n) for n, sps in phases]), **labels),
            series(
                ctx, "training", "step_seconds", counter([(sps * t, n) for (n, sps), t in zip(phases, times)]), **labels
            ),
            series(ctx, "training", "tokens", counter([(sps * TOKENS_PER_STEP, n) for n, sps in phases]), **labels),
        ]
    return out


def phase_series(
    ctx: Context, phases: dict[tuple[str, str], dict[str, float]], length: int, job: str = "42"
) -> list[Series]:
    """Per-rank phase counters of one job, as rank_series() steps it (4 steps a scrape): each (rank, node)'s seconds
    per step in each phase."""
    return phase_counters(ctx, phases, lambda seconds: counter([(4.0 * seconds, length)]), job)


def groups(ctx: Context) -> list[Group]:
    jobs = _TestJob(ctx)
    rules = [
        _straggler(jobs),
        _step_time_regression(jobs),
        _hang(jobs),
        _nccl_collective_slow(jobs),
        _throughput_drop(jobs),
    ]
    return [Group("hpcobs-training-alerts", domain="training", interval=ctx.evaluation_interval, rules=rules)]


@dataclass(frozen=True)
class _TestJob:
    """Job 42 of JOB_OWNER, that every training case trains."""

    ctx: Context

    @property
    def thresholds(self) -> Thresholds:
        return self.ctx.thresholds

    @cached_property
    def job_alert(self) -> partial[Alert]:
        return alerts_of("training", DashboardUid.TRAINING)

    @property
    def job(self) -> str:
        """The job an alert names, in its description."""
        return f"Job {label('hpc_job')} (user {label('user')}, cluster {label(self.ctx.cluster)})"

    @cached_property
    def info(self) -> list[Series]:
        # The job runs for the whole of every case: longer than two baseline windows and a `for`.
        return [job_info(self.ctx, "42", self.ctx.timeline.held(1, "200m"), job_name="pretrain")]

    def owned(self, **labels: str) -> list[Sample]:
        """The alert on job 42, with its owner's labels."""
        return [alert(**self.ctx.cluster_labels, hpc_job="42", **JOB_OWNER, **labels)]

    def two_ranks(
        self, length: int = 40, stop_after: int | None = None, phases: list[tuple[int, float]] | None = None
    ) -> list[Series]:
        """Ranks 0 on n1 and 1 on n2 at 0.5 s a step, as rank_series() shapes them."""
        return rank_series(
            self.ctx, {("0", "n1"): 0.5, ("1", "n2"): 0.5}, length=length, stop_after=stop_after, phases=phases
        )


# Seconds per step in each phase of a balanced rank of the straggler's cases (0.4 s of its 0.5 s step timed).
BALANCED_PHASES = {"data": 0.05, "forward": 0.1, "backward": 0.15, "comm": 0.1}
RANKS = (("0", "n1"), ("1", "n1"), ("2", "n2"), ("3", "n2"))


def _four_ranks(
    jobs: _TestJob, length: int, slowest: float, slow_phase: str | None = None, lockstep: bool = True
) -> list[Series]:
    """Ranks 0-2 at 0.5 s of work a step and rank 3 at `slowest`. In lockstep (as the training helper times a
    synchronous job) every rank's steps take `slowest` and ranks 0-2 wait its extra time in backward; else each
    rank's take its own. With a slow phase every rank times its phases and rank 3 spends its extra time in it."""
    extra = slowest - 0.5
    step_times = {rank: slowest if lockstep else 0.5 for rank in RANKS[:3]} | {RANKS[3]: slowest}
    phases = {}
    if slow_phase is not None:
        wait = extra if lockstep else 0.0
        waiter = {**BALANCED_PHASES, "backward": BALANCED_PHASES["backward"] + wait}
        phases = dict.fromkeys(RANKS[:3], waiter)
        phases[RANKS[3]] = {**BALANCED_PHASES, slow_phase: BALANCED_PHASES[slow_phase] + extra}
    return rank_series(jobs.ctx, step_times, length=length) + phase_series(jobs.ctx, phases, length) + jobs.info


def _congested(jobs: _TestJob, length: int, factor: float) -> list[Series]:
    """Every rank in lockstep slowed alike, the extra time in its comm phase: a slow fabric, no straggler."""
    step = 0.5 * factor
    phases = {**BALANCED_PHASES, "comm": BALANCED_PHASES["comm"] + step - 0.5}
    return (
        rank_series(jobs.ctx, dict.fromkeys(RANKS, step), length=length)
        + phase_series(jobs.ctx, dict.fromkeys(RANKS, phases), length)
        + jobs.info
    )


def _straggler(jobs: _TestJob) -> Alert:
    ctx, ratio, for_ = jobs.ctx, jobs.thresholds.training_straggler_ratio, jobs.thresholds.training_straggler_for
    cluster = ctx.cluster
    when = timing(ctx, for_, 1)
    length = when.hold // when.step + 20
    four_ranks = partial(_four_ranks, jobs, length)
    straggling = (
        f"job:training_straggler_rank:step_seconds and on ({cluster}, hpc_job) job:training_straggler:ratio < {ratio}"
    )
    # The phase in which the straggler spends the most seconds per step beyond the median rank, when it spends more in
    # any: the phase of its largest excess, the excess that names it.
    excess = (
        f"job:training_straggler_rank:phase_seconds - on ({cluster}, hpc_job, phase) job:training_phase_seconds:median"
    )
    slow_phase = f"topk by ({cluster}, hpc_job) (1, {excess} > 0)"
    # Joined as 1 (`> bool 0`), so that the alert's value stays the straggler's step time.
    fault = round(0.5 / ratio / 0.9, 3)
    above = round(0.5 / ratio * 0.97, 3)
    return jobs.job_alert(
        "TrainingStraggler",
        severity="warning",
        team=Team.JOB_OWNER,
        expr=owned(
            ctx,
            f"({straggling}) * on ({cluster}, hpc_job) group_left (phase) ({slow_phase} > bool 0) "
            f"or on ({cluster}, hpc_job) {straggling}",
        ),
        for_=for_,
        summary="One rank of a training job is much slower than the others.",
        description=f"{jobs.job}: rank {label('rank')} on {label('node')} has held the job back for {for_}: the "
        f"straggler ratio is under {ratio} (the rank's seconds per step beyond the median rank's, summed over its "
        "phases, against the job's step time; or the median rank's step time against the slowest's), and the whole "
        f"job runs at its pace. It is slow in its {label('phase')} phase (the one it exceeds the median rank in the "
        "most; blank when the job times no phase, and a synchronous job that times none shows no straggler): data is "
        "the input pipeline or the filesystem, forward or backward that node's GPUs (clocks, thermals, PCIe), comm "
        "the fabric. Drain the node if it is the hardware.",
        fired_by=("straggler",),
        **standard_cases(
            when,
            fault=f"in lockstep, a straggler just under the {ratio} ratio, slow in its data phase, the others "
            "waiting in backward",
            fault_series=four_ranks(fault, "data"),
            expect=jobs.owned(rank="3", node="n2", phase="data"),
            healthy="balanced ranks",
            healthy_series=four_ranks(0.5, "data"),
            pending=f"straggling for less than {for_}",
            also_fires=[
                when.fires(
                    "slow in its comm phase, the others waiting in backward",
                    four_ranks(fault, "comm"),
                    jobs.owned(rank="3", node="n2", phase="comm"),
                ),
                when.fires(
                    "free-running ranks, slow in data",
                    four_ranks(fault, "data", lockstep=False),
                    jobs.owned(rank="3", node="n2", phase="data"),
                ),
                when.fires(
                    "free-running ranks of a job that times no phase: no phase named",
                    four_ranks(fault, lockstep=False),
                    jobs.owned(rank="3", node="n2"),
                ),
            ],
            also_silent=[
                when.silent(f"in lockstep, a straggler just above the {ratio} ratio", four_ranks(above, "data")),
                when.silent(
                    f"free-running ranks just above the {ratio} ratio", four_ranks(above, "data", lockstep=False)
                ),
                when.silent(
                    "every rank slowed alike in comm (a congested fabric): no straggler",
                    _congested(jobs, length, 2),
                ),
                when.silent(
                    "in lockstep without phases: every rank's step time the same, nothing to see", four_ranks(fault)
                ),
            ],
        ),
    )


def _step_time_regression(jobs: _TestJob) -> Alert:
    ctx, thresholds = jobs.ctx, jobs.thresholds
    factor, baseline, for_ = (
        thresholds.training_step_time_regression_factor,
        thresholds.training_step_time_baseline_window,
        thresholds.training_step_time_regression_for,
    )
    best = 60  # scrapes at the job's best step time, then the step time changes
    # The changed step time dominates the rate window 2 or 3 scrapes after the change.
    when = timing(ctx, for_, best + 3, earliest_scrapes=best + 2)

    def regressed(seconds_after: float) -> list[Series]:
        return (
            rank_series(
                ctx,
                {("0", "n1"): (0.5, seconds_after), ("1", "n2"): (0.5, seconds_after)},
                phases=[(best, 4.0), (when.hold // when.step + 30, 4.0)],
            )
            + jobs.info
        )

    return jobs.job_alert(
        "TrainingStepTimeRegression",
        severity="warning",
        team=Team.JOB_OWNER,
        expr=owned(
            ctx,
            f"job:training_step_seconds:median > {factor} * "
            f"min_over_time(job:training_step_seconds:median[{baseline}])",
        ),
        for_=for_,
        summary="A training job's steps have become much slower than its own best.",
        description=f"{jobs.job}: the median rank's step time has been over {factor}x the job's best of the last "
        f"{baseline} for {for_}. Look for a slow node, a congested fabric or a change in the job "
        "(sequence length, data loading).",
        **standard_cases(
            when,
            # 1.2x the factor (not less): the new step time must dominate the rate window by the onset.
            fault=f"step time rises to 1.2 times {factor}x",
            fault_series=regressed(round(0.5 * factor * 1.2, 3)),
            expect=jobs.owned(),
            healthy="a steady job",
            healthy_series=regressed(0.5),
            pending=f"slower for less than {for_}",
            also_silent=[when.silent(f"slower, but under {factor}x", regressed(round(0.5 * factor * 0.93, 3)))],
        ),
    )


@dataclass(frozen=True)
class _Stopped:
    """Job 42 on n1 and n2, its last step at scrape `stop`, its series `length` scrapes long."""

    jobs: _TestJob
    stop: int
    length: int

    def gpus(self, job: str | None = "42") -> list[Series]:
        ctx = self.jobs.ctx
        return [gpu_utilization(ctx, f"1x{self.length}", node=node, gpu="0", hpc_job=job) for node in ("n1", "n2")]

    def ranks(self, later: int = 0) -> list[Series]:
        """Its two ranks, stopping `later` scrapes after `stop`."""
        return self.jobs.two_ranks(length=self.length, stop_after=self.stop + later)

    def writing(self, bytes_per_second: float, later: int = 0) -> list[Series]:
        """The job writes to Lustre from its last step on, at this rate over two OSTs (Lustre jobstats)."""
        after, step = self.stop + later, duration_seconds(self.jobs.ctx.scrape_interval)
        return [
            series(
                self.jobs.ctx,
                "lustre",
                "job_write_bytes",
                f"0x{after} 0+{bytes_per_second / 2 * step:.12g}x{self.length - after}",
                node="oss01",
                component="ost",
                target=f"scratch-OST000{index}",
                hpc_job="42",
                operation="write",
            )
            for index in (0, 1)
        ]

    def checkpoint(self, bytes_per_second: float, later: int = 0) -> list[Series]:
        """The job stops and writes at this rate from then on, GPUs still held."""
        return self.ranks(later) + self.writing(bytes_per_second, later) + self.gpus() + self.jobs.info


def _hang(jobs: _TestJob) -> Alert:
    ctx, thresholds, cluster = jobs.ctx, jobs.thresholds, jobs.ctx.cluster
    for_, window, stalled = (
        thresholds.training_hang_for,
        thresholds.training_checkpoint_window,
        thresholds.storage_checkpoint_stalled_bytes_per_second,
    )
    stop = 10  # the job's last step is at this scrape
    # The rate window holds no step from (stop + 3) or (stop + 4) scrapes on (left edge in or out).
    when = timing(ctx, for_, stop + 4, earliest_scrapes=stop + 3)
    checkpoint = duration_seconds(window) // when.step
    job = _Stopped(jobs, stop, stop + checkpoint + when.hold // when.step + 30)
    hang = f"job:gpus_allocated:count > 0 and on ({cluster}, hpc_job) job:training_steps:rate == 0"
    # A job writing its checkpoint makes no step: not a hang while it writes at a checkpoint's pace (a slower write is
    # StorageCheckpointWriteStalled's, which inhibits this alert) and for at most training_checkpoint_window after its
    # steps stopped. Lustre jobstats is the only per-job write rate hpcobs reads (docs/contracts.md, Checkpoints).
    checkpointing = (
        f"job:lustre_write_bytes:rate >= {stalled} and on ({cluster}, hpc_job) "
        f"max_over_time(job:training_steps:rate[{window}]) > 0"
    )
    lustre = ctx.sources["lustre"].enabled
    fires, silent = _checkpoint_cases(job, when) if lustre else ([], [])
    return jobs.job_alert(
        "TrainingHang",
        severity="critical",
        team=Team.JOB_OWNER,
        expr=f"{hang} unless on ({cluster}, hpc_job) ({checkpointing})" if lustre else hang,
        for_=for_,
        summary="A training job holds its GPUs but makes no progress.",
        description=f"{jobs.job} still holds its GPUs but has completed no training step for {for_}"
        + (f" and is not writing a checkpoint (or has been for over {window})" if lustre else "")
        + ": it hangs (a collective waiting for a dead or stuck rank, a stalled filesystem). Dump its stacks with "
        "py-spy, then cancel it and restart from the last checkpoint.",
        fired_by=("training_hang", "checkpoint_stall", "xid79"),
        **standard_cases(
            when,
            fault="no step while the GPUs are still allocated",
            fault_series=job.ranks() + job.gpus() + jobs.info,
            expect=jobs.owned(),
            healthy="a job making progress",
            healthy_series=rank_series(ctx, {("0", "n1"): 0.5}, length=job.length) + job.gpus() + jobs.info,
            pending=f"no step for less than {for_}",
            also_fires=[
                when.fires(
                    "a job without job-info alerts without its owner",
                    job.ranks() + job.gpus(),
                    [alert(**ctx.cluster_labels, hpc_job="42")],
                ),
                *fires,
            ],
            also_silent=[
                when.silent(
                    "a checkpoint pauses steps for a few scrapes",
                    rank_series(ctx, {("0", "n1"): 0.5}, phases=[(20, 4.0), (3, 0.0), (job.length - 23, 4.0)])
                    + job.gpus()
                    + jobs.info,
                ),
                when.silent(
                    "the job released its GPUs (its training series linger)", job.ranks() + job.gpus(None) + jobs.info
                ),
                *silent,
            ],
        ),
    )


def _checkpoint_cases(job: _Stopped, when: Timing) -> tuple[list[Case], list[Case]]:
    """TrainingHang's cases at the boundaries of a checkpoint: its write rate and how long it may last."""
    thresholds = job.jobs.thresholds
    window, stalled = thresholds.training_checkpoint_window, thresholds.storage_checkpoint_stalled_bytes_per_second
    step = when.step
    checkpoint = duration_seconds(window) // step
    # A checkpoint that keeps writing stops excusing the job once no step is left in the window after the rate's.
    too_long = timing(
        job.jobs.ctx,
        thresholds.training_hang_for,
        job.stop + 4 + checkpoint,
        earliest_scrapes=job.stop + 3 + checkpoint,
        settle=2 * step,
    )
    # A checkpoint started this many scrapes after the over-long one has not used its window when that one fires.
    later = -(-(too_long.firing_seconds - too_long.onset - too_long.hold) // step) + 2
    fires = [
        when.fires(
            f"writing just under {stalled:.3g} B/s: a stalled checkpoint is no excuse",
            job.checkpoint(stalled * 0.9),
            job.jobs.owned(),
        ),
        too_long.fires(
            f"a checkpoint still writing {window} after the steps stopped",
            job.checkpoint(stalled * 20),
            job.jobs.owned(),
        ),
    ]
    silent = [
        when.silent(f"a checkpoint writing at just over {stalled:.3g} B/s", job.checkpoint(stalled * 1.1)),
        too_long.silent(
            f"a checkpoint writing for just under {window} after the steps stopped", job.checkpoint(stalled * 20, later)
        ),
    ]
    return fires, silent


def _nccl_collective_slow(jobs: _TestJob) -> Alert:
    ctx, thresholds = jobs.ctx, jobs.thresholds
    factor, window, for_ = (
        thresholds.training_nccl_slowdown_factor,
        thresholds.training_baseline_window,
        thresholds.training_nccl_slow_for,
    )
    step = duration_seconds(ctx.scrape_interval)
    calm = duration_seconds(window) // step  # a whole baseline window of normal collectives
    when = timing(ctx, for_, calm + 1, settle=5 * step)
    after = when.hold // step + 20  # scrapes after the baseline window
    # Job 42 (2 nodes, 16 GPUs): gradients all-reduced across the nodes in 128-129MB buckets at 6 ms, activations
    # all-reduced inside each node (NVLink-only) at 160 us, parameter shards all-gathered across the nodes at 3 ms.
    gradients = dict(collective="AllReduce", message_size="128-129MB", n_nodes="2", nranks="16")
    activations = dict(collective="AllReduce", message_size="32-33MB", n_nodes="1", nranks="8")
    shards = dict(collective="AllGather", message_size="64-65MB", n_nodes="2", nranks="16")

    def bucket(like: dict[str, str], microseconds: str, algo_proto: str = "Ring_ll128") -> list[Series]:
        """One bucket's collective time on GPU0 of n1 and of n2."""
        return [
            nccl_collective(ctx, "coll_exec_time", microseconds, gpu="GPU0", node=node, algo_proto=algo_proto, **like)
            for node in ("n1", "n2")
        ]

    def gradients_at(times: float) -> list[Series]:
        """The gradient AllReduce at 6 ms for the baseline window, then `times` that; the other groups steady."""
        return [
            *bucket(gradients, f"6000x{calm} {6000 * times:.12g}x{after}"),
            *bucket(activations, f"160x{calm + after}", "NVLS_simple"),
            *bucket(shards, f"3000x{calm + after}"),
        ] + jobs.info

    # An evaluation pass after the baseline window: no backward pass, so no gradient AllReduce; the eval loss
    # all-reduced in 8-9KB messages, the eval outputs all-gathered in 512-513MB messages beside the parameter shards.
    # Each group keeps its time; the mean over AllGather's buckets, what the rule read before it compared like with
    # like, reads (factor + 1)x the shards' time, and would have paged.
    eval_outputs = dict(shards, message_size="512-513MB")
    eval_loss = dict(gradients, message_size="8-9KB")
    evaluation = [
        *bucket(gradients, f"6000x{calm}"),
        *bucket(eval_loss, f"_x{calm} 40x{after}", "Tree_ll"),
        *bucket(activations, f"160x{calm + after}", "NVLS_simple"),
        *bucket(shards, f"3000x{calm + after}"),
        *bucket(eval_outputs, f"_x{calm} {3000 * (2 * factor + 1):.12g}x{after}"),
    ] + jobs.info
    return jobs.job_alert(
        "TrainingNcclCollectiveSlow",
        severity="warning",
        team=Team.ML_PLATFORM,
        expr=owned(
            ctx,
            f"job:nccl_collective_seconds:avg > {factor} * "
            f"quantile_over_time(0.5, job:nccl_collective_seconds:avg[{window}])",
        ),
        for_=for_,
        summary="A training job's NCCL collectives take much longer than usual for the same messages.",
        description=f"{jobs.job}: {label('collective')} of {label('message_size')} messages on its "
        f"{label('n_nodes')}-node communicators ({label('nranks')} ranks; 1 node is NVLink-only) has taken over "
        f"{factor}x its median time of the last {window} for {for_}. Usually the fabric (IB errors, congestion, a port "
        "down) or a rank late to the collective; check the IB alerts of the job's nodes.",
        fired_by=("nccl_latency_spike",),
        **standard_cases(
            when,
            fault=f"the network gradient AllReduce just over {factor}x, the NVLink and AllGather groups steady",
            fault_series=gradients_at(factor * 1.1),
            expect=jobs.owned(**gradients),
            healthy="steady collectives",
            healthy_series=gradients_at(1),
            pending=f"over {factor}x for less than {for_}",
            also_fires=[
                when.fires(
                    "only the slow group, whatever the others do: AllReduce 8x slower on the network",
                    gradients_at(8),
                    jobs.owned(**gradients),
                )
            ],
            also_silent=[
                when.silent(f"slower, but under {factor}x", gradients_at(factor * 0.9)),
                when.silent("an evaluation pass changes the mix of buckets, not the time of any", evaluation),
            ],
        ),
    )


def _throughput_drop(jobs: _TestJob) -> Alert:
    ctx, thresholds = jobs.ctx, jobs.thresholds
    drop, window, for_ = (
        thresholds.training_throughput_drop_ratio,
        thresholds.training_baseline_window,
        thresholds.training_throughput_drop_for,
    )
    steady = 60  # scrapes at the job's usual pace
    # Tokens/s falls under the ratio 2 or 3 scrapes into the drop.
    when = timing(ctx, for_, steady + 3, earliest_scrapes=steady + 2)
    tokens = "job:training_tokens:rate"

    def steps_per_scrape_after(steps: float) -> list[Series]:
        return jobs.two_ranks(phases=[(steady, 4.0), (when.hold // when.step + 30, steps)]) + jobs.info

    return jobs.job_alert(
        "TrainingThroughputDrop",
        severity="warning",
        team=Team.JOB_OWNER,
        expr=owned(ctx, f"{tokens} < {drop} * quantile_over_time(0.9, {tokens}[{window}]) and {tokens} > 0"),
        for_=for_,
        summary="A training job processes far fewer tokens per second than it did.",
        description=f"{jobs.job} has processed under {drop:.0%} of its recent tokens/s (90th percentile of the last "
        f"{window}) for {for_} while still making progress: look for a straggler, slow collectives or "
        "a slow input pipeline.",
        fired_by=("straggler",),
        **standard_cases(
            when,
            fault=f"a drop to just under {drop:.0%}",
            fault_series=steps_per_scrape_after(round(4.0 * drop * 0.9, 3)),
            expect=jobs.owned(),
            healthy="steady throughput",
            healthy_series=steps_per_scrape_after(4.0),
            pending=f"lower for less than {for_}",
            also_silent=[
                when.silent(f"a drop to just over {drop:.0%}", steps_per_scrape_after(round(4.0 * drop * 1.06, 3))),
                when.silent("no progress at all is TrainingHang's", steps_per_scrape_after(0.0)),
            ],
        ),
    )
