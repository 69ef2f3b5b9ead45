"""Storage alerts: filling and full filesystems, stalled checkpoints, NFS and Lustre health.

Node mounts are read from node:filesystem_used:ratio minus the shared ones (config
thresholds.storage_shared_fstypes and storage_shared_mountpoints): node_exporter excludes no network
filesystem by default (defFSTypesExcluded, docs/exporters.md), so every client reports the same NFS or Lustre
mount and alerting on each client's view would page once per node. A full shared mount pages once, from the
fullest client view (StorageSharedFilesystemFull). Lustre is watched from its servers instead, per filesystem
(fs:lustre_used:ratio) and per OST: one full OST fails the writes striped on it while the filesystem
still looks half empty. The per-OST and health reads are raw (no record keeps them) and small: one
series per OST, one per Lustre host. Filling up reads the recorded forecasts
(node:filesystem_used_forecast:ratio, fs:lustre_used_forecast:ratio), which the fill panels show too.

Inodes run out apart from space (many small files: an unpacked data set, per-rank logs, checkpoint shards), and
then every file creation fails with ENOSPC while df still shows free space. The inode alerts judge the same mounts
as the space ones, through the same selection (the inode ratio joined with the space record's series, which
carry it), and Lustre per target: an MDT out of inodes refuses new files on the whole filesystem, an OST out of
objects the stripes placed on it. The inode reads are raw (node_exporter's files and files_free, the Lustre
exporter's inodes_free and inodes_maximum): a record per mount would double the largest storage record for a
ratio only these alerts read.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

from hpcobs.recording_rules.storage import MOUNT

from hpcobs.authoring.alert_cases import Timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Sample, Series, alert
from hpcobs.authoring.synthetic import JOB_OWNER, job_info, series
from hpcobs.lang.escape import promql_matcher
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

from .training import owned, rank_series

OST = {"component": '="ost"'}
# The targets that hold a filesystem's inodes: its MDTs (files) and OSTs (objects); the MGS (component "mgt",
# target "MGS", lustrefs-exporter's snapshots) belongs to no filesystem.
DATA_TARGETS = {"component": '=~"mdt|ost"'}
TIB_KIB = 1024**3  # one TiB in the KiB the Lustre exporter reports
NODE_DISK = 10**12  # a node mount of 1 TB
NODE_INODES = 64 * 10**6  # its inodes (ext4's default of one per 16 KiB)
TARGET_INODES = 2 * 10**9  # inodes of a Lustre target in the tests
# Full filesystems are full from this scrape on in every case.
FULL_FROM = 6

THRESHOLDS = (
    declare.regex(
        "storage_shared_fstypes",
        "nfs4?|lustre|cifs|smb3|ceph|beegfs|gpfs|wekafs",
        "Filesystem types (RE2 regex on node_exporter's `fstype`, anchored at both ends) of shared filesystems: "
        "node_exporter reports them on every client, so the node mount alerts skip them and "
        "StorageSharedFilesystemFull judges each once.",
    ),
    declare.regex(
        "storage_shared_mountpoints",
        "/lustre(/.*)?|/home(/.*)?",
        "Mountpoints (RE2 regex, anchored at both ends as in PromQL) of shared filesystems whatever their type, "
        "judged like storage_shared_fstypes: an NFS server's own node_exporter sees its export as a local mount.",
    ),
    declare.duration(
        "storage_fill_window",
        "6h",
        "History predict_linear fits to forecast a filesystem's fill ratio (StorageFilesystemFillingUp, "
        "StorageLustreFillingUp).",
    ),
    declare.duration(
        "storage_fill_horizon",
        "24h",
        "A filesystem forecast to be full within this horizon is filling up (StorageFilesystemFillingUp, "
        "StorageLustreFillingUp).",
    ),
    declare.fraction(
        "storage_fill_min_ratio",
        0.3,
        "Filling-up alerts ignore filesystems less used than this (a data set landing on an empty one).",
    ),
    declare.duration(
        "storage_fill_for",
        "30m",
        "How long the forecast must say full before StorageFilesystemFillingUp / StorageLustreFillingUp.",
    ),
    declare.fraction(
        "storage_full_ratio",
        0.95,
        "Used fraction above which a node mount or a Lustre OST is full (StorageFilesystemFull, StorageLustreOstFull).",
    ),
    declare.fraction(
        "storage_inodes_full_ratio",
        0.95,
        "Used fraction of its inodes above which a node mount or a Lustre MDT or OST is out of inodes "
        "(StorageFilesystemInodesFull, StorageSharedFilesystemInodesFull, StorageLustreInodesFull): every file "
        "creation then fails with ENOSPC. 5% left is where node_exporter's own mixin warns "
        "(NodeFilesystemAlmostOutOfFiles, docs/node-mixin/alerts/alerts.libsonnet); here it pages like a full disk, "
        "as jobs on a cluster create files at a rate that empties the rest within hours.",
    ),
    declare.duration(
        "storage_full_for",
        "5m",
        "How long a filesystem must stay above storage_full_ratio (storage_inodes_full_ratio for its inodes) before "
        "its full alert (a file written then deleted).",
    ),
    declare.rate(
        "storage_checkpoint_stalled_bytes_per_second",
        50_000_000,
        "A training job that makes no step while writing to Lustre slower than this (bytes/s, the whole job) has a "
        "stalled checkpoint (StorageCheckpointWriteStalled).",
    ),
    declare.duration(
        "storage_checkpoint_stall_for",
        "5m",
        "How long a checkpoint may crawl before StorageCheckpointWriteStalled (a healthy one takes ~1-2 min).",
    ),
    declare.rate(
        "storage_nfs_retransmissions_per_second",
        0.05,
        "NFS RPC retransmissions per second on a client above which StorageNfsRetransmissions fires (each one "
        "follows a timeout).",
    ),
    declare.duration(
        "storage_nfs_retransmissions_for",
        "10m",
        "How long NFS retransmissions must continue before StorageNfsRetransmissions.",
    ),
    declare.duration(
        "storage_lustre_unhealthy_for",
        "2m",
        "How long a Lustre host may report health_check unhealthy before StorageLustreUnhealthy pages.",
    ),
)


def groups(ctx: Context) -> list[Group]:
    data = _Data(ctx)
    rules = [
        _filesystem_filling_up(data),
        _lustre_filling_up(data),
        *(_filesystem_full(data, measure) for measure in MEASURES),
        *(_shared_filesystem_full(data, measure) for measure in MEASURES),
        _lustre_ost_full(data),
        _lustre_inodes_full(data),
        _checkpoint_write_stalled(data),
        _nfs_retransmissions(data),
        _lustre_unhealthy(data),
    ]
    return [Group("hpcobs-storage-alerts", domain="storage", interval=ctx.evaluation_interval, rules=rules)]


def _remaining(used: str, total: int) -> tuple[str, str]:
    """(size, free) promtool values for a used fraction given in thousandths ('500+0.5x100 900x10')."""
    out, samples = [], 0
    for part in used.split():
        start, op, rest = part.partition("+")
        slope, _, count = rest.partition("x") if op else ("0", "", start.partition("x")[2])
        start = start.partition("x")[0]
        free = total - int(start) * total // 1000
        out.append(f"{free}-{int(float(slope) * total / 1000)}x{count}" if op else f"{free}x{count}")
        samples += int(count) + 1
    return f"{total}x{samples - 1}", " ".join(out)


@dataclass(frozen=True)
class _Data:
    """Thresholds and test series the storage alerts share."""

    ctx: Context

    @property
    def thresholds(self) -> Thresholds:
        return self.ctx.thresholds

    @property
    def step(self) -> int:
        return duration_seconds(self.ctx.scrape_interval)

    @property
    def where(self) -> str:
        return f"cluster {label(self.ctx.cluster)}"

    def storage_alert(self, server_host: bool = False) -> partial[Alert]:
        """`server_host`: about a Lustre server (its node label), which the node view does not show."""
        return alerts_of("storage", DashboardUid.NETWORK_STORAGE, Team.STORAGE, server_host)

    @cached_property
    def local(self) -> str:
        """Used ratio of node mounts that are not shared."""
        # The same selection as node:filesystem_used_forecast:ratio (recording_rules/storage.py).
        not_shared = (
            promql_matcher("fstype", "!~", self.thresholds.storage_shared_fstypes),
            promql_matcher("mountpoint", "!~", self.thresholds.storage_shared_mountpoints),
        )
        return f"node:filesystem_used:ratio{{{','.join(not_shared)}}}"

    @cached_property
    def shared(self) -> str:
        """Used ratio of shared mounts as each client sees them, but Lustre's: Lustre is judged from its servers
        (StorageLustreOstFull: one full OST fails the writes striped on it while the client view, an average
        over the OSTs, still looks fine)."""
        not_lustre = ',fstype!="lustre"'
        by_type = promql_matcher("fstype", "=~", self.thresholds.storage_shared_fstypes)
        by_mountpoint = promql_matcher("mountpoint", "=~", self.thresholds.storage_shared_mountpoints)
        return (
            f"node:filesystem_used:ratio{{{by_type}{not_lustre}}} "
            f"or node:filesystem_used:ratio{{{by_mountpoint}{not_lustre}}}"
        )

    def inodes_used(self, mounts: str) -> str:
        """Used fraction of the inodes of the mounts that `mounts` (a used-space expression by mount) selects."""
        ctx = self.ctx

        def files(signal: str) -> str:
            return ctx.select("node_exporter", [signal], MOUNT)

        on = ", ".join((ctx.cluster, *MOUNT))
        return f"((1 - {files('fs_files_free')} / {files('fs_files')}) and on ({on}) ({mounts}))"

    def on(self, **labels: str) -> list[Sample]:
        return [alert(**self.ctx.cluster_labels, **labels)]

    def mount(self, used: str, mountpoint: str = "/raid", node: str = "n1", inodes: bool = False) -> list[Series]:
        """A node mount of 1 TB; `used` in thousandths as _remaining() reads it, of its space or its inodes."""
        labels = dict(node=node, device="/dev/md0", mountpoint=mountpoint, fstype="ext4")
        return self._mount(used, labels, inodes)

    def nfs_mount(self, used: str, node: str, mountpoint: str = "/scratch", inodes: bool = False) -> list[Series]:
        """A shared NFS filesystem of 1 TB as one client's node_exporter reports it."""
        labels = dict(node=node, device=f"nfs01:/export{mountpoint}", mountpoint=mountpoint, fstype="nfs4")
        return self._mount(used, labels, inodes)

    def _mount(self, used: str, labels: dict[str, str], inodes: bool) -> list[Series]:
        """Its size and available space; with `inodes`, `used` is of its inodes and its space is half used."""
        total, avail = _remaining(used, NODE_DISK)
        if not inodes:
            return [
                series(self.ctx, "node_exporter", "fs_size", total, **labels),
                series(self.ctx, "node_exporter", "fs_avail", avail, **labels),
            ]
        files, free = _remaining(used, NODE_INODES)
        half = f"{NODE_DISK // 2}x{total.partition('x')[2]}"
        return [
            series(self.ctx, "node_exporter", "fs_size", total, **labels),
            series(self.ctx, "node_exporter", "fs_avail", half, **labels),
            series(self.ctx, "node_exporter", "fs_files", files, **labels),
            series(self.ctx, "node_exporter", "fs_files_free", free, **labels),
        ]

    def ost(self, index: int, used: str) -> list[Series]:
        """An OST of 1 TiB of filesystem scratch on oss01; `used` as _remaining() reads it."""
        labels = dict(node="oss01", component="ost", target=f"scratch-OST{index:04x}")
        total, avail = _remaining(used, TIB_KIB)
        return [
            series(self.ctx, "lustre", "capacity_kib", total, **labels),
            series(self.ctx, "lustre", "available_kib", avail, **labels),
        ]

    def target_inodes(self, used: str, target: str, node: str, component: str) -> list[Series]:
        """A Lustre target's inodes; `used` as _remaining() reads it."""
        maximum, free = _remaining(used, TARGET_INODES)
        labels = dict(node=node, component=component, target=target)
        return [
            series(self.ctx, "lustre", "inodes_max", maximum, **labels),
            series(self.ctx, "lustre", "inodes_free", free, **labels),
        ]

    # -- filling up: the recorded forecast (predict_linear over the fill window) -------------------------

    def filling(self, ratio: str, forecast: str) -> str:
        return f"({ratio} > {self.thresholds.storage_fill_min_ratio}) and {forecast} >= 1"

    @cached_property
    def fill(self) -> Timing:
        return timing(self.ctx, self.thresholds.storage_fill_for, 1)

    @cached_property
    def fill_length(self) -> int:
        return self.fill.hold // self.fill.step + 40

    def fill_start(self, share: float) -> int:
        """Used thousandths at `share` of storage_fill_min_ratio. A fault starting just over it (1.03) has grown to
        about 1.15 times it when its case is evaluated (at the default horizon): a ratio 25% higher silences it."""
        return round(self.thresholds.storage_fill_min_ratio * share * 1000)

    def growth(self, pace: float) -> float:
        """Used thousandths per scrape that reach full within pace x the horizon (1.5: well within; 0.4: after)."""
        horizon_scrapes = duration_seconds(self.thresholds.storage_fill_horizon) // self.fill.step
        return round(1000 / horizon_scrapes * pace, 4)

    # -- full: above a ratio -----------------------------------------------------------------------------

    @cached_property
    def full(self) -> Timing:
        return timing(self.ctx, self.thresholds.storage_full_for, FULL_FROM, settle=5 * self.step)

    @cached_property
    def full_length(self) -> int:
        return self.full.hold // self.full.step + 20

    def filled(self, under: int, over: int) -> str:
        """Used thousandths: `under` (just under the full ratio) for FULL_FROM scrapes, then `over`."""
        return f"{under}x{FULL_FROM - 1} {over}x{self.full_length}"


