"""Training: one job ($hpc_job) — progress, stragglers, NCCL, its GPUs, its logs and traces (docs/dashboards.md).

Job-level series are recorded, per node where a job spans many (a job on 8,192 GPUs has 1,024 nodes and
8,192 ranks); the raw series read here (per-rank step time, GPU memory) are those of ONE job, selected
through the catalogue, and read at one instant, bounded to the slowest ranks and least busy GPUs: over time
they would be read for every rank or GPU at every point drawn.
"""

from grafana_foundation_sdk.models.common import BigValueTextMode

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
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.TRAINING
UTILISATION = ((None, "red"), (0.25, "orange"), (0.6, "green"))
SLOWEST_RANKS = 10
LEAST_BUSY_GPUS = 10


def _job(ctx: Context) -> str:
    """Matchers of recorded series on the selected job."""
    return f'{common.in_cluster(ctx)}, hpc_job="$hpc_job"'


def _raw_job(ctx: Context) -> dict[str, str]:
    """Matchers of the selected job's raw series."""
    return {ctx.cluster: f'="${ctx.cluster}"', "hpc_job": '="$hpc_job"'}


def _traces(ctx: Context) -> str:
    tempo = ctx.config.get("grafana", "datasources")["tempo"]["uid"]
    return explore_url(tempo, "tempo", '{ .hpc_job = "$hpc_job" }', "traceql")


def _progress_now(ctx: Context) -> list[Panel]:
    """The job's last values: step time, stragglers, throughput."""
    job = _job(ctx)
    straggler = ctx.thresholds.training_straggler_ratio
    return [
        stat(
            "Median step time",
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
            description=f"Median rank's step time over the slowest rank's: 1 when balanced, below {straggler} "
            "a straggler holds the job back.",
        ),
        stat(
            "Slowest rank",
            f"job:training_slowest_rank:step_seconds{{{job}}}",
            legend="rank {{rank}} on {{node}}",
            unit="s",
            width=4,
            text_mode=BigValueTextMode.VALUE_AND_NAME,
            description="The slowest rank, its node and its step time.",
        ),
        stat(
            "Tokens/s",
            f"job:training_tokens:rate{{{job}}}",
            unit="short",
            width=4,
            description="Tokens per second over every rank.",
        ),
        stat(
            "Model TFLOP/s",
            f"job:training_model_flops:rate{{{job}}} / 1e12",
            unit="short",
            width=4,
            description="Model FLOPs per second over every rank, in TFLOP/s (framework's analytic estimate).",
        ),
        stat(
            "Steps/s",
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
            "Step time",
            [
                Query(f"job:training_step_seconds:min{{{job}}}", "fastest rank"),
                Query(f"job:training_step_seconds:median{{{job}}}", "median rank"),
                Query(f"job:training_step_seconds:max{{{job}}}", "slowest rank"),
            ],
            unit="s",
            description="Step time of the fastest, median and slowest rank.",
        ),
        timeseries(
            "Straggler ratio over time",
            f"job:training_straggler:ratio{{{job}}}",
            legend="median / slowest",
            unit="percentunit",
            min=0,
            max=1,
            thresholds=((None, "red"), (straggler, "green")),
            description=f"Median over slowest rank step time; below {straggler} is a straggler.",
        ),
        timeseries(
            "Slowest rank over time",
            f"job:training_slowest_rank:step_seconds{{{job}}}",
            legend="rank {{rank}} on {{node}}",
            unit="s",
            width=8,
            description="Which rank, on which node, was the slowest over time, and its step time.",
        ),
        timeseries(
            "Tokens/s over time",
            f"job:training_tokens:rate{{{job}}}",
            legend="tokens/s",
            unit="short",
            width=8,
            description="Tokens per second over every rank.",
        ),
        timeseries(
            "Model TFLOP/s over time",
            f"job:training_model_flops:rate{{{job}}} / 1e12",
            legend="TFLOP/s",
            unit="short",
            width=8,
            description="Model FLOPs per second over every rank, in TFLOP/s.",
        ),
    ]


def _ranks(ctx: Context) -> list[Panel]:
    """The slowest ranks now (raw training series of this job, one instant read) and the loss."""
    job = _job(ctx)

    def per_rank(signal: str) -> str:
        return ctx.select(
            "training",
            [signal],
            ("rank", "node"),
            op="sum",
            where=_raw_job(ctx),
            over=lambda expr: f"rate({expr}[$__rate_interval])",
        )

    # A rank's step time, as the recording rules compute it (rate of step seconds over rate of steps).
    slowest = f"topk({SLOWEST_RANKS}, {per_rank('step_seconds')} / ({per_rank('steps')} > 0))"
    cluster = ctx.cluster
    return [
        table(
            "Slowest ranks now",
            [
                Column(slowest, "Step time (s)"),
                Column(
                    f"{slowest} / on ({cluster}) group_left () job:training_step_seconds:median{{{job}}}",
                    "x median rank",
                    ((None, "green"), (1 / ctx.thresholds.training_straggler_ratio, "red")),
                    cell="color-text",
                ),
            ],
            labels=["rank", "node"],
            width=12,
            height=9,
            links=(common.node_link(ctx),),
            description=f"The {SLOWEST_RANKS} slowest ranks of the job over the last few scrapes, their nodes and "
            "their step time against the median rank's (raw training series of this job, read at one instant: "
            "a large job has thousands of ranks, and a panel over time would read every one at every point); "
            "click a rank for its node's GPUs. The slowest rank over time is in the Progress panels above.",
        ),
        timeseries(
            "Loss",
            f"job:training_loss:avg{{{job}}}",
            legend="loss",
            unit="none",
            width=12,
            height=9,
            description="Training loss the job's ranks report at their last step (mean over ranks).",
        ),
    ]


