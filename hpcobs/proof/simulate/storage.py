"""Lustre (whamcloud/lustrefs-exporter) on the MDS/OSS servers (capacity, throughput, jobstats with
jobid_var=SLURM_JOB_ID) and on every compute node (llite client stats)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from hpcobs.proof.simulate.activity import CHECKPOINT_TAKES
from hpcobs.proof.simulate.core import Family, accumulate, seeded, to_unit, where, window_mask
from hpcobs.proof.simulate.model import LUSTRE_FS, LUSTRE_OST_KIB, LUSTRE_SERVERS, MIN_JOB_AGE, Job

MDT_KIB = 8 * 1024**3
JOB_CLEANUP = 600  # jobstats job_cleanup_interval: a job's entries outlive it by this
READ_PER_GPU = 4e7  # bytes/s of training data per GPU
CHECKPOINT_PER_GPU = 6e9  # bytes of checkpoint shard per GPU, written in CHECKPOINT_TAKES
STALLED_WRITE = 5e6  # bytes/s a stalled checkpoint still manages, for the whole job
MDT_OPS = (
    "close",
    "crossdir_rename",
    "getattr",
    "getxattr",
    "link",
    "migrate",
    "mkdir",
    "mknod",
    "open",
    "parallel_rename_dir",
    "parallel_rename_file",
    "punch",
    "read",
    "read_bytes",
    "rename",
    "rename_trylocks",
    "rmdir",
    "samedir_rename",
    "setattr",
    "setxattr",
    "statfs",
    "sync",
    "unlink",
    "write",
    "write_bytes",
)
BUSY_MDT_OPS = {
    "open": 40.0,
    "close": 40.0,
    "getattr": 120.0,
    "statfs": 1.0,
    "setattr": 2.0,
    "mkdir": 0.05,
    "unlink": 0.5,
    "sync": 0.1,
}
OST_OPS = ("get_info", "punch", "set_info", "setattr", "statfs", "sync")
CLIENT_OPS = (
    "close",
    "getattr",
    "inode_permission",
    "ioctl",
    "mkdir",
    "mknod",
    "open",
    "opencount",
    "readdir",
    "rmdir",
    "setxattr",
    "statfs",
    "unlink",
)


def osts() -> list[str]:
    return [t for targets in LUSTRE_SERVERS.values() for t in targets if t.startswith("OST")]


def lustre_used_fraction(sim, ost: str) -> list[float]:
    """Used share of one OST: steady, or filling towards 98% over fs_filling's duration, then staying."""
    base = 0.35 + 0.15 * seeded(sim.seed, "ost", ost).random()
    out = [base] * sim.window.steps
    for effect in sim.faults.effects("ost_fill", f"{LUSTRE_FS}-{ost}"):
        length = max(1, effect.end - effect.start)
        for i in range(effect.start, sim.window.steps):
            out[i] = base + (0.98 - base) * min(1.0, (i - effect.start + 1) / length)
    return out


def lustre_inodes_used(sim, target: str, used: list[float]) -> list[float]:
    """Used share of a target's inodes: half its used space (files of ~2 MiB average), or filling towards 98% over
    lustre_inodes' duration (millions of small files), then staying."""
    out = [u / 2 for u in used]
    for effect in sim.faults.effects("inode_fill", f"{LUSTRE_FS}-{target}"):
        length = max(1, effect.end - effect.start)
        for i in range(effect.start, sim.window.steps):
            out[i] = out[i] + (0.98 - out[i]) * min(1.0, (i - effect.start + 1) / length)
    return out


