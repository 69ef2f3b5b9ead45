"""Slurm jobs: queue, node states and drain reasons, allocation by account and user, the job table with
efficiency grades, out-of-memory kills (docs/dashboards.md). Recorded series only; every job links to the
training dashboard. Drain reasons and OOM counts appear where the Slurm exporter has them.

Efficiency grades follow Princeton's jobstats GPU utilisation colours: red at or below 15%, orange
below 25%, green from 25%.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Panel,
    Query,
    Row,
    Variable,
    bargauge,
    logs,
    stat,
    table,
    timeseries,
)
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.SLURM_JOBS
POOR, LOW = 15, 25  # percent
# Threshold steps colour values >= the step, so orange starts just above 15%: exactly 15% is red.
GRADES = ((None, "red"), (POOR + 1e-6, "orange"), (LOW, "green"))
JOB_LABELS = ["hpc_job", "user", "account", "partition"]


def _partitions(ctx: Context) -> str:
    return f'{common.in_cluster(ctx)}, partition=~"$partition"'


def _owned(ctx: Context) -> str:
    return f'{_partitions(ctx)}, account=~"$account", user=~"$user"'


def _drain_reasons(ctx: Context) -> list[Panel]:
    """Drained and down nodes with their reason, where the Slurm exporter reports it."""
    if "node_drain_reason" not in ctx.sources["slurm"].exporter.signals():
        return []
    in_cluster = common.in_cluster(ctx)
    return [
        table(
            "Drain and down reasons",
            [
                Column(
                    f"(time() - node:slurm_drained_since:timestamp{{{in_cluster}}}) / 3600 "
                    f"* on ({ctx.cluster}, node) group_left (reason) node:slurm_drain_reason:info{{{in_cluster}}}",
                    "Hours since",
                    ((None, "green"), (1, "orange"), (24, "red")),
                    cell="color-text",
                ),
            ],
            labels=["node", "reason"],
            width=24,
            height=7,
            links=(common.node_link(ctx),),
            shows=("slurm_nodes_down",),
            description="Drained and down nodes, the reason set with scontrol (or by Slurm, e.g. Kill task failed) "
            "and how long ago (SckyzO exporter's drain_reason collector); click a node for its GPUs.",
        ),
    ]


def _queue(ctx: Context) -> Row:
    parts = _partitions(ctx)
    in_cluster = common.in_cluster(ctx)
    return Row(
        "Queue and nodes",
        [
            stat(
                "Jobs pending",
                f"sum(partition:slurm_jobs_pending:count{{{parts}}}) or vector(0)",
                unit="none",
                description="Jobs waiting in the queue of the selected partitions.",
            ),
            stat(
                "Jobs running",
                f"sum(partition:slurm_jobs_running:count{{{parts}}}) or vector(0)",
                unit="none",
                description="Jobs running in the selected partitions.",
            ),
            stat(
                "GPUs allocated by Slurm",
                f"sum(partition:slurm_gpus_allocated:count{{{parts}}}) or vector(0)",
                unit="none",
                description="GPUs Slurm has allocated in the selected partitions.",
            ),
            stat(
                "Nodes down, drained or failed (cluster)",
                f'sum(cluster:slurm_nodes:count{{{in_cluster}, state=~"down|drain|fail"}}) or vector(0)',
                unit="none",
                # Orange at any node, a presentation choice: the cluster's count is not what the Slurm alerts
                # judge (a partition's nodes in one state, or its drained share).
                thresholds=((None, "green"), (1, "orange")),
                description="Nodes of the whole cluster in state down, drain or fail, each node once however many "
                "partitions it is in (the partition filter does not apply).",
            ),
            timeseries(
                "Queue by partition",
                [
                    Query(f"partition:slurm_jobs_pending:count{{{parts}}}", "{{partition}} pending"),
                    Query(f"partition:slurm_jobs_running:count{{{parts}}}", "{{partition}} running"),
                ],
                unit="none",
                description="Pending and running jobs per partition.",
            ),
            timeseries(
                "Node states (cluster)",
                f"cluster:slurm_nodes:count{{{in_cluster}}}",
                legend="{{state}}",
                unit="none",
                stack=True,
                description="Nodes of the whole cluster by Slurm state (alloc, mixed, idle, down, drain, fail), each "
                "node once however many partitions it is in.",
            ),
            bargauge(
                "GPUs allocated by partition (Slurm)",
                f"partition:slurm_gpus_allocated:count{{{parts}}}",
                legend="{{partition}}",
                unit="none",
                width=8,
                description="GPUs Slurm reports allocated per partition.",
            ),
            bargauge(
                "Node states by partition",
                f"partition:slurm_nodes:count{{{parts}}} > 0",
                legend="{{partition}} {{state}}",
                unit="none",
                width=16,
                description="Current node count per partition and state, as Slurm reports it: a node in two "
                "partitions counts in each.",
            ),
            *_drain_reasons(ctx),
        ],
    )


def _allocation(ctx: Context) -> Row:
    owned = _owned(ctx)
    return Row(
        "Allocation",
        [
            timeseries(
                "GPUs by account",
                f"sum by (account) (job:gpus_allocated:count{{{owned}}})",
                legend="{{account}}",
                unit="none",
                stack=True,
                width=8,
                description="GPUs held by each account's jobs (from the GPU exporter's job mapping).",
            ),
            timeseries(
                "GPUs by user",
                f"sum by (user) (job:gpus_allocated:count{{{owned}}})",
                legend="{{user}}",
                unit="none",
                stack=True,
                width=8,
                description="GPUs held by each user's jobs.",
            ),
            timeseries(
                "GPU power by account",
                f'account:gpu_power:watts{{{common.in_cluster(ctx)}, account=~"$account"}}',
                legend="{{account}}",
                unit="watt",
                width=8,
                description="Power of each account's GPUs.",
            ),
        ],
    )


def _jobs(ctx: Context) -> Row:
    owned = _owned(ctx)
    allocated = f"job:gpus_allocated:count{{{owned}}}"
    idle = f"job:gpus_allocated_idle:count{{{owned}}}"
    oom = (
        [
            timeseries(
                "Jobs ended out of memory",
                f"partition:slurm_jobs_oom:count{{{_partitions(ctx)}}}",
                legend="{{partition}}",
                unit="none",
                width=12,
                shows=("oom_kill",),
                description="Jobs slurmctld lists in state OUT_OF_MEMORY, per partition (Slurm's own metrics).",
            ),
        ]
        if ctx.sources["slurm"].exporter.signals_for("partition_jobs_oom")
        else []
    )
    return Row(
        "Jobs",
        [
            table(
                "Jobs",
                [
                    Column(allocated, "GPUs"),
                    Column(f"job:gpu_power:watts{{{owned}}}", "Power (W)"),
                    Column(
                        f"{common.over_range(ctx, f'job:gpu_power:watts{{{owned}}}')} / 3600 / 1000", "Energy (kWh)"
                    ),
                    Column(
                        f"avg_over_time(job:gpu_utilization:avg{{{owned}}}[$__range]) * 100",
                        "Mean GPU utilisation % (grade)",
                        GRADES,
                        cell="color-background",
                    ),
                    Column(
                        common.or_zero(idle, allocated), "Idle GPUs", ((None, "green"), (1, "red")), cell="color-text"
                    ),
                ],
                labels=JOB_LABELS,
                height=12,
                links=(common.training_link(ctx),),
                description="Running jobs with GPUs: mean utilisation and energy over the range, efficiency grade "
                "(jobstats: red <= 15%, orange < 25%); click a job for its training view.",
            ),
            table(
                "Jobs with idle GPUs",
                [Column(f"{idle} > 0", "Idle GPUs", ((None, "orange"),), cell="color-text")],
                labels=JOB_LABELS,
                width=12,
                links=(common.training_link(ctx),),
                shows=("idle_gpus",),
                description=f"Jobs holding GPUs at 0% for {ctx.thresholds.gpu_idle_window}.",
            ),
            *oom,
            logs(
                "Out-of-memory kills",
                "$log_selector |~ `oom[-_]kill|invoked oom-killer|[Oo]ut of memory|OOM failure`",
                width=12,
                description="Slurm and kernel out-of-memory kill lines; set log_selector to your log shipper's "
                "stream selector.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Slurm queue and node states, GPU allocation by account and user, jobs with efficiency grades.",
        tags=("hpcobs", "slurm"),
        variables=(
            common.cluster_variable(ctx),
            Variable(
                "partition",
                "Partition",
                f"label_values(partition:slurm_jobs_pending:count{{{in_cluster}}}, partition)",
                multi=True,
                include_all=True,
            ),
            *common.owner_variables(ctx, ("account", "user"), given=("partition",)),
            common.log_selector(ctx),
        ),
        rows=(_queue(ctx), _allocation(ctx), _jobs(ctx)),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Slurm"),
    )
