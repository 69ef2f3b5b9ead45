"""Node: everything about ONE node ($node) for the engineer a node alert or a node link sends there: its firing alerts
and status (Slurm state and drain reason, GPUs unhealthy or throttled, ports not ACTIVE, jobs and their users), its
GPUs, InfiniBand ports, filesystems and logs (docs/dashboards.md).

The status line reads recorded series; the GPU and port rows read the raw series of this one node through the
catalogue (ctx.gpu, ctx.select), never typed raw names. One node's GPUs and ports are few: they are drawn one line
each. Xid, NVLink and clock event panels exist only where dcgm-exporter runs.
"""

from collections.abc import Callable

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Panel,
    Query,
    Row,
    Variable,
    bargauge,
    drawn,
    logs,
    stat,
    table,
    timeseries,
)
from hpcobs.lang.promql import label_replace
from hpcobs.settings.names import DashboardUid

from . import common, gpu_cluster

UID = DashboardUid.NODE
# Every domain whose alerts can name a node: the first panel lists them all, restricted to this node.
ALERT_DOMAINS = ("Gpu", "Node", "Ib", "Storage", "Slurm", "Security", "Training", "Exporter")
THIS_NODE = 'node="$node"'
# Faults whose alerts name a node (GPU, InfiniBand, Slurm node state): the firing-alerts panel shows one of them.
NODE_FAULTS = ("xid79", "xid48", "dbe", "thermal", "ib_port_down", "ib_symbol_errors", "slurm_nodes_down")
NVLINK_ERRORS = (
    ("nvlink_crc_flit_errors", "CRC flit"),
    ("nvlink_crc_data_errors", "CRC data"),
    ("nvlink_replay_errors", "replay"),
    ("nvlink_recovery_errors", "recovery"),
)
PORT = ("node", "device", "port")
PROBLEM = ((None, "green"), (1, "red"))


def _this_node(ctx: Context) -> str:
    """Matchers of a recorded series on the selected cluster and node."""
    return f"{common.in_cluster(ctx)}, {THIS_NODE}"


def _one_node(ctx: Context) -> dict[str, str]:
    """Raw-series matchers of the GPU row: the selected cluster, node and GPUs."""
    return {ctx.cluster: f'="${ctx.cluster}"', "node": '="$node"', "gpu": '=~"$gpu"'}


# --------------------------------------------------------------------------------------------- on call


def _slurm_state_now(ctx: Context) -> str:
    """The node's Slurm state in the words of common.SLURM_NODE_STATE, from the exporter's per-node series of this
    one node (one per partition, the same sinfo StateLong on each: "allocated", "drained*", "down*"...). Read raw:
    a record of every node's state would cost a series per node for this one panel."""
    one_node = {ctx.cluster: f'="${ctx.cluster}"', "node": '="$node"'}
    raw = ctx.select(
        "slurm", ctx.sources["slurm"].exporter.signals_for("node_state"), ("node", "status"), op="group", where=one_node
    )
    # The longest word first: Go's regexp takes the first alternative that matches ("draining" before "drain").
    words = sorted((str(value) for value, _, _ in common.SLURM_NODE_STATE), key=len, reverse=True)
    named = label_replace(raw, "state", "status", f"({'|'.join(words)}).*")
    return f"group by ({ctx.cluster}, node, state) ({named})"


def _slurm_state(ctx: Context) -> list[Panel]:
    """The node's Slurm state and, where the exporter has them, its drain or down reason and since when."""
    if not ctx.sources["slurm"].exporter.signals_for("node_state"):
        return []
    cluster, this_node = ctx.cluster, _this_node(ctx)
    state = _slurm_state_now(ctx)
    labels = ["state"]
    expr = f"{state} * 0"
    if "node_drain_reason" in ctx.sources["slurm"].exporter.signals():
        # A node with a reason shows it and the hours since it was set; any other node its state, at 0 (no reason).
        hours = (
            f"(time() - node:slurm_drained_since:timestamp{{{this_node}}}) / 3600 "
            f"* on ({cluster}, node) group_left (reason) node:slurm_drain_reason:info{{{this_node}}}"
        )
        expr = f"{hours} * on ({cluster}, node) group_left (state) {state} or ignoring (reason) {expr}"
        labels.append("reason")
    return [
        table(
            "Slurm state and drain reason of node $node",
            [
                Column(
                    expr,
                    "Reason set for",
                    ((None, "green"), (1, "orange"), (24, "red")),
                    cell="color-text",
                    unit="h",
                    mappings=((0, "no reason", "green"),),
                )
            ],
            labels=labels,
            label_words={"state": common.SLURM_NODE_STATE},
            width=9,
            height=5,
            description="The node's Slurm state (alloc, mixed, idle, drain, down, fail) and, for a drained or down "
            "node, the reason set with scontrol or by Slurm (e.g. Kill task failed) and how many hours ago "
            "(SckyzO exporter).",
        )
    ]


