"""Training: per-rank data reduced to per-job series, never recorded per rank (docs/recording-rules.md).

A rank's step time is the rate of its step-seconds counter over the rate of its step counter (robust to
scrape timing, unlike a last-step gauge). In a synchronous job every rank leaves a step's last collective together:
every rank's step time is the job's pace, and a straggler shows only in its phases. Its extra time is in its own slow
phase; every other rank waits the same time in the phase that holds the collective (backward under DDP, whose
gradient all-reduce overlaps it), so the median rank is a waiter and only the straggler exceeds it in any phase.
Per job: fastest, median and slowest rank's step time; a rank's excess (the seconds per step it spends beyond the
median rank, summed over the phases it exceeds it in) and the straggler, the rank with the largest, or the slowest
rank by step time when the job times no phase; the straggler ratio (nvidia-resiliency-ext scores a rank reference /
own time and flags < 0.75): median / slowest step time, or 1 - excess / the job's step time if lower; where the time
of a step goes (seconds per step in each phase: the median rank's and the straggler's), throughput, the loss, and
NCCL collective time and bus bandwidth per group of like collectives (collective, message-size bucket, communicator
shape: LIKE). The training dashboard reads these rather than the
ranks: a job on 8,192 GPUs has 8,192 ranks, and a panel over the ranks reads all of them at every point it draws.
"""

from functools import partial

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import nccl_collective, phase_counters, series
from hpcobs.lang.promql import aggregate

RANK = ("hpc_job", "rank", "node")
JOB = ("hpc_job",)
# What makes two NCCL collective times comparable: NCCL Inspector writes one series per bucket of its key, the
# communicator's shape (n_nodes, nranks), the collective, the message-size bucket, the communicator's name and the
# algorithm/protocol (NVIDIA/nccl 12df1a11 plugins/profiler/inspector/inspector_prom.cc, inspectorPromCollBucketKey).
# A job's collective time or bus bandwidth is compared within one (collective, bucket, shape): a 1 GB AllGather takes
# 16x a 64 MB one, and n_nodes="1" is a communicator inside one node (NVLink, ~10x a network one's bandwidth). The
# records average what is the same work: the ranks, communicators of one shape, and the algorithms NCCL picked for
# it (a switch of algorithm for the same messages, NVLS lost for Ring, is a slowdown to see). docs/exporters.md,
# "NCCL like with like".
LIKE = ("collective", "message_size", "n_nodes", "nranks")
# The communicators of test job 42 (2 nodes, 16 GPUs): data parallel across the nodes, tensor parallel inside one.
NETWORK_2_NODES = {"n_nodes": "2", "nranks": "16"}
NVLINK_8_RANKS = {"n_nodes": "1", "nranks": "8"}
# What each rank of a test job does: a step every 8 s (a power of two: exact at any scrape interval), 100 tokens
# and 1e14 FLOP per second.
STEPS_PER_SECOND = 1 / 8
TOKENS_PER_SECOND = 100
FLOPS_PER_SECOND = 1e14
# Seconds per step in each phase of the test jobs' ranks (binary fractions: exact rates): the balanced ranks time
# 0.4375 s of their 0.5 s of work, the straggler (rank 3) loses an extra 0.5 s in its input pipeline. Free-running
# (job 42) the straggler's steps take 1 s and the others' 0.5 s; in lockstep (job 45) every rank's take 1 s, the
# others waiting the straggler's extra 0.5 s in backward.
BALANCED_PHASES = {"data": 0.0625, "forward": 0.125, "backward": 0.1875, "comm": 0.0625}
STRAGGLER_PHASES = {**BALANCED_PHASES, "data": 0.5625}
WAITER_PHASES = {**BALANCED_PHASES, "backward": 0.6875}
EXCESS = 0.5


def groups(ctx: Context) -> list[Group]:
    return [
        Group(
            "hpcobs-training",
            domain="training",
            interval=ctx.evaluation_interval,
            rules=_step_times(ctx),
        ),
        # Groups run side by side: progress and NCCL apart from the step times, each well inside its interval
        # with thousands of ranks (docs/benchmarks.md, Fleet scale).
        Group(
            "hpcobs-training-progress",
            domain="training",
            interval=ctx.evaluation_interval,
            rules=[*_throughput(ctx), _loss(ctx)],
        ),
        Group("hpcobs-training-nccl", domain="training", interval=ctx.evaluation_interval, rules=_collectives(ctx)),
        # The phases beside the step times: a rank times up to a handful of phases, so these read a few times the
        # step-time group's series.
        Group("hpcobs-training-phases", domain="training", interval=ctx.evaluation_interval, rules=_phase_median(ctx)),
        # The straggler the phases find: a group never reads its own records.
        Group(
            "hpcobs-training-straggler", domain="training", interval=ctx.evaluation_interval, rules=_straggler_rank(ctx)
        ),
        # From the recorded statistics: the ranks are read once per statistic, not again for the ratio.
        Group(
            "hpcobs-training-job",
            domain="training",
            interval=ctx.evaluation_interval,
            rules=[_straggler(ctx)],
        ),
    ]


