"""Training: one job ($hpc_job) — who runs it and whether it is well, its progress, stragglers, where the time
of its steps goes, NCCL, its GPUs, its logs and traces (docs/dashboards.md).

Job-level series are recorded, per node where a job spans many (a job on 8,192 GPUs has 1,024 nodes and
8,192 ranks); the raw series read here (per-rank step time, GPU memory) are those of ONE job, selected
through the catalogue, and read at one instant, bounded to the slowest ranks and least busy GPUs: over time
they would be read for every rank or GPU at every point drawn. Per-rank and per-node views are fine here only
because the dashboard is about one job; each is still capped or drawn as a heatmap.
"""

from grafana_foundation_sdk.models.common import BigValueTextMode
from grafana_foundation_sdk.models.dashboard import VariableSort

from hpcobs.authoring import traceql
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Link,
    Panel,
    Query,
    Row,
    Variable,
    explore_url,
    heatmap,
    logs,
    stat,
    table,
    text,
    timeseries,
)
from hpcobs.lang import promql
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.TRAINING
SLOWEST_RANKS = 10
LEAST_BUSY_GPUS = 10
# Alerts that carry the job (hpc_job): its training alerts, its GPUs' faults, its checkpoints, its Slurm
# end and idle GPUs, and a prolog that stopped writing on its nodes.
JOB_ALERTS = ("Training", "Gpu", "StorageCheckpoint", "SlurmJob", "ExporterJob")
# The faults that fire the hero job's own training alerts in the simulator.
JOB_FAULTS = ("straggler", "training_hang", "checkpoint_stall", "nccl_latency_spike")
JOB_STATE = ((1, "running", "green"), (0, "ended", "blue"))
# What the training helper (instrumentation/hpcobs_training) sets on its spans, declared here because the build
# never imports the helper: tests/test_traceql.py holds these to its STEP_SPAN, RESOURCE_ATTRIBUTES and
# SPAN_ATTRIBUTES and to the spans it emits.
STEP_SPAN = "step"
JOB_ATTRIBUTE = "resource.hpc_job"
RANK_ATTRIBUTE = "resource.rank"
SLOW_ATTRIBUTE = "span.hpcobs.slow"
JOB = traceql.GrafanaVariable("hpc_job")
RANK = traceql.GrafanaVariable("rank")


def _job(ctx: Context) -> str:
    """Matchers of recorded series on the selected job."""
    return f'{common.in_cluster(ctx)}, hpc_job="$hpc_job"'


def _raw_job(ctx: Context) -> dict[str, str]:
    """Matchers of the selected job's raw series."""
    return {ctx.cluster: f'="${ctx.cluster}"', "hpc_job": '="$hpc_job"'}


def _started(ctx: Context) -> str:
    """When the selected job started, from the raw series of that one job (no record: the header reads it once):
    the earliest start time its nodes' prologs wrote or, from an exporter that only gives how long a running job
    has run (jontk's slurm_job_run_time_seconds), now minus that."""
    where = _raw_job(ctx)
    if "job_start_time" in ctx.sources["job_info"].exporter.signals():
        return ctx.select("job_info", ["job_start_time"], ("hpc_job",), op="min", where=where)
    return f"time() - {ctx.select('job_info', ['job_run_time'], ('hpc_job',), where=where)}"


def _per_rank(ctx: Context, signal: str, window: str, by: tuple[str, ...] = ("rank", "node")) -> str:
    """The rate over `window` of a training signal of each rank of the selected job (raw series: read at one
    instant only)."""
    return ctx.select("training", [signal], by, op="sum", where=_raw_job(ctx), over=lambda e: f"rate({e}[{window}])")


def _rank_step_seconds(ctx: Context, window: str) -> str:
    """Each rank's step time over `window`, as the recording rules compute it (rate of step seconds over rate of
    steps), from the selected job's raw series."""
    return f"{_per_rank(ctx, 'step_seconds', window)} / ({_per_rank(ctx, 'steps', window)} > 0)"