def _progress(ctx: Context) -> Row:
    return Row("Progress", [*_progress_now(ctx), *_progress_over_time(ctx), *_ranks(ctx)])


def _nccl(ctx: Context) -> Row:
    """Collective time and bus bandwidth per group of like collectives (recording_rules/training.py, LIKE), the
    NVLink-only communicators apart from the network ones."""
    job = _job(ctx)
    kinds = (
        ("network", common.NCCL_NETWORK, "{{collective}} {{message_size}} on {{n_nodes}} nodes ({{nranks}} ranks)"),
        ("NVLink-only", common.NCCL_NVLINK_ONLY, "{{collective}} {{message_size}} ({{nranks}} ranks)"),
    )
    return Row(
        "NCCL",
        [
            *(
                timeseries(
                    f"Collective time, {kind} communicators",
                    f"job:nccl_collective_seconds:avg{{{job}, {matcher}}}",
                    legend=legend,
                    unit="s",
                    width=12,
                    description=f"Mean time of each collective on the job's {kind} communicators, one line per "
                    "message-size bucket and communicator shape (NCCL Inspector): a bucket is compared with itself "
                    "only; a line that starts or stops is a change of what the job does (evaluation, checkpoint).",
                )
                for kind, matcher, legend in kinds
            ),
            *(
                timeseries(
                    f"Bus bandwidth, {kind} communicators",
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
                "GPU utilisation by node",
                f'job:gpu_utilization_by_node:avg{{{job}, node=~"$node"}}',
                legend="{{node}}",
                unit="percentunit",
                min=0,
                max=1,
                width=12,
                description="Mean utilisation of the job's GPUs on each of its nodes, over time (one row per node): "
                "a cold row is a node the job waits for.",
            ),
            table(
                "Least busy GPUs now",
                [
                    Column(least_busy, "Utilisation", UTILISATION, cell="color-text"),
                    Column(
                        f"{job_gpu_memory} / 2^30 and on ({cluster}, node, gpu) {least_busy}",
                        "Memory used (GiB)",
                    ),
                ],
                labels=["node", "gpu"],
                width=12,
                links=(common.node_link(ctx),),
                description=f"The {LEAST_BUSY_GPUS} least utilised GPUs of the job now, and their framebuffer use "
                "(read at one instant: a line per GPU of a large job would read every GPU at every point); "
                "click a node for its GPUs over time.",
            ),
            timeseries(
                "GPU memory used",
                f"job:gpu_memory_used:max{{{job}}}",
                legend="largest GPU",
                unit="bytes",
                width=6,
                description="Framebuffer memory used on the job's fullest GPU (out-of-memory comes from the fullest).",
            ),
            timeseries(
                "SM and tensor activity",
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
                "GPU power",
                f"job:gpu_power:watts{{{job}}}",
                legend="power",
                unit="watt",
                width=6,
                description="Power of the job's GPUs (a GPU shared with another job is split between them).",
            ),
            timeseries(
                "Lustre I/O",
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
        [
            logs(
                "Xid, NCCL, watchdog and OOM lines on the job's nodes",
                f'$log_selector | $log_node_label=~"$node" |~ `{common.JOB_LOG_LINES}`',
                description="Kernel Xid errors, NCCL WARN lines, PyTorch NCCL watchdog timeouts and out-of-memory "
                "kills on the job's nodes; set log_selector and log_node_label to your log shipper's labels.",
            ),
            text(
                "Traces",
                f"[Traces of job $hpc_job in Tempo]({_traces(ctx)}) (spans with attribute `hpc_job`).",
                description="Opens Grafana Explore on the Tempo datasource with the job's traces.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="One training job: step time, stragglers, throughput, loss, NCCL, its GPUs, logs and traces.",
        tags=("hpcobs", "training"),
        variables=(
            common.cluster_variable(ctx),
            *common.owner_variables(ctx, ("account", "user")),
            Variable(
                "hpc_job",
                "Job",
                f'label_values(job:gpus_allocated:count{{{in_cluster}, user=~"$user"}}, hpc_job)',
                description="Slurm job id.",
            ),
            Variable(
                "node",
                "Node",
                f"label_values(gpu:job:info{{{_job(ctx)}}}, node)",
                multi=True,
                include_all=True,
                description="The job's nodes.",
            ),
            common.log_selector(ctx),
            common.log_node_label(ctx),
        ),
        rows=(_progress(ctx), _nccl(ctx), _gpus(ctx), _logs_and_traces(ctx)),
        links=(*common.others(UID), Link("Job traces (Tempo)", _traces(ctx))),
        alerts=common.alerts(ctx, "Training"),
    )
