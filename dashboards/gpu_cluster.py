"""GPU cluster: what is wrong now and where, the fleet at a glance (docs/dashboards.md); one node's GPUs are on the
node dashboard, which every node links to.

Panels read recorded series only. Xid, row remap, NVLink and clock event panels exist only where dcgm-exporter
runs: the AMD exporter has no equivalent of those fields.
Over time the fleet is drawn as totals and distributions, a fixed number of lines whatever its size; which
nodes, GPUs and jobs are affected is an instant table.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Mappings,
    Panel,
    Query,
    Row,
    heatmap,
    stat,
    table,
    timeseries,
)
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.GPU_CLUSTER
XID_FAULTS = ("xid79", "xid48", "xid13", "dbe", "row_remap_failure")
# The faults that put a GPU in gpu:problems:count (recording_rules/gpu_health.py).
PROBLEM_FAULTS = (*XID_FAULTS, "row_remap_pending", "thermal")
# The `problem` label of gpu:problems:count: red takes the GPU out of service, orange needs a look.
GPU_PROBLEM: Mappings = (
    ("xid", "Xid", "orange"),
    ("ecc_uncorrectable", "uncorrectable ECC", "red"),
    ("row_remap_failed", "row remap failed", "red"),
    ("row_remap_pending", "row remap pending", "orange"),
    ("throttled", "throttled", "orange"),
    ("hot", "hot", "orange"),
)
# Faults that fire GPU, node or exporter alerts (their fired_by), so fill the firing-alerts table.
ALERTED_FAULTS = (*PROBLEM_FAULTS, "nvlink_errors", "idle_gpus", "exporter_down")
NOT_OK: Mappings = ((1, "not OK", "red"),)
TOP = 10  # offenders an instant table lists


def _owned_gpus(ctx: Context) -> str:
    """One job per allocated GPU, with its user where the job-info record has one: a GPU shared by two jobs is shown
    with one of them, so that a join on the GPU stays one-to-one."""
    jobs = f"topk by ({ctx.cluster}, node, gpu) (1, gpu:job:info{{{common.in_cluster(ctx)}}})"
    return f"({common.with_owner(ctx, jobs)})"


def _on_call(ctx: Context, nvidia: bool) -> Row:
    """What is wrong now and where: the domain's firing alerts and the GPUs not OK, with their node, job and user."""
    problems = f"gpu:problems:count{{{common.in_cluster(ctx)}}}"
    with_owner = (
        f"{problems} * on ({ctx.cluster}, node, gpu) group_left (hpc_job, user) {_owned_gpus(ctx)} "
        f"or ignoring (hpc_job, user) {problems}"
    )
    not_ok = table(
        "GPUs not OK now",
        [Column(with_owner, "State", mappings=NOT_OK, cell="color-text", unit="none")],
        labels=["node", "gpu", "problem", "xid_class", "err_code", "hpc_job", "user"],
        width=24,  # seven columns: half the width cut off the job and its user
        height=7,
        label_links={"node": common.node_link(ctx), "hpc_job": common.training_link(ctx)},
        label_words={"problem": GPU_PROBLEM, "xid_class": common.XID_CLASS},
        shows=PROBLEM_FAULTS,
        description="Each GPU with a problem now, one row per problem: its last Xid (and the Xid's class), "
        "uncorrectable ECC errors in the last hour, a failed or pending row remap, a hardware or thermal clock "
        f"slowdown, or a temperature above {ctx.thresholds.gpu_temperature_celsius:g} C; and the job holding it "
        "with the job's user. Click a node for its dashboard, a job for its training view.",
    )
    return Row(
        "On call: what is wrong now",
        [
            common.firing_alerts(ctx, "Gpu", "Node", "Exporter", width=24, height=7, shows=ALERTED_FAULTS),
            *([not_ok] if nvidia else []),
        ],
    )


def _unhealthy(ctx: Context) -> str:
    return f"sum(cluster:gpus_unhealthy:count{{{common.in_cluster(ctx)}}}) or vector(0)"


def _idle(ctx: Context) -> str:
    return f"sum(node:gpus_allocated_idle:count{{{common.in_cluster(ctx)}}}) or vector(0)"


