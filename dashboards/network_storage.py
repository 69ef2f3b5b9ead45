"""Network & storage: what is wrong now (firing alerts, ports not ACTIVE and the jobs on their nodes, Lustre targets
filling up), InfiniBand across nodes, NCCL bandwidth, Lustre and NFS, filesystem fill (docs/dashboards.md); one
node's ports are on the node dashboard, which every node links to.

Fleet panels read recorded series (ports summed per node): over time, the spread across the nodes or a fixed set
(filesystems, exports); nodes, ports, jobs and OSTs as instant tables, the top ones picked once over the range.
Bandwidth is in bytes per second everywhere (Grafana's "Bps"), volumes in bytes.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Panel,
    Query,
    Row,
    Thresholds,
    Variable,
    bargauge,
    stat,
    table,
    timeseries,
)
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.NETWORK_STORAGE
PORT = ("node", "device", "port")
TOP = 10  # rows of a table of the top jobs, picked once over the dashboard's range
# The alert name prefixes of this dashboard's domains (alerts/network.py, alerts/storage.py); NCCL's alerts are the
# training dashboard's (TrainingNccl...: about one job's collectives).
ALERT_DOMAINS = ("Ib", "Storage")
PROBLEM = ((None, "green"), (1, "red"))
WARNING = ((None, "green"), (1, "orange"))
# Fleet lines over time draw a recorded spread across the nodes (hpcobs.lang.promql.spread): five series whatever the
# fleet's size, where a line per node would read every node's series at every point drawn; the Nodes table
# names the nodes, from one value each.
SPREAD_LEGEND = "quantile {{quantile}}"
SPREAD_TEXT = (
    "the lowest node (quantile 0), the 10th percentile, the median, the 90th percentile and the highest node "
    "(quantile 1)."
)


def _above(limit: float, color: str = "red") -> Thresholds:
    """A rate coloured from the limit its alert fires above (the colours of the error tables)."""
    return ((None, "green"), (limit, color))


def _lustre_trouble(ctx: Context) -> list[Panel]:
    """The Lustre targets filling up and the Lustre hosts reporting themselves unhealthy."""
    in_cluster = common.in_cluster(ctx)
    space, inodes = (
        common.fill(ctx.thresholds.storage_full_ratio),
        common.fill(ctx.thresholds.storage_inodes_full_ratio),
    )
    (space_trouble, _), (inodes_trouble, _) = space[1], inodes[1]
    return [
        table(
            "Lustre targets filling up",
            [
                Column(
                    f"fs:lustre_ost_used:ratio{{{in_cluster}}} > {space_trouble}",
                    "Space used",
                    space,
                    cell="color-background",
                    unit="percentunit",
                ),
                Column(
                    f"fs:lustre_target_inodes_used:ratio{{{in_cluster}}} > {inodes_trouble}",
                    "Inodes used",
                    inodes,
                    cell="color-background",
                    unit="percentunit",
                ),
            ],
            labels=["fs", "target", "node"],
            width=6,
            height=8,
            shows=("fs_filling", "lustre_inodes"),
            description=f"Lustre OSTs with more than {space_trouble:.0%} of their space used and OSTs or MDTs "
            f"with more than {inodes_trouble:.0%} of their inodes used (orange), red from the level "
            "StorageLustreOstFull and StorageLustreInodesFull fire at: a full OST fails the writes striped on it "
            "while the filesystem still looks half empty. The node is the server.",
        ),
        stat(
            "Lustre hosts unhealthy",
            f"count(node:lustre_unhealthy:count{{{in_cluster}}}) or vector(0)",
            unit="none",
            thresholds=common.BAD,
            width=2,
            height=8,
            description="Lustre servers and clients whose health_check reports unhealthy (a target hit an LBUG "
            "or went read-only; clients of its targets hang): StorageLustreUnhealthy fires on each.",
        ),
    ]


def _on_call(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    jobs_on_nodes = f"group by ({ctx.cluster}, node, hpc_job) (job:gpu_utilization_by_node:avg{{{in_cluster}}})"
    users = common.owners(ctx)

    def with_jobs(per_node: str) -> str:
        """A per-node count once per job running on the node, with the job's user."""
        on_node = f"{per_node} * on ({ctx.cluster}, node) group_right () {jobs_on_nodes}"
        return f"{on_node} * on ({ctx.cluster}, hpc_job) group_left (user) {users}"

    links = {"node": common.node_link(ctx), "hpc_job": common.training_link(ctx)}
    return Row(
        "What is wrong now",
        [
            common.firing_alerts(
                ctx,
                *ALERT_DOMAINS,
                labels=("node", "fs", "target", "mountpoint", "hpc_job", "user"),
                shows=("ib_port_down", "ib_link_flap", "ib_link_degraded", "fs_filling", "lustre_inodes"),
            ),
            table(
                "InfiniBand ports not ACTIVE",
                [
                    Column(
                        f"port:ib_not_active:state{{{in_cluster}}}",
                        "State",
                        cell="color-text",
                        mappings=common.IB_PORT_STATE,
                    ),
                    Column(
                        f"port:ib_not_active:physical_state{{{in_cluster}}}",
                        "Physical state",
                        cell="color-text",
                        mappings=common.IB_PHYSICAL_STATE,
                    ),
                ],
                labels=["node", *PORT[1:]],
                label_links={"node": common.node_link(ctx)},
                width=8,
                height=8,
                shows=("ib_port_down", "ib_port_init"),
                description="Each compute-rail port that has had a link since boot and is not ACTIVE now: its "
                "logical state (DOWN: no link; INIT or ARMED: link up, waiting for the subnet manager) and physical "
                "state (Polling: no signal from the peer, a cable or transceiver; LinkUp). Click a node for its "
                "view; the jobs on these nodes are beside.",
            ),
            table(
                "Jobs on nodes with port problems",
                [
                    Column(
                        with_jobs(f"node:ib_ports_not_active:count{{{in_cluster}}}"),
                        "Ports not ACTIVE",
                        common.BAD,
                        cell="color-text",
                    ),
                    Column(
                        with_jobs(f"node:ib_ports_below_nominal_rate:count{{{in_cluster}}}"),
                        "Ports below nominal rate",
                        common.ANY,
                        cell="color-text",
                    ),
                ],
                labels=["node", "hpc_job", "user"],
                label_links=links,
                width=8,
                height=8,
                shows=("ib_port_down", "ib_port_init", "ib_link_degraded"),
                description="The Slurm jobs running on each node with ports not ACTIVE or trained below the nominal "
                "rate, and their users: whose collectives wait for these ports. Click a node or a job for its view.",
            ),
            *_lustre_trouble(ctx),
        ],
    )


