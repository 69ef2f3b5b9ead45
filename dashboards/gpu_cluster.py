"""GPU cluster: the fleet at a glance, then one node's GPUs (docs/dashboards.md).

Cluster-level panels read recorded series only; the node drill-down row reads the raw per-GPU series of
ONE node ($node), through the catalogue (ctx.gpu), never typed raw names. Xid, row remap, NVLink and clock
event panels exist only where dcgm-exporter runs: the AMD exporter has no equivalent of those fields.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Panel,
    Query,
    Row,
    Variable,
    heatmap,
    scaled,
    stat,
    table,
    timeseries,
)
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.GPU_CLUSTER
NVLINK_ERRORS = (
    ("nvlink_crc_flit_errors", "CRC flit"),
    ("nvlink_crc_data_errors", "CRC data"),
    ("nvlink_replay_errors", "replay"),
    ("nvlink_recovery_errors", "recovery"),
)
# Utilisation colours are a presentation choice: no alert fires on low utilisation (GpuAllocatedIdle reads zero).
UTILISATION = ((None, "red"), (0.25, "orange"), (0.6, "green"))
XID_FAULTS = ("xid79", "xid48", "xid13", "dbe", "row_remap_failure")
ANY = ((None, "green"), (1, "orange"))
BAD = ((None, "green"), (1, "red"))


def _one_node(ctx: Context) -> dict[str, str]:
    """Raw-series matchers of the drill-down: the selected cluster, node and GPUs."""
    return {ctx.cluster: f'="${ctx.cluster}"', "node": '="$node"', "gpu": '=~"$gpu"'}


def _fleet(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    power = f"cluster:gpu_power:watts{{{in_cluster}}}"
    return Row(
        "Fleet",
        [
            stat(
                "GPUs",
                f"sum(cluster:gpus:count{{{in_cluster}}})",
                unit="none",
                width=4,
                description="GPUs reporting to the GPU exporters.",
            ),
            stat(
                "Allocated",
                f"sum(cluster:gpus_allocated:count{{{in_cluster}}})",
                unit="none",
                width=4,
                description="GPUs held by at least one Slurm job (from the exporter's job mapping).",
            ),
            stat(
                "Allocated but idle",
                f"sum(node:gpus_allocated_idle:count{{{in_cluster}}}) or vector(0)",
                unit="none",
                width=4,
                thresholds=ANY,
                description=f"GPUs held by the same job for {ctx.thresholds.gpu_idle_window} with every "
                "utilisation sample at 0.",
            ),
            stat(
                "Unhealthy",
                f"sum(cluster:gpus_unhealthy:count{{{in_cluster}}}) or vector(0)",
                unit="none",
                width=4,
                thresholds=BAD,
                description="GPUs with a drain-class Xid or a failed row remap: drain the node.",
            ),
            stat(
                "Mean utilisation",
                f"cluster:gpu_utilization:avg{{{in_cluster}}}",
                unit="percentunit",
                width=4,
                thresholds=UTILISATION,
                min=0,
                max=1,
                description="Mean utilisation over every GPU of the cluster.",
            ),
            stat(
                "Mean SM active",
                f"avg(node:gpu_sm_active:avg{{{in_cluster}}})",
                unit="percentunit",
                width=4,
                thresholds=UTILISATION,
                min=0,
                max=1,
                description="Mean over nodes of the fraction of time SMs had a warp resident (DCGM profiling).",
            ),
            stat("GPU power", f"sum({power})", unit="watt", width=4, description="Board power of every GPU, summed."),
            stat(
                "GPU energy today",
                f"sum({common.over_range(ctx, power)}) / 3600",
                unit="watth",
                width=4,
                time_from="now/d",
                description="GPU energy since midnight: the recorded power integrated over the rule evaluation "
                f"interval ({ctx.evaluation_interval}).",
            ),
            timeseries(
                "GPUs allocated and idle",
                [
                    Query(f"sum(cluster:gpus:count{{{in_cluster}}})", "total"),
                    Query(f"sum(cluster:gpus_allocated:count{{{in_cluster}}})", "allocated"),
                    Query(f"sum(node:gpus_allocated_idle:count{{{in_cluster}}}) or vector(0)", "allocated but idle"),
                ],
                unit="none",
                width=16,
                description="GPUs in the fleet, held by jobs, and held but idle.",
            ),
        ],
    )


def _usage(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    owned = f'{in_cluster}, partition=~"$partition", account=~"$account", user=~"$user", hpc_job=~"$hpc_job"'
    gpu_hours = f"topk(10, {common.over_range(ctx, f'job:gpus_allocated:count{{{owned}}}')} / 3600)"
    return Row(
        "Utilisation by partition and account",
        [
            timeseries(
                "Utilisation by partition",
                f'partition:gpu_utilization:avg{{{in_cluster}, partition=~"$partition"}}',
                legend="{{partition}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Mean utilisation of the GPUs that jobs of each partition hold.",
            ),
            timeseries(
                "Utilisation by account",
                f'account:gpu_utilization:avg{{{in_cluster}, account=~"$account"}}',
                legend="{{account}}",
                unit="percentunit",
                min=0,
                max=1,
                description="Mean utilisation of the GPUs that jobs of each account hold.",
            ),
            timeseries(
                "GPUs allocated by account",
                f'account:gpus_allocated:count{{{in_cluster}, account=~"$account"}}',
                legend="{{account}}",
                unit="none",
                stack=True,
                description="GPUs held by each account's jobs (jobs without Slurm info have no account).",
            ),
            table(
                "Top jobs by GPU-hours",
                [Column(gpu_hours, "GPU-hours")],
                labels=["hpc_job", "user", "account", "partition"],
                width=12,
                links=(common.training_link(ctx),),
                description="GPU-hours held over the dashboard's range (recorded GPU count x evaluation interval); "
                "click a job for its training view.",
            ),
        ],
    )


def _nvidia_health(ctx: Context) -> tuple[list[Panel], list[Panel]]:
    """dcgm-exporter only: the Xid panels (beside the unhealthy GPUs) and the row remap, throttle and NVLink
    panels (after the ECC panel)."""
    in_cluster = common.in_cluster(ctx)
    xid = [
        timeseries(
            "GPUs by last Xid",
            f"cluster:gpus_by_xid:count{{{in_cluster}}}",
            legend="Xid {{err_code}} ({{xid_class}})",
            unit="none",
            width=8,
            stack=True,
            shows=XID_FAULTS,
            description="GPUs by the code of their last Xid error and its class (NVIDIA's Xid catalogue: "
            "fell_off_bus and drain take the node out of service, application is the job's, "
            "warning needs a reset soon).",
        ),
        table(
            "Nodes with Xid errors",
            [Column(f"node:gpus_by_xid:count{{{in_cluster}}}", "GPUs", ((None, "orange"),), cell="color-text")],
            labels=["node", "err_code", "xid_class"],
            width=8,
            links=(common.node_link(ctx),),
            shows=XID_FAULTS,
            description="Per node, Xid code and class: GPUs whose last Xid is that code; click a node for its GPUs.",
        ),
    ]
    faults = [
        timeseries(
            "Row remapping",
            f"node:gpus_row_remap:count{{{in_cluster}}}",
            legend="{{node}} {{state}}",
            unit="none",
            width=6,
            shows=("row_remap_failure", "row_remap_pending", "dbe"),
            description="GPUs per node whose row remapping failed (no spare rows: RMA) or is pending "
            "(a GPU reset applies it).",
        ),
        timeseries(
            "Throttled GPUs by node",
            f"node:gpus_throttled:count{{{in_cluster}}} > 0",
            legend="{{node}}",
            unit="none",
            width=6,
            shows=("thermal",),
            description="GPUs per node in a hardware, thermal or power-brake clock slowdown.",
        ),
        table(
            "Nodes with NVLink errors",
            [
                # Orange only: the record sums CRC, replay and recovery errors, which GpuNvlinkErrors holds to
                # separate limits (CRC per second, replay per minute), so no one limit applies to the sum.
                Column(
                    f"node:gpu_nvlink_errors:rate{{{in_cluster}}} > 0",
                    "Errors/s",
                    ((None, "orange"),),
                    cell="color-text",
                )
            ],
            labels=["node"],
            width=6,
            height=8,
            links=(common.node_link(ctx),),
            shows=("nvlink_errors",),
            description="Nodes whose GPUs count NVLink CRC, replay or recovery errors now, per second (fields "
            "commented out in dcgm-exporter's default CSV: docs/exporters.md); click a node for each GPU's "
            "errors over time. A table of the nodes in error, not a line per node: the record exists for every "
            "node, so a time series would read all of them at every point.",
        ),
    ]
    return xid, faults


def _nodes_table(ctx: Context, nvidia: bool) -> Panel:
    in_cluster = common.in_cluster(ctx)

    def or_zero(condition_count: str) -> str:
        return common.or_zero(f"{condition_count}{{{in_cluster}}}", f"node:gpus:count{{{in_cluster}}}")

    throttled = [Column(or_zero("node:gpus_throttled:count"), "Throttled", ANY, cell="color-text")] if nvidia else []
    return table(
        "Nodes",
        [
            Column(f"node:gpus:count{{{in_cluster}}}", "GPUs"),
            Column(f"node:gpus_allocated:count{{{in_cluster}}}", "Allocated"),
            Column(
                f"node:gpu_utilization:avg{{{in_cluster}}} * 100",
                "Utilisation (%)",
                scaled(UTILISATION, "percent"),
                cell="color-text",
            ),
            Column(f"node:gpu_power:watts{{{in_cluster}}}", "Power (W)"),
            Column(or_zero("node:gpus_unhealthy:count"), "Unhealthy", BAD, cell="color-background"),
            *throttled,
        ],
        labels=["node"],
        links=(common.node_link(ctx),),
        description="Per node: GPUs, allocation, utilisation, power and health; click a node for its GPUs.",
    )


def _health(ctx: Context, nvidia: bool) -> Row:
    in_cluster = common.in_cluster(ctx)
    xid, nvidia_faults = _nvidia_health(ctx) if nvidia else ([], [])
    return Row(
        "Health",
        [
            timeseries(
                "Unhealthy GPUs by node",
                f"node:gpus_unhealthy:count{{{in_cluster}}} > 0",
                legend="{{node}}",
                unit="none",
                width=8,
                thresholds=BAD,
                shows=XID_FAULTS,
                description="GPUs per node to take out of service: a drain-class Xid or a failed row remap "
                "(NVIDIA), a health check not OK (AMD).",
            ),
            *xid,
            timeseries(
                "GPUs with uncorrectable ECC errors (1h)",
                f"node:gpus_ecc_uncorrectable:count{{{in_cluster}}} > 0",
                legend="{{node}}",
                unit="none",
                width=6,
                shows=("dbe",),
                description="GPUs per node whose uncorrectable (double-bit) ECC counter rose in the last hour.",
            ),
            *nvidia_faults,
            heatmap(
                "GPUs by utilisation",
                f"cluster:gpus_by_utilization:count{{{in_cluster}}}",
                legend="{{utilization}}",
                unit="none",
                min=0,
                description="How many GPUs run in each 10% band of utilisation, over time: the fleet's "
                "distribution whatever its size (one row per node stops being readable at a few hundred "
                "nodes). Which nodes are cold: sort the Nodes table by utilisation.",
            ),
            _nodes_table(ctx, nvidia),
        ],
    )


def _nvidia_gpus(ctx: Context) -> list[Panel]:
    """dcgm-exporter only: each GPU's last Xid, NVLink errors and clock events (raw series of ONE node)."""
    one_node = _one_node(ctx)

    def per_second(expr: str) -> str:
        return f"rate({expr}[$__rate_interval])"

    nvlink = [
        Query(
            ctx.select("dcgm", [signal], ("node", "gpu"), op="sum", where=one_node, over=per_second),
            f"GPU {{{{gpu}}}} {name}",
        )
        for signal, name in NVLINK_ERRORS
    ]
    return [
        timeseries(
            "Last Xid",
            ctx.gpu("xid", where=one_node),
            legend="GPU {{gpu}}",
            unit="none",
            width=8,
            shows=XID_FAULTS,
            description="The last Xid error code each GPU reported (0 or no series: none; dcgm-exporter "
            "4.5.3-4.8.2 only export it after the first Xid); see NVIDIA's Xid catalogue.",
        ),
        timeseries(
            "NVLink errors",
            nvlink,
            unit="eps",
            width=8,
            description="NVLink CRC, replay and recovery errors per second on each GPU (raw DCGM).",
        ),
        timeseries(
            "Throttle reasons",
            ctx.select("dcgm", ["clock_events"], ("node", "gpu", "clock_event"), where=one_node),
            legend="GPU {{gpu}} {{clock_event}}",
            unit="none",
            width=8,
            description="Clock events per GPU in the exporter's window: hardware and thermal slowdowns, power "
            "brake and power cap (raw DCGM). Empty while no reason was seen in the window: the exporter then writes "
            "no series.",
            shows=("thermal",),
        ),
    ]