def _rank_phase_seconds(ctx: Context, window: str) -> str:
    """Each rank's seconds per step in each phase over `window`, from the selected job's raw series."""
    phases = _per_rank(ctx, "phase_seconds", window, ("rank", "node", "phase"))
    return f"{phases} / on ({ctx.cluster}, rank, node) group_left () ({_per_rank(ctx, 'steps', window)} > 0)"


def _rank_excess(ctx: Context, window: str) -> str:
    """Each rank's excess over `window`: its seconds per step beyond the median rank's, summed over the phases it
    exceeds it in, as job:training_straggler_rank:excess_seconds ranks them (raw series of the selected job)."""
    cluster = ctx.cluster
    beyond = (
        f"{_rank_phase_seconds(ctx, window)} - on ({cluster}, phase) group_left () "
        f"job:training_phase_seconds:median{{{_job(ctx)}}}"
    )
    return f"sum by ({cluster}, rank, node) (clamp_min({beyond}, 0))"


def _holding_back(ctx: Context, window: str, keep: int | None = None) -> str:
    """The ranks by what the recording rules pick the straggler by: their excess when the job times phases, else
    their step time (in lockstep every rank's is the same: docs/training.md); the `keep` largest if given."""

    def largest(expr: str) -> str:
        return expr if keep is None else f"topk({keep}, {expr})"

    return f"{largest(_rank_excess(ctx, window))} or on () {largest(_rank_step_seconds(ctx, window))}"


def _traced(ctx: Context) -> bool:
    """Whether the site provisions Tempo: without it, no link to it and no word of it."""
    return bool(ctx.config.get("grafana", "datasources")["tempo"]["enabled"])


def _traces(ctx: Context, *conditions: tuple[str, traceql.Value]) -> str:
    """Grafana Explore on Tempo with the selected job's spans that meet `conditions`."""
    tempo = ctx.config.get("grafana", "datasources")["tempo"]["uid"]
    return explore_url(tempo, "tempo", traceql.spans([(JOB_ATTRIBUTE, JOB), *conditions]), "traceql")


def _slow_steps(ctx: Context, *rank: tuple[str, traceql.Value]) -> str:
    """The selected job's slow steps (those the helper's sampler kept for being slow), of one rank if given."""
    return _traces(ctx, *rank, (traceql.NAME, STEP_SPAN), (SLOW_ATTRIBUTE, True))


def _header(ctx: Context) -> Row:
    """Whose job this is, how big, since when, whether it still runs, how well it uses its GPUs, and what fires."""
    job = _job(ctx)
    return Row(
        "Job $hpc_job",
        [
            common.firing_alerts(
                ctx,
                *JOB_ALERTS,
                labels=("node", "gpu"),
                where='hpc_job="$hpc_job"',
                height=5,
                shows=JOB_FAULTS,
                description="Alerts about this job firing now (its training, its GPUs, its checkpoints, its Slurm "
                "allocation): what, how bad and where; click a node for its own view.",
            ),
            stat(
                "Owner: user, account, partition",
                f"job:slurm_job_info:max{{{job}}}",
                legend="{{user}} · {{account}} · {{partition}}",
                unit="none",
                width=6,
                text_mode=BigValueTextMode.NAME,
                description="Who runs the job: its user, the account it is charged to and its partition (Slurm job "
                "info, written by the prolog).",
            ),
            stat(
                "GPUs held by the job",
                f"job:gpus_allocated:count{{{job}}}",
                unit="none",
                width=3,
                description="GPUs mapped to the job now (the prolog's GPU mapping, as dcgm-exporter labels them).",
            ),
            stat(
                "Nodes of the job",
                f"count(group by (node) (gpu:job:info{{{job}}}))",
                unit="none",
                width=3,
                description="Nodes on which the job holds GPUs now.",
            ),
            stat(
                "Job started",
                f"{_started(ctx)} * 1000",
                unit="dateTimeAsIso",
                width=4,
                description="When the allocation started: the earliest start time the prolog wrote on the job's "
                "nodes (hpcobs_slurm_job_start_time_seconds), or now minus jontk's run time.",
            ),
            stat(
                "Job state",
                f"group(job:slurm_job_info:max{{{job}}} or job:gpus_allocated:count{{{job}}}) or vector(0)",
                unit="none",
                width=2,
                mappings=JOB_STATE,
                description="Running while the job's Slurm info or GPU mapping exists; ended once the epilog removed "
                "them (how it ended: the Slurm jobs dashboard).",
            ),
            stat(
                "Mean GPU utilisation of the job",
                f"job:gpu_utilization:avg{{{job}}}",
                unit="percentunit",
                width=3,
                thresholds=common.utilization(ctx),
                min=0,
                max=1,
                description="Mean utilisation over the job's GPUs now: its efficiency, graded like every "
                "utilisation (red poor, orange fair, green good).",
            ),
            stat(
                "Idle GPUs of the job",
                f"job:gpus_allocated_idle:count{{{job}}} or on () vector(0)",
                unit="none",
                width=3,
                thresholds=common.ANY,
                description=f"GPUs the job has held at 0% utilisation for {ctx.thresholds.gpu_idle_window} "
                "(what GpuAllocatedIdle reads).",
            ),
        ],
    )