def _rate_of(ctx: Context, signal: str, by: tuple[str, ...] = RANK) -> str:
    window = ctx.rate_window
    return ctx.select("training", [signal], by, over=lambda e: f"rate({e}[{window}])", op="sum")


def _rank_step(ctx: Context) -> str:
    # Ranks that made no step in the window are left out here (0/0); the hang alert watches steps.
    return f"{_rate_of(ctx, 'step_seconds')} / ({_rate_of(ctx, 'steps')} > 0)"


def _ranks(
    ctx: Context,
    step_times: dict[tuple[str, str], float],
    job: str = "42",
    steps_per_second: float = STEPS_PER_SECOND,
) -> list[Series]:
    """The training counters of each (rank, node) of a job, given each rank's seconds per step: every rank
    processes TOKENS_PER_SECOND and FLOPS_PER_SECOND."""
    t = ctx.timeline
    out = []
    for (rank, node), seconds in step_times.items():
        labels = dict(node=node, hpc_job=job, rank=rank)
        out += [
            series(ctx, "training", "steps", t.rising(steps_per_second, t.span), **labels),
            series(ctx, "training", "step_seconds", t.rising(steps_per_second * seconds, t.span), **labels),
            series(ctx, "training", "tokens", t.rising(TOKENS_PER_SECOND, t.span), **labels),
            series(ctx, "training", "model_flops", t.rising(FLOPS_PER_SECOND, t.span), **labels),
        ]
    return out


def _phase_series(ctx: Context, phases: dict[tuple[str, str], dict[str, float]], job: str = "42") -> list[Series]:
    """The phase counters of each (rank, node) of a job, given its seconds per step in each phase."""
    t = ctx.timeline
    return phase_counters(ctx, phases, lambda seconds: t.rising(STEPS_PER_SECOND * seconds, t.span), job)


def _straggling(ctx: Context) -> list[Series]:
    """Job 42: rank 3 takes twice as long per step as the others."""
    return _ranks(ctx, {("0", "n1"): 0.5, ("1", "n1"): 0.5, ("2", "n2"): 0.5, ("3", "n2"): 1.0})


def _straggling_phases(ctx: Context) -> list[Series]:
    """Job 42's phases: rank 3 is slow in its data phase."""
    balanced = {rank: BALANCED_PHASES for rank in (("0", "n1"), ("1", "n1"), ("2", "n2"))}
    return _phase_series(ctx, {**balanced, ("3", "n2"): STRAGGLER_PHASES})


def _healthy(ctx: Context) -> list[Series]:
    """Job 43: two balanced ranks."""
    return _ranks(ctx, {("0", "n1"): 0.5, ("1", "n1"): 0.5}, job="43")


LOCKSTEP_RANKS = (("0", "n1"), ("1", "n1"), ("2", "n2"), ("3", "n2"))


def _lockstep(ctx: Context, job: str = "45") -> list[Series]:
    """A synchronous job's ranks as the training helper times them: every rank's steps take the straggler's 1 s."""
    return _ranks(ctx, dict.fromkeys(LOCKSTEP_RANKS, 1.0), job=job)


def _lockstep_phases(ctx: Context) -> list[Series]:
    """Job 45's phases: rank 3 is slow in its data phase, the others wait for it in backward."""
    waiters = dict.fromkeys(LOCKSTEP_RANKS[:3], WAITER_PHASES)
    return _phase_series(ctx, {**waiters, ("3", "n2"): STRAGGLER_PHASES}, job="45")


def _every_job(ctx: Context) -> list[Series]:
    """Job 42 free-running, 43 balanced, 45 in lockstep (each timing its phases but 43) and 46 in lockstep without
    phases."""
    return (
        _straggling(ctx)
        + _straggling_phases(ctx)
        + _healthy(ctx)
        + _lockstep(ctx)
        + _lockstep_phases(ctx)
        + _lockstep(ctx, job="46")
    )