def _counts(ctx: Context) -> list[Panel]:
    """How many GPUs the cluster has, allocated, allocated but idle and unhealthy."""
    in_cluster = common.in_cluster(ctx)
    return [
        stat(
            "GPUs in the cluster",
            f"sum(cluster:gpus:count{{{in_cluster}}})",
            unit="none",
            width=4,
            description="GPUs reporting to the GPU exporters.",
        ),
        stat(
            "GPUs allocated",
            f"sum(cluster:gpus_allocated:count{{{in_cluster}}})",
            unit="none",
            width=4,
            description="GPUs held by at least one Slurm job (from the exporter's job mapping).",
        ),
        stat(
            "GPUs allocated but idle",
            _idle(ctx),
            unit="none",
            width=4,
            thresholds=common.ANY,
            description=f"GPUs held by the same job for {ctx.thresholds.gpu_idle_window} with every "
            "utilisation sample at 0; the Nodes table below lists them first after the unhealthy ones.",
        ),
        stat(
            "GPUs unhealthy",
            _unhealthy(ctx),
            unit="none",
            width=4,
            thresholds=common.BAD,
            description="GPUs with a drain-class Xid or a failed row remap (NVIDIA), a health check not OK "
            "(AMD): drain the node. Which ones: GPUs not OK now, above.",
        ),
    ]


def _fleet(ctx: Context, nvidia: bool) -> Row:
    in_cluster = common.in_cluster(ctx)
    power = f"cluster:gpu_power:watts{{{in_cluster}}}"
    return Row(
        "Fleet",
        [
            *_counts(ctx),
            stat(
                "Mean GPU utilisation, cluster",
                f"cluster:gpu_utilization:avg{{{in_cluster}}}",
                unit="percentunit",
                width=4,
                thresholds=common.utilization(ctx),
                min=0,
                max=1,
                description="Mean utilisation over every GPU of the cluster.",
            ),
            stat(
                "Mean SM active, mean over nodes",
                f"avg(node:gpu_sm_active:avg{{{in_cluster}}})",
                unit="percentunit",
                width=4,
                thresholds=common.utilization(ctx),
                min=0,
                max=1,
                description="Mean over nodes of the fraction of time SMs had a warp resident (DCGM profiling).",
            ),
            stat(
                "GPU board power, cluster total",
                f"sum({power})",
                unit="watt",
                width=4,
                description="Board power of every GPU of the cluster, summed (not the nodes' wall power).",
            ),
            stat(
                "GPU energy today, cluster total",
                f"sum({common.over_range(ctx, power)}) / 3600",
                unit="watth",
                width=4,
                time_from="now/d",
                description="GPU board energy since midnight: the recorded power integrated over the rule "
                f"evaluation interval ({ctx.evaluation_interval}).",
            ),
            timeseries(
                "GPUs in the cluster: allocated, idle, unhealthy",
                [
                    Query(f"sum(cluster:gpus:count{{{in_cluster}}})", "total"),
                    Query(f"sum(cluster:gpus_allocated:count{{{in_cluster}}})", "allocated"),
                    Query(_idle(ctx), "allocated but idle"),
                    Query(_unhealthy(ctx), "unhealthy"),
                ],
                unit="none",
                width=16,
                description="GPUs in the fleet, held by jobs, held but idle, and unhealthy: four lines whatever "
                "the fleet's size.",
            ),
            _nodes_table(ctx, nvidia),
        ],
    )