def _filesystem_filling_up(data: _Data) -> Alert:
    thresholds, fast = data.thresholds, data.growth(1.5)
    horizon, length = thresholds.storage_fill_horizon, data.fill_length
    return data.storage_alert()(
        "StorageFilesystemFillingUp",
        severity="warning",
        expr=data.filling(data.local, "node:filesystem_used_forecast:ratio"),
        for_=thresholds.storage_fill_for,
        summary="A node filesystem is forecast to be full soon.",
        description=f"{label('mountpoint')} on {label('node')} ({data.where}) will be full within {horizon} at the "
        f"rate it grew over the last {thresholds.storage_fill_window}: find what writes to it (checkpoint "
        "staging, core dumps, logs).",
        **standard_cases(
            data.fill,
            fault=f"just over {thresholds.storage_fill_min_ratio:.0%} used and growing to full in well under {horizon}",
            fault_series=data.mount(f"{data.fill_start(1.03)}+{fast}x{length}"),
            expect=data.on(node="n1", mountpoint="/raid", fstype="ext4"),
            healthy="a steady filesystem",
            healthy_series=data.mount(f"600x{length}"),
            pending=f"forecast full for less than {thresholds.storage_fill_for}",
            also_silent=[
                data.fill.silent(
                    f"growing, but full only after {horizon}", data.mount(f"500+{data.growth(0.4)}x{length}")
                ),
                data.fill.silent(
                    f"growing fast but less than {thresholds.storage_fill_min_ratio:.0%} used",
                    data.mount(f"{data.fill_start(0.8)}+{fast}x{length}"),
                ),
                data.fill.silent(
                    "a shared mount: each client sees it; Lustre has its own alerts",
                    data.mount(f"500+{fast}x{length}", mountpoint="/lustre"),
                ),
            ],
        ),
    )