def _progress_now(ctx: Context) -> list[Panel]:
    """The job's last values: step time, stragglers, throughput."""
    job = _job(ctx)
    straggler = ctx.thresholds.training_straggler_ratio
    return [
        stat(
            "Step time, median rank",
            f"job:training_step_seconds:median{{{job}}}",
            unit="s",
            width=4,
            description="Step time of the median rank (rate of step seconds over rate of steps).",
        ),
        stat(
            "Straggler ratio",
            f"job:training_straggler:ratio{{{job}}}",
            unit="percentunit",
            width=4,
            thresholds=((None, "red"), (straggler, "green")),
            min=0,
            max=1,
            description="1 when balanced, below "
            f"{straggler} a straggler holds the job back: the median rank's step time over the slowest's, or 1 - the "
            "straggler's excess over the median rank over the job's step time when lower (a synchronous job's ranks "
            "all step at its pace: only their phases show the straggler).",
        ),
        stat(
            "Slowest rank now, its node and step time",
            f"job:training_straggler_rank:step_seconds{{{job}}}",
            legend="rank {{rank}} on {{node}}",
            unit="s",
            width=4,
            text_mode=BigValueTextMode.VALUE_AND_NAME,
            description="The rank holding the job back (the straggler: the largest excess over the median rank "
            "when the job times phases, else the slowest step time), its node and its step time (in a synchronous "
            "job, the job's pace).",
        ),
        stat(
            "Tokens per second, whole job",
            f"job:training_tokens:rate{{{job}}}",
            unit="short",
            width=4,
            description="Tokens per second over every rank of the job.",
        ),
        stat(
            "Model TFLOP/s, whole job",
            f"job:training_model_flops:rate{{{job}}} / 1e12",
            unit="short",
            width=4,
            description="Model FLOPs per second over every rank, in TFLOP/s (framework's analytic estimate).",
        ),
        stat(
            "Optimizer steps per second",
            f"job:training_steps:rate{{{job}}}",
            unit="short",
            width=4,
            thresholds=((None, "red"), (1e-9, "green")),
            description="Optimizer steps per second (mean over ranks); 0 when the job hangs.",
        ),
    ]


def _progress_over_time(ctx: Context) -> list[Panel]:
    """Step time, stragglers and throughput over time."""
    job = _job(ctx)
    straggler = ctx.thresholds.training_straggler_ratio
    return [
        timeseries(
            "Step time: fastest, median and slowest rank",
            [
                Query(f"job:training_step_seconds:min{{{job}}}", "fastest rank"),
                Query(f"job:training_step_seconds:median{{{job}}}", "median rank"),
                Query(f"job:training_step_seconds:max{{{job}}}", "slowest rank"),
            ],
            unit="s",
            description="Step time of the fastest, median and slowest rank: three lines whatever the job's size. In "
            "a synchronous job they are one line, the job's pace (each rank times a step from the previous one's end, "
            "which all ranks leave together); its straggler shows in Where time goes.",
        ),
        timeseries(
            "Straggler ratio over time",
            f"job:training_straggler:ratio{{{job}}}",
            legend="straggler ratio",
            unit="percentunit",
            min=0,
            max=1,
            thresholds=((None, "red"), (straggler, "green")),
            description=f"The straggler ratio over time (median over slowest step time, or 1 - the straggler's "
            f"excess over the job's step time when lower); below {straggler} is a straggler.",
        ),
        timeseries(
            "Tokens per second over time, whole job",
            f"job:training_tokens:rate{{{job}}}",
            legend="tokens/s",
            unit="short",
            width=12,
            description="Tokens per second over every rank of the job.",
        ),
        timeseries(
            "Model TFLOP/s over time, whole job",
            f"job:training_model_flops:rate{{{job}}} / 1e12",
            legend="TFLOP/s",
            unit="short",
            width=12,
            description="Model FLOPs per second over every rank of the job, in TFLOP/s.",
        ),
    ]