def _problem_counts(ctx: Context, nvidia: bool) -> list[Panel]:
    this_node = _this_node(ctx)
    throttled = [
        stat(
            "Throttled GPUs of node $node",
            f"sum(node:gpus_throttled:count{{{this_node}}}) or vector(0)",
            unit="none",
            width=5,
            height=5,
            thresholds=common.ANY,
            description="GPUs of the node in a hardware, thermal or power-brake clock slowdown now.",
        )
    ]
    return [
        stat(
            "Unhealthy GPUs of node $node",
            f"sum(node:gpus_unhealthy:count{{{this_node}}}) or vector(0)",
            unit="none",
            width=5,
            height=5,
            thresholds=common.BAD,
            description="GPUs of the node to take out of service: a drain-class Xid or a failed row remap (NVIDIA), "
            "a health check not OK (AMD).",
        ),
        *(throttled if nvidia else []),
        stat(
            "InfiniBand ports not ACTIVE on node $node",
            f"sum(node:ib_ports_not_active:count{{{this_node}}}) or vector(0)",
            unit="none",
            width=5,
            height=5,
            thresholds=common.BAD,
            description="InfiniBand ports of the node whose logical state is not ACTIVE: the row below names them.",
        ),
    ]


def _jobs(ctx: Context) -> Panel:
    gpus = f"count by ({ctx.cluster}, hpc_job) (gpu:job:info{{{_this_node(ctx)}}})"
    expr = common.with_owner(ctx, gpus, "user", "account")
    return table(
        "Jobs on node $node",
        [Column(expr, "GPUs of this node")],
        labels=["hpc_job", "user", "account"],
        label_links={"hpc_job": common.training_link(ctx)},
        width=24,
        height=5,
        description="Jobs holding GPUs of the node now, their user and account, and how many of the node's GPUs "
        "each holds; click a job for its training view.",
    )


def _on_call(ctx: Context, nvidia: bool) -> Row:
    return Row(
        "On call: node $node",
        [
            common.firing_alerts(ctx, *ALERT_DOMAINS, where=THIS_NODE, shows=NODE_FAULTS),
            *_slurm_state(ctx),
            *_problem_counts(ctx, nvidia),
            _jobs(ctx),
        ],
    )