def _lustre_filling_up(data: _Data) -> Alert:
    thresholds, fast, slow = data.thresholds, data.growth(1.5), data.growth(0.4)
    horizon, length = thresholds.storage_fill_horizon, data.fill_length
    return data.storage_alert()(
        "StorageLustreFillingUp",
        severity="warning",
        expr=data.filling("fs:lustre_used:ratio", "fs:lustre_used_forecast:ratio"),
        for_=thresholds.storage_fill_for,
        summary="A Lustre filesystem is forecast to be full soon.",
        description=f"Lustre filesystem {label('fs')} ({data.where}) will be full within {horizon} at the rate it "
        f"grew over the last {thresholds.storage_fill_window}: find the jobs and users writing most (lfs "
        "quota, jobstats) before checkpoints start failing.",
        fired_by=("fs_filling",),
        **standard_cases(
            data.fill,
            fault="an OST filling fast fills the filesystem, just over the used ratio",
            fault_series=data.ost(0, f"{data.fill_start(1.03)}+{2 * fast}x{length}")
            + data.ost(1, f"{data.fill_start(1.03)}x{length}"),
            expect=data.on(fs="scratch"),
            healthy="a steady filesystem",
            healthy_series=data.ost(0, f"400x{length}") + data.ost(1, f"600x{length}"),
            pending=f"forecast full for less than {thresholds.storage_fill_for}",
            also_silent=[
                data.fill.silent(
                    f"growing, but full only after {horizon}",
                    data.ost(0, f"500+{slow}x{length}") + data.ost(1, f"500+{slow}x{length}"),
                )
            ],
        ),
    )


