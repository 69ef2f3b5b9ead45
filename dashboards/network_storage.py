"""Network & storage: InfiniBand per node, NCCL bandwidth, Lustre and NFS, filesystem fill (DESIGN.md §11).

Recorded series only (ports are summed per node by the recording rules).
"""
from hpcobs.context import Context
from hpcobs.promql import duration_seconds as _seconds
from hpcobs.dashboard import Column, DashboardSpec, Query, Row, Variable, bargauge, stat, table, timeseries

from . import common

UID = common.NETWORK_STORAGE
FILL = ((None, "green"), (0.8, "orange"), (0.95, "red"))


def dashboard(ctx: Context) -> DashboardSpec:
    cl = common.in_cluster(ctx)
    nodes = f'{cl}, node=~"$node"'
    fill_window = ctx.thresholds.get("storage_fill_window", "6h")
    horizon = ctx.thresholds.get("storage_fill_horizon", "24h")

    def per_node(title: str, series: str, unit: str, description: str, **kw) -> object:
        return timeseries(title, f"{series}{{{nodes}}}", legend="{{node}}", unit=unit, description=description, **kw)

    fabric = Row("InfiniBand", [
        stat("Fabric transmit", f"sum(cluster:ib_transmit_bytes:rate{{{cl}}})", unit="Bps",
             description="Bytes per second sent over every InfiniBand port of the cluster."),
        stat("Ports not ACTIVE", f"sum(cluster:ib_ports_not_active:count{{{cl}}}) or vector(0)", unit="none",
             thresholds=((None, "green"), (1, "red")),
             description="InfiniBand ports whose logical state is not ACTIVE."),
        stat("Ports below nominal rate", f"sum(node:ib_ports_below_nominal_rate:count{{{cl}}}) or vector(0)",
             unit="none", thresholds=((None, "green"), (1, "orange")),
             description="Ports that trained below the nominal link rate "
                         f"({ctx.thresholds['ib_port_rate_bytes_per_second']:.3g} B/s)."),
        stat("Ports that went down (1h)", f"sum(node:ib_ports_flapped:count{{{cl}}}) or vector(0)", unit="none",
             thresholds=((None, "green"), (1, "orange")),
             description="Ports whose link went down at least once in the last hour."),
        per_node("Transmit per node", "node:ib_transmit_bytes:rate", "Bps",
                 "Bytes per second each node sends over its InfiniBand ports."),
        per_node("Receive per node", "node:ib_receive_bytes:rate", "Bps",
                 "Bytes per second each node receives over its InfiniBand ports."),
    ])

    errors = Row("InfiniBand errors", [
        per_node("Symbol errors", "node:ib_symbol_errors:rate", "eps",
                 "Symbol errors per second (bad cable or transceiver; a healthy link counts none).", width=8),
        per_node("Receive errors", "node:ib_receive_errors:rate", "pps",
                 "Malformed packets received per second.", width=8),
        per_node("Transmit discards", "node:ib_transmit_discards:rate", "pps",
                 "Outbound packets discarded per second (link down, congestion, timeouts).", width=8),
        per_node("Transmit wait", "node:ib_transmit_wait:rate", "cps",
                 "Ticks per second with data queued but no credit to send: congestion.", width=8),
        per_node("Ports that went down (1h)", "node:ib_ports_flapped:count", "none",
                 "Ports per node whose link went down in the last hour (link flaps).", width=8),
        table("Port state by node", [
            Column(f"node:ib_ports_not_active:count{{{nodes}}}", "Not ACTIVE", ((None, "green"), (1, "red")),
                   cell="color-background"),
            Column(f"node:ib_ports_below_nominal_rate:count{{{nodes}}}", "Below nominal rate",
                   ((None, "green"), (1, "orange")), cell="color-background"),
        ], labels=["node"], width=8, links=(common.node_link(ctx),),
            description="Nodes with ports not ACTIVE or trained below the nominal rate."),
    ])

    nccl = Row("NCCL", [
        timeseries("NCCL bus bandwidth by job", f"job:nccl_bus_bandwidth:avg{{{cl}}}",
                   legend="{{hpc_job}} {{collective}}", unit="Bps", width=24,
                   description="Mean bus bandwidth per job and collective (NCCL Inspector); compare with the "
                               "fabric's nominal rate."),
    ])

    storage = Row("Storage", [
        timeseries("Lustre write per filesystem", f'fs:lustre_write_bytes:rate{{{cl}, fs=~"$fs"}}', legend="{{fs}}",
                   unit="Bps", description="Bytes per second written to each Lustre filesystem (OST totals)."),
        timeseries("Lustre read per filesystem", f'fs:lustre_read_bytes:rate{{{cl}, fs=~"$fs"}}', legend="{{fs}}",
                   unit="Bps", description="Bytes per second read from each Lustre filesystem (OST totals)."),
        timeseries("Lustre write per job (top 10)", f"topk(10, job:lustre_write_bytes:rate{{{cl}}})",
                   legend="{{hpc_job}}", unit="Bps",
                   description="Bytes per second each job writes (Lustre jobstats, jobid_var=SLURM_JOB_ID)."),
        timeseries("Lustre read per job (top 10)", f"topk(10, job:lustre_read_bytes:rate{{{cl}}})",
                   legend="{{hpc_job}}", unit="Bps", description="Bytes per second each job reads (Lustre jobstats)."),
        bargauge("Checkpoint write bandwidth (peak per job)",
                 f"topk(10, max_over_time(job:lustre_write_bytes:rate{{{cl}}}[$__range]))", legend="{{hpc_job}}",
                 unit="Bps", description="Peak write bandwidth of each job over the range: checkpoints are its "
                                         "write bursts."),
        per_node("NFS retransmissions", "node:nfs_retransmissions:rate", "ops",
                 "NFS RPC retransmissions per second on each client (each follows a timeout)."),
    ])

    fill = Row("Filesystem fill", [
        bargauge("Lustre filesystems used", f'fs:lustre_used:ratio{{{cl}, fs=~"$fs"}}', legend="{{fs}}",
                 unit="percentunit", thresholds=FILL, min=0, max=1, width=8,
                 description="Used fraction of each Lustre filesystem (available space as users see it)."),
        timeseries("Lustre fill and forecast", [
            Query(f'fs:lustre_used:ratio{{{cl}, fs=~"$fs"}}', "{{fs}}"),
            Query(f'clamp(predict_linear(fs:lustre_used:ratio{{{cl}, fs=~"$fs"}}[{fill_window}], '
                  f'{_seconds(horizon)}), 0, 1)', "{{fs}} in " + horizon),
        ], unit="percentunit", min=0, max=1, thresholds=FILL, width=16,
            description=f"Used fraction now and forecast {horizon} ahead (linear fit over {fill_window})."),
        bargauge("Fullest node mounts", f'topk(10, node:filesystem_used:ratio{{{nodes}}})',
                 legend="{{node}} {{mountpoint}}", unit="percentunit", thresholds=FILL, min=0, max=1, width=8,
                 description="The ten fullest local mounts (checkpoint staging, /)."),
        timeseries("Node mounts forecast to fill",
                   f'topk(10, clamp(predict_linear(node:filesystem_used:ratio{{{nodes}}}[{fill_window}], '
                   f'{_seconds(horizon)}), 0, 1))', legend="{{node}} {{mountpoint}}", unit="percentunit",
                   min=0, max=1, thresholds=FILL, width=16,
                   description=f"Local mounts with the highest forecast fill {horizon} ahead "
                               f"(linear fit over {fill_window})."),
    ])

    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="InfiniBand throughput, errors and port state, NCCL bandwidth, Lustre and NFS, filesystem fill.",
        tags=("hpcobs", "network", "storage"),
        variables=(
            common.cluster_variable(ctx),
            Variable("node", "Node", f"label_values(node:ib_transmit_bytes:rate{{{cl}}}, node)", multi=True,
                     include_all=True),
            Variable("fs", "Filesystem", f"label_values(fs:lustre_used:ratio{{{cl}}}, fs)", multi=True,
                     include_all=True),
        ),
        rows=(fabric, errors, nccl, storage, fill),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Ib", "Storage"),
    )