def _node(ctx: Context, nvidia: bool) -> Row:
    in_cluster = common.in_cluster(ctx)
    one_node = _one_node(ctx)
    return Row(
        "Node $node: GPUs",
        [
            timeseries(
                "GPU utilisation",
                f'gpu:utilization:ratio{{{in_cluster}, node="$node", gpu=~"$gpu"}}',
                legend="GPU {{gpu}}",
                unit="percentunit",
                width=8,
                min=0,
                max=1,
                description="Utilisation of each GPU of the node.",
            ),
            timeseries(
                "SM active",
                ctx.gpu("sm_active", where=one_node),
                legend="GPU {{gpu}}",
                unit="percentunit",
                width=8,
                min=0,
                max=1,
                description="Fraction of time each GPU's SMs had a warp resident (raw exporter series).",
            ),
            timeseries(
                "Memory used",
                ctx.gpu("memory_used", where=one_node),
                legend="GPU {{gpu}}",
                unit="bytes",
                width=8,
                description="Framebuffer memory used on each GPU (raw exporter series).",
            ),
            timeseries(
                "Power",
                ctx.gpu("power", where=one_node),
                legend="GPU {{gpu}}",
                unit="watt",
                width=8,
                description="Board power of each GPU (raw exporter series).",
            ),
            timeseries(
                "Temperature",
                ctx.gpu("temperature", where=one_node),
                legend="GPU {{gpu}}",
                unit="celsius",
                width=8,
                thresholds=((None, "green"), (ctx.thresholds.gpu_temperature_celsius, "red")),
                description="GPU core temperature (raw exporter series).",
            ),
            *(_nvidia_gpus(ctx) if nvidia else []),
            table(
                "Jobs on the node's GPUs",
                [Column(f'gpu:job:info{{{in_cluster}, node="$node", gpu=~"$gpu", hpc_job=~"$hpc_job"}}', "Held")],
                labels=["gpu", "hpc_job"],
                width=24,
                height=6,
                links=(common.training_link(ctx),),
                description="Which job holds each GPU of the node; click a job for its training view.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    nvidia = ctx.sources["dcgm"].enabled
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Fleet utilisation, health and allocation of the GPU cluster, and one node's GPUs "
        "(hpcobs recording rules).",
        tags=("hpcobs", "gpu"),
        variables=(
            common.cluster_variable(ctx),
            *common.owner_variables(ctx, ("partition", "account", "user", "hpc_job")),
            Variable(
                "node",
                "Node",
                f"label_values(node:gpus:count{{{in_cluster}}}, node)",
                description="Node of the drill-down row.",
            ),
            Variable(
                "gpu",
                "GPU",
                f'label_values(gpu:utilization:ratio{{{in_cluster}, node="$node"}}, gpu)',
                multi=True,
                include_all=True,
            ),
        ),
        rows=(_fleet(ctx), _usage(ctx), _health(ctx, nvidia), _node(ctx, nvidia)),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Gpu", "Node", "Exporter"),
    )