@dataclass(frozen=True)
class _Measure:
    """What a node mount runs out of, space or inodes: one row per pair of node mount alerts (local, shared)."""

    local_alert: str
    shared_alert: str
    full: Callable[[Thresholds], float]  # the used ratio it is full at
    used: Callable[[_Data, str], str]  # used fraction of the mounts a used-space expression selects
    noun: str  # what the summary says runs out
    what: str  # how the description says it is full, with {full}
    local_fails: str  # what fails on the node
    shared_fails: str  # what fails on every client, and what to do
    inodes: bool  # whether the test series fill its inodes


MEASURES = (
    _Measure(
        "StorageFilesystemFull",
        "StorageSharedFilesystemFull",
        lambda thresholds: thresholds.storage_full_ratio,
        lambda data, mounts: mounts,
        "is full",
        "is more than {full:.0%} used",
        "writes (checkpoint staging, logs, /tmp) are about to fail with ENOSPC.",
        "jobs writing to it on every node are about to fail with ENOSPC. Find the users writing most (quota, du on "
        "the server) and free or grow it on the file server.",
        inodes=False,
    ),
    _Measure(
        "StorageFilesystemInodesFull",
        "StorageSharedFilesystemInodesFull",
        lambda thresholds: thresholds.storage_inodes_full_ratio,
        _Data.inodes_used,
        "is running out of inodes",
        "has used more than {full:.0%} of its inodes",
        "creating files (checkpoint shards, logs, /tmp) is about to fail with ENOSPC while df still shows free space.",
        "creating files on it from every node is about to fail with ENOSPC while df still shows free space. Find "
        "who creates most files (quota -s, a file count per directory on the server) and clean up, or grow the "
        "inode table on the file server.",
        inodes=True,
    ),
)