def _step_times(ctx: Context) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    rank_step = _rank_step(ctx)
    job42, job43, job45 = (dict(**cluster_labels, hpc_job=job) for job in ("42", "43", "45"))
    median = f"quantile by ({cluster}, hpc_job) (0.5, {rank_step})"
    slowest = aggregate("max", (cluster, *JOB), rank_step)
    # Per-job step time statistics: record, expression, test description, expected for job 42 and job 43; job 45's
    # ranks all step at its pace.
    statistics = (
        ("job:training_step_seconds:min", aggregate("min", (cluster, *JOB), rank_step), "fastest rank's", 0.5, 0.5),
        ("job:training_step_seconds:median", median, "median rank's", 0.5, 0.5),
        ("job:training_step_seconds:max", slowest, "slowest rank's (the job's pace)", 1.0, 0.5),
    )
    return [
        Record(
            record,
            expression,
            tests=[
                Case(
                    f"{whose} step time; in lockstep every rank's is the job's pace",
                    at=ctx.timeline.settled,
                    series=_straggling(ctx) + _healthy(ctx) + _lockstep(ctx),
                    expect=[sample(straggling, **job42), sample(healthy, **job43), sample(1.0, **job45)],
                )
            ],
        )
        for record, expression, whose, straggling, healthy in statistics
    ]


def _straggler(ctx: Context) -> Record:
    """The lower of median / slowest step time (free-running ranks) and 1 - the straggler's excess / the job's step
    time (lockstep, where every rank's step time is the same): a straggler S + d beside ranks of S reads S / (S + d)
    either way. Without phases only the first remains: a synchronous job that times no phase shows no straggler."""
    labels = {job: dict(**ctx.cluster_labels, hpc_job=job) for job in ("42", "43", "45", "46")}
    by_step = "job:training_step_seconds:median / job:training_step_seconds:max"
    # Per job, without the rank: a straggler's series outlives its turn by the lookback where no staleness marker ends
    # it (backfilled history), and two ranks at once must not break the division.
    by_excess = (
        f"1 - max by ({ctx.cluster}, hpc_job) (job:training_straggler_rank:excess_seconds) / "
        "job:training_step_seconds:max"
    )
    return Record(
        "job:training_straggler:ratio",
        f"({by_step} <= {by_excess}) or ({by_excess}) or ({by_step})",
        tests=[
            Case(
                "1 when balanced; 0.5 for a straggler taking twice its peers' time, free-running (42) or in lockstep "
                "(45); 1 for a lockstep job without phases (46: nothing to see)",
                at=ctx.timeline.settled,
                series=_every_job(ctx),
                expect=[
                    sample(ratio, **labels[job]) for job, ratio in (("42", 0.5), ("43", 1), ("45", 0.5), ("46", 1))
                ],
            )
        ],
    )


def _rank_phase(ctx: Context) -> str:
    """A rank's seconds per step in a phase; a rank that made no step in the window is left out, as in _rank_step."""
    return (
        f"{_rate_of(ctx, 'phase_seconds', (*RANK, 'phase'))} / on ({ctx.cluster}, hpc_job, rank, node) group_left () "
        f"({_rate_of(ctx, 'steps')} > 0)"
    )


def _phase_case(ctx: Context, description: str, expect: list) -> list[Case]:
    return [Case(description, at=ctx.timeline.settled, series=_every_job(ctx), expect=expect)]


def _phase_median(ctx: Context) -> list[Record]:
    """The median rank's seconds per step in each phase, per job (a waiter's in lockstep). Job 43 times no phase:
    it has none of the phase records."""
    cluster, rank_phase = ctx.cluster, _rank_phase(ctx)
    labels = {job: dict(**ctx.cluster_labels, hpc_job=job) for job in ("42", "45")}
    case = partial(_phase_case, ctx)
    return [
        Record(
            "job:training_phase_seconds:median",
            f"quantile by ({cluster}, hpc_job, phase) (0.5, {rank_phase})",
            tests=case(
                "the median rank's seconds per step in each phase, a waiter's in lockstep; none for a job that times "
                "no phase",
                [
                    sample(seconds, **labels[job], phase=phase)
                    for job, phases in (("42", BALANCED_PHASES), ("45", WAITER_PHASES))
                    for phase, seconds in phases.items()
                ],
            ),
        ),
    ]


