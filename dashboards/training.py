"""Training: one job ($hpc_job) — progress, stragglers, NCCL, its GPUs, its logs and traces (docs/dashboards.md).

Job-level series are recorded; the raw series read here (per-rank step time, loss, NCCL per message
size, GPU memory) are those of ONE job, selected through the catalogue.
"""

from grafana_foundation_sdk.models.common import BigValueTextMode

from hpcobs.context import Context
from hpcobs.dashboard import (
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
    text,
    timeseries,
)
from hpcobs.names import DashboardUid
from hpcobs.promql import aggregate

from . import common

UID = DashboardUid.TRAINING
UTILISATION = ((None, "red"), (0.25, "orange"), (0.6, "green"))


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
    """Every rank's step time (raw training series of this job) and the loss."""

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
    rank_step = f"{per_rank('step_seconds')} / ({per_rank('steps')} > 0)"
    return [
        heatmap(
            "Step time by rank",
            rank_step,
            legend="rank {{rank}}",
            unit="s",
            width=12,
            height=9,
            description="Step time of every rank of the job (one row per rank, raw training series of this "
            "job): a straggler is a hot row, a slow node a hot band.",
        ),
        timeseries(
            "Slowest ranks",
            f"topk(10, {rank_step})",
            legend="rank {{rank}} on {{node}}",
            unit="s",
            width=12,
            height=9,
            description="Step time of the ten slowest ranks of the job and their nodes.",
        ),
        timeseries(
            "Loss",
            ctx.select("training", ["loss"], ("hpc_job",), op="avg", where=_raw_job(ctx)),
            legend="loss",
            unit="none",
            width=24,
            height=7,
            description="Training loss the job's ranks report at their last step (mean over ranks).",
        ),
    ]


def _progress(ctx: Context) -> Row:
    return Row("Progress", [*_progress_now(ctx), *_progress_over_time(ctx), *_ranks(ctx)])


def _nccl(ctx: Context) -> Row:
    job = _job(ctx)
    return Row(
        "NCCL",
        [
            timeseries(
                "Collective time by collective",
                f"job:nccl_collective_seconds:avg{{{job}}}",
                legend="{{collective}}",
                unit="s",
                width=8,
                description="Mean time of each collective (NCCL Inspector).",
            ),
            timeseries(
                "Collective time by message size",
                ctx.select(
                    "nccl_inspector", ["coll_exec_time"], ("collective", "message_size"), op="avg", where=_raw_job(ctx)
                ),
                legend="{{collective}} {{message_size}}",
                unit="s",
                width=8,
                description="Mean collective time by collective and message size bucket (raw NCCL Inspector "
                "series of this job).",
            ),
            timeseries(
                "Bus bandwidth by collective",
                f"job:nccl_bus_bandwidth:avg{{{job}}}",
                legend="{{collective}}",
                unit="Bps",
                width=8,
                description="Mean NCCL bus bandwidth of each collective.",
            ),
        ],
    )


def _gpus(ctx: Context) -> Row:
    cluster, job = ctx.cluster, _job(ctx)
    job_gpus = f'gpu:job:info{{{job}, node=~"$node"}}'
    job_gpu_util = (
        f"gpu:utilization:ratio{{{common.in_cluster(ctx)}}} * on ({cluster}, node, gpu) group_right () {job_gpus}"
    )
    job_gpu_memory = ctx.gpu("memory_used", keep=("hpc_job",), where={**_raw_job(ctx), "node": '=~"$node"'})
    return Row(
        "GPUs of the job",
        [
            timeseries(
                "GPU utilisation by GPU",
                job_gpu_util,
                legend="{{node}} GPU {{gpu}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Utilisation of each GPU the job holds (one rank per GPU).",
            ),
            timeseries(
                "GPU memory used by GPU",
                job_gpu_memory,
                legend="{{node}} GPU {{gpu}}",
                unit="bytes",
                description="Framebuffer memory used on each GPU of the job (raw DCGM series of this job; one "
                "rank per GPU).",
            ),
            timeseries(
                "GPU utilisation by node",
                aggregate("avg", (cluster, "node"), job_gpu_util),
                legend="{{node}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Mean utilisation of the job's GPUs on each of its nodes: a cold node holds the job back.",
            ),
            timeseries(
                "GPU memory used by node",
                aggregate("sum", (cluster, "node"), job_gpu_memory),
                legend="{{node}}",
                unit="bytes",
                description="Framebuffer memory the job uses on each of its nodes.",
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
                width=8,
                description="Mean utilisation, SM activity and tensor-pipe activity over the job's GPUs.",
            ),
            timeseries(
                "GPU power",
                f"job:gpu_power:watts{{{job}}}",
                legend="power",
                unit="watt",
                width=8,
                description="Power of the job's GPUs (a GPU shared with another job is split between them).",
            ),
            timeseries(
                "Lustre I/O",
                [
                    Query(f"job:lustre_write_bytes:rate{{{job}}}", "write"),
                    Query(f"job:lustre_read_bytes:rate{{{job}}}", "read"),
                ],
                unit="Bps",
                width=8,
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
            common.LOG_SELECTOR,
            common.LOG_NODE_LABEL,
        ),
        rows=(_progress(ctx), _nccl(ctx), _gpus(ctx), _logs_and_traces(ctx)),
        links=(*common.others(UID), Link("Job traces (Tempo)", _traces(ctx))),
        alerts=common.alerts(ctx, "Training"),
    )
