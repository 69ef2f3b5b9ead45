"""Storage: Lustre bandwidth per job (jobstats) and per filesystem, NFS bandwidth per export, fill ratios and
their forecasts (docs/recording-rules.md).

Lustre jobstats need `jobid_var=SLURM_JOB_ID` on the clients and `?jobstats=true` on the exporter's
scrape (docs/exporters.md); the job id then joins dcgm-exporter's hpc_job. NFS has no per-job counters:
its client bandwidth per export comes from node_exporter's mountstats collector (--collector.mountstats,
off by default), summed over the clients.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample, spread_case
from hpcobs.authoring.synthetic import series
from hpcobs.lang.escape import promql_matcher
from hpcobs.lang.promql import SPREAD_QUANTILES, aggregate, duration_seconds, label_replace, spread

OST = {"component": '="ost"'}
# The targets holding data and metadata (an MGT holds neither): what the inode fill reads, as
# StorageLustreInodesFull does.
DATA_TARGETS = {"component": '=~"mdt|ost"'}
TARGET = ("fs", "target", "node")
# A mount as node_exporter reports it: its type is kept so that the alerts tell shared filesystems from local ones.
MOUNT = ("node", "mountpoint", "fstype")


# Lustre OST counter rates: record, jobstats or OST signal, the label kept, test description, expected value
# and the labels it is expected under (besides the cluster's).
LUSTRE_RATES = (
    (
        "job:lustre_write_bytes:rate",
        "job_write_bytes",
        "hpc_job",
        "bytes per second a job writes over every OST (checkpoints)",
        150e6,
        {"hpc_job": "42"},
    ),
    (
        "job:lustre_read_bytes:rate",
        "job_read_bytes",
        "hpc_job",
        "bytes per second a job reads",
        10e6,
        {"hpc_job": "42"},
    ),
    (
        "fs:lustre_write_bytes:rate",
        "write_bytes",
        "fs",
        "bytes per second written to the filesystem named by the OST prefix",
        200e6,
        {"fs": "scratch"},
    ),
    (
        "fs:lustre_read_bytes:rate",
        "read_bytes",
        "fs",
        "bytes per second read from the filesystem",
        20e6,
        {"fs": "scratch"},
    ),
)
# NFS client rates per export: record, mountstats signal, test description, expected value.
NFS_RATES = (
    ("fs:nfs_read_bytes:rate", "nfs_mount_read_bytes", "bytes per second every client reads from the export", 3e6),
    ("fs:nfs_write_bytes:rate", "nfs_mount_write_bytes", "bytes per second every client writes to the export", 1e5),
)


def groups(ctx: Context) -> list[Group]:
    return [
        Group(
            "hpcobs-storage",
            domain="storage",
            interval=ctx.evaluation_interval,
            rules=[*_lustre(ctx), *_lustre_targets(ctx), _local_filesystems(ctx), *_nfs(ctx)],
        ),
        Group("hpcobs-storage-forecast", domain="storage", interval=ctx.evaluation_interval, rules=_forecasts(ctx)),
        Group(
            "hpcobs-storage-cluster",
            domain="storage",
            interval=ctx.evaluation_interval,
            rules=[_nfs_spread(ctx), _ost_spread(ctx)],
        ),
    ]


def _nfs_spread(ctx: Context) -> Record:
    def client_counter(values: str, node: str) -> Series:
        return series(ctx, "node_exporter", "nfs_rpc_retransmissions", values, node=node)

    description = "least affected client, 10th percentile, median, 90th percentile and most affected client"
    return Record(
        "cluster:nfs_retransmissions_per_node:quantile",
        spread((ctx.cluster,), "node:nfs_retransmissions:rate"),
        tests=[spread_case(description, client_counter, 1, ctx.timeline, **ctx.cluster_labels)],
    )


def _lustre_series(ctx: Context) -> list[Series]:
    def ost(signal: str, values: str, target: str, **labels: str) -> Series:
        return series(ctx, "lustre", signal, values, node="oss01", component="ost", target=target, **labels)

    t = ctx.timeline
    return [
        ost("job_write_bytes", t.rising(100e6, t.span), "scratch-OST0000", hpc_job="42", operation="write_bytes"),
        ost("job_write_bytes", t.rising(50e6, t.span), "scratch-OST0001", hpc_job="42", operation="write_bytes"),
        ost("job_read_bytes", t.rising(10e6, t.span), "scratch-OST0000", hpc_job="42", operation="read_bytes"),
        ost("write_bytes", t.rising(200e6, t.span), "scratch-OST0000", operation="write_bytes"),
        ost("read_bytes", t.rising(20e6, t.span), "scratch-OST0001", operation="read_bytes"),
        ost("capacity_kib", t.held(1000000, t.span), "scratch-OST0000"),
        ost("capacity_kib", t.held(1000000, t.span), "scratch-OST0001"),
        ost("available_kib", t.held(250000, t.span), "scratch-OST0000"),
        ost("available_kib", t.held(750000, t.span), "scratch-OST0001"),
    ]


def _lustre(ctx: Context) -> list[Record]:
    cluster_labels = ctx.cluster_labels
    window = ctx.rate_window
    lustre = _lustre_series(ctx)
    rates = [
        Record(
            record,
            ctx.select("lustre", [signal], (by,), over=lambda e: f"rate({e}[{window}])", op="sum", where=OST),
            tests=[
                Case(
                    description,
                    at=ctx.timeline.settled,
                    series=lustre,
                    expect=[sample(value, **cluster_labels, **expected_labels)],
                )
            ],
        )
        for record, signal, by, description, value, expected_labels in LUSTRE_RATES
    ]
    used = Record(
        "fs:lustre_used:ratio",
        f"1 - {ctx.select('lustre', ['available_kib'], ('fs',), op='sum', where=OST)} "
        f"/ {ctx.select('lustre', ['capacity_kib'], ('fs',), op='sum', where=OST)}",
        tests=[
            Case(
                "used fraction of the filesystem over its OSTs, as a user sees it (available)",
                at=ctx.timeline.settled,
                series=lustre,
                expect=[sample(0.5, **cluster_labels, fs="scratch")],
            )
        ],
    )
    return [*rates, used]


def _lustre_targets(ctx: Context) -> list[Record]:
    """Each Lustre target's space and inodes used, and the Lustre hosts whose health check fails: what
    StorageLustreOstFull, StorageLustreInodesFull and StorageLustreUnhealthy judge, one series per target or
    unhealthy host, for the panels that name the OST or host in trouble (the filesystem's own ratio averages a full
    OST away)."""
    t, cluster_labels = ctx.timeline, ctx.cluster_labels

    def target(signal: str, value: int, name: str, component: str, node: str) -> Series:
        return series(ctx, "lustre", signal, t.held(value, t.span), node=node, component=component, target=name)

    def used(signals: tuple[str, str], where: dict[str, str], by: tuple[str, ...]) -> str:
        free, total = (ctx.select("lustre", [signal], by, op="sum", where=where) for signal in signals)
        return f"1 - {free} / {total}"

    inodes = [
        target("inodes_free", 100, "scratch-MDT0000", "mdt", "mds01"),
        target("inodes_max", 1000, "scratch-MDT0000", "mdt", "mds01"),
        target("inodes_free", 750, "scratch-OST0000", "ost", "oss01"),
        target("inodes_max", 1000, "scratch-OST0000", "ost", "oss01"),
    ]
    health = [
        series(ctx, "lustre", "healthy", t.held(1, t.span), node="oss01"),
        series(ctx, "lustre", "healthy", t.held(0, t.span), node="oss02"),
    ]
    return [
        Record(
            "fs:lustre_ost_used:ratio",
            used(("available_kib", "capacity_kib"), OST, TARGET),
            tests=[
                Case(
                    "used fraction of each OST (available space as users see it)",
                    at=t.settled,
                    series=_lustre_series(ctx),
                    expect=[
                        sample(0.75, **cluster_labels, fs="scratch", target="scratch-OST0000", node="oss01"),
                        sample(0.25, **cluster_labels, fs="scratch", target="scratch-OST0001", node="oss01"),
                    ],
                )
            ],
        ),
        Record(
            "fs:lustre_target_inodes_used:ratio",
            used(("inodes_free", "inodes_max"), DATA_TARGETS, (*TARGET, "component")),
            tests=[
                Case(
                    "used fraction of the inodes of each MDT and OST",
                    at=t.settled,
                    series=inodes,
                    expect=[
                        sample(
                            0.9, **cluster_labels, fs="scratch", target="scratch-MDT0000", node="mds01", component="mdt"
                        ),
                        sample(
                            0.25,
                            **cluster_labels,
                            fs="scratch",
                            target="scratch-OST0000",
                            node="oss01",
                            component="ost",
                        ),
                    ],
                )
            ],
        ),
        Record(
            "node:lustre_unhealthy:count",
            ctx.select("lustre", ["healthy"], ("node",), op="count", when=("==", 0)),
            tests=[
                Case(
                    "1 on each host whose Lustre health_check is unhealthy, nothing on the healthy ones",
                    at=t.settled,
                    series=health,
                    expect=[sample(1, **cluster_labels, node="oss02")],
                )
            ],
        ),
    ]


def _ost_spread(ctx: Context) -> Record:
    """OST fill across each filesystem's OSTs over time: five lines per filesystem whatever its OST count."""
    t = ctx.timeline

    def ost(rank: int) -> list[Series]:
        labels = dict(node="oss01", component="ost", target=f"scratch-OST{rank:04x}")
        return [
            series(ctx, "lustre", "capacity_kib", t.held(1000, t.span), **labels),
            series(ctx, "lustre", "available_kib", t.held(1000 - 250 * rank, t.span), **labels),
        ]

    ranks = 5  # OSTs used 0, 1/4 .. 1: Prometheus' quantile interpolates between ranks, so quantile q is q
    return Record(
        "fs:lustre_ost_used:quantile",
        spread((ctx.cluster, "fs"), "fs:lustre_ost_used:ratio"),
        tests=[
            Case(
                "least used OST, 10th percentile, median, 90th percentile and fullest OST of each filesystem",
                at=t.settled,
                series=[s for rank in range(ranks) for s in ost(rank)],
                expect=[
                    sample(q * (ranks - 1) / 4, **ctx.cluster_labels, fs="scratch", quantile=f"{q:g}")
                    for q in SPREAD_QUANTILES
                ],
            )
        ],
    )