def _slowest_ranks(ctx: Context) -> str:
    """The SLOWEST_RANKS ranks holding the job back most: by excess over the median rank when the job times phases,
    else by step time."""
    return _holding_back(ctx, "$__rate_interval", SLOWEST_RANKS)


def _ranks(ctx: Context) -> list[Panel]:
    """The slowest ranks now (raw training series of this job, one instant read) and the loss."""
    job = _job(ctx)
    slowest = _slowest_ranks(ctx)
    rank_traces = Link(
        "Slow steps of rank ${__data.fields.rank} in Tempo",
        _slow_steps(ctx, (RANK_ATTRIBUTE, traceql.GrafanaVariable("__data.fields.rank"))),
    )
    cluster = ctx.cluster
    step = _rank_step_seconds(ctx, "$__rate_interval")
    excess = _rank_excess(ctx, "$__rate_interval")
    pace = f"job:training_step_seconds:max{{{job}}}"
    # 1 / the straggler ratio the rank would give the job: its pace over the pace without the rank's excess, or its
    # step time over the median rank's without phases.
    times_median = (
        f"1 / (1 - ({excess} and on ({cluster}, rank, node) ({slowest})) / on ({cluster}) group_left () {pace}) "
        f"or on () ({step} and on ({cluster}, rank, node) ({slowest})) / on ({cluster}) group_left () "
        f"job:training_step_seconds:median{{{job}}}"
    )
    # The record holds the straggler at each evaluation: the ranks that ever were, picked once over the range (a line
    # per rank over time would grow with every rank that took its turn).
    was_slowest = f"job:training_straggler_rank:step_seconds{{{job}}}[$__range]"
    excess_over_range = f"max_over_time(job:training_straggler_rank:excess_seconds{{{job}}}[$__range])"
    time_as_slowest = f"count_over_time({was_slowest}) * {promql.duration_seconds(ctx.evaluation_interval)}"
    # The ranks that were it longest: one record names the straggler, whatever ranked it (excess or step time).
    slowest_over_range = f"topk({SLOWEST_RANKS}, {time_as_slowest})"
    picked = f"and on ({cluster}, hpc_job, rank, node) {slowest_over_range}"
    ranked = (
        "by their excess over the median rank (seconds per step beyond its, over the phases) when the job times "
        "phases, else by step time"
    )
    return [
        table(
            "Slowest ranks now",
            [
                Column(f"{step} and on ({cluster}, rank, node) ({slowest})", "Step time (s)"),
                Column(f"{excess} and on ({cluster}, rank, node) ({slowest})", "Excess over median rank (s)"),
                Column(
                    times_median,
                    "x median rank",
                    ((None, "green"), (1 / ctx.thresholds.training_straggler_ratio, "red")),
                    cell="color-text",
                ),
            ],
            labels=["rank", "node"],
            width=12,
            height=9,
            sort_by=("x median rank",),
            label_links={"node": common.node_link(ctx), "rank": rank_traces},
            description=f"The {SLOWEST_RANKS} ranks holding the job back most over the last few scrapes, {ranked} "
            "(in a synchronous job every rank's step time is the job's pace: the straggler shows only in its "
            "phases), their nodes, step time and excess, and x median rank: the job's step time over what it would "
            "be without the rank's excess (without phases, the rank's step time over the median rank's), red where "
            "TrainingStraggler fires. Raw training series of this job, read at one instant: a large job has "
            "thousands of ranks, and a panel over time would read every one at every point; per-rank rows are fine "
            "only because this view is one job. Click a node for its own view"
            + (", a rank for its slow steps in Tempo." if _traced(ctx) else "."),
        ),
        table(
            "Ranks that were the slowest over the range",
            [
                Column(slowest_over_range, "Time as the slowest", unit="s"),
                Column(f"{excess_over_range} {picked}", "Largest excess", unit="s"),
                Column(f"max_over_time({was_slowest}) {picked}", "Worst step time", unit="s"),
            ],
            labels=["rank", "node"],
            width=12,
            height=9,
            sort_by=("Time as the slowest",),
            label_links={"node": common.node_link(ctx)},
            description=f"The {SLOWEST_RANKS} ranks of this job that the recording rules named its straggler "
            f"longest over the dashboard's range ({ranked}), picked once over the range: how long they held that "
            "place (a rank that stays there is a straggler, one that changes every step is noise), their largest "
            "excess and their worst step time.",
        ),
        timeseries(
            "Training loss, mean over ranks",
            f"job:training_loss:avg{{{job}}}",
            legend="loss",
            unit="none",
            width=24,
            height=7,
            description="Training loss the job's ranks report at their last step (mean over ranks).",
        ),
    ]