def _straggler_rank(ctx: Context) -> list[Record]:
    """The rank with the largest excess over the median rank's phases, the straggler (that rank, or the slowest by
    step time without phases) with its step time, and its seconds per step in each phase. Each chooses the straggler
    at its own evaluation, never from the excess record: a topk record's previous leaders stay visible for the
    lookback (docs/scale-out.md, MetricsQL differences, "Fixed: the slowest rank's phases"). The straggler's excess
    per phase is the difference of the phase records, taken where it is read (TrainingStraggler, the dashboard): a
    third record of every phase of every job would cost as much as these two for a subtraction."""
    cluster, rank_step, rank_phase = ctx.cluster, _rank_step(ctx), _rank_phase(ctx)
    labels = {job: dict(**ctx.cluster_labels, hpc_job=job) for job in ("42", "45")}
    rank_excess = aggregate(
        "sum",
        (cluster, *RANK),
        f"clamp_min({rank_phase} - on ({cluster}, hpc_job, phase) group_left () job:training_phase_seconds:median, 0)",
    )
    straggler = {"rank": "3", "node": "n2"}
    case = partial(_phase_case, ctx)
    by_excess = f"topk by ({cluster}, hpc_job) (1, {rank_excess})"
    return [
        Record(
            "job:training_straggler_rank:excess_seconds",
            by_excess,
            tests=case(
                "the rank with the largest excess over the median rank, its node and its excess: the straggler's "
                "extra data time, free-running or in lockstep (where every rank's step time is the same); none "
                "without phases",
                [sample(EXCESS, **labels[job], **straggler) for job in ("42", "45")],
            ),
        ),
        Record(
            "job:training_straggler_rank:step_seconds",
            # The straggler by excess, or for a job that times no phase the slowest of its ranks. The two sides hold
            # different jobs: MetricsQL's `or` over a range fills a left series' gaps with a right one of its group
            # (docs/scale-out.md, MetricsQL differences), which must never be another rank of the same job.
            f"topk by ({cluster}, hpc_job) (1, ({rank_step} and on ({cluster}, hpc_job, rank, node) {by_excess}) "
            f"or ({rank_step} unless on ({cluster}, hpc_job) job:training_phase_seconds:median))",
            tests=[
                Case(
                    "the straggler by excess, its node and its step time (the job's pace in lockstep)",
                    at=ctx.timeline.settled,
                    # Without the balanced jobs: their ranks tie, and which one topk keeps is the engine's choice.
                    series=_straggling(ctx) + _straggling_phases(ctx) + _lockstep(ctx) + _lockstep_phases(ctx),
                    expect=[sample(1.0, **labels[job], **straggler) for job in ("42", "45")],
                ),
                Case(
                    "without phases, the slowest rank by step time",
                    at=ctx.timeline.settled,
                    series=_straggling(ctx),
                    expect=[sample(1.0, **labels["42"], **straggler)],
                ),
            ],
        ),
        Record(
            "job:training_straggler_rank:phase_seconds",
            # Per job, not per rank: job:training_straggler_rank:excess_seconds already says which rank it is.
            aggregate(
                "max", (cluster, *JOB, "phase"), f"{rank_phase} and on ({cluster}, hpc_job, rank, node) {by_excess}"
            ),
            tests=case(
                "the straggler's seconds per step in each phase",
                [
                    sample(seconds, **labels[job], phase=phase)
                    for job in ("42", "45")
                    for phase, seconds in STRAGGLER_PHASES.items()
                ],
            ),
        ),
    ]


def _throughput(ctx: Context) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    job42, job43 = dict(**cluster_labels, hpc_job="42"), dict(**cluster_labels, hpc_job="43")
    hung = _ranks(ctx, {("0", "n3"): 1}, job="44", steps_per_second=0)
    return [
        Record(
            "job:training_steps:rate",
            aggregate("sum", (cluster, *JOB), _rate_of(ctx, "steps"))
            + f" / count by ({cluster}, hpc_job) ({_rate_of(ctx, 'steps')})",
            tests=[
                Case(
                    "steps per second of the job (mean over ranks); 0 when it hangs",
                    at=ctx.timeline.settled,
                    series=_straggling(ctx) + hung,
                    expect=[sample(STEPS_PER_SECOND, **job42), sample(0, **cluster_labels, hpc_job="44")],
                )
            ],
        ),
        Record(
            "job:training_tokens:rate",
            aggregate("sum", (cluster, *JOB), _rate_of(ctx, "tokens")),
            tests=[
                Case(
                    "tokens per second over every rank",
                    at=ctx.timeline.settled,
                    series=_straggling(ctx),
                    expect=[sample(4 * TOKENS_PER_SECOND, **job42)],
                )
            ],
        ),
        Record(
            "job:training_model_flops:rate",
            aggregate("sum", (cluster, *JOB), _rate_of(ctx, "model_flops")),
            tests=[
                Case(
                    "model FLOP/s over every rank",
                    at=ctx.timeline.settled,
                    series=_healthy(ctx),
                    expect=[sample(2 * FLOPS_PER_SECOND, **job43)],
                )
            ],
        ),
    ]