def _full_levels(data: _Data, full: float) -> tuple[int, int, int]:
    """Used thousandths just above the full ratio and just under it, and the length of a steady series."""
    return round(full * 1000) + 20, round(full * 1000) - 10, data.full_length + 5


def _filesystem_full(data: _Data, measure: _Measure) -> Alert:
    full = measure.full(data.thresholds)
    over, under, length = _full_levels(data, full)
    for_, inodes = data.thresholds.storage_full_for, measure.inodes

    def mount(used: str, mountpoint: str = "/raid") -> list[Series]:
        return data.mount(used, mountpoint, inodes=inodes)

    return data.storage_alert()(
        measure.local_alert,
        severity="critical",
        expr=f"{measure.used(data, data.local)} > {full}",
        for_=for_,
        summary=f"A node filesystem {measure.noun}.",
        description=f"{label('mountpoint')} on {label('node')} ({data.where}) {measure.what.format(full=full)}: "
        f"{measure.local_fails}",
        **standard_cases(
            data.full,
            fault=f"above {full:.0%}",
            fault_series=mount(data.filled(under, over)),
            expect=data.on(node="n1", mountpoint="/raid", fstype="ext4"),
            healthy="half full",
            healthy_series=mount(f"500x{length}"),
            pending=f"above {full:.0%} for less than {for_}",
            also_silent=[
                data.full.silent(f"just under {full:.0%}", mount(f"{under}x{length}")),
                data.full.silent(
                    f"a full shared mountpoint is {measure.shared_alert}'s",
                    mount(f"{over}x{length}", mountpoint="/home"),
                ),
                data.full.silent(
                    f"a full NFS mount every client reports is {measure.shared_alert}'s",
                    data.nfs_mount(f"{over}x{length}", "n1", inodes=inodes)
                    + data.nfs_mount(f"{over}x{length}", "n2", inodes=inodes),
                ),
            ],
        ),
    )