class JobIO:
    def __init__(self, sim):
        self.sim = sim
        self.io = lru_cache(maxsize=8)(self._io)

    def _io(self, job: Job) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(read, write) bytes/s of a training job over the whole filesystem at each scrape."""
        sim, n = self.sim, self.sim.window.steps
        running = sim.activity.running(job)
        ckpt = sim.activity.checkpoint_mask(job)
        stalled = window_mask(n, sim.faults.windows("job_stall", job.id))
        gpus = len(job.gpus)
        read = [READ_PER_GPU * gpus if r and not c and not s else 0.0 for r, c, s in zip(running, ckpt, stalled)]
        write = [
            STALLED_WRITE if s and r else CHECKPOINT_PER_GPU * gpus / CHECKPOINT_TAKES if c and r else 0.0
            for r, c, s in zip(running, ckpt, stalled)
        ]
        return tuple(read), tuple(write)

    def visible(self, job: Job) -> list[bool]:
        first, _ = self.sim.activity.span(job)
        return window_mask(self.sim.window.steps, [(first, self.sim.window.index(job.end + JOB_CLEANUP))])


def _server_of(target: str) -> str:
    return next(server for server, targets in LUSTRE_SERVERS.items() if target in targets)


def families(sim) -> Iterator[Family]:
    if not sim.enabled("lustre"):
        return
    source = sim.sources["lustre"]
    io = JobIO(sim)
    n, step = sim.window.steps, sim.window.step
    training_jobs = [j for j in sim.cluster.jobs if j.training and j.end > -JOB_CLEANUP - MIN_JOB_AGE]
    share = 1 / len(osts())

    def fs_name(target: str) -> str:
        return f"{LUSTRE_FS}-{target}"

    def capacity(target: str) -> float:
        return LUSTRE_OST_KIB * 1024.0 if target.startswith("OST") else MDT_KIB * 1024.0

    def used(target: str) -> list[float]:
        if target.startswith("OST"):
            return lustre_used_fraction(sim, target)
        return [0.12] * n

    def totals(kind: int) -> list[float]:
        out = [0.0] * n
        for job in training_jobs:
            out = [a + b for a, b in zip(out, io.io(job)[kind])]
        return out

    def per_target(component_of_ost_only: bool, fn):
        for server, targets in LUSTRE_SERVERS.items():
            for target in targets:
                if component_of_ost_only and not target.startswith("OST"):
                    continue
                component = "ost" if target.startswith("OST") else "mdt"
                for labels, values in fn(target, component):
                    yield server, {"component": component, "target": fs_name(target), **labels}, values

    def jobstats(kind: int, samples: bool):
        def fn(target, component):
            for job in training_jobs:
                rates = io.io(job)[kind]
                op = "read" if kind == 0 else "write"
                size = 4 * 1024**2 if kind == 0 else 16 * 1024**2
                values = accumulate([r * share * step / (size if samples else 1) for r in rates], 0.0)
                yield {"jobid": job.id, "operation": op}, where(io.visible(job), values)

        return lambda: per_target(True, fn)

    def job_ops():
        def fn(target, component):
            for job in training_jobs:
                rng = seeded(sim.seed, "mdt-ops", job.id)
                running = sim.activity.running(job)
                for op in MDT_OPS:
                    rate = BUSY_MDT_OPS.get(op, 0.0) * len(job.nodes) * rng.uniform(0.8, 1.2)
                    yield (
                        {"jobid": job.id, "operation": op},
                        where(io.visible(job), accumulate([rate * step if r else 0.0 for r in running], 0.0)),
                    )

        return per_target(False, lambda t, c: fn(t, c) if c == "mdt" else iter(()))

    def throughput(kind: int, samples: bool):
        def fn(target, component):
            rng = seeded(sim.seed, "ost-total", target, kind)
            size = 4 * 1024**2 if kind == 0 else 16 * 1024**2
            values = accumulate(
                [(r * share + 2e7) * step / (size if samples else 1) for r in totals(kind)],
                rng.uniform(1e14, 5e14) / (size if samples else 1),
            )
            yield {"operation": "read" if kind == 0 else "write"}, values

        return lambda: per_target(True, fn)

    def target_ops():
        def fn(target, component):
            ops = (
                OST_OPS if component == "ost" else ("open", "close", "getattr", "setattr", "statfs", "mkdir", "unlink")
            )
            for op in ops:
                rng = seeded(sim.seed, "target-ops", target, op)
                yield {"operation": op}, accumulate([rng.uniform(1, 50) * step] * n, rng.uniform(1e6, 1e9))

        return per_target(False, fn)

    def gauge(fn):
        return lambda: per_target(False, lambda t, c: iter([({}, fn(t))]))

    server_tables = {
        "job_read_bytes": jobstats(0, False),
        "job_write_bytes": jobstats(1, False),
        "job_read_samples": jobstats(0, True),
        "job_write_samples": jobstats(1, True),
        "job_ops": job_ops,
        "read_bytes": throughput(0, False),
        "write_bytes": throughput(1, False),
        "read_samples": throughput(0, True),
        "write_samples": throughput(1, True),
        "target_ops": target_ops,
        "available_kib": gauge(lambda t: [capacity(t) * (1 - u) * 0.97 for u in used(t)]),
        "capacity_kib": gauge(lambda t: [capacity(t)] * n),
        "free_kib": gauge(lambda t: [capacity(t) * (1 - u) for u in used(t)]),
        "inodes_free": gauge(lambda t: [capacity(t) / 1048576 * (1 - u) for u in lustre_inodes_used(sim, t, used(t))]),
        "inodes_max": gauge(lambda t: [capacity(t) / 1048576] * n),
        "connected_clients": gauge(lambda t: [len(sim.cluster.nodes)] * n),
    }

    def client_ops(node):
        for op in CLIENT_OPS:
            rng = seeded(sim.seed, "client-ops", node.name, op)
            yield (
                {"operation": op, "target": f"{LUSTRE_FS}-ffff8881{node.index:08x}"},
                accumulate([rng.uniform(0.1, 20) * step] * n, rng.uniform(1e4, 1e8)),
            )

    def emit(signal: str, metric):
        if signal == "healthy":
            for host in LUSTRE_SERVERS:
                health = [1] * n
                for effect in sim.faults.effects("lustre_unhealthy", host):
                    health[effect.start : effect.end] = [0] * (effect.end - effect.start)
                yield sim.target("lustre", host), health
            for node in sim.cluster.nodes:  # a client's exporter answers only while its node is up and listed
                scraped = sim.scraped("lustre", node.index)
                yield sim.target("lustre", node.name), [1] * n if scraped is None else where(scraped, [1] * n)
            return
        if signal == "client_ops":
            for node in sim.cluster.nodes:
                scraped = sim.scraped("lustre", node.index)
                for labels, values in client_ops(node):
                    raw = to_unit(values, metric)
                    yield {**labels, **sim.target("lustre", node.name)}, raw if scraped is None else where(scraped, raw)
            return
        for server, labels, values in server_tables[signal]():
            yield {**labels, **sim.target("lustre", server)}, to_unit(values, metric)

    for signal in source.exporter.signals():
        if signal not in server_tables and signal not in ("healthy", "client_ops"):
            continue
        metric = source.metric(signal)
        yield Family(metric.name, metric.type, metric.help, emit(signal, metric))