def _nodes_table(ctx: Context, nvidia: bool) -> Panel:
    """The nodes, worst first: unhealthy GPUs, then allocated but idle, then throttled or with an Xid."""
    in_cluster = common.in_cluster(ctx)
    everyone = f"node:gpus:count{{{in_cluster}}}"

    def or_zero(condition_count: str) -> str:
        return common.or_zero(condition_count, everyone)

    def problem(expr: str, name: str) -> Column:
        return Column(or_zero(expr), name, common.ANY, cell="color-text", unit="none")

    jobs_on_gpus = f"gpu:job:info{{{in_cluster}}}"
    users = f"{jobs_on_gpus} * on ({ctx.cluster}, hpc_job) group_left (user) job:slurm_job_info:max{{{in_cluster}}}"
    nvidia_problems = (
        [
            problem(f"node:gpus_throttled:count{{{in_cluster}}}", "Throttled"),
            problem(f"sum by ({ctx.cluster}, node) (node:gpus_by_xid:count{{{in_cluster}}})", "With an Xid"),
        ]
        if nvidia
        else []
    )
    slurm = ctx.sources["slurm"].exporter
    drained = (
        [
            Column(
                f"node:slurm_drain_reason:info{{{in_cluster}}} or on ({ctx.cluster}, node) {everyone} * 0",
                "Slurm",
                mappings=((1, "drained or down", "orange"), (0, "in service", "green")),
                cell="color-text",
                unit="none",
            )
        ]
        if "node_drain_reason" in slurm.signals()
        else []
    )
    problems = [
        Column(
            or_zero(f"node:gpus_unhealthy:count{{{in_cluster}}}"), "Unhealthy", common.BAD, "color-background", "none"
        ),
        problem(f"node:gpus_allocated_idle:count{{{in_cluster}}}", "Allocated but idle"),
        *nvidia_problems,
    ]
    columns = [
        *problems,
        Column(everyone, "GPUs", unit="none"),
        Column(f"node:gpus_allocated:count{{{in_cluster}}}", "Allocated", unit="none"),
        Column(
            or_zero(f"count by ({ctx.cluster}, node) (group by ({ctx.cluster}, node, hpc_job) ({jobs_on_gpus}))"),
            "Jobs",
            unit="none",
        ),
        Column(
            or_zero(f"count by ({ctx.cluster}, node) (group by ({ctx.cluster}, node, user) ({users}))"),
            "Users",
            unit="none",
        ),
        Column(
            f"node:gpu_utilization:avg{{{in_cluster}}}",
            "Utilisation",
            common.utilization(ctx),
            cell="color-text",
            unit="percentunit",
        ),
        Column(f"node:gpu_power:watts{{{in_cluster}}}", "GPU power", unit="watt"),
        *drained,
    ]
    return table(
        "Nodes, worst first",
        columns,
        labels=["node", *(["reason"] if drained else [])],
        height=10,
        label_links={"node": common.node_link(ctx)},
        sort_by=[column.name for column in problems],  # ties broken by the next problem
        description="Per node, worst first (unhealthy GPUs, then allocated but idle ones"
        + (", throttled ones, ones with an Xid" if nvidia else "")
        + "): GPUs, allocated, the jobs holding them and their users, mean GPU utilisation, GPU board power"
        + (", and the Slurm drain reason where the node is drained" if drained else "")
        + ". Click a node for its dashboard.",
    )


