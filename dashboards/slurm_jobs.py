"""Slurm jobs: what is wrong now (the Slurm alerts firing, the nodes Slurm has down, drained or failing and why),
why the queue does not move (pending jobs by reason), the running jobs with their efficiency, and, collapsed, GPU
use by account and user (docs/dashboards.md). Recorded series only; every job links to the training dashboard,
every node to the node dashboard. Node states, drain and pending reasons and OOM counts appear where the Slurm
exporter has them.
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
JOB_LABELS = ["hpc_job", "user", "account", "partition"]
NOT_OK = "down|drain|fail"
# The Slurm alerts' fault scenarios (alerts/slurm.py fired_by): what fills the firing-alerts table.
SLURM_FAULTS = (
    "slurm_nodes_down",
    "queue_backlog",
    "oom_kill",
    "idle_gpus",
    "dbe",
    "row_remap_failure",
    "slurmctld_overload",
    "slurmdbd_down",
)
TOP = 10


def _partitions(ctx: Context) -> str:
    return f'{common.in_cluster(ctx)}, partition=~"$partition"'


def _owned(ctx: Context) -> str:
    """The selected jobs: partition, account, user and job variables."""
    return f'{_partitions(ctx)}, account=~"$account", user=~"$user", hpc_job=~"$hpc_job"'


def _signals(ctx: Context) -> set[str]:
    return set(ctx.sources["slurm"].exporter.signals())


def _job_links(ctx: Context) -> dict:
    return {"hpc_job": common.training_link(ctx)}


def _nodes_not_ok(ctx: Context) -> list[Panel]:
    """The nodes Slurm does not schedule on, where the exporter reports each node's state (SckyzO)."""
    if not ctx.sources["slurm"].exporter.signals_for("node_state"):
        return []
    in_cluster = common.in_cluster(ctx)
    cluster = ctx.cluster
    not_ok = f"node:slurm_unschedulable:count{{{in_cluster}}}"
    if "node_drain_reason" in _signals(ctx):
        # A node without a reason stays, with an empty reason; its time is unknown (-1) without a timestamp.
        with_reason = (
            f"({not_ok} * on ({cluster}, node) group_left (reason) node:slurm_drain_reason:info{{{in_cluster}}} "
            f"or ignoring (reason) {not_ok})"
        )
        since = (
            f"(time() - node:slurm_drained_since:timestamp{{{in_cluster}}}) * on ({cluster}, node) "
            f"group_left (state, reason) {with_reason} or {with_reason} * -1"
        )
    else:
        with_reason, since = not_ok, f"{not_ok} * -1"
    return [
        table(
            "Nodes Slurm does not schedule on",
            [Column(since, "Out of service for", mappings=((-1, "unknown", "orange"),), unit="s")],
            labels=["node", "state", "reason"],
            label_links={"node": common.node_link(ctx)},
            label_words={"state": common.SLURM_NODE_STATE},
            width=12,
            height=6,
            shows=("slurm_nodes_down",),
            description="Nodes down, drained, failing or in maintenance, each once whatever its partitions: their "
            "Slurm state, the reason set with scontrol (or by Slurm, e.g. Kill task failed) and how long ago it was "
            "set (SckyzO exporter's drain_reason collector; unknown without it). Click a node for its GPUs, ports "
            "and logs.",
        )
    ]


def _on_call(ctx: Context) -> Row:
    alerts = common.firing_alerts(
        ctx, "Slurm", labels=("partition", "node", "hpc_job", "user"), width=12, shows=SLURM_FAULTS
    )
    return Row("What is wrong now", [alerts, *_nodes_not_ok(ctx)])