def _shared_filesystem_full(data: _Data, measure: _Measure) -> Alert:
    full = measure.full(data.thresholds)
    over, under, length = _full_levels(data, full)
    for_ = data.thresholds.storage_full_for

    def everywhere(used: str) -> list[Series]:
        """The same shared filesystem as two clients report it."""
        return data.nfs_mount(used, "n1", inodes=measure.inodes) + data.nfs_mount(used, "n2", inodes=measure.inodes)

    return data.storage_alert()(
        measure.shared_alert,
        severity="critical",
        expr=f"max by ({data.ctx.cluster}, mountpoint) ({measure.used(data, data.shared)}) > {full}",
        for_=for_,
        summary=f"A shared filesystem {measure.noun}.",
        description=f"The shared filesystem mounted at {label('mountpoint')} ({data.where}) "
        f"{measure.what.format(full=full)} as its fullest client sees it: {measure.shared_fails}",
        fired_by=() if measure.inodes else ("shared_fs_full",),
        **standard_cases(
            data.full,
            fault=f"above {full:.0%} on every client",
            fault_series=everywhere(data.filled(under, over)),
            expect=data.on(mountpoint="/scratch"),
            healthy="half full",
            healthy_series=everywhere(f"500x{length}"),
            pending=f"above {full:.0%} for less than {for_}",
            also_silent=[
                data.full.silent(f"just under {full:.0%}", everywhere(f"{under}x{length}")),
                data.full.silent(
                    f"a full local mount is {measure.local_alert}'s",
                    data.mount(f"{over}x{length}", inodes=measure.inodes),
                ),
            ],
        ),
    )


def _lustre_ost_full(data: _Data) -> Alert:
    full = data.thresholds.storage_full_ratio
    over, under, length = _full_levels(data, full)
    for_, by = data.thresholds.storage_full_for, ("fs", "target", "node")
    used = (
        f"1 - {data.ctx.select('lustre', ['available_kib'], by, op='sum', where=OST)} "
        f"/ {data.ctx.select('lustre', ['capacity_kib'], by, op='sum', where=OST)}"
    )
    return data.storage_alert(server_host=True)(
        "StorageLustreOstFull",
        severity="critical",
        expr=f"{used} > {full}",
        for_=for_,
        summary="A Lustre OST is full.",
        description=f"OST {label('target')} of Lustre filesystem {label('fs')} on {label('node')} ({data.where}) is "
        f"more than {full:.0%} used: writes of files striped on it fail with ENOSPC even though the "
        "filesystem has space. Rebalance (lfs migrate) or deactivate it for new objects.",
        fired_by=("fs_filling",),
        **standard_cases(
            data.full,
            fault=f"one OST above {full:.0%}",
            fault_series=data.ost(0, data.filled(under, over)) + data.ost(1, f"400x{length}"),
            expect=data.on(fs="scratch", target="scratch-OST0000", node="oss01"),
            healthy="OSTs half full",
            healthy_series=data.ost(0, f"500x{length}") + data.ost(1, f"400x{length}"),
            pending=f"above {full:.0%} for less than {for_}",
            pending_series=data.ost(0, data.filled(under, over)),
            also_silent=[data.full.silent(f"just under {full:.0%}", data.ost(0, f"{under}x{length}"))],
        ),
    )