def _progress(ctx: Context) -> Row:
    return Row("Progress", [*_progress_now(ctx), *_progress_over_time(ctx), *_ranks(ctx)])


def _where_time_goes(ctx: Context) -> Row:
    """Seconds per step in each phase the job times (the helper's tracker.phase): the median rank against the
    slowest over time (records: two lines per phase), and the slowest ranks' phases now (raw, one instant)."""
    job, cluster = _job(ctx), ctx.cluster
    straggler = 1 / ctx.thresholds.training_straggler_ratio
    per_step = _rank_phase_seconds(ctx, "$__rate_interval")
    slowest_phases = f"{per_step} and on ({cluster}, rank, node) {_slowest_ranks(ctx)}"
    no_phases = "A job that times no phase (no hpcobs_training_phase_seconds_total) draws nothing here."
    return Row(
        "Where time goes",
        [
            timeseries(
                "Seconds per step in each phase: median rank and slowest rank",
                [
                    Query(f"job:training_phase_seconds:median{{{job}}}", "{{phase}}, median rank"),
                    Query(f"job:training_straggler_rank:phase_seconds{{{job}}}", "{{phase}}, slowest rank"),
                ],
                unit="s",
                width=8,
                description="Seconds per step each phase takes on the median rank and on the slowest rank (the one "
                "\"Slowest rank now\" names): two lines per phase, whatever the job's size. A straggler's slow "
                "phase is the one where its line rises above the median rank's; in a synchronous job the median rank "
                "waits for it, so the median rank's backward (DDP) or forward (FSDP) line rises by as much. "
                f"{no_phases}",
            ),
            timeseries(
                "Slowest rank's excess over the median rank, per phase",
                f"job:training_straggler_rank:phase_seconds{{{job}}} - on ({cluster}, hpc_job, phase) "
                f"job:training_phase_seconds:median{{{job}}}",
                legend="{{phase}}",
                unit="s",
                width=6,
                description="Seconds per step the slowest rank spends in each phase beyond the median rank: the "
                f"highest line is the phase TrainingStraggler names. {no_phases}",
            ),
            table(
                "Slowest ranks' phases now",
                [
                    Column(slowest_phases, "Seconds per step", unit="s"),
                    Column(
                        f"({slowest_phases}) / on ({cluster}, phase) group_left () "
                        f"job:training_phase_seconds:median{{{job}}}",
                        "x median rank",
                        ((None, "green"), (straggler, "red")),
                        cell="color-text",
                    ),
                ],
                labels=["rank", "node", "phase"],
                width=10,
                sort_by=("x median rank",),
                label_links={"node": common.node_link(ctx)},
                description=f'Each phase of the job\'s {SLOWEST_RANKS} slowest ranks (as "Slowest ranks now" '
                "picks them): its seconds per step and that against the median rank's in the same phase, largest "
                f"first; red above {straggler:.3g}x, the straggler's slow phase on top (raw training series of this "
                "job, read at one instant and bounded by the slowest ranks times their phases); click a node for "
                f"its own view. {no_phases}",
            ),
        ],
    )