# --------------------------------------------------------------------------------------------- GPUs


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
            "Last Xid per GPU",
            ctx.gpu("xid", where=one_node),
            legend="GPU {{gpu}}",
            unit="none",
            width=8,
            shows=gpu_cluster.XID_FAULTS,
            description="The last Xid error code each GPU reported (0 or no series: none; dcgm-exporter "
            "4.5.3-4.8.2 only export it after the first Xid); see NVIDIA's Xid catalogue.",
        ),
        timeseries(
            "NVLink errors per GPU",
            nvlink,
            unit="eps",
            width=8,
            description="NVLink CRC, replay and recovery errors per second on each GPU (raw DCGM).",
        ),
        timeseries(
            "Throttle reasons per GPU",
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


def _gpus(ctx: Context, nvidia: bool) -> Row:
    one_node = _one_node(ctx)
    utilization = common.utilization(ctx)
    return Row(
        "GPUs of node $node",
        [
            timeseries(
                "Utilisation per GPU",
                f'gpu:utilization:ratio{{{_this_node(ctx)}, gpu=~"$gpu"}}',
                legend="GPU {{gpu}}",
                unit="percentunit",
                width=8,
                min=0,
                max=1,
                thresholds=utilization,
                description="Utilisation of each GPU of the node; dashed lines at the poor and good levels every "
                "dashboard colours utilisation by.",
            ),
            timeseries(
                "SM active per GPU",
                ctx.gpu("sm_active", where=one_node),
                legend="GPU {{gpu}}",
                unit="percentunit",
                width=8,
                min=0,
                max=1,
                thresholds=utilization,
                description="Fraction of time each GPU's SMs had a warp resident (raw exporter series).",
            ),
            timeseries(
                "Memory used per GPU",
                ctx.gpu("memory_used", where=one_node),
                legend="GPU {{gpu}}",
                unit="bytes",
                width=8,
                description="Framebuffer memory used on each GPU (raw exporter series).",
            ),
            timeseries(
                "Power per GPU",
                ctx.gpu("power", where=one_node),
                legend="GPU {{gpu}}",
                unit="watt",
                width=8,
                description="Board power of each GPU (raw exporter series).",
            ),
            timeseries(
                "Temperature per GPU",
                ctx.gpu("temperature", where=one_node),
                legend="GPU {{gpu}}",
                unit="celsius",
                width=8,
                thresholds=common.temperature(ctx),
                description="GPU core temperature (raw exporter series); red from the temperature "
                "GpuTemperatureHigh fires at.",
            ),
            *(_nvidia_gpus(ctx) if nvidia else []),
            table(
                "Jobs on the node's GPUs",
                [Column(f'gpu:job:info{{{_this_node(ctx)}, gpu=~"$gpu"}}', "Held")],
                labels=["gpu", "hpc_job"],
                label_links={"hpc_job": common.training_link(ctx)},
                width=24,
                height=6,
                description="Which job holds each GPU of the node; click a job for its training view.",
            ),
        ],
    )


# --------------------------------------------------------------------------------------------- ports


def _ports(ctx: Context) -> Row:
    one_node = {ctx.cluster: f'="${ctx.cluster}"', "node": '="$node"'}

    def port(signal: str, over: Callable[[str], str] | None = None) -> str:
        return ctx.select("node_exporter", [signal], PORT, op="sum", over=over, where=one_node)

    def port_rate(signal: str) -> str:
        return port(signal, over=lambda expr: f"rate({expr}[$__rate_interval])")

    def port_increase(signal: str) -> str:
        return port(signal, over=lambda expr: f"increase({expr}[1h])")

    nominal = drawn(ctx.thresholds.ib_port_rate_bytes_per_second, "Gbit/s")
    return Row(
        "InfiniBand ports of node $node",
        [
            table(
                "InfiniBand ports of node $node",
                [
                    Column(port("ib_state"), "State", mappings=common.IB_PORT_STATE, cell="color-background"),
                    Column(
                        port("ib_physical_state"),
                        "Physical state",
                        mappings=common.IB_PHYSICAL_STATE,
                        cell="color-background",
                    ),
                    Column(
                        f"{port('ib_rate')} * 8 / 1e9",
                        "Rate",
                        ((None, "orange"), (nominal, "green")),
                        cell="color-text",
                        unit="Gbits",
                    ),
                    Column(port_increase("ib_link_downed"), "Link downs (1h)", PROBLEM, cell="color-text"),
                    Column(port_increase("ib_symbol_errors"), "Symbol errors (1h)", PROBLEM, cell="color-text"),
                    Column(port_increase("ib_link_error_recovery"), "Link recoveries (1h)", PROBLEM, cell="color-text"),
                    Column(
                        port_increase("ib_local_link_integrity_errors"),
                        "Link integrity errors (1h)",
                        PROBLEM,
                        cell="color-text",
                    ),
                ],
                labels=["device", "port"],
                width=24,
                height=7,
                description="Every InfiniBand port of the node: logical state (ACTIVE is up), physical state "
                f"(LinkUp is up), link rate (green from the nominal {nominal:g} Gb/s) and the last hour's link "
                "downs, symbol errors, link error recoveries and link integrity errors (raw node_exporter series).",
            ),
            timeseries(
                "Transmit per port",
                port_rate("ib_port_xmit_bytes"),
                legend="{{device}}:{{port}}",
                unit="Bps",
                width=8,
                description="Bytes per second sent on each InfiniBand port of the node.",
            ),
            timeseries(
                "Receive per port",
                port_rate("ib_port_rcv_bytes"),
                legend="{{device}}:{{port}}",
                unit="Bps",
                width=8,
                description="Bytes per second received on each InfiniBand port of the node.",
            ),
            timeseries(
                "Errors per port",
                [
                    Query(port_rate("ib_symbol_errors"), "{{device}}:{{port}} symbol"),
                    Query(port_rate("ib_port_rcv_errors"), "{{device}}:{{port}} receive"),
                    Query(port_rate("ib_port_xmit_discards"), "{{device}}:{{port}} transmit discards"),
                ],
                unit="eps",
                width=8,
                description="Symbol errors, malformed received packets and transmit discards per second on each port.",
            ),
        ],
    )


# --------------------------------------------------------------------------------------------- filesystems, logs


def _filesystems(ctx: Context) -> Row:
    this_node = _this_node(ctx)
    horizon, window = ctx.thresholds.storage_fill_horizon, ctx.thresholds.storage_fill_window
    used = f"node:filesystem_used:ratio{{{this_node}}}"
    # Recorded (recording_rules/storage.py): a fit over the whole window, done again at every point drawn, would
    # read every sample of the window each time.
    forecast = f"clamp(node:filesystem_used_forecast:ratio{{{this_node}}}, 0, 1)"
    fill = common.fill(ctx.thresholds.storage_full_ratio)
    return Row(
        "Filesystems of node $node",
        [
            bargauge(
                "Mounts used on node $node",
                used,
                legend="{{mountpoint}}",
                unit="percentunit",
                thresholds=fill,
                min=0,
                max=1,
                width=8,
                description="Used fraction of each local mount of the node now (checkpoint staging, /); red from "
                "where StorageFilesystemFull fires.",
            ),
            timeseries(
                "Mount fill and forecast on node $node",
                [Query(used, "{{mountpoint}}"), Query(forecast, "{{mountpoint}} in " + horizon)],
                unit="percentunit",
                min=0,
                max=1,
                thresholds=fill,
                width=8,
                description=f"Used fraction of each local mount and its forecast {horizon} ahead (linear fit over "
                f"{window}): a forecast line at 100% means full within {horizon}.",
            ),
            timeseries(
                "NFS retransmissions of node $node",
                f"node:nfs_retransmissions:rate{{{this_node}}}",
                legend="{{node}}",
                unit="ops",
                width=8,
                thresholds=((None, "green"), (ctx.thresholds.storage_nfs_retransmissions_per_second, "orange")),
                description="NFS RPC retransmissions per second of the node as a client (each follows a timeout); "
                "dashed line where the storage alert fires.",
            ),
        ],
        collapsed=True,
    )


def _logs(ctx: Context) -> Row:
    this_node = '$log_selector | $log_node_label="$node"'
    return Row(
        "Logs of node $node",
        [
            logs(
                "Xid, NCCL, watchdog and OOM lines of node $node",
                f"{this_node} |~ `{common.JOB_LOG_LINES}`",
                description="Kernel Xid errors, NCCL WARN lines, PyTorch NCCL watchdog timeouts and out-of-memory "
                "kills on the node; set log_selector and log_node_label to your log shipper's labels.",
            ),
            logs(
                "All log lines of node $node",
                this_node,
                description="Every kernel and job log line of the node, unfiltered: what came before and after a "
                "line above.",
            ),
        ],
        collapsed=True,
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    nvidia = ctx.sources["dcgm"].enabled
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="One node: its firing alerts, Slurm state and drain reason, jobs and users, GPUs, InfiniBand "
        "ports, filesystems and logs.",
        tags=("hpcobs", "node"),
        variables=(
            common.cluster_variable(ctx),
            Variable(
                "node",
                "Node",
                f"label_values(node:gpus:count{{{in_cluster}}}, node)",
                description="The node this dashboard shows.",
            ),
            Variable(
                "gpu",
                "GPU",
                f'label_values(gpu:utilization:ratio{{{in_cluster}, node="$node"}}, gpu)',
                multi=True,
                include_all=True,
                description="GPUs of the node drawn in the GPU row.",
            ),
            common.log_selector(ctx),
            common.log_node_label(ctx),
        ),
        rows=(_on_call(ctx, nvidia), _gpus(ctx, nvidia), _ports(ctx), _filesystems(ctx), _logs(ctx)),
        links=common.others(UID),
        alerts=f"{common.alerts(ctx, *ALERT_DOMAINS)}, {THIS_NODE}",
    )
