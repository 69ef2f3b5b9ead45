"""Training alerts (DESIGN.md §10), on the per-job records of recording_rules/training.py.

Each job is compared with itself (its own best step time, its own recent collective time and
throughput), never with a fleet-wide constant: models, batch sizes and scales differ too much.
A job's own symptoms (straggler, hang, regression, throughput) go to its owner (team job-owner);
slow NCCL collectives are usually the fabric or the NCCL setup, so they go to ml-platform
(docs/runbooks/training.md says why).
"""
from hpcobs.context import Context
from hpcobs.promql import duration, duration_seconds
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, Series, alert
from hpcobs.synthetic import gpu_utilization, series

DASHBOARD = "hpcobs-training"
OWNER = ("user", "account", "partition")
ALICE = dict(user="alice", account="llm", partition="gpu")
TOKENS_PER_STEP = 750                       # per rank



def owned(ctx: Context, expr: str) -> str:
    """The job alert `expr` with its owner's labels from the job-info record; a job without job-info
    (prolog broken: ExporterJobInfoMissing's case) still alerts, without them."""
    c = ctx.cluster
    return (f"({expr}) * on ({c}, hpc_job) group_left ({', '.join(OWNER)}) job:slurm_job_info:max "
            f"or on ({c}, hpc_job) ({expr})")


def job_info(ctx: Context, job: str, node: str = "n1", samples: int = 400, **owner: str) -> Series:
    return series(ctx, "job_info", "job_info", f"1x{samples}", node=node, hpc_job=job, job_name="pretrain",
                  qos="normal", **{**ALICE, **owner})


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