def _nccl(ctx: Context) -> Row:
    """Collective time and bus bandwidth per group of like collectives (recording_rules/training.py, LIKE), the
    NVLink-only communicators apart from the network ones."""
    job = _job(ctx)
    kinds = (
        ("network", common.NCCL_NETWORK, "{{collective}} {{message_size}} on {{n_nodes}} nodes ({{nranks}} ranks)"),
        ("NVLink-only", common.NCCL_NVLINK_ONLY, "{{collective}} {{message_size}} ({{nranks}} ranks)"),
    )
    return Row(
        "NCCL detail",
        [
            *(
                timeseries(
                    f"NCCL collective time, the job's {kind} communicators",
                    f"job:nccl_collective_seconds:avg{{{job}, {matcher}}}",
                    legend=legend,
                    unit="s",
                    width=12,
                    description=f"Mean time of each collective on the job's {kind} communicators, one line per "
                    "message-size bucket and communicator shape (NCCL Inspector; as many as this one job's kinds of "
                    "collective, not the fleet's): a bucket is compared with itself only; a line that starts or stops "
                    "is a change of what the job does (evaluation, checkpoint).",
                )
                for kind, matcher, legend in kinds
            ),
            *(
                timeseries(
                    f"NCCL bus bandwidth, the job's {kind} communicators",
                    f"job:nccl_bus_bandwidth:avg{{{job}, {matcher}}}",
                    legend=legend,
                    unit="Bps",
                    width=12,
                    description=f"Mean NCCL bus bandwidth on the job's {kind} communicators, per collective, "
                    "message-size bucket and communicator shape: small messages are latency-bound and never "
                    "reach the link's bandwidth.",
                )
                for kind, matcher, legend in kinds
            ),
        ],
        collapsed=True,
    )


def _gpus(ctx: Context) -> Row:
    cluster, job = ctx.cluster, _job(ctx)
    job_gpus = f'gpu:job:info{{{job}, node=~"$node"}}'
    job_gpu_util = (
        f"gpu:utilization:ratio{{{common.in_cluster(ctx)}}} * on ({cluster}, node, gpu) group_right () {job_gpus}"
    )
    least_busy = f"bottomk({LEAST_BUSY_GPUS}, {job_gpu_util})"
    job_gpu_memory = ctx.gpu("memory_used", keep=("hpc_job",), where={**_raw_job(ctx), "node": '=~"$node"'})
    return Row(
        "GPUs of the job",
        [
            heatmap(
                "GPU utilisation per node of the job",
                f'job:gpu_utilization_by_node:avg{{{job}, node=~"$node"}}',
                legend="{{node}}",
                unit="percentunit",
                min=0,
                max=1,
                width=12,
                description="Mean utilisation of the job's GPUs on each of its nodes, over time (one row per node): "
                "a cold row is a node the job waits for. One row per node is fine only because this view is one job.",
            ),
            table(
                "Least busy GPUs of the job now",
                [
                    Column(least_busy, "Utilisation", common.utilization(ctx), cell="color-text", unit="percentunit"),
                    Column(
                        f"{job_gpu_memory} and on ({cluster}, node, gpu) {least_busy}",
                        "Memory used",
                        unit="bytes",
                    ),
                ],
                labels=["node", "gpu"],
                width=12,
                label_links={"node": common.node_link(ctx)},
                description=f"The {LEAST_BUSY_GPUS} least utilised GPUs of the job now, and their framebuffer use "
                "(read at one instant: a line per GPU of a large job would read every GPU at every point); "
                "click a node for its own view.",
            ),
            timeseries(
                "GPU memory used, the job's fullest GPU",
                f"job:gpu_memory_used:max{{{job}}}",
                legend="largest GPU",
                unit="bytes",
                width=6,
                description="Framebuffer memory used on the job's fullest GPU (out-of-memory comes from the fullest).",
            ),
            timeseries(
                "GPU utilisation, SM and tensor activity, mean over the job's GPUs",
                [
                    Query(f"job:gpu_sm_active:avg{{{job}}}", "SM active"),
                    Query(f"job:gpu_tensor_active:avg{{{job}}}", "tensor active"),
                    Query(f"job:gpu_utilization:avg{{{job}}}", "utilisation"),
                ],
                unit="percentunit",
                min=0,
                max=1,
                width=6,
                description="Mean utilisation, SM activity and tensor-pipe activity over the job's GPUs.",
            ),
            timeseries(
                "GPU power of the job",
                f"job:gpu_power:watts{{{job}}}",
                legend="power",
                unit="watt",
                width=6,
                description="Power of the job's GPUs (a GPU shared with another job is split between them).",
            ),
            timeseries(
                "Lustre I/O of the job",
                [
                    Query(f"job:lustre_write_bytes:rate{{{job}}}", "write"),
                    Query(f"job:lustre_read_bytes:rate{{{job}}}", "read"),
                ],
                unit="Bps",
                width=6,
                description="Bytes per second the job writes (checkpoints) and reads on Lustre.",
            ),
        ],
    )