def _usage(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    owned = f'{in_cluster}, partition=~"$partition", account=~"$account", user=~"$user", hpc_job=~"$hpc_job"'
    gpu_hours = f"topk({TOP}, {common.over_range(ctx, f'job:gpus_allocated:count{{{owned}}}')} / 3600)"
    return Row(
        "Utilisation by partition and account",
        [
            timeseries(
                "Mean GPU utilisation per partition",
                f'partition:gpu_utilization:avg{{{in_cluster}, partition=~"$partition"}}',
                legend="{{partition}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Mean utilisation of the GPUs that jobs of each partition hold (a line per partition).",
            ),
            timeseries(
                "Mean GPU utilisation per account",
                f'account:gpu_utilization:avg{{{in_cluster}, account=~"$account"}}',
                legend="{{account}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Mean utilisation of the GPUs that jobs of each account hold (a line per account).",
            ),
            timeseries(
                "GPUs allocated per account",
                f'account:gpus_allocated:count{{{in_cluster}, account=~"$account"}}',
                legend="{{account}}",
                unit="none",
                stack=True,
                description="GPUs held by each account's jobs (jobs without Slurm info have no account).",
            ),
            table(
                f"Top {TOP} jobs by GPU-hours over the range",
                [
                    Column(gpu_hours, "GPU-hours", unit="none"),
                    Column(
                        f"job:gpu_utilization:avg{{{owned}}} and on ({ctx.cluster}, hpc_job) {gpu_hours}",
                        "GPU utilisation now",
                        common.utilization(ctx),
                        cell="color-text",
                        unit="percentunit",
                    ),
                ],
                labels=["hpc_job", "user", "account", "partition"],
                width=12,
                label_links={"hpc_job": common.training_link(ctx)},
                description="The jobs that held the most GPU-hours over the dashboard's range (recorded GPU count x "
                "evaluation interval, the ten picked once over the range) and the mean utilisation of their GPUs "
                "now; click a job for its training view.",
            ),
        ],
        collapsed=True,
    )


def _nvidia_health(ctx: Context) -> list[Panel]:
    """dcgm-exporter only: the Xid, problem and NVLink panels."""
    in_cluster = common.in_cluster(ctx)
    problems = f"gpu:problems:count{{{in_cluster}}}"
    return [
        timeseries(
            "GPUs not OK in the cluster, per problem",
            f"count by ({ctx.cluster}, problem) ({problems})",
            legend="{{problem}}",
            unit="none",
            width=8,
            stack=True,
            shows=PROBLEM_FAULTS,
            description="GPUs of the cluster with each problem over time (Xid, uncorrectable ECC, row remap "
            "failed or pending, throttled, hot): a line per problem whatever the fleet's size. Which GPUs: the "
            "tables beside and at the top.",
        ),
        timeseries(
            "GPUs per last Xid code, cluster",
            f"cluster:gpus_by_xid:count{{{in_cluster}}}",
            legend="Xid {{err_code}} ({{xid_class}})",
            unit="none",
            width=8,
            stack=True,
            shows=XID_FAULTS,
            description="GPUs of the cluster by the code of their last Xid error and its class (NVIDIA's Xid "
            "catalogue: fell_off_bus and drain take the node out of service, application is the job's, "
            "warning needs a reset soon): a line per code seen.",
        ),
        table(
            f"Top {TOP} nodes by GPUs not OK over the range",
            [
                Column(
                    f"topk({TOP}, count by ({ctx.cluster}, node, problem, xid_class) "
                    f"(max_over_time({problems}[$__range])))",
                    "GPUs",
                    ((None, "orange"),),
                    cell="color-text",
                    unit="none",
                )
            ],
            labels=["node", "problem", "xid_class"],
            width=8,
            label_links={"node": common.node_link(ctx)},
            label_words={"problem": GPU_PROBLEM, "xid_class": common.XID_CLASS},
            shows=PROBLEM_FAULTS,
            description="Per node and problem, the GPUs that had it at some time in the dashboard's range (the "
            "ten worst picked once over the range); click a node for its dashboard.",
        ),
        table(
            "Nodes with Xid errors now",
            [Column(f"node:gpus_by_xid:count{{{in_cluster}}}", "GPUs", ((None, "orange"),), "color-text", unit="none")],
            labels=["node", "err_code", "xid_class"],
            width=12,
            label_links={"node": common.node_link(ctx)},
            label_words={"xid_class": common.XID_CLASS},
            shows=XID_FAULTS,
            description="Per node, Xid code and class: GPUs whose last Xid is that code; click a node for its "
            "dashboard.",
        ),
        table(
            "Nodes with NVLink errors now",
            [
                # Orange only: the record sums CRC, replay and recovery errors, which GpuNvlinkErrors holds to
                # separate limits (CRC per second, replay per minute), so no one limit applies to the sum.
                Column(
                    f"node:gpu_nvlink_errors:rate{{{in_cluster}}} > 0",
                    "Errors",
                    ((None, "orange"),),
                    cell="color-text",
                    unit="eps",
                )
            ],
            labels=["node"],
            width=12,
            label_links={"node": common.node_link(ctx)},
            shows=("nvlink_errors",),
            description="Nodes whose GPUs count NVLink CRC, replay or recovery errors now, per second (fields "
            "commented out in dcgm-exporter's default CSV: docs/exporters.md); click a node for each GPU's "
            "errors over time. A table of the nodes in error, not a line per node: the record exists for every "
            "node, so a time series would read all of them at every point.",
        ),
    ]


def _health(ctx: Context, nvidia: bool) -> Row:
    in_cluster = common.in_cluster(ctx)
    return Row(
        "Health and utilisation over time",
        [
            *(_nvidia_health(ctx) if nvidia else []),
            heatmap(
                "GPUs per utilisation band, cluster",
                f"cluster:gpus_by_utilization:count{{{in_cluster}}}",
                legend="{{utilization}}",
                unit="none",
                min=0,
                counts=True,
                description="How many GPUs run in each 10% band of utilisation, over time (darker: more GPUs): "
                "the fleet's distribution whatever its size. The colour counts GPUs, it does not grade them. "
                "Which nodes are cold: sort the Nodes table by utilisation.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    nvidia = ctx.sources["dcgm"].enabled
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="What is wrong with the GPU cluster now and where (firing alerts, GPUs not OK with their job "
        "and user, nodes worst first), fleet utilisation, health and allocation (hpcobs recording rules).",
        tags=("hpcobs", "gpu"),
        variables=(
            common.cluster_variable(ctx),
            *common.owner_variables(ctx, ("partition", "account", "user", "hpc_job")),
        ),
        rows=(_on_call(ctx, nvidia), _fleet(ctx, nvidia), _health(ctx, nvidia), _usage(ctx)),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Gpu", "Node", "Exporter"),
    )