def rank_series(ctx: Context, step_times: dict[tuple[str, str], float | tuple[float, ...]], job: str = "42",
                length: int = 40, stop_after: int | None = None,
                phases: list[tuple[int, float]] | None = None) -> list[Series]:
    """Per-rank training counters of one job. Phases are (scrapes, steps per scrape); a rank's step time is
    one number or one per phase. stop_after: the job makes no step after that many scrapes."""
    if phases is None:
        phases = [(length, 4.0)] if stop_after is None else [(stop_after, 4.0), (length - stop_after, 0.0)]
    out = []
    for (rank, node), seconds in step_times.items():
        times = seconds if isinstance(seconds, tuple) else (seconds,) * len(phases)
        labels = dict(node=node, hpc_job=job, rank=rank)
        out += [series(ctx, "training", "steps", counter([(sps, n) for n, sps in phases]), **labels),
                series(ctx, "training", "step_seconds",
                       counter([(sps * t, n) for (n, sps), t in zip(phases, times)]), **labels),
                series(ctx, "training", "tokens", counter([(sps * TOKENS_PER_STEP, n) for n, sps in phases]), **labels)]
    return out


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    step = duration_seconds(ctx.scrape_interval)
    where = f"user {label('user')}, cluster {label(c)}"
    job = f"Job {label('hpc_job')} ({where})"
    job42 = dict(**cl, hpc_job="42", **ALICE)
    info = [job_info(ctx, "42")]

    # -- straggler ---------------------------------------------------------------------------------
    ratio, straggler_for = th["training_straggler_ratio"], duration_seconds(th["training_straggler_for"])
    straggler_len = straggler_for // step + 20

    def four_ranks(slowest: float) -> list[Series]:
        return rank_series(ctx, {("0", "n1"): 0.5, ("1", "n1"): 0.5, ("2", "n2"): 0.5, ("3", "n2"): slowest},
                           length=straggler_len)

    # A slowest rank whose ratio median / slowest sits just above the threshold.
    borderline = round(0.5 / ratio * 0.97, 3)

    # -- step time regression ----------------------------------------------------------------------
    factor, baseline = th["training_step_time_regression_factor"], th["training_step_time_baseline_window"]
    regression_for = duration_seconds(th["training_step_time_regression_for"])
    before = 60                                # scrapes at the job's best step time
    after = regression_for // step + 30

    def regressed(seconds_after: float) -> list[Series]:
        return rank_series(ctx, {("0", "n1"): (0.5, seconds_after), ("1", "n2"): (0.5, seconds_after)},
                           phases=[(before, 4.0), (after, 4.0)])

    change = before * step                     # the step time changes here; rate() needs a window to follow
    # The doubled step time dominates the rate window 2 or 3 scrapes after the change.
    regression_at = duration(change + 3 * step + regression_for + 10 * step)
    regression_early = duration(change + 2 * step + regression_for - 3 * step)

    # -- hang --------------------------------------------------------------------------------------
    hang_for = duration_seconds(th["training_hang_for"])
    stop = 10
    hang_len = stop + hang_for // step + 30

    def gpus(job_id: str | None = "42", samples=hang_len):
        return [gpu_utilization(ctx, f"1x{samples}", node=n, gpu=g, hpc_job=job_id)
                for n, g in (("n1", "0"), ("n2", "0"))]

    hung = rank_series(ctx, {("0", "n1"): 0.5, ("1", "n2"): 0.5}, length=hang_len, stop_after=stop)
    # The rate window holds no step from (stop + 3) or (stop + 4) scrapes on (left edge in or out).
    hang_at, hang_early = duration((stop + 4) * step + hang_for + 10 * step), duration((stop + 3) * step + hang_for - 3 * step)

    # -- NCCL --------------------------------------------------------------------------------------
    nccl_factor, window = th["training_nccl_slowdown_factor"], th["training_baseline_window"]
    nccl_for = duration_seconds(th["training_nccl_slow_for"])
    calm = duration_seconds(window) // step    # a whole baseline window of normal collectives

    def collective(microseconds: str, name="AllReduce", gpu="GPU0", node="n1"):
        return series(ctx, "nccl_inspector", "coll_exec_time", microseconds, node=node, hpc_job="42", gpu=gpu,
                      version="v5.1", comm_name="0x7f3a", n_nodes="2", nranks="16", collective=name,
                      message_size="128-129MB", algo_proto="Ring_ll128")

    def nccl(spiked: float) -> list[Series]:
        slow = f"1000x{calm} {spiked:.12g}x{nccl_for // step + 20}"
        return [collective(slow), collective(slow, gpu="GPU1", node="n2"),
                collective(f"500x{calm + nccl_for // step + 21}", name="AllGather")]

    nccl_at, nccl_early = duration((calm + 1) * step + nccl_for + 5 * step), duration((calm + 1) * step + nccl_for - 3 * step)

    # -- throughput --------------------------------------------------------------------------------
    drop, drop_for = th["training_throughput_drop_ratio"], duration_seconds(th["training_throughput_drop_for"])
    steady = 60
    after_drop = drop_for // step + 30

    def throughput(steps_after: float) -> list[Series]:
        return rank_series(ctx, {("0", "n1"): 0.5, ("1", "n2"): 0.5}, phases=[(steady, 4.0), (after_drop, steps_after)])

    # Tokens/s falls under the ratio 2 or 3 scrapes into the drop.
    drop_at = duration((steady + 3) * step + drop_for + 10 * step)
    drop_early = duration((steady + 2) * step + drop_for - 3 * step)

    tokens = "job:training_tokens:rate"

    return [Group("hpcobs-training-alerts", domain="training", interval=ctx.scrape_interval, rules=[
        Alert(
            "TrainingStraggler", severity="warning", team="job-owner",
            expr=owned(ctx, f"job:training_slowest_rank:step_seconds and on ({c}, hpc_job) "
                            f"job:training_straggler:ratio < {ratio}"),
            for_=th["training_straggler_for"],
            summary="One rank of a training job is much slower than the others.",
            description=f"{job}: rank {label('rank')} on {label('node')} has been the slowest for "
                        f"{th['training_straggler_for']}, with the median rank's step time under {ratio} of its own; "
                        "the whole job runs at its pace. Check that node's GPUs (clocks, thermals, PCIe) and drain it "
                        "if it is the hardware.",
            runbook="training", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"), fired_by=("straggler",),
            fires_on=[Case("rank 3 takes twice as long per step", at=duration(step + straggler_for + 10 * step),
                           series=four_ranks(1.0) + info, expect=[alert(**job42, rank="3", node="n2")])],
            silent_on=[
                Case("balanced ranks", at=duration(step + straggler_for + 10 * step), series=four_ranks(0.5) + info),
                Case(f"a slowest rank just above the {ratio} ratio", at=duration(step + straggler_for + 10 * step),
                     series=four_ranks(borderline) + info),
                Case(f"straggling for less than {th['training_straggler_for']}", at=duration(step + straggler_for - 3 * step),
                     series=four_ranks(1.0) + info),
            ],
        ),
        Alert(
            "TrainingStepTimeRegression", severity="warning", team="job-owner",
            expr=owned(ctx, f"job:training_step_seconds:median > {factor} * "
                            f"min_over_time(job:training_step_seconds:median[{baseline}])"),
            for_=th["training_step_time_regression_for"],
            summary="A training job's steps have become much slower than its own best.",
            description=f"{job}: the median rank's step time has been over {factor}x the job's best of the last "
                        f"{baseline} for {th['training_step_time_regression_for']}. Look for a slow node, a "
                        "congested fabric or a change in the job (sequence length, data loading).",
            runbook="training", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"),
            fires_on=[Case("step time doubles", at=regression_at, series=regressed(1.0) + info,
                           expect=[alert(**job42)])],
            silent_on=[
                Case("a steady job", at=regression_at, series=regressed(0.5) + info),
                Case(f"slower, but under {factor}x", at=regression_at, series=regressed(round(0.5 * factor * 0.93, 3)) + info),
                Case(f"slower for less than {th['training_step_time_regression_for']}", at=regression_early,
                     series=regressed(1.0) + info),
            ],
        ),
        Alert(
            "TrainingHang", severity="critical", team="job-owner",
            expr=f"job:gpus_allocated:count > 0 and on ({c}, hpc_job) job:training_steps:rate == 0",
            for_=th["training_hang_for"],
            summary="A training job holds its GPUs but makes no progress.",
            description=f"{job} still holds its GPUs but has completed no training step for "
                        f"{th['training_hang_for']}: it hangs (a collective waiting for a dead or stuck rank, a "
                        "stalled filesystem). Dump its stacks with py-spy, then cancel it and restart from the last "
                        "checkpoint.",
            runbook="training", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"),
            fired_by=("training_hang", "checkpoint_stall", "xid79"),
            fires_on=[Case("no step while the GPUs are still allocated", at=hang_at, series=hung + gpus() + info,
                           expect=[alert(**job42)]),
                      Case("a job without job-info alerts without its owner", at=hang_at, series=hung + gpus(),
                           expect=[alert(**cl, hpc_job="42")])],
            silent_on=[
                Case("a job making progress", at=hang_at,
                     series=rank_series(ctx, {("0", "n1"): 0.5}, length=hang_len) + gpus() + info),
                Case("a checkpoint pauses steps for a few scrapes", at=hang_at,
                     series=rank_series(ctx, {("0", "n1"): 0.5}, phases=[(20, 4.0), (3, 0.0), (hang_len - 23, 4.0)])
                     + gpus() + info),
                Case("the job released its GPUs (its training series linger)", at=hang_at,
                     series=hung + gpus(None) + info),
                Case(f"no step for less than {th['training_hang_for']}", at=hang_early, series=hung + gpus() + info),
            ],
        ),
        Alert(
            "TrainingNcclCollectiveSlow", severity="warning", team="ml-platform",
            expr=owned(ctx, f"job:nccl_collective_seconds:avg > {nccl_factor} * "
                            f"quantile_over_time(0.5, job:nccl_collective_seconds:avg[{window}])"),
            for_=th["training_nccl_slow_for"],
            summary="A training job's NCCL collectives take much longer than usual.",
            description=f"{job}: {label('collective')} has taken over {nccl_factor}x its median time of the last "
                        f"{window} for {th['training_nccl_slow_for']}. Usually the fabric (IB errors, congestion, a "
                        "port down) or a rank late to the collective; check the IB alerts of the job's nodes.",
            runbook="training", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"), fired_by=("nccl_latency_spike",),
            fires_on=[Case("AllReduce 8x slower", at=nccl_at, series=nccl(8000) + info,
                           expect=[alert(**job42, collective="AllReduce")])],
            silent_on=[
                Case("steady collectives", at=nccl_at, series=nccl(1000) + info),
                Case(f"slower, but under {nccl_factor}x", at=nccl_at, series=nccl(1000 * nccl_factor * 0.9) + info),
                Case(f"slow for less than {th['training_nccl_slow_for']}", at=nccl_early, series=nccl(8000) + info),
            ],
        ),
        Alert(
            "TrainingThroughputDrop", severity="warning", team="job-owner",
            expr=owned(ctx, f"{tokens} < {drop} * quantile_over_time(0.9, {tokens}[{window}]) and {tokens} > 0"),
            for_=th["training_throughput_drop_for"],
            summary="A training job processes far fewer tokens per second than it did.",
            description=f"{job} has processed under {drop:.0%} of its recent tokens/s (90th percentile of the last "
                        f"{window}) for {th['training_throughput_drop_for']} while still making progress: look for a "
                        "straggler, slow collectives or a slow input pipeline.",
            runbook="training", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"),
            fired_by=("straggler",),
            fires_on=[Case("tokens/s halves", at=drop_at, series=throughput(2.0) + info, expect=[alert(**job42)])],
            silent_on=[
                Case("steady throughput", at=drop_at, series=throughput(4.0) + info),
                Case(f"a drop to just over {drop:.0%}", at=drop_at, series=throughput(round(4.0 * drop * 1.06, 3)) + info),
                Case("no progress at all is TrainingHang's", at=drop_at, series=throughput(0.0) + info),
                Case(f"lower for less than {th['training_throughput_drop_for']}", at=drop_early,
                     series=throughput(2.0) + info),
            ],
        ),
    ])]