def _logs_and_traces(ctx: Context) -> Row:
    return Row(
        "Logs and traces",
        collapsed=True,
        panels=[
            logs(
                "Xid, NCCL, watchdog and OOM lines on the job's nodes",
                f'$log_selector | $log_node_label=~"$node" |~ `{common.JOB_LOG_LINES}`',
                description="Kernel Xid errors, NCCL WARN lines, PyTorch NCCL watchdog timeouts and out-of-memory "
                "kills on the job's nodes (node at All is the job's node list, never every host); set log_selector "
                "and log_node_label to your log shipper's labels.",
            ),
            text(
                "Traces of the job",
                f"[Slow steps of rank $rank]({_slow_steps(ctx, (RANK_ATTRIBUTE, RANK))}) · "
                f"[Slow steps of every rank]({_slow_steps(ctx)}) · [Every span of job $hpc_job]({_traces(ctx)}) "
                "in Tempo.",
                description="Opens Grafana Explore on the Tempo datasource with the step spans the training helper "
                "kept for being slow (each with a child span per phase) of the selected rank or of every rank, or "
                "with every span of the job.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="One training job: who runs it, its state and efficiency and its alerts; step time, stragglers, "
        "throughput, loss, where the time of a step goes, NCCL, its GPUs, logs and traces.",
        tags=("hpcobs", "training"),
        variables=(
            common.cluster_variable(ctx),
            *common.owner_variables(ctx, ("account", "user")),
            Variable(
                "hpc_job",
                "Job",
                f'query_result(job:gpus_allocated:count{{{in_cluster}, account=~"$account", user=~"$user"}})',
                regex='/hpc_job="([^"]+)"/',
                sort=VariableSort.NUMERICAL_DESC,
                description="Slurm job id: the jobs holding GPUs now, newest (highest id) first, the default.",
            ),
            Variable(
                "node",
                "Node",
                f"label_values(gpu:job:info{{{_job(ctx)}}}, node)",
                multi=True,
                include_all=True,
                all_value=None,
                description="The job's nodes; All is the job's node list (logs never read other hosts).",
            ),
            Variable(
                "rank",
                "Rank",
                f"query_result(sort_desc({_holding_back(ctx, ctx.rate_window)}))",
                regex='/rank="([0-9]+)"/',
                sort=VariableSort.DISABLED,
                description="The job's ranks, the one holding the job back first (by excess over the median rank "
                "when the job times phases, else by step time, over the recording rules' rate window): the default is "
                "the straggler when the dashboard opens; the traces links open its slow steps.",
            ),
            common.log_selector(ctx),
            common.log_node_label(ctx),
        ),
        rows=(_header(ctx), _progress(ctx), _where_time_goes(ctx), _gpus(ctx), _nccl(ctx), _logs_and_traces(ctx)),
        links=(
            *common.others(UID),
            Link("Slow steps of the rank (Tempo)", _slow_steps(ctx, (RANK_ATTRIBUTE, RANK))),
            Link("Job traces (Tempo)", _traces(ctx)),
        ),
        alerts=common.alerts(ctx, "Training"),
    )