def _local_filesystems(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels

    def mount(signal: str, value: int, mountpoint: str, node: str = "n1") -> Series:
        return series(
            ctx,
            "node_exporter",
            signal,
            ctx.timeline.held(value, ctx.timeline.span),
            node=node,
            device="/dev/nvme0n1p1",
            mountpoint=mountpoint,
            fstype="xfs",
        )

    local = [
        mount("fs_size", 4 * 2**40, "/local"),
        mount("fs_avail", 2**40, "/local"),
        mount("fs_size", 100 * 2**30, "/"),
        mount("fs_avail", 75 * 2**30, "/"),
    ]
    return Record(
        "node:filesystem_used:ratio",
        f"1 - {ctx.select('node_exporter', ['fs_avail'], MOUNT)} / {ctx.select('node_exporter', ['fs_size'], MOUNT)}",
        tests=[
            Case(
                "used fraction of each local mount (checkpoint staging, /)",
                at=ctx.timeline.settled,
                series=local,
                expect=[
                    sample(0.75, **cluster_labels, node="n1", mountpoint="/local", fstype="xfs"),
                    sample(0.25, **cluster_labels, node="n1", mountpoint="/", fstype="xfs"),
                ],
            )
        ],
    )


def _nfs(ctx: Context) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    window = ctx.rate_window

    def nfs_rate(signal: str) -> str:
        """Per export, named `fs` like a Lustre filesystem (one filesystem variable for both)."""
        per_export = ctx.select("node_exporter", [signal], ("export",), over=lambda e: f"rate({e}[{window}])", op="sum")
        return aggregate("sum", (cluster, "fs"), label_replace(per_export, "fs", "export", "(.+)"))

    def nfs_client(signal: str, values: str, node: str) -> Series:
        return series(
            ctx,
            "node_exporter",
            signal,
            values,
            node=node,
            export="nfs01:/export/home",
            protocol="tcp",
            mountaddr="10.10.0.2",
        )

    t = ctx.timeline
    nfs = [
        nfs_client("nfs_mount_read_bytes", t.rising(1e6, t.span), "n1"),
        nfs_client("nfs_mount_read_bytes", t.rising(2e6, t.span), "n2"),
        nfs_client("nfs_mount_write_bytes", t.rising(1e5, t.span), "n1"),
    ]
    home = dict(**cluster_labels, fs="nfs01:/export/home")
    rates = [
        Record(
            record,
            nfs_rate(signal),
            tests=[Case(description, at=t.settled, series=nfs, expect=[sample(value, **home)])],
        )
        for record, signal, description, value in NFS_RATES
    ]
    retransmissions = Record(
        "node:nfs_retransmissions:rate",
        aggregate(
            "sum",
            (cluster, "node"),
            ctx.select(
                "node_exporter",
                ["nfs_rpc_retransmissions"],
                ("node",),
                over=lambda e: f"rate({e}[{window}])",
                op="sum",
            ),
        ),
        tests=[
            Case(
                "NFS RPC retransmissions per second on the client",
                at=t.settled,
                series=[series(ctx, "node_exporter", "nfs_rpc_retransmissions", t.rising(0.5, t.span), node="n1")],
                expect=[sample(0.5, **cluster_labels, node="n1")],
            )
        ],
    )
    return [*rates, retransmissions]


def _forecasts(ctx: Context) -> list[Record]:
    """Fill ratios forecast `storage_fill_horizon` ahead by a linear fit over `storage_fill_window`: local node
    mounts (shared mountpoints are Lustre's and NFS's own, and every client would repeat them) and Lustre
    filesystems. The fit reads the whole window of every mount, the largest read of the storage rules: it is
    done once here for the filling-up alerts and the fill panels, which a panel drawing it over time would
    otherwise redo at each of its points."""
    cluster_labels = ctx.cluster_labels
    thresholds = ctx.thresholds
    window, horizon = thresholds.storage_fill_window, duration_seconds(thresholds.storage_fill_horizon)
    # Mounts that are not shared, as the node mount alerts select them (alerts/storage.py).
    local = ",".join(
        (
            promql_matcher("fstype", "!~", thresholds.storage_shared_fstypes),
            promql_matcher("mountpoint", "!~", thresholds.storage_shared_mountpoints),
        )
    )
    # 64 scrapes (a power of two, so the fit's means are exact) of a ratio growing by exactly 2^-15 per
    # second: the forecast is the last value plus 2^-15 x the horizon, exactly.
    scrapes, per_second = 64, 2**-15
    step = duration_seconds(ctx.scrape_interval)
    # Read at the last scrape: the forecast recorded at the last rule evaluation before it, from the ratio then.
    recorded = ctx.timeline.observed((scrapes - 1) * step)
    at = f"{(scrapes - 1) * step}s"
    forecast = 0.5 + recorded * per_second + horizon * per_second

    def mount(mountpoint: str, growing: bool) -> list[Series]:
        size = 2**40
        slope = round(step * per_second * size) if growing else 0
        labels = dict(node="n1", device="/dev/md0", mountpoint=mountpoint, fstype="ext4")
        return [
            series(ctx, "node_exporter", "fs_size", f"{size}x{scrapes}", **labels),
            series(ctx, "node_exporter", "fs_avail", f"{size // 2}-{slope}x{scrapes}", **labels),
        ]

    def nfs(mountpoint: str) -> list[Series]:
        """A shared NFS mount, growing, at a mountpoint no threshold names: its type says it is shared."""
        size = 2**40
        labels = dict(node="n1", device=f"nfs01:/export{mountpoint}", mountpoint=mountpoint, fstype="nfs4")
        return [
            series(ctx, "node_exporter", "fs_size", f"{size}x{scrapes}", **labels),
            series(
                ctx, "node_exporter", "fs_avail", f"{size // 2}-{round(step * per_second * size)}x{scrapes}", **labels
            ),
        ]

    def ost(target: str, growing: bool) -> list[Series]:
        size = 2**30
        slope = round(step * per_second * size) if growing else 0
        labels = dict(node="oss01", component="ost", target=target)
        return [
            series(ctx, "lustre", "capacity_kib", f"{size}x{scrapes}", **labels),
            series(ctx, "lustre", "available_kib", f"{size // 2}-{slope}x{scrapes}", **labels),
        ]

    return [
        Record(
            "node:filesystem_used_forecast:ratio",
            f"predict_linear(node:filesystem_used:ratio{{{local}}}[{window}], {horizon})",
            tests=[
                Case(
                    "a local mount growing is forecast from its trend, a steady one stays; shared mounts are left out",
                    at=at,
                    series=mount("/raid", True) + mount("/", False) + mount("/lustre", True) + nfs("/scratch"),
                    expect=[
                        sample(forecast, **cluster_labels, node="n1", mountpoint="/raid", fstype="ext4"),
                        sample(0.5, **cluster_labels, node="n1", mountpoint="/", fstype="ext4"),
                    ],
                )
            ],
        ),
        Record(
            "fs:lustre_used_forecast:ratio",
            f"predict_linear(fs:lustre_used:ratio[{window}], {horizon})",
            tests=[
                Case(
                    "the filesystem's used fraction over its OSTs, forecast from its trend",
                    at=at,
                    series=ost("scratch-OST0000", True) + ost("scratch-OST0001", True),
                    expect=[sample(forecast, **cluster_labels, fs="scratch")],
                )
            ],
        ),
    ]