def _pending_reasons(ctx: Context) -> list[Panel]:
    """Why jobs wait, where the exporter gives squeue's pending reason (SckyzO's queue collector)."""
    if "queue_pending" not in _signals(ctx):
        return []
    pending = f'user:slurm_jobs_pending_by_reason:count{{{_partitions(ctx)}, user=~"$user"}}'
    return [
        timeseries(
            "Jobs pending by reason",
            f"sum by (reason) ({pending})",
            legend="{{reason}}",
            unit="none",
            stack=True,
            width=12,
            description="Pending jobs of the selected partitions and users by squeue's reason: Resources or "
            "Priority is a busy queue; a QOS, association or reservation reason (QOSMaxGRESPerUser, "
            "AssocGrpGRES, ReqNodeNotAvail) is a limit to look at. One line per reason Slurm gives, a fixed list.",
        ),
        table(
            f"Users with the most pending jobs, by reason (top {TOP})",
            [
                Column(f"topk({TOP}, sum by (user, partition, reason) ({pending}))", "Jobs pending now", unit="none"),
            ],
            labels=["user", "partition", "reason"],
            width=12,
            description="Who is waiting and why, now: the users and partitions with the most pending jobs, per "
            "reason (SckyzO's queue collector; an empty user when the exporter runs with --no-collector.queue."
            "user-label).",
        ),
    ]


def _queue(ctx: Context) -> Row:
    parts = _partitions(ctx)
    in_cluster = common.in_cluster(ctx)
    return Row(
        "Queue and nodes",
        [
            stat(
                "Jobs pending (selected partitions)",
                f"sum(partition:slurm_jobs_pending:count{{{parts}}}) or vector(0)",
                unit="none",
                description="Jobs waiting in the queue of the selected partitions.",
            ),
            stat(
                "Jobs running (selected partitions)",
                f"sum(partition:slurm_jobs_running:count{{{parts}}}) or vector(0)",
                unit="none",
                description="Jobs running in the selected partitions.",
            ),
            stat(
                "GPUs allocated by Slurm (selected partitions)",
                f"sum(partition:slurm_gpus_allocated:count{{{parts}}}) or vector(0)",
                unit="none",
                description="GPUs Slurm has allocated in the selected partitions.",
            ),
            stat(
                "Nodes down, drained or failed (cluster)",
                f'sum(cluster:slurm_nodes:count{{{in_cluster}, state=~"{NOT_OK}"}}) or vector(0)',
                unit="none",
                # Orange at any node, a presentation choice: the cluster's count is not what the Slurm alerts
                # judge (a partition's nodes in one state, or its drained share).
                thresholds=common.ANY,
                description="Nodes of the whole cluster in state down, drain or fail, each node once however many "
                "partitions it is in (the partition filter does not apply).",
            ),
            *_pending_reasons(ctx),
            timeseries(
                "Jobs pending and running per partition",
                [
                    Query(f"partition:slurm_jobs_pending:count{{{parts}}}", "{{partition}} pending"),
                    Query(f"partition:slurm_jobs_running:count{{{parts}}}", "{{partition}} running"),
                ],
                unit="none",
                width=12,
                description="Pending and running jobs per partition (two lines per selected partition): a pending "
                "line that climbs while running stays flat is a queue that does not move.",
            ),
            timeseries(
                "Nodes per Slurm state (cluster)",
                f"cluster:slurm_nodes:count{{{in_cluster}}}",
                legend="{{state}}",
                unit="none",
                stack=True,
                width=12,
                description="Nodes of the whole cluster by Slurm state (alloc, mixed, idle, down, drain, fail), each "
                "node once however many partitions it is in.",
            ),
            bargauge(
                "GPUs allocated by Slurm per partition",
                f"partition:slurm_gpus_allocated:count{{{parts}}}",
                legend="{{partition}}",
                unit="none",
                width=8,
                description="GPUs Slurm reports allocated per partition, now.",
            ),
            bargauge(
                "Nodes per partition and Slurm state",
                f"partition:slurm_nodes:count{{{parts}}} > 0",
                legend="{{partition}} {{state}}",
                unit="none",
                width=16,
                description="Current node count per partition and state, as Slurm reports it: a node in two "
                "partitions counts in each.",
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
                "Jobs ended out of memory per partition",
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
                "Running jobs with GPUs",
                [
                    Column(allocated, "GPUs", unit="none"),
                    Column(f"job:gpu_power:watts{{{owned}}}", "Power", unit="watt"),
                    Column(
                        f"{common.over_range(ctx, f'job:gpu_power:watts{{{owned}}}')} / 3600 / 1000",
                        "Energy over the range",
                        unit="kwatth",
                    ),
                    Column(
                        f"avg_over_time(job:gpu_utilization:avg{{{owned}}}[$__range])",
                        "Mean GPU utilisation",
                        common.utilization(ctx),
                        cell="color-background",
                        unit="percentunit",
                    ),
                    Column(common.or_zero(idle, allocated), "Idle GPUs", common.BAD, cell="color-text", unit="none"),
                ],
                labels=JOB_LABELS,
                height=12,
                label_links=_job_links(ctx),
                description="Running jobs of the selected partitions, accounts, users and jobs: GPUs and power now, "
                "energy and mean utilisation over the range (red below the poor level, green from the good one, "
                "as on every dashboard), GPUs idle now; click a job for its training view.",
            ),
            table(
                "Jobs with idle GPUs",
                [Column(f"{idle} > 0", "Idle GPUs", common.ANY, cell="color-text", unit="none")],
                labels=JOB_LABELS,
                width=12,
                label_links=_job_links(ctx),
                shows=("idle_gpus",),
                description=f"Selected jobs holding GPUs at 0% for {ctx.thresholds.gpu_idle_window} "
                "(SlurmJobHoldingIdleGpus); click a job for its training view.",
            ),
            *oom,
            logs(
                "Out-of-memory kill log lines",
                "$log_selector |~ `oom[-_]kill|invoked oom-killer|[Oo]ut of memory|OOM failure`",
                width=12,
                description="Slurm and kernel out-of-memory kill lines; set log_selector to your log shipper's "
                "stream selector.",
            ),
        ],
    )