def _fabric(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    return Row(
        "InfiniBand",
        [
            stat(
                "Fabric transmit",
                f"sum(cluster:ib_transmit_bytes:rate{{{in_cluster}}})",
                unit="Bps",
                description="Bytes per second sent over every InfiniBand port of the cluster.",
            ),
            stat(
                "Ports not ACTIVE",
                f"sum(cluster:ib_ports_not_active:count{{{in_cluster}}}) or vector(0)",
                unit="none",
                thresholds=PROBLEM,
                shows=("ib_port_down", "ib_link_flap"),
                description="InfiniBand ports whose logical state is not ACTIVE.",
            ),
            stat(
                "Ports below nominal rate",
                f"sum(node:ib_ports_below_nominal_rate:count{{{in_cluster}}}) or vector(0)",
                unit="none",
                thresholds=WARNING,
                shows=("ib_link_degraded",),
                description="Ports that trained below the nominal link rate "
                f"({ctx.thresholds.ib_port_rate_bytes_per_second:.3g} bytes/s).",
            ),
            stat(
                "Ports that went down (1h)",
                f"sum(node:ib_ports_flapped:count{{{in_cluster}}}) or vector(0)",
                unit="none",
                thresholds=WARNING,
                shows=("ib_port_down", "ib_link_flap"),
                description="Ports whose link went down at least once in the last hour.",
            ),
            timeseries(
                "Transmit per node (spread)",
                _spread(ctx, "cluster:ib_transmit_bytes_per_node:quantile"),
                legend=SPREAD_LEGEND,
                unit="Bps",
                width=12,
                description="Bytes per second a node sends over its InfiniBand ports, across the nodes: "
                f"{SPREAD_TEXT} A training job's nodes move together; a low line under a busy median is a "
                "node the job waits for: find it in the Nodes table.",
            ),
            timeseries(
                "Receive per node (spread)",
                _spread(ctx, "cluster:ib_receive_bytes_per_node:quantile"),
                legend=SPREAD_LEGEND,
                unit="Bps",
                width=12,
                description="Bytes per second a node receives over its InfiniBand ports, across the nodes: "
                + SPREAD_TEXT,
            ),
            _nodes_table(ctx),
        ],
    )


def _spread(ctx: Context, record: str) -> str:
    return f"{record}{{{common.in_cluster(ctx)}}}"


def _nodes_table(ctx: Context) -> Panel:
    in_cluster = common.in_cluster(ctx)
    limits = ctx.thresholds
    return table(
        "Nodes",
        [
            Column(f"node:ib_transmit_bytes:rate{{{in_cluster}}}", "Transmit", unit="Bps"),
            Column(f"node:ib_receive_bytes:rate{{{in_cluster}}}", "Receive", unit="Bps"),
            Column(
                f"node:ib_transmit_wait:rate{{{in_cluster}}}",
                "Transmit wait",
                _above(limits.ib_transmit_wait_ticks_per_second, "orange"),
                cell="color-text",
                unit="cps",
            ),
            Column(
                f"node:nfs_retransmissions:rate{{{in_cluster}}}",
                "NFS retransmissions",
                _above(limits.storage_nfs_retransmissions_per_second, "orange"),
                cell="color-text",
                unit="ops",
            ),
        ],
        labels=["node"],
        label_links={"node": common.node_link(ctx)},
        description="Per node now: InfiniBand bytes per second sent and received, transmit wait (ticks per second "
        "with data queued but no credit: congestion) and NFS retransmissions per second; sort by a column to find "
        "the node behind a spread's low or high line, click a node for its view.",
    )


def _errors(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)

    def erring(series: str, name: str, limit: float) -> Column:
        """Any error shows the node (orange); red from the rate its alert fires above."""
        return Column(
            f"{series}{{{in_cluster}}} > 0", name, ((None, "orange"), (limit, "red")), cell="color-text", unit="eps"
        )

    limits = ctx.thresholds

    return Row(
        "InfiniBand errors",
        [
            table(
                "Nodes with port errors",
                [
                    erring("node:ib_symbol_errors:rate", "Symbol errors", limits.ib_symbol_errors_per_second),
                    erring("node:ib_receive_errors:rate", "Receive errors", limits.ib_receive_errors_per_second),
                    erring(
                        "node:ib_transmit_discards:rate", "Transmit discards", limits.ib_transmit_discards_per_second
                    ),
                ],
                labels=["node"],
                width=8,
                label_links={"node": common.node_link(ctx)},
                shows=("ib_symbol_errors", "ib_congestion"),
                description="Nodes whose ports count errors now, per second: symbol errors (bad cable or "
                "transceiver; a healthy link counts none), malformed packets received, outbound packets "
                "discarded (link down, congestion, timeouts). Click a node for each port's errors over time. "
                "A table of the nodes in error, not a line per node: these records exist for every node, so a "
                "time series would read all of them at every point.",
            ),
            timeseries(
                "Transmit wait per node (spread)",
                _spread(ctx, "cluster:ib_transmit_wait_per_node:quantile"),
                thresholds=_above(limits.ib_transmit_wait_ticks_per_second, "orange"),
                legend=SPREAD_LEGEND,
                unit="cps",
                width=8,
                description="Ticks per second with data queued but no credit to send (congestion), across the "
                f"nodes: {SPREAD_TEXT} The most waiting nodes now: the Nodes table, sorted by transmit wait.",
            ),
            table(
                "Nodes with port problems",
                [
                    Column(
                        f"node:ib_ports_link_down:count{{{in_cluster}}} > 0",
                        "Link down",
                        PROBLEM,
                        cell="color-background",
                    ),
                    Column(
                        f"node:ib_ports_not_active:count{{{in_cluster}}} > 0",
                        "Not ACTIVE",
                        PROBLEM,
                        cell="color-background",
                    ),
                    Column(
                        f"node:ib_ports_below_nominal_rate:count{{{in_cluster}}} > 0",
                        "Below nominal rate",
                        WARNING,
                        cell="color-background",
                    ),
                    Column(
                        f"node:ib_ports_flapped:count{{{in_cluster}}} > 0",
                        "Went down (1h)",
                        WARNING,
                        cell="color-background",
                    ),
                ],
                labels=["node"],
                width=8,
                label_links={"node": common.node_link(ctx)},
                shows=("ib_port_down", "ib_port_init", "ib_link_degraded", "ib_link_flap"),
                description="Ports per node without physical link, not ACTIVE (with or without link), trained "
                "below the nominal rate, or whose link went down in the last hour (link flaps); a table of the nodes "
                "concerned, where a line per node would grow with the fleet. Click a node for its ports.",
            ),
        ],
    )


def _nccl(ctx: Context) -> Row:
    nominal = ctx.thresholds.ib_port_rate_bytes_per_second
    bandwidth = f"job:nccl_bus_bandwidth:avg{{{common.in_cluster(ctx)}, {common.NCCL_NETWORK}}}"
    group = f"{ctx.cluster}, hpc_job, collective, message_size, n_nodes"
    busiest = f"topk({TOP}, avg_over_time({bandwidth}[$__range]))"
    return Row(
        "NCCL",
        [
            table(
                f"NCCL bus bandwidth of network communicators per job (top {TOP} over the range)",
                [
                    Column(busiest, "Mean", unit="Bps"),
                    Column(f"min_over_time({bandwidth}[$__range]) and on ({group}) {busiest}", "Lowest", unit="Bps"),
                    Column(f"{bandwidth} and on ({group}) {busiest}", "Now", unit="Bps"),
                ],
                labels=["hpc_job", "collective", "message_size", "n_nodes"],
                label_links={"hpc_job": common.training_link(ctx)},
                description=f"The {TOP} job, collective, message-size bucket and communicator shape groups of the "
                "communicators that cross the fabric with the highest mean bus bandwidth over the range (NCCL "
                "Inspector; picked once over the range, NVLink-only communicators are on the training dashboard), "
                "with their lowest and current bandwidth: a lowest far under the mean is a slow spell. Compare large "
                f"buckets with the fabric's nominal rate ({nominal:.3g} bytes/s per port): small messages are "
                "latency-bound. Click a job for its training view.",
            ),
        ],
        collapsed=True,
    )


def _storage(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    filesystems = f'{in_cluster}, fs=~"$fs"'
    written = common.over_range(ctx, f"job:lustre_write_bytes:rate{{{in_cluster}}}")
    users = common.owners(ctx)
    top_writers = f"topk({TOP}, {written})"

    def of_top_writers(expr: str) -> str:
        return f"{expr} and on ({ctx.cluster}, hpc_job) {top_writers}"

    return Row(
        "Lustre and NFS I/O",
        [
            timeseries(
                "Lustre write per filesystem",
                f"fs:lustre_write_bytes:rate{{{filesystems}}}",
                legend="{{fs}}",
                unit="Bps",
                description="Bytes per second written to each Lustre filesystem (OST totals).",
            ),
            timeseries(
                "Lustre read per filesystem",
                f"fs:lustre_read_bytes:rate{{{filesystems}}}",
                legend="{{fs}}",
                unit="Bps",
                description="Bytes per second read from each Lustre filesystem (OST totals).",
            ),
            table(
                f"Lustre I/O per job (top {TOP} writers over the range)",
                [
                    Column(
                        f"{top_writers} * on ({ctx.cluster}, hpc_job) group_left (user) {users} "
                        f"or ignoring (user) {top_writers}",
                        "Written",
                        unit="bytes",
                    ),
                    Column(
                        of_top_writers(common.over_range(ctx, f"job:lustre_read_bytes:rate{{{in_cluster}}}")),
                        "Read",
                        unit="bytes",
                    ),
                    Column(
                        of_top_writers(f"max_over_time(job:lustre_write_bytes:rate{{{in_cluster}}}[$__range])"),
                        "Peak write (checkpoints)",
                        unit="Bps",
                    ),
                ],
                labels=["hpc_job", "user"],
                label_links={"hpc_job": common.training_link(ctx)},
                description=f"The {TOP} jobs that wrote most to Lustre over the range (jobstats, "
                "jobid_var=SLURM_JOB_ID; picked once over the range), with their user, what they read and their peak "
                "write bandwidth: checkpoints are a job's write bursts. Click a job for its training view.",
            ),
            timeseries(
                "NFS per export",
                [
                    Query(f"fs:nfs_read_bytes:rate{{{filesystems}}}", "{{fs}} read"),
                    Query(f"fs:nfs_write_bytes:rate{{{filesystems}}}", "{{fs}} write"),
                ],
                unit="Bps",
                description="Bytes per second the clients read from and write to each NFS export (node_exporter "
                "--collector.mountstats; NFS has no per-job counters).",
            ),
            timeseries(
                "NFS retransmissions per client (spread)",
                _spread(ctx, "cluster:nfs_retransmissions_per_node:quantile"),
                thresholds=_above(ctx.thresholds.storage_nfs_retransmissions_per_second, "orange"),
                legend=SPREAD_LEGEND,
                unit="ops",
                description="NFS RPC retransmissions per second (each follows a timeout), across the clients: "
                f"{SPREAD_TEXT} The most affected clients now: the Nodes table, sorted by retransmissions.",
            ),
        ],
        collapsed=True,
    )


def _node_mounts(ctx: Context) -> list[Panel]:
    """The fullest local mounts now and those forecast fullest."""
    in_cluster = common.in_cluster(ctx)
    window, horizon = ctx.thresholds.storage_fill_window, ctx.thresholds.storage_fill_horizon
    mounts_forecast = f"topk(10, clamp(node:filesystem_used_forecast:ratio{{{in_cluster}}}, 0, 1))"
    fill = common.fill(ctx.thresholds.storage_full_ratio)
    return [
        bargauge(
            "Fullest node mounts",
            f"topk(10, node:filesystem_used:ratio{{{in_cluster}}})",
            legend="{{node}} {{mountpoint}}",
            unit="percentunit",
            thresholds=fill,
            min=0,
            max=1,
            width=8,
            description="The ten fullest local mounts (checkpoint staging, /).",
        ),
        table(
            "Node mounts forecast to fill",
            [
                Column(mounts_forecast, f"Forecast in {horizon}", fill, cell="color-background", unit="percentunit"),
                Column(
                    f"node:filesystem_used:ratio{{{in_cluster}}} and on ({ctx.cluster}, node, mountpoint) "
                    f"{mounts_forecast}",
                    "Used now",
                    fill,
                    cell="color-text",
                    unit="percentunit",
                ),
            ],
            labels=["node", "mountpoint"],
            width=16,
            height=8,
            description=f"The ten local mounts forecast fullest {horizon} ahead (linear fit over {window}), "
            f"with their used fraction now: 100% means full within {horizon}. Shared mounts (Lustre, NFS) "
            "are forecast once, above.",
        ),
    ]


def _fill(ctx: Context) -> Row:
    in_cluster = common.in_cluster(ctx)
    window = ctx.thresholds.storage_fill_window
    horizon = ctx.thresholds.storage_fill_horizon
    lustre = f'fs:lustre_used:ratio{{{in_cluster}, fs=~"$fs"}}'
    # Forecasts are recorded (recording_rules/storage.py): fitted over the whole window, they would be computed
    # again at every point a panel draws, reading the window's every sample each time.
    lustre_forecast = f'clamp(fs:lustre_used_forecast:ratio{{{in_cluster}, fs=~"$fs"}}, 0, 1)'
    fullest_osts = f'topk({TOP}, fs:lustre_ost_used:ratio{{{in_cluster}, fs=~"$fs"}})'
    fill = common.fill(ctx.thresholds.storage_full_ratio)
    return Row(
        "Filesystem fill",
        [
            bargauge(
                "Lustre filesystems used",
                lustre,
                legend="{{fs}}",
                unit="percentunit",
                thresholds=fill,
                min=0,
                max=1,
                width=8,
                description="Used fraction of each Lustre filesystem (available space as users see it).",
            ),
            timeseries(
                "Lustre fill and forecast",
                [Query(lustre, "{{fs}}"), Query(lustre_forecast, "{{fs}} in " + horizon)],
                unit="percentunit",
                min=0,
                max=1,
                thresholds=common.fill(ctx.thresholds.storage_full_ratio),
                width=16,
                description=f"Used fraction now and forecast {horizon} ahead (linear fit over {window}).",
            ),
            timeseries(
                "OST fill per filesystem (spread)",
                f'fs:lustre_ost_used:quantile{{{in_cluster}, fs=~"$fs"}}',
                legend="{{fs}} quantile {{quantile}}",
                unit="percentunit",
                min=0,
                max=1,
                thresholds=fill,
                description="Used fraction of each filesystem's OSTs, across its OSTs: the emptiest OST (quantile 0), "
                "the 10th percentile, the median, the 90th percentile and the fullest (quantile 1). A fullest line "
                "far above the median is an unbalanced filesystem: its writes fail on that OST first "
                "(StorageLustreOstFull).",
            ),
            table(
                f"Fullest OSTs (top {TOP})",
                [
                    Column(fullest_osts, "Space used", fill, cell="color-background", unit="percentunit"),
                    Column(
                        f"fs:lustre_target_inodes_used:ratio{{{in_cluster}}} and on ({ctx.cluster}, fs, target, node) "
                        f"{fullest_osts}",
                        "Inodes used",
                        common.fill(ctx.thresholds.storage_inodes_full_ratio),
                        cell="color-text",
                        unit="percentunit",
                    ),
                ],
                labels=["fs", "target", "node"],
                width=12,
                height=8,
                description=f"The {TOP} fullest OSTs now, with their inodes used; the node is the server.",
            ),
            *_node_mounts(ctx),
        ],
        collapsed=True,
    )


def dashboard(ctx: Context) -> DashboardSpec:
    in_cluster = common.in_cluster(ctx)
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="What is wrong now (firing alerts, ports not ACTIVE and whose jobs they hurt, Lustre targets "
        "filling up), InfiniBand throughput and errors, NCCL bandwidth, Lustre and NFS I/O, "
        "filesystem fill.",
        tags=("hpcobs", "network", "storage"),
        variables=(
            common.cluster_variable(ctx),
            Variable(
                "fs",
                "Filesystem",
                f'label_values({{__name__=~"fs:.+", {in_cluster}}}, fs)',
                multi=True,
                include_all=True,
                description="Lustre filesystems and NFS exports.",
            ),
        ),
        rows=(_on_call(ctx), _fabric(ctx), _errors(ctx), _nccl(ctx), _storage(ctx), _fill(ctx)),
        links=common.others(UID),
        alerts=common.alerts(ctx, *ALERT_DOMAINS),
    )