def _lustre_inodes_full(data: _Data) -> Alert:
    full = data.thresholds.storage_inodes_full_ratio
    over, under, length = _full_levels(data, full)
    for_, by = data.thresholds.storage_full_for, ("fs", "target", "node", "component")
    ctx = data.ctx
    used = (
        f"1 - {ctx.select('lustre', ['inodes_free'], by, op='sum', where=DATA_TARGETS)} "
        f"/ {ctx.select('lustre', ['inodes_max'], by, op='sum', where=DATA_TARGETS)}"
    )

    def mdt(used: str) -> list[Series]:
        return data.target_inodes(used, "scratch-MDT0000", "mds01", "mdt")

    def ost(used: str) -> list[Series]:
        return data.target_inodes(used, "scratch-OST0000", "oss01", "ost")

    return data.storage_alert(server_host=True)(
        "StorageLustreInodesFull",
        severity="critical",
        expr=f"{used} > {full}",
        for_=for_,
        summary="A Lustre MDT or OST is running out of inodes.",
        description=f"{label('component')} {label('target')} of Lustre filesystem {label('fs')} on {label('node')} "
        f"({data.where}) has used more than {full:.0%} of its inodes: on an MDT every file creation on the "
        "filesystem is about to fail with ENOSPC, on an OST the creation of files striped on it, whatever space is "
        "left. Find who creates most files (lfs quota -u/-p, jobstats open/mknod) and clean up.",
        fired_by=("lustre_inodes",),
        **standard_cases(
            data.full,
            fault=f"the MDT above {full:.0%} of its inodes",
            fault_series=mdt(data.filled(under, over)) + ost(f"400x{length}"),
            expect=data.on(fs="scratch", target="scratch-MDT0000", node="mds01", component="mdt"),
            healthy="inodes half used",
            healthy_series=mdt(f"500x{length}") + ost(f"400x{length}"),
            pending=f"above {full:.0%} for less than {for_}",
            pending_series=mdt(data.filled(under, over)),
            also_fires=[
                data.full.fires(
                    "an OST out of objects",
                    ost(data.filled(under, over)),
                    data.on(fs="scratch", target="scratch-OST0000", node="oss01", component="ost"),
                )
            ],
            also_silent=[
                data.full.silent(f"just under {full:.0%}", mdt(f"{under}x{length}")),
                data.full.silent(
                    "the MGS belongs to no filesystem",
                    data.target_inodes(f"{over}x{length}", "MGS", "mds01", "mgt"),
                ),
            ],
        ),
    )


def _checkpoint_write_stalled(data: _Data) -> Alert:
    ctx, thresholds = data.ctx, data.thresholds
    stalled, for_ = (
        thresholds.storage_checkpoint_stalled_bytes_per_second,
        thresholds.storage_checkpoint_stall_for,
    )
    stop = 10  # the job's last step is at this scrape
    # No step in the rate window from (stop + 3) or (stop + 4) scrapes on, depending on whether the window
    # includes its left edge (Prometheus 2 vs 3).
    when = timing(ctx, for_, stop + 4, earliest_scrapes=stop + 3, settle=5 * data.step)
    run = when.hold // when.step + 30
    progress = rank_series(ctx, {("0", "n1"): 0.5, ("1", "n2"): 0.5}, stop_after=stop, length=stop + run)

    def job_writes(values: str) -> list[Series]:
        return [
            series(
                ctx,
                "lustre",
                "job_write_bytes",
                values,
                node="oss01",
                component="ost",
                target=f"scratch-OST000{index}",
                hpc_job="42",
                operation="write",
            )
            for index in (0, 1)
        ]

    def trickle(bytes_per_second: float) -> list[Series]:
        """Writes from the job's stop on, at this rate over its two OSTs."""
        return job_writes(f"0x{stop} 0+{bytes_per_second / 2 * when.step:.12g}x{run}")

    stuck = progress + trickle(stalled * 0.9)
    return data.storage_alert()(
        "StorageCheckpointWriteStalled",
        severity="critical",
        expr=owned(
            ctx,
            f"(job:lustre_write_bytes:rate > 0 < {stalled}) and on ({ctx.cluster}, hpc_job) "
            "job:training_steps:rate == 0",
        ),
        for_=for_,
        summary="A training job's checkpoint write to Lustre has stalled.",
        description=f"Job {label('hpc_job')} (user {label('user')}, {data.where}) has made no training step for "
        f"{for_} while writing to Lustre at under {stalled} bytes/s: its checkpoint is stuck on the "
        "filesystem. Check the OSTs it writes to and the OSS health.",
        fired_by=("checkpoint_stall",),
        **standard_cases(
            when,
            fault="no step, writes just under the stall threshold",
            fault_series=stuck + [job_info(ctx, "42", "1x400", job_name="pretrain")],
            expect=data.on(hpc_job="42", **JOB_OWNER),
            healthy="training and not writing (between checkpoints)",
            healthy_series=rank_series(ctx, {("0", "n1"): 0.5}, length=stop + run) + job_writes(f"0x{stop + run}"),
            pending=f"stalled for less than {for_}",
            pending_series=stuck,
            also_fires=[
                when.fires("a job without job-info still alerts, without its owner", stuck, data.on(hpc_job="42"))
            ],
            also_silent=[
                when.silent("no step but writing fast: a checkpoint in progress", progress + trickle(stalled * 20)),
                when.silent("no step and writing just over the stall threshold", progress + trickle(stalled * 1.1)),
                when.silent(
                    "no step and no write at all: a hang, TrainingHang's case", progress + job_writes(f"0x{stop + run}")
                ),
            ],
        ),
    )


