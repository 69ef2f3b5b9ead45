"""node_exporter on every node: InfiniBand, filesystems (local, Lustre client, NFS home), NFS client,
hwmon, textfile collector, disks, CPU, memory, EDAC; plus the job-info series our prolog writes for its
textfile collector (docs/contracts.md#job-info).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hpcobs.lang import promregex
from hpcobs.proof.simulate.core import Family, accumulate, seeded, to_unit, where, window_mask
from hpcobs.proof.simulate.model import (
    CPUS_PER_NODE,
    LUSTRE_FS,
    LUSTRE_OST_KIB,
    LUSTRE_SERVERS,
    MEMORY_BYTES,
    NFS_EXPORT,
    NFS_SCRATCH,
    NFS_SERVER_ADDRESS,
    Node,
)
from hpcobs.proof.simulate.storage import lustre_used_fraction

IB_RATE = 5e10  # 400 Gb/s NDR, in bytes/s as node_exporter reports it
IB_PEAK = 2.2e10  # bytes/s a busy training job pushes through one HCA
# Ports node_exporter reports beside the compute rails (collector/infiniband_linux.go walks every port of every
# device under /sys/class/infiniband; procfs reads link_layer but the collector writes no label for it): an unused
# HCA port, DOWN since boot with its link_downed counter at zero and whatever low rate the driver keeps for a port
# without link (10 Gb/s here), and a RoCE storage rail (a bonded Ethernet pair, 200 Gb/s) ACTIVE below the NDR rate.
UNUSED_PORT_RATE = 1.25e9
STORAGE_RAIL = "mlx5_bond_0"
STORAGE_RAIL_RATE = 2.5e10
CPU_MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
COLLECTORS = (
    "cpu",
    "diskstats",
    "edac",
    "filesystem",
    "hwmon",
    "infiniband",
    "loadavg",
    "meminfo",
    "mountstats",
    "nfs",
    "stat",
    "textfile",
    "time",
)
# Optional families the simulated site collects: NFS client bandwidth per mount (--collector.mountstats,
# which docs/exporters.md asks for); mlx5 hw_counters stay off.
OPTIONAL_COLLECTED = ("nfs_mount_read_bytes", "nfs_mount_write_bytes")
NFS_METHODS = ("Access", "Getattr", "Lookup", "Read", "Write")
# slurm/hpcobs-slurm.conf's default: root's textfile directory, read by node_exporter (docs/slurm.md#security);
# node_exporter 1.5 names each file by its full path.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
BOOT_AGO = 12 * 86400
# A rebooted node's kernel started this long before node_exporter answers again (services, then the exporter).
BOOT_TO_FIRST_SCRAPE = 120
SHARED_NFS_USED = {"/home": 0.64, NFS_SCRATCH[1]: 0.55}  # used fraction of the shared NFS filesystems
SHARED_FULL = 0.97  # what shared_fs_full fills /scratch to


class Port:
    """One IB port: traffic follows the node's GPU work; faults change state and error counters."""

    def __init__(self, sim, node: Node, hca: str, signal: str, role: str = "compute"):
        self.sim, self.node, self.hca, self.role = sim, node, hca, role
        self.n, self.step = sim.window.steps, sim.window.step
        self.rng = seeded(sim.seed, "ib", signal, node.name, hca)
        self.key = (node.index, hca)
        self.down = [True] * self.n if role == "unused" else sim.faults.mask("ib_down", *self.key)
        self.init = sim.faults.mask("ib_init", *self.key) or [False] * self.n
        self.flap_downs = self._flaps()
        base_rate = {"compute": IB_RATE, "unused": UNUSED_PORT_RATE, "storage": STORAGE_RAIL_RATE}[role]
        self.rate = [base_rate] * self.n
        for effect in sim.faults.effects("ib_degraded", *self.key):
            for i in range(effect.start, min(effect.end, self.n)):
                self.rate[i] = IB_RATE * effect.get("factor")

    def _flaps(self) -> list[int]:
        out = []
        for effect in self.sim.faults.effects("ib_flap", *self.key):
            period = max(1, effect.get("period") // self.step)
            out += list(range(effect.start, min(effect.end, self.n), period))
        return out

    @property
    def link_down(self) -> list[bool]:
        """Scrapes without traffic: the link down, or up but not ACTIVE (INIT carries no data)."""
        mask = [d or i for d, i in zip(self.down or [False] * self.n, self.init)]
        for i in self.flap_downs:
            mask[i] = True
        return mask

    def traffic(self, share: float = 1.0) -> list[float]:
        """Bytes/s at each scrape."""
        work = self.sim.activity.node_work(self.node.index, self.node.gpus)
        congestion = self.sim.faults.mask("ib_congestion", *self.key) or [False] * self.n
        r = self.rng.random
        return [
            0.0 if d else min(rate, IB_PEAK * share * w * (0.6 if c else 1.0) * (0.9 + 0.2 * r()) + 2e5)
            for w, d, c, rate in zip(work, self.link_down, congestion, self.rate)
        ]

    def counter(self, per_second: list[float], initial: float) -> list[float]:
        return accumulate([v * self.step for v in per_second], initial)

    def events(self, kind: str, per_second: float) -> list[float]:
        mask = self.sim.faults.mask(kind, *self.key) or [False] * self.n
        r = self.rng.random
        return [per_second * (0.5 + r()) if m else 0.0 for m in mask]

    def flap_count(self) -> list[float]:
        """+1 at each flap and at the start of each down or INIT window (the port lost its link: a peer switch
        rebooting while the subnet manager is away leaves it in INIT); an unused port never had a link to lose."""
        if self.role == "unused":
            return [0.0] * self.n
        inc = [0.0] * self.n
        for i in self.flap_downs:
            inc[i] += 1
        for kind in ("ib_down", "ib_init"):
            for effect in self.sim.faults.effects(kind, *self.key):
                if effect.start < self.n:
                    inc[effect.start] += 1
        return accumulate(inc, self.rng.randrange(3))

    def link_errors(self, per_event: float, initial: int) -> list[float]:
        """A counter since boot that adds `per_event` at each of the port's link error recoveries (ib_link_errors:
        one every `period` seconds). A flap adds nothing: IBTA counts a recovery that fails, and downs the link,
        in LinkDownedCounter only (node_exporter's HELP: link_downed "failed to recover", link_error_recovery
        "successfully recovered")."""
        inc = [0.0] * self.n
        for effect in self.sim.faults.effects("ib_link_errors", *self.key):
            period = max(1, effect.get("period") // self.step)
            for i in range(effect.start, min(effect.end, self.n), period):
                inc[i] += per_event
        return accumulate(inc, initial)

    def state(self, up: int, down: int, init: int, polling: int | None = None) -> list[int]:
        """The logical or physical state at each scrape: ACTIVE/LinkUp, DOWN/Disabled, INIT (the logical state
        INIT, the physical LinkUp) or, for one scrape of a flap, Polling."""
        states = [down if d else init if i else up for d, i in zip(self.down or [False] * self.n, self.init)]
        for i in self.flap_downs:
            states[i] = polling if polling is not None else down
        return states


def ib_devices(sim, node: Node) -> list[tuple[str, str]]:
    """(device, role) of every RDMA device node_exporter reports on a node: the compute rails, one unused HCA
    port, and the storage rail when the site's ib_compute_rail_devices leaves it out (a site with a RoCE storage
    rail names its compute rails; docs/exporters.md)."""
    devices = [(hca, "compute") for hca in node.hcas] + [(f"mlx5_{len(node.hcas)}", "unused")]
    if not promregex.fullmatch(sim.thresholds.ib_compute_rail_devices, STORAGE_RAIL):
        devices.append((STORAGE_RAIL, "storage"))
    return devices


def _initial(port: Port, scale: float) -> float:
    return port.rng.uniform(0.2, 1.0) * scale


IB: dict[str, Callable[[Port], list]] = {
    # node_exporter's state_id (4 ACTIVE, 1 DOWN, 2 INIT) and physical_state_id (5 LinkUp, 3 Disabled, 2 Polling).
    "ib_state": lambda p: p.state(4, 1, init=2),
    "ib_physical_state": lambda p: p.state(5, 3, init=5, polling=2),
    "ib_rate": lambda p: p.rate,
    "ib_port_rcv_bytes": lambda p: p.counter(p.traffic(), _initial(p, 1e15)),
    "ib_port_xmit_bytes": lambda p: p.counter(p.traffic(), _initial(p, 1e15)),
    "ib_legacy_rcv_bytes": lambda p: p.counter(p.traffic(), _initial(p, 1e15)),
    "ib_legacy_xmit_bytes": lambda p: p.counter(p.traffic(), _initial(p, 1e15)),
    "ib_port_rcv_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_port_xmit_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_unicast_rcv_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_unicast_xmit_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_multicast_rcv_packets": lambda p: p.counter([0.5] * p.n, _initial(p, 1e6)),
    "ib_multicast_xmit_packets": lambda p: p.counter([0.2] * p.n, _initial(p, 1e6)),
    "ib_legacy_rcv_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_legacy_xmit_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_legacy_unicast_rcv_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_legacy_unicast_xmit_packets": lambda p: p.counter([t / 4096 for t in p.traffic()], _initial(p, 3e11)),
    "ib_legacy_multicast_rcv_packets": lambda p: p.counter([0.5] * p.n, _initial(p, 1e6)),
    "ib_legacy_multicast_xmit_packets": lambda p: p.counter([0.2] * p.n, _initial(p, 1e6)),
    "ib_link_downed": lambda p: p.flap_count(),
    "ib_link_error_recovery": lambda p: p.link_errors(1, p.rng.randrange(5)),
    "ib_port_rcv_errors": lambda p: p.counter(p.events("ib_symbol_errors", 0.5), p.rng.randrange(10)),
    "ib_port_rcv_discards": lambda p: p.counter(p.events("ib_congestion", 2.0), p.rng.randrange(10)),
    "ib_port_xmit_discards": lambda p: p.counter(p.events("ib_congestion", 5.0), p.rng.randrange(10)),
    # Ticks with data queued but nothing sent: a little when busy, ~1000x under congestion.
    "ib_port_xmit_wait": lambda p: p.counter(
        [a + b for a, b in zip([2e3 * t / IB_PEAK for t in p.traffic()], p.events("ib_congestion", 3e6))],
        _initial(p, 1e9),
    ),
    "ib_port_rcv_constraint_errors": lambda p: [0] * p.n,
    "ib_port_xmit_constraint_errors": lambda p: [0] * p.n,
    # A link error recovery follows a burst of symbol errors that crossed the port's LocalPhyErrors limit.
    "ib_symbol_errors": lambda p: [
        a + b for a, b in zip(p.counter(p.events("ib_symbol_errors", 3.0), p.rng.randrange(3)), p.link_errors(10, 0))
    ],
    "ib_port_rcv_remote_physical_errors": lambda p: [0] * p.n,
    "ib_port_rcv_switch_relay_errors": lambda p: [0] * p.n,
    "ib_local_link_integrity_errors": lambda p: p.link_errors(1, 0),
    "ib_excessive_buffer_overrun_errors": lambda p: [0] * p.n,
    "ib_vl15_dropped": lambda p: [0] * p.n,
}


# -- filesystems ---------------------------------------------------------------------------------


def mounts(sim) -> list[tuple[str, str, str, float]]:
    """(device, mountpoint, fstype, size bytes) on every node. node_exporter's filesystem collector excludes no
    network filesystem (defFSTypesExcluded in collector/filesystem_linux.go lists pseudo filesystems only), so
    every client reports the shared ones: Lustre, NFS /home and an NFS /scratch at a mountpoint no threshold names."""
    lustre_osts = [t for ts in LUSTRE_SERVERS.values() for t in ts if t.startswith("OST")]
    return [
        ("/dev/nvme0n1p2", "/", "ext4", 1.8e12),
        ("/dev/md0", "/raid", "ext4", 2.8e13),
        (f"10.10.0.1@o2ib:/{LUSTRE_FS}", "/lustre", "lustre", len(lustre_osts) * LUSTRE_OST_KIB * 1024.0),
        (NFS_EXPORT, "/home", "nfs4", 5e13),
        (NFS_SCRATCH[0], NFS_SCRATCH[1], "nfs4", NFS_SCRATCH[2]),
    ]


def _fs_used_fraction(sim, node: Node, mountpoint: str) -> list[float]:
    if mountpoint == "/lustre":
        osts = [t for ts in LUSTRE_SERVERS.values() for t in ts if t.startswith("OST")]
        per = [lustre_used_fraction(sim, ost) for ost in osts]
        return [sum(v) / len(osts) for v in zip(*per)]
    if mountpoint in SHARED_NFS_USED:
        # One filesystem: every client reports the same usage.
        out = [SHARED_NFS_USED[mountpoint]] * sim.window.steps
        for effect in sim.faults.effects("shared_fill", mountpoint):
            length = max(1, effect.end - effect.start)
            for i in range(effect.start, sim.window.steps):
                out[i] = out[i] + (SHARED_FULL - out[i]) * min(1.0, (i - effect.start + 1) / length)
        return out
    base = {"/": 0.31, "/raid": 0.12}[mountpoint]
    return [base + 0.01 * seeded(sim.seed, "fs", node.name, mountpoint).random()] * sim.window.steps


def _fs_family(sim, signal: str):
    def series(node: Node):
        for device, mountpoint, fstype, size in mounts(sim):
            labels = {"device": device, "mountpoint": mountpoint, "fstype": fstype, "device_error": ""}
            used = _fs_used_fraction(sim, node, mountpoint)
            reserved = 0.05 if fstype == "ext4" else 0.0
            values = {
                "fs_size": [size] * len(used),
                "fs_free": [size * (1 - u) for u in used],
                "fs_avail": [max(0.0, size * (1 - u - reserved)) for u in used],
                "fs_files": [size / 65536] * len(used),
                "fs_files_free": [size / 65536 * (1 - u * 0.4) for u in used],
                "fs_readonly": [0] * len(used),
                "fs_device_error": [0] * len(used),
            }[signal]
            yield labels, values

    return series


# -- everything else on a node -------------------------------------------------------------------


def _per_node(sim, signal: str) -> Callable[[Node], Iterator[tuple[dict, list]]] | None:
    n, step = sim.window.steps, sim.window.step
    if signal == "ib_info":
        return lambda node: (
            (
                {"device": hca, "board_id": "MT_0000000838", "firmware_version": "28.41.1000", "hca_type": "MT4129"},
                [1] * n,
            )
            for hca, _ in ib_devices(sim, node)
        )
    ib = IB.get(signal)
    if ib is not None:
        return lambda node: (
            ({"device": hca, "port": "1"}, ib(Port(sim, node, hca, signal, role)))
            for hca, role in ib_devices(sim, node)
        )
    if signal.startswith("fs_"):
        return _fs_family(sim, signal)

    def rng(node: Node, *extra):
        return seeded(sim.seed, "node", signal, node.name, *extra)

    def work(node: Node) -> list[float]:
        return sim.activity.node_work(node.index, node.gpus)

    def boot_time(node: Node) -> list[int]:
        """When the kernel booted: weeks ago, or shortly before node_exporter answered again after a reboot."""
        values = [sim.window.start - BOOT_AGO + node.index * 37] * n
        for effect in sorted(sim.faults.effects("boot", node.index), key=lambda e: e.start):
            booted = sim.window.time(effect.start) - BOOT_TO_FIRST_SCRAPE
            values[effect.start :] = [booted] * (n - min(n, effect.start))
        return values

    def mem_available(node: Node) -> list[float]:
        r = rng(node)
        base = [MEMORY_BYTES * (0.82 - 0.45 * w) + 2e9 * (r.random() - 0.5) for w in work(node)]
        for effect in sim.faults.effects("mem_pressure", node.index):
            span = max(1, effect.end - effect.start)
            for i in range(effect.start, min(effect.end, n)):
                base[i] = max(0.3e9, MEMORY_BYTES * 0.2 * (1 - (i - effect.start + 1) / span))
        return base

    def cpu(node: Node):
        load = work(node)
        shares = {
            "user": 0.55,
            "system": 0.08,
            "iowait": 0.01,
            "softirq": 0.01,
            "irq": 0.002,
            "nice": 0.0,
            "steal": 0.0,
        }
        for c in range(CPUS_PER_NODE):
            for mode in CPU_MODES:
                r = rng(node, c, mode)
                if mode == "idle":
                    rate = [1 - sum(shares.values()) * w for w in load]
                else:
                    rate = [shares[mode] * w * (0.8 + 0.4 * r.random()) for w in load]
                yield (
                    {"cpu": str(c), "mode": mode},
                    accumulate([v * step for v in rate], BOOT_AGO * r.uniform(0.05, 0.3)),
                )

    def nfs(node: Node):
        for method in NFS_METHODS:
            r = rng(node, method)
            yield {"method": method, "proto": "4"}, accumulate([step * r.uniform(2, 8)] * n, r.uniform(1e5, 1e7))

    def textfile_mtime(node: Node):
        """One series per .prom file of root's textfile directory: the prolog's job-info file (written once)."""
        if not sim.enabled("job_info") or sim.job_info_source != "prolog":
            return
        for job in sim.cluster.jobs_on(node.index):
            first, last = sim.activity.span(job)
            mask = [
                a and not b
                for a, b in zip(
                    window_mask(n, [(first, last)]), sim.faults.mask("no_mapping", node.index) or [False] * n
                )
            ]
            if any(mask):
                yield (
                    {"file": f"{TEXTFILE_DIR}/hpcobs_job_{job.id}.prom"},
                    where(mask, [sim.window.start + max(job.start, 0)] * n),
                )

    def nfs_mount(bytes_per_second: float):
        """mountstats of the /home mount: reads and writes follow the node's work."""

        def series(node: Node):
            r = rng(node)
            yield (
                {"export": NFS_EXPORT, "protocol": "tcp", "mountaddr": NFS_SERVER_ADDRESS},
                accumulate(
                    [bytes_per_second * step * (0.2 + w) * r.uniform(0.8, 1.2) for w in work(node)],
                    bytes_per_second * BOOT_AGO * r.uniform(0.1, 0.3),
                ),
            )

        return series

    def disk(scale: float, devices=("nvme0n1", "nvme1n1")):
        def series(node: Node):
            for device in devices:
                r = rng(node, device)
                yield (
                    {"device": device},
                    accumulate(
                        [scale * step * (0.2 + w) * r.uniform(0.8, 1.2) for w in work(node)],
                        scale * BOOT_AGO * r.uniform(0.1, 0.3),
                    ),
                )

        return series

    def plain(fn: Callable[[Node], list]):
        return lambda node: iter([({}, fn(node))])

    table: dict[str, Callable[[Node], Iterator]] = {
        "nfs_requests": nfs,
        "nfs_rpcs": plain(lambda node: accumulate([step * 25.0] * n, rng(node).uniform(1e6, 1e8))),
        "nfs_rpc_retransmissions": plain(lambda node: accumulate([0.0] * n, rng(node).randrange(20))),
        "nfs_rpc_auth_refreshes": plain(lambda node: accumulate([step * 0.01] * n, rng(node).uniform(1e3, 1e5))),
        "nfs_connections": plain(lambda node: [1] * n),
        "nfs_mount_read_bytes": nfs_mount(4e6),
        "nfs_mount_write_bytes": nfs_mount(5e5),
        "nfs_packets": lambda node: iter(
            [({"protocol": "tcp"}, accumulate([step * 25.0] * n, 1e7)), ({"protocol": "udp"}, [0] * n)]
        ),
        "hwmon_temp": lambda node: iter(
            [
                ({"chip": "platform_coretemp_0", "sensor": f"temp{k}"}, [38 + 30 * w + k for w in work(node)])
                for k in (1, 2)
            ]
        ),
        "hwmon_temp_max": lambda node: iter(
            [({"chip": "platform_coretemp_0", "sensor": f"temp{k}"}, [95] * n) for k in (1, 2)]
        ),
        "hwmon_temp_crit": lambda node: iter(
            [({"chip": "platform_coretemp_0", "sensor": f"temp{k}"}, [105] * n) for k in (1, 2)]
        ),
        "hwmon_chip_names": lambda node: iter([({"chip": "platform_coretemp_0", "chip_name": "coretemp"}, [1] * n)]),
        "hwmon_sensor_label": lambda node: iter(
            [
                ({"chip": "platform_coretemp_0", "label": f"Package id {k - 1}", "sensor": f"temp{k}"}, [1] * n)
                for k in (1, 2)
            ]
        ),
        "textfile_scrape_error": plain(lambda node: [0] * n),
        "textfile_mtime": textfile_mtime,
        "collector_success": lambda node: iter([({"collector": c}, [1] * n) for c in COLLECTORS]),
        "collector_duration": lambda node: iter(
            [({"collector": c}, [0.002 + 0.01 * rng(node, c).random()] * n) for c in COLLECTORS]
        ),
        "disk_read_bytes": disk(4e8),
        "disk_written_bytes": disk(2e8),
        "disk_io_time": disk(0.3),
        "disk_writes_completed": disk(2e3),
        "disk_write_time": disk(0.2),
        "boot_time": plain(boot_time),
        "time": plain(lambda node: [float(sim.window.time(i)) for i in range(n)]),
        "load1": plain(lambda node: [2 + 14 * w + rng(node).random() for w in work(node)]),
        "cpu_seconds": cpu,
        "mem_total": plain(lambda node: [MEMORY_BYTES] * n),
        "mem_available": plain(mem_available),
        "edac_correctable": lambda node: iter([({"controller": str(c)}, [node.index % 2] * n) for c in (0, 1)]),
        "edac_uncorrectable": lambda node: iter([({"controller": str(c)}, [0] * n) for c in (0, 1)]),
    }
    return table.get(signal)


def node_exporter_families(sim) -> Iterator[Family]:
    source = sim.sources["node_exporter"]
    for signal in source.exporter.signals():
        metric = source.metric(signal)
        if metric.optional and signal not in OPTIONAL_COLLECTED:
            continue
        per_node = _per_node(sim, signal)
        if per_node is None:
            continue
        yield Family(metric.name, metric.type, metric.help, _node_series(sim, "node_exporter", metric, per_node))


def _node_series(sim, exporter: str, metric, per_node, nodes=None):
    for node in nodes if nodes is not None else sim.cluster.nodes:
        target = sim.target(exporter, node.name)
        scraped = sim.scraped(exporter, node.index)
        for labels, values in per_node(node):
            raw = to_unit(values, metric)
            yield {**labels, **target}, raw if scraped is None else where(scraped, raw)


def job_info_families(sim) -> Iterator[Family]:
    """The prolog's job-info series, one per job and node while it runs (not when the prolog fails)."""
    source = sim.sources["job_info"]
    n = sim.window.steps

    def per_node(signal: str):
        def series(node: Node):
            no_mapping = sim.faults.mask("no_mapping", node.index) or [False] * n
            for job in sim.cluster.jobs_on(node.index):
                mask = [a and not b for a, b in zip(window_mask(n, [sim.activity.span(job)]), no_mapping)]
                if not any(mask):
                    continue
                if signal == "job_info":
                    yield (
                        {
                            "hpc_job": job.id,
                            "user": job.user,
                            "account": job.account,
                            "partition": job.partition,
                            "job_name": job.name,
                            "qos": job.qos,
                        },
                        where(mask, [1] * n),
                    )
                else:
                    yield {"hpc_job": job.id}, where(mask, [sim.window.start + job.start] * n)

        return series

    for signal in source.exporter.signals():
        metric = source.metric(signal)
        yield Family(metric.name, metric.type, metric.help, _node_series(sim, "job_info", metric, per_node(signal)))


def families(sim) -> Iterator[Family]:
    if sim.enabled("node_exporter"):
        yield from node_exporter_families(sim)
    if sim.enabled("job_info") and sim.job_info_source == "prolog":
        yield from job_info_families(sim)