def _by_owner(ctx: Context, owner: str, labels: list[str]) -> Panel:
    """The top accounts or users of the selected jobs by GPU-hours over the range, picked once: an instant table."""
    owned = _owned(ctx)
    by = ", ".join(labels)
    gpu_hours = f"sum by ({by}) ({common.over_range(ctx, f'job:gpus_allocated:count{{{owned}}}')}) / 3600"
    top = f"topk({TOP}, {gpu_hours})"
    # The other columns keep the rows of the top ones only, so the table has no row without GPU-hours.
    kept = f"and on ({by}) {top}"
    return table(
        f"{owner.capitalize()}s by GPU-hours (top {TOP})",
        [
            Column(top, "GPU-hours over the range", unit="none"),
            Column(f"sum by ({by}) (job:gpus_allocated:count{{{owned}}}) {kept}", "GPUs now", unit="none"),
            Column(
                f"sum by ({by}) ({common.over_range(ctx, f'job:gpu_power:watts{{{owned}}}')}) / 3600 / 1000 {kept}",
                "Energy over the range",
                unit="kwatth",
            ),
        ],
        labels=labels,
        width=12,
        height=8,
        description=f"The {TOP} {owner}s whose selected jobs held the most GPU-hours over the range, picked once "
        "over the whole range, with the GPUs they hold now and the energy their GPUs drew.",
    )


def _allocation(ctx: Context) -> Row:
    owned = _owned(ctx)
    return Row(
        "Allocation by account and user",
        [
            timeseries(
                "GPUs held by the selected jobs",
                f"sum(job:gpus_allocated:count{{{owned}}}) or vector(0)",
                legend="GPUs",
                unit="none",
                width=12,
                description="GPUs held by the jobs of the selected partitions, accounts, users and jobs (from the "
                "GPU exporter's job mapping): one line whatever the number of jobs.",
            ),
            timeseries(
                "GPU power of the selected jobs",
                f"sum(job:gpu_power:watts{{{owned}}}) or vector(0)",
                legend="power",
                unit="watt",
                width=12,
                description="Power drawn by the GPUs of the selected jobs, one line.",
            ),
            _by_owner(ctx, "account", ["account"]),
            _by_owner(ctx, "user", ["user", "account"]),
        ],
        collapsed=True,
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Slurm alerts and the nodes out of service first, then why the queue waits, the running jobs "
        "with their efficiency, and GPU use by account and user.",
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
            *common.owner_variables(ctx, ("account", "user", "hpc_job"), given=("partition",)),
            common.log_selector(ctx),
        ),
        rows=(_on_call(ctx), _queue(ctx), _jobs(ctx), _allocation(ctx)),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Slurm"),
    )