def _loss(ctx: Context) -> Record:
    t = ctx.timeline

    def loss(values: str, rank: str) -> Series:
        return series(ctx, "training", "loss", values, node="n1", hpc_job="42", rank=rank)

    return Record(
        "job:training_loss:avg",
        ctx.select("training", ["loss"], JOB, op="avg"),
        tests=[
            Case(
                "the loss the job's ranks report, averaged over the ranks",
                at=ctx.timeline.settled,
                series=[loss(t.held(2.5, t.span), "0"), loss(t.held(2.25, t.span), "1")],
                expect=[sample(2.375, **ctx.cluster_labels, hpc_job="42")],
            )
        ],
    )


def _collectives(ctx: Context) -> list[Record]:
    job42 = dict(**ctx.cluster_labels, hpc_job="42")
    t = ctx.timeline

    def nccl(like: dict[str, str], per_gpu: dict[str, tuple[str, int, float]]) -> list[Series]:
        """One bucket of job 42 on each GPU given: its algo/protocol, collective time (us) and bus bandwidth (GB/s)."""
        return [
            nccl_collective(ctx, signal, t.held(value, t.span), gpu=gpu, algo_proto=algo_proto, **like)
            for gpu, (algo_proto, microseconds, gbs) in per_gpu.items()
            for signal, value in (("coll_exec_time", microseconds), ("coll_busbw", gbs))
        ]

    # Job 42 trains with tensor parallelism inside a node (an NVLink-only communicator) and data parallelism across
    # its 2 nodes (a network one): one AllReduce of each, the network one in two buckets, and an AllGather that NCCL
    # runs with two algorithms on two GPUs. Each bucket of each communicator shape is a group of its own.
    gradients = dict(collective="AllReduce", message_size="128-129MB", **NETWORK_2_NODES)
    metrics = dict(collective="AllReduce", message_size="8-9KB", **NETWORK_2_NODES)
    activations = dict(collective="AllReduce", message_size="32-33MB", **NVLINK_8_RANKS)
    shards = dict(collective="AllGather", message_size="64-65MB", **NETWORK_2_NODES)
    buckets = [
        *nccl(gradients, {"GPU0": ("Ring_ll128", 6000, 40), "GPU1": ("Ring_ll128", 6400, 38)}),
        *nccl(metrics, {"GPU0": ("Tree_ll", 40, 0.4)}),
        *nccl(activations, {"GPU0": ("NVLS_simple", 160, 360), "GPU1": ("NVLS_simple", 170, 350)}),
        *nccl(shards, {"GPU0": ("Ring_ll128", 3000, 40), "GPU1": ("Ring_simple", 3200, 36)}),
    ]
    # Per group: collective time (s) and bus bandwidth (B/s), the mean over the group's GPUs and algorithms.
    groups = (
        (gradients, 0.0062, 39e9),
        (metrics, 0.00004, 0.4e9),
        (activations, 0.000165, 355e9),
        (shards, 0.0031, 38e9),
    )
    return [
        Record(
            "job:nccl_collective_seconds:avg",
            ctx.select("nccl_inspector", ["coll_exec_time"], (*JOB, *LIKE), op="avg"),
            tests=[
                Case(
                    "mean collective time per job and group (collective, message-size bucket, communicator shape), "
                    "in seconds: an NVLink-only and a network AllReduce, or two buckets, are never averaged together",
                    at=ctx.timeline.settled,
                    series=buckets,
                    expect=[sample(seconds, **job42, **like) for like, seconds, _ in groups],
                )
            ],
        ),
        Record(
            "job:nccl_bus_bandwidth:avg",
            ctx.select("nccl_inspector", ["coll_busbw"], (*JOB, *LIKE), op="avg"),
            tests=[
                Case(
                    "mean bus bandwidth per job and group, in bytes per second: an NVLink-only communicator's "
                    "(~360 GB/s) never blended with a network one's (~40 GB/s)",
                    at=ctx.timeline.settled,
                    series=buckets,
                    expect=[sample(bandwidth, **job42, **like) for like, _, bandwidth in groups],
                )
            ],
        ),
    ]
