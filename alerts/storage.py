"""Storage alerts (DESIGN.md §10): filling and full filesystems, stalled checkpoints, NFS and Lustre health.

Node mounts are read from node:filesystem_used:ratio minus the shared mountpoints (config
thresholds.storage_shared_mountpoints): every client sees a Lustre or NFS filesystem, so alerting on each
client's view would page once per node. Lustre is watched from its servers instead, per filesystem
(fs:lustre_used:ratio) and per OST: one full OST fails the writes striped on it while the filesystem
still looks half empty. The per-OST and health reads are raw (no record keeps them) and small: one
series per OST, one per Lustre host.
"""
from hpcobs.context import Context
from hpcobs.escape import promql_matcher
from hpcobs.promql import duration, duration_seconds
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import series

from .training import job_info, owned, rank_series

OST = {"component": '="ost"'}
DASHBOARD = "hpcobs-network-storage"
TIB_KIB = 1024 ** 3           # one TiB in the KiB the Lustre exporter reports



def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    step = duration_seconds(ctx.scrape_interval)
    where = f"cluster {label(c)}"
    shared = th["storage_shared_mountpoints"]
    fill_window, horizon = th["storage_fill_window"], th["storage_fill_horizon"]
    fill_for, full_for = duration_seconds(th["storage_fill_for"]), duration_seconds(th["storage_full_for"])
    min_ratio, full = th["storage_fill_min_ratio"], th["storage_full_ratio"]
    local = f"node:filesystem_used:ratio{{{promql_matcher('mountpoint', '!~', shared)}}}"

    def filling(ratio: str) -> str:
        return (f"({ratio} > {min_ratio}) and predict_linear({ratio}[{fill_window}], "
                f"{duration_seconds(horizon)}) >= 1")

    # -- synthetic data ------------------------------------------------------------------------------
    size = 10 ** 12

    def remaining(used: str, total: int) -> tuple[str, str]:
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

    def mount(used: str, mountpoint="/raid", node="n1"):
        """A node mount of 1 TB; `used` as remaining() reads it."""
        labels = dict(node=node, device="/dev/md0", mountpoint=mountpoint, fstype="ext4")
        total, avail = remaining(used, size)
        return [series(ctx, "node_exporter", "fs_size", total, **labels),
                series(ctx, "node_exporter", "fs_avail", avail, **labels)]

    def ost(index: int, used: str, target_fs="scratch"):
        """An OST of 1 TiB on oss01; `used` as remaining() reads it."""
        labels = dict(node="oss01", component="ost", target=f"{target_fs}-OST{index:04x}")
        total, avail = remaining(used, TIB_KIB)
        return [series(ctx, "lustre", "capacity_kib", total, **labels),
                series(ctx, "lustre", "available_kib", avail, **labels)]

    # Used fraction per scrape (thousandths) that reaches 1 within the horizon, and one that just does not.
    horizon_scrapes = duration_seconds(horizon) // step
    fast, slow = round(1000 / horizon_scrapes * 1.5, 4), round(1000 / horizon_scrapes * 0.4, 4)
    long = fill_for // step + 40
    fill_at, fill_early = duration(step + fill_for + 10 * step), duration(step + fill_for - 3 * step)
    n1 = dict(**cl, node="n1")
    fs = dict(**cl, fs="scratch")
    full_fires = 6 * step + full_for           # full from the 6th scrape
    full_at, full_early = duration(full_fires + 5 * step), duration(full_fires - 3 * step)
    full_len = full_for // step + 20
    filled = f"800x5 {{}}x{full_len}"
    over, under = round(full * 1000) + 20, round(full * 1000) - 10

    ost_ratio = (f"1 - {ctx.select('lustre', ['available_kib'], ('fs', 'target', 'node'), op='sum', where=OST)} "
                 f"/ {ctx.select('lustre', ['capacity_kib'], ('fs', 'target', 'node'), op='sum', where=OST)}")

    # -- checkpoint stall ----------------------------------------------------------------------------
    stalled = th["storage_checkpoint_stalled_bytes_per_second"]
    stall_for = duration_seconds(th["storage_checkpoint_stall_for"])

    def job_writes(values: str, job="42"):
        return [series(ctx, "lustre", "job_write_bytes", values, node="oss01", component="ost", target=f"scratch-OST000{i}",
                       hpc_job=job, operation="write") for i in (0, 1)]

    def per_ost(bytes_per_second: float) -> str:
        return f"{bytes_per_second / 2 * step:.12g}"

    stop = 10                                   # the job's last step is at this scrape
    run = stall_for // step + 30
    progress = rank_series(ctx, {("0", "n1"): 0.5, ("1", "n2"): 0.5}, stop_after=stop, length=stop + run)
    owner = [job_info(ctx, "42")]
    job42 = dict(**cl, hpc_job="42", user="alice", account="llm", partition="gpu")
    # No step in the rate window from (stop + 3) or (stop + 4) scrapes on, depending on whether the window
    # includes its left edge (Prometheus 2 vs 3).
    stall_at = duration((stop + 4) * step + stall_for + 5 * step)
    stall_early = duration((stop + 3) * step + stall_for - 3 * step)

    def trickle(bytes_per_second: float, start=stop) -> list:
        return job_writes(f"0x{start} 0+{per_ost(bytes_per_second)}x{stop + run - start}")

    nfs_rate = th["storage_nfs_retransmissions_per_second"]
    nfs_for = duration_seconds(th["storage_nfs_retransmissions_for"])

    nfs_at, nfs_early = duration(11 * step + nfs_for + 10 * step), duration(11 * step + nfs_for - 3 * step)

    def retransmissions(rate: float, start=10):
        return [series(ctx, "node_exporter", "nfs_rpc_retransmissions",
                       f"7x{start} 7+{rate * step:.12g}x{nfs_for // step + 30}", node="n1")]

    unhealthy_for = duration_seconds(th["storage_lustre_unhealthy_for"])
    lustre_healthy = ctx.select("lustre", ["healthy"], ("node",), op="min")

    sick, well = f"1x5 0x{unhealthy_for // step + 20}", f"1x{unhealthy_for // step + 25}"
    sick_at, sick_early = duration(6 * step + unhealthy_for + 5 * step), duration(6 * step + unhealthy_for - 3 * step)

    def health(values: str, node="oss01"):
        return [series(ctx, "lustre", "healthy", values, node=node)]

    return [Group("hpcobs-storage-alerts", domain="storage", interval=ctx.scrape_interval, rules=[
        Alert(
            "StorageFilesystemFillingUp", severity="warning", team="storage",
            expr=filling(local), for_=th["storage_fill_for"],
            summary="A node filesystem is forecast to be full soon.",
            description=f"{label('mountpoint')} on {label('node')} ({where}) will be full within {horizon} at the rate it "
                        f"grew over the last {fill_window}: find what writes to it (checkpoint staging, core dumps, logs).",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case(f"half full and growing to full in well under {horizon}", at=fill_at,
                           series=mount(f"500+{fast}x{long}"), expect=[alert(**n1, mountpoint="/raid")])],
            silent_on=[
                Case("a steady filesystem", at=fill_at, series=mount(f"600x{long}")),
                Case(f"growing, but full only after {horizon}", at=fill_at, series=mount(f"500+{slow}x{long}")),
                Case(f"growing fast but less than {min_ratio:.0%} used", at=fill_at,
                     series=mount(f"100+{fast}x{long}")),
                Case("a shared mount: each client sees it; Lustre has its own alerts", at=fill_at,
                     series=mount(f"500+{fast}x{long}", mountpoint="/lustre")),
                Case(f"forecast full for less than {th['storage_fill_for']}", at=fill_early,
                     series=mount(f"500+{fast}x{long}")),
            ],
        ),
        Alert(
            "StorageLustreFillingUp", severity="warning", team="storage",
            expr=filling("fs:lustre_used:ratio"), for_=th["storage_fill_for"],
            summary="A Lustre filesystem is forecast to be full soon.",
            description=f"Lustre filesystem {label('fs')} ({where}) will be full within {horizon} at the rate it grew over "
                        f"the last {fill_window}: find the jobs and users writing most (lfs quota, jobstats) before "
                        "checkpoints start failing.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "fs"), fired_by=("fs_filling",),
            fires_on=[Case("an OST filling fast fills the filesystem", at=fill_at,
                           series=ost(0, f"400+{2 * fast}x{long}") + ost(1, f"400x{long}"), expect=[alert(**fs)])],
            silent_on=[
                Case("a steady filesystem", at=fill_at, series=ost(0, f"400x{long}") + ost(1, f"600x{long}")),
                Case(f"growing, but full only after {horizon}", at=fill_at,
                     series=ost(0, f"500+{slow}x{long}") + ost(1, f"500+{slow}x{long}")),
                Case(f"forecast full for less than {th['storage_fill_for']}", at=fill_early,
                     series=ost(0, f"400+{2 * fast}x{long}") + ost(1, f"400x{long}")),
            ],
        ),
        Alert(
            "StorageFilesystemFull", severity="critical", team="storage",
            expr=f"{local} > {full}", for_=th["storage_full_for"],
            summary="A node filesystem is full.",
            description=f"{label('mountpoint')} on {label('node')} ({where}) is more than {full:.0%} used: writes "
                        "(checkpoint staging, logs, /tmp) are about to fail with ENOSPC.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case(f"above {full:.0%}", at=full_at, series=mount(filled.format(over)),
                           expect=[alert(**n1, mountpoint="/raid")])],
            silent_on=[
                Case("half full", at=full_at, series=mount(f"500x{full_len + 5}")),
                Case(f"just under {full:.0%}", at=full_at, series=mount(f"{under}x{full_len + 5}")),
                Case("a full shared mount is Lustre's or the NFS server's alert", at=full_at,
                     series=mount(f"{over}x{full_len + 5}", mountpoint="/home")),
                Case(f"above {full:.0%} for less than {th['storage_full_for']}", at=full_early,
                     series=mount(filled.format(over))),
            ],
        ),
        Alert(
            "StorageLustreOstFull", severity="critical", team="storage",
            expr=f"{ost_ratio} > {full}", for_=th["storage_full_for"],
            summary="A Lustre OST is full.",
            description=f"OST {label('target')} of Lustre filesystem {label('fs')} on {label('node')} ({where}) is more than "
                        f"{full:.0%} used: writes of files striped on it fail with ENOSPC even though the filesystem "
                        "has space. Rebalance (lfs migrate) or deactivate it for new objects.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "fs"), fired_by=("fs_filling",),
            fires_on=[Case(f"one OST above {full:.0%}", at=full_at,
                           series=ost(0, filled.format(over)) + ost(1, f"400x{full_len + 5}"),
                           expect=[alert(**fs, target="scratch-OST0000", node="oss01")])],
            silent_on=[
                Case("OSTs half full", at=full_at, series=ost(0, f"500x{full_len + 5}") + ost(1, f"400x{full_len + 5}")),
                Case(f"just under {full:.0%}", at=full_at, series=ost(0, f"{under}x{full_len + 5}")),
                Case(f"above {full:.0%} for less than {th['storage_full_for']}", at=full_early,
                     series=ost(0, filled.format(over))),
            ],
        ),
        Alert(
            "StorageCheckpointWriteStalled", severity="critical", team="storage",
            expr=owned(ctx, f"(job:lustre_write_bytes:rate > 0 < {stalled}) and on ({c}, hpc_job) "
                            "job:training_steps:rate == 0"),
            for_=th["storage_checkpoint_stall_for"],
            summary="A training job's checkpoint write to Lustre has stalled.",
            description=f"Job {label('hpc_job')} (user {label('user')}, {where}) has made no training step for "
                        f"{th['storage_checkpoint_stall_for']} while writing to Lustre at under {stalled} bytes/s: its "
                        "checkpoint is stuck on the filesystem. Check the OSTs it writes to and the OSS health.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "hpc_job"), fired_by=("checkpoint_stall",),
            fires_on=[Case("no step, writes down to a trickle", at=stall_at,
                           series=progress + trickle(stalled / 10) + owner, expect=[alert(**job42)]),
                      Case("a job without job-info still alerts, without its owner", at=stall_at,
                           series=progress + trickle(stalled / 10), expect=[alert(**cl, hpc_job="42")])],
            silent_on=[
                Case("training and not writing (between checkpoints)", at=stall_at,
                     series=rank_series(ctx, {("0", "n1"): 0.5}, length=stop + run) + job_writes(f"0x{stop + run}")),
                Case("no step but writing fast: a checkpoint in progress", at=stall_at,
                     series=progress + trickle(stalled * 20)),
                Case("no step and writing just over the stall threshold", at=stall_at,
                     series=progress + trickle(stalled * 1.1)),
                Case("no step and no write at all: a hang, TrainingHang's case", at=stall_at,
                     series=progress + job_writes(f"0x{stop + run}")),
                Case(f"stalled for less than {th['storage_checkpoint_stall_for']}", at=stall_early,
                     series=progress + trickle(stalled / 10)),
            ],
        ),
        Alert(
            "StorageNfsRetransmissions", severity="warning", team="storage",
            expr=f"node:nfs_retransmissions:rate > {nfs_rate}", for_=th["storage_nfs_retransmissions_for"],
            summary="An NFS client keeps retransmitting RPCs.",
            description=f"The NFS client on {label('node')} ({where}) has retransmitted RPCs for "
                        f"{th['storage_nfs_retransmissions_for']}: the NFS server is slow or unreachable and processes "
                        "on the node block on /home or other NFS mounts.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case("retransmitting at twice the threshold", at=nfs_at,
                           series=retransmissions(2 * nfs_rate), expect=[alert(**n1)])],
            silent_on=[
                Case("no retransmission", at=nfs_at, series=retransmissions(0)),
                Case("just under the threshold", at=nfs_at, series=retransmissions(0.9 * nfs_rate)),
                Case(f"retransmitting for less than {th['storage_nfs_retransmissions_for']}", at=nfs_early,
                     series=retransmissions(2 * nfs_rate)),
            ],
        ),
        Alert(
            "StorageLustreUnhealthy", severity="critical", team="storage",
            expr=f"{lustre_healthy} == 0", for_=th["storage_lustre_unhealthy_for"],
            summary="A Lustre host reports itself unhealthy.",
            description=f"Lustre on {label('node')} ({where}) reports health_check unhealthy: a target hit an LBUG or "
                        "went read-only; clients of its targets hang. Check lctl get_param health_check and dmesg.",
            runbook="storage", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case("the OSS turns unhealthy", at=sick_at, series=health(sick) + health(well, node="oss02"),
                           expect=[alert(**cl, node="oss01")])],
            silent_on=[
                Case("healthy servers", at=sick_at, series=health(well) + health(well, node="oss02")),
                Case(f"unhealthy for less than {th['storage_lustre_unhealthy_for']}", at=sick_early, series=health(sick)),
            ],
        ),
    ])]