def _nfs_retransmissions(data: _Data) -> Alert:
    rate, for_ = (
        data.thresholds.storage_nfs_retransmissions_per_second,
        data.thresholds.storage_nfs_retransmissions_for,
    )
    # Retransmissions start after the 10th scrape and show in rate() one scrape later.
    when = timing(data.ctx, for_, 11)

    def retransmissions(per_second: float) -> list[Series]:
        return [
            series(
                data.ctx,
                "node_exporter",
                "nfs_rpc_retransmissions",
                f"7x10 7+{per_second * when.step:.12g}x{when.hold // when.step + 30}",
                node="n1",
            )
        ]

    return data.storage_alert()(
        "StorageNfsRetransmissions",
        severity="warning",
        expr=f"node:nfs_retransmissions:rate > {rate}",
        for_=for_,
        summary="An NFS client keeps retransmitting RPCs.",
        description=f"The NFS client on {label('node')} ({data.where}) has retransmitted RPCs for {for_}: the NFS "
        "server is slow or unreachable and processes on the node block on /home or other NFS mounts.",
        **standard_cases(
            when,
            fault="retransmitting just over the threshold",
            fault_series=retransmissions(1.1 * rate),
            expect=data.on(node="n1"),
            healthy="no retransmission",
            healthy_series=retransmissions(0),
            pending=f"retransmitting for less than {for_}",
            also_silent=[when.silent("just under the threshold", retransmissions(0.9 * rate))],
        ),
    )


def _lustre_unhealthy(data: _Data) -> Alert:
    for_ = data.thresholds.storage_lustre_unhealthy_for
    when = timing(data.ctx, for_, FULL_FROM, settle=5 * data.step)
    scrapes = when.hold // when.step

    def health(values: str, node: str = "oss01") -> list[Series]:
        return [series(data.ctx, "lustre", "healthy", values, node=node)]

    sick, well = f"1x{FULL_FROM - 1} 0x{scrapes + 20}", f"1x{scrapes + 25}"
    return data.storage_alert(server_host=True)(
        "StorageLustreUnhealthy",
        severity="critical",
        expr=f"{data.ctx.select('lustre', ['healthy'], ('node',), op='min')} == 0",
        for_=for_,
        summary="A Lustre host reports itself unhealthy.",
        description=f"Lustre on {label('node')} ({data.where}) reports health_check unhealthy: a target hit an LBUG "
        "or went read-only; clients of its targets hang. Check lctl get_param health_check and dmesg.",
        **standard_cases(
            when,
            fault="the OSS turns unhealthy",
            fault_series=health(sick) + health(well, node="oss02"),
            expect=data.on(node="oss01"),
            healthy="healthy servers",
            healthy_series=health(well) + health(well, node="oss02"),
            pending=f"unhealthy for less than {for_}",
            pending_series=health(sick),
        ),
        fired_by=("lustre_unhealthy",),
    )
