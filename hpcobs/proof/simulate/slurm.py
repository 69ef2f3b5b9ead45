"""Slurm: the configured controller-side exporter (SckyzO/vpenso family or Slurm >= 25.11 native OpenMetrics)
and, when exporters.job_info.source is jontk, jontk/slurm-exporter's per-job series.

All three read one SlurmView: node states, allocations, running / pending / recently finished jobs over
time, computed from the job timeline and the scenarios (nodes down or drained, queue backlog, OOM kills).

Partitions overlap, as slurm.conf lets them (a node belongs to every partition whose Nodes= names it): the last
batch node is also in the interactive partition. The exporters report it as Slurm does: in every per-partition
count of each of its partitions (SckyzO nodes.go counts `sinfo %R|%D|%T` lines, one per partition; Slurm's
openmetrics.c counts each partition's nodes), as one per-node series per partition (SckyzO node.go), and once in
the cluster totals (SckyzO's scontrol node count, Slurm's cluster node counts).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property

from hpcobs.exporters.labels import SLURM_CONTROLLER
from hpcobs.proof.simulate.core import Family, accumulate, seeded, to_unit, where, window_mask
from hpcobs.proof.simulate.model import CPUS_PER_NODE, MEMORY_BYTES, MIN_JOB_AGE, Job, Node

SLURM_VERSION = "25.11.2"
FEATURES = {"train": "h100,nvlink", "interactive": "h100,nvlink", "amd": "mi300x"}
PENDING_USERS = {
    "train": (("alice", 0.4), ("bob", 0.3), ("dave", 0.2), ("grace", 0.1)),
    "interactive": (("carol", 0.6), ("erin", 0.4)),
    "amd": (("frank", 1.0),),
}
TERMINAL = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY")
# jontk/slurm-exporter's jobs_simple.go hard-codes these (catalogue slurm_jontk.yaml, job_info help).
JONTK_HARDCODED = {"account": "default", "qos": "normal"}


class SlurmView:
    def __init__(self, sim):
        self.sim = sim
        self.n = sim.window.steps
        self.cluster = sim.cluster
        self.span = sim.activity.span

    # -- time series helpers ---------------------------------------------------------------------
    def sweep(self, intervals: Iterable[tuple[int, int, float]]) -> list[float]:
        """Sum of weights over [start, end) scrape intervals (a difference array, O(jobs + scrapes))."""
        diff: list[float] = [0] * (self.n + 1)
        for start, end, weight in intervals:
            start, end = max(0, start), min(self.n, end)
            if end > start:
                diff[start] += weight
                diff[end] -= weight
        return list(itertools.accumulate(diff[:-1]))

    def const(self, value) -> list:
        return [value] * self.n

    # -- jobs ------------------------------------------------------------------------------------
    def running(self, pred: Callable[[Job], bool] = lambda j: True, weight: Callable[[Job], float] = lambda j: 1):
        return self.sweep((*self.span(j), weight(j)) for j in self.cluster.jobs if pred(j))

    def finished(self, state: str, pred: Callable[[Job], bool] = lambda j: True) -> list[float]:
        """Jobs that ended in `state` within the last MinJobAge (the controller still lists them)."""
        w = self.sim.window
        return self.sweep(
            (w.index(j.end), w.index(j.end + MIN_JOB_AGE), 1)
            for j in self.cluster.jobs
            if j.end_state == state and pred(j) and j.end < w.duration
        )

    def started_total(self, base: int, pred: Callable[[Job], bool] = lambda j: True) -> list[float]:
        w = self.sim.window
        return [
            base + v
            for v in self.sweep((w.index(j.start), self.n, 1) for j in self.cluster.jobs if pred(j) and j.start >= 0)
        ]

    def ended_total(self, base: int, states: tuple[str, ...]) -> list[float]:
        w = self.sim.window
        return [
            base + v
            for v in self.sweep(
                (w.index(j.end), self.n, 1)
                for j in self.cluster.jobs
                if j.end_state in states and 0 <= j.end < w.duration
            )
        ]

    def pending(self, partition: str, user: str | None = None) -> list[float]:
        """Pending jobs: a small random walk, or a ramp to the backlog's peak during queue_backlog."""
        rng = seeded(self.sim.seed, "pending", partition)
        base = {"train": 4, "interactive": 1, "amd": 0}.get(partition, 0)
        level, out = float(base), []
        for _ in range(self.n):
            level = max(0.0, min(base * 2 + 1, level + rng.choice((-1, 0, 0, 1))))
            out.append(level)
        for effect in self.sim.faults.effects("backlog", partition):
            ramp = max(1, (effect.end - effect.start) // 3)
            for i in range(effect.start, min(effect.end, self.n)):
                out[i] += effect.get("peak") * min(1.0, (i - effect.start + 1) / ramp)
        if user is None:
            return out
        share = dict(PENDING_USERS.get(partition, ()))[user]
        first = PENDING_USERS[partition][0][0]
        users = PENDING_USERS[partition]
        return [int(p * share) + (int(p) - sum(int(p * s) for _, s in users) if user == first else 0) for p in out]

    # -- nodes -----------------------------------------------------------------------------------
    def alloc_gpus(self, node: Node) -> list[int]:
        per_gpu = [
            window_mask(self.n, [self.span(j) for j in self.cluster.jobs_on_gpu(node.index, g)])
            for g in range(node.gpus)
        ]
        return [sum(col) for col in zip(*per_gpu)]

    def state(self, node: Node) -> list[str | None]:
        """Slurm's long state name (sinfo %T) at each scrape; None while the node is not in slurm.conf."""
        alloc = self.alloc_gpus(node)
        out: list[str | None] = ["idle" if a == 0 else "allocated" if a >= node.gpus else "mixed" for a in alloc]
        for effect in self.sim.faults.effects("node_state", node.index):
            for i in range(effect.start, min(effect.end, self.n)):
                if effect.get("state") == "down":
                    out[i] = "down"
                else:
                    out[i] = "draining" if alloc[i] else "drained"
        listed = self.sim.in_cluster(node.index)
        return out if listed is None else where(listed, out)

    def partitions_of(self, node: Node) -> tuple[str, ...]:
        """The node's partitions: its own, and interactive too for the last batch node (an overflow node)."""
        roles = self.cluster.roles
        overflow = roles.shared is not None and bool(roles.batch) and node.index == roles.batch[-1]
        return (node.partition, "interactive") if overflow else (node.partition,)

    @cached_property
    def tallies(self) -> dict[tuple[str | None, str], tuple[list[int], list[int], list[int]]]:
        """(partition, state) -> (nodes, allocated GPUs, idle GPUs) at each scrape, a node counted in each of its
        partitions; partition None: the cluster, each node once. Node by node, so memory holds these few sums,
        not every node's timeline."""
        out: dict[tuple[str | None, str], tuple[list[int], list[int], list[int]]] = {}
        for node in self.cluster.nodes:
            for i, (state, alloc) in enumerate(zip(self.state(node), self.alloc_gpus(node))):
                if state is None:
                    continue
                for partition in (None, *self.partitions_of(node)):
                    nodes, used, free = out.setdefault((partition, state), ([0] * self.n, [0] * self.n, [0] * self.n))
                    nodes[i] += 1
                    used[i] += alloc
                    free[i] += node.gpus - alloc
        return out

    def _tally(self, states: tuple[str, ...] | None, partition: str | None, column: int) -> list[int]:
        total = [0] * self.n
        for (p, state), cols in self.tallies.items():
            if p == partition and (states is None or state in states):
                total = [a + b for a, b in zip(total, cols[column])]
        return total

    def count_nodes(self, states: tuple[str, ...], partition: str | None = None) -> list[int]:
        return self._tally(states, partition, 0)

    def node_gpus_by(self, states: tuple[str, ...] | None, partition: str | None = None, allocated: bool = True):
        """GPUs allocated (or idle) on nodes in the given states."""
        return self._tally(states, partition, 1 if allocated else 2)

    def nodes_in(self, partition: str | None = None) -> list[Node]:
        return [n for n in self.cluster.nodes if partition is None or partition in self.partitions_of(n)]

    def listed(self, partition: str | None = None, per_node: Callable[[Node], int] = lambda n: 1) -> list[int]:
        """Sum of `per_node` over the partition's nodes at each scrape, counting a node only while it is in
        slurm.conf (a node that joins or leaves mid-window)."""
        nodes = self.nodes_in(partition)
        masks = {n.index: self.sim.in_cluster(n.index) for n in nodes}
        total = self.const(sum(per_node(n) for n in nodes if masks[n.index] is None))
        for node in nodes:
            if masks[node.index] is not None:
                total = [t + per_node(node) * m for t, m in zip(total, masks[node.index])]
        return total

    def cpus_of(self, gpus: float, node_gpus: int) -> float:
        return round(CPUS_PER_NODE * gpus / max(1, node_gpus))


UNAVAILABLE = ("down", "drained", "draining")
US = 1e-6
# Scheduler statistics nobody in hpcobs models: plausible constants with a little noise (value, spread),
# in SI units like every model (cycle times are exposed in microseconds).
SCHEDULER_STATS = {
    "scheduler_threads": (3, 0),
    "scheduler_dbd_queue_size": (0, 0),
    # sdiag's Agent queue size (scheduler.go ^Agent queue): RPCs to slurmd in the retry list, 0 while all answer.
    "scheduler_queue_size": (0, 0),
    "scheduler_last_cycle": (2200 * US, 800 * US),
    "scheduler_mean_cycle": (1900 * US, 200 * US),
    "scheduler_cycle_per_minute": (30, 4),
    "scheduler_backfill_last_cycle": (52000 * US, 9000 * US),
    "scheduler_backfill_mean_cycle": (48000 * US, 3000 * US),
    "scheduler_backfill_depth_mean": (40, 6),
    "schedule_cycle_last": (2200 * US, 800 * US),
    "schedule_cycle_max": (91000 * US, 0),
    "schedule_cycle_depth": (35, 6),
    "sched_mean_cycle": (1900 * US, 200 * US),
    "bf_cycle_last": (52000 * US, 9000 * US),
    "bf_cycle_max": (480000 * US, 0),
    "bf_mean_cycle": (48000 * US, 3000 * US),
    "bf_queue_len": (12, 4),
    "bf_active": (0, 0),
    "slurmdbd_queue_size": (0, 0),
    "agent_queue_size": (0, 0),
    "server_thread_cnt": (3, 2),
}


def _stat(v: SlurmView, signal: str) -> list[float]:
    value, spread = SCHEDULER_STATS[signal]
    rng = seeded(v.sim.seed, "slurm-stat", signal)
    digits = 0 if value >= 1 or value == 0 else 6
    out = [max(0, round(value + spread * (rng.random() - 0.5), digits)) for _ in range(v.n)]
    exporter = v.sim.sources["slurm"].exporter
    for canonical in ("slurmdbd_agent_queue", "slurmctld_server_threads"):
        if signal not in exporter.signals_for(canonical):
            continue
        # slurmdbd_down, slurmctld_overload: a ramp to the peak over the first third of the fault, then held.
        for effect in v.sim.faults.effects("sdiag", canonical):
            ramp = max(1, (effect.end - effect.start) // 3)
            for i in range(effect.start, min(effect.end, v.n)):
                out[i] = max(out[i], round(effect.get("peak") * min(1.0, (i - effect.start + 1) / ramp)))
    return out


def _whole(values: list[float]) -> list[int]:
    """Counts the exporter reports as integers even when they grow by a fraction per scrape here."""
    return [int(v) for v in values]


def _labelled(items) -> Callable[[SlurmView], Iterator[tuple[dict, list]]]:
    return lambda v: iter(items(v))


def _plain(fn) -> Callable[[SlurmView], Iterator[tuple[dict, list]]]:
    return lambda v: iter([({}, fn(v))])


def _only_nonzero(values: list[float]) -> list:
    """squeue-derived families have a series only while there is a job in that state."""
    return [x if x else None for x in values]


def _by_partition(fn):
    return _labelled(lambda v: [({"partition": p}, fn(v, p)) for p in v.cluster.partitions])


def _by_account(fn):
    return _labelled(lambda v: [({"account": a}, fn(v, a)) for a in sorted({j.account for j in v.cluster.jobs})])


def _by_user(fn, label: str = "user"):
    return _labelled(lambda v: [({label: u}, fn(v, u)) for u in sorted({j.user for j in v.cluster.jobs})])


def _per_node(fn, status: bool = True, extra: dict | None = None):
    """Per-node series; SckyzO puts the node's state in `status`, so a state change is a new series, and writes
    one series per partition of the node (node.go tryCollect loops over the node's partitions)."""

    def items(v: SlurmView):
        for node in v.cluster.nodes:
            states = v.state(node)
            values = fn(v, node)
            if not status:
                yield {"node": node.name, **(extra or {})}, where([s is not None for s in states], values)
                continue
            for state in dict.fromkeys(s for s in states if s is not None):
                mask = [s == state for s in states]
                for partition in v.partitions_of(node):
                    yield (
                        {"node": node.name, "status": state, "partition": partition, **(extra or {})},
                        where(mask, values),
                    )

    return items


def _nodes_count(states: tuple[str, ...]):
    return _labelled(
        lambda v: [
            ({"partition": p, "active_feature_set": FEATURES[p]}, v.count_nodes(states, p))
            for p in v.cluster.partitions
        ]
    )


def _pending_by_user_partition(v: SlurmView, cores: bool = False):
    for partition in v.cluster.partitions:
        for user, _ in PENDING_USERS.get(partition, ()):
            values = v.pending(partition, user)
            values = [p * CPUS_PER_NODE if cores else p for p in values]
            if any(values):
                yield {"user": user, "partition": partition, "reason": "Resources"}, _only_nonzero(values)


def _user_partitions(v: SlurmView) -> Iterator[tuple[dict[str, str], Callable[[Job], bool]]]:
    """Each (user, partition) that has jobs: its labels and the test for its jobs."""
    for partition in v.cluster.partitions:
        for user in sorted({j.user for j in v.cluster.jobs if j.partition == partition}):
            yield {"user": user, "partition": partition}, _owned_by(user, partition)


def _owned_by(user: str, partition: str) -> Callable[[Job], bool]:
    return lambda job: job.partition == partition and job.user == user


def _running_by_user_partition(v: SlurmView, weight=lambda j: 1):
    for labels, owned in _user_partitions(v):
        values = v.running(owned, weight)
        if any(values):
            yield labels, _only_nonzero(values)


def _finished_by_user_partition(state: str):
    def items(v: SlurmView):
        for labels, owned in _user_partitions(v):
            values = v.finished(state, owned)
            if any(values):
                yield labels, _only_nonzero(values)

    return lambda v: iter(items(v))


def _gpus_total(v: SlurmView) -> list[int]:
    return v.listed(per_node=lambda n: n.gpus)


def _gpus_other(v: SlurmView, partition=None) -> list[float]:
    return [
        a + b
        for a, b in zip(v.node_gpus_by(UNAVAILABLE, partition, True), v.node_gpus_by(UNAVAILABLE, partition, False))
    ]


def _gpus_alloc(v: SlurmView, partition=None) -> list[float]:
    return v.node_gpus_by(("allocated", "mixed"), partition)


def _gpus_idle(v: SlurmView, partition=None) -> list[float]:
    return v.node_gpus_by(("allocated", "mixed", "idle"), partition, allocated=False)


def _cpus(v: SlurmView, gpus: list[float]) -> list[float]:
    return [round(CPUS_PER_NODE * g / max(1, v.cluster.gpus_per_node)) for g in gpus]


def _all_pending(v: SlurmView) -> list[float]:
    return [sum(c) for c in zip(*(v.pending(p) for p in v.cluster.partitions))]


SCKYZO_COLLECTORS = (
    "accounts",
    "cpus",
    "fairshare",
    "gpus",
    "info",
    "node",
    "nodes",
    "partitions",
    "queue",
    "scheduler",
    "users",
)

SCKYZO: dict[str, Callable[[SlurmView], Iterator[tuple[dict, list]]]] = {
    "nodes_alloc": _nodes_count(("allocated",)),
    "nodes_comp": _nodes_count(("completing",)),
    "nodes_down": _nodes_count(("down",)),
    "nodes_drain": _nodes_count(("drained", "draining")),
    "nodes_err": _nodes_count(("error",)),
    "nodes_fail": _nodes_count(("fail",)),
    "nodes_idle": _nodes_count(("idle",)),
    "nodes_inval": _nodes_count(("inval",)),
    "nodes_maint": _nodes_count(("maint",)),
    "nodes_mix": _nodes_count(("mixed",)),
    "nodes_resv": _nodes_count(("reserved",)),
    "nodes_other": _nodes_count(("other",)),
    "nodes_planned": _nodes_count(("planned",)),
    "nodes_total": _plain(lambda v: v.listed()),
    "node_cpu_alloc": _per_node(lambda v, n: [v.cpus_of(a, n.gpus) for a in v.alloc_gpus(n)]),
    "node_cpu_idle": _per_node(lambda v, n: [CPUS_PER_NODE - v.cpus_of(a, n.gpus) for a in v.alloc_gpus(n)]),
    "node_cpu_other": _per_node(lambda v, n: v.const(0)),
    "node_cpu_total": _per_node(lambda v, n: v.const(CPUS_PER_NODE)),
    "node_mem_alloc": _per_node(lambda v, n: [MEMORY_BYTES * 0.85 * a / n.gpus for a in v.alloc_gpus(n)]),
    "node_mem_total": _per_node(lambda v, n: v.const(MEMORY_BYTES * 0.95)),
    "node_status": _per_node(lambda v, n: v.const(1)),
    "node_gres_total": _per_node(lambda v, n: v.const(n.gpus), extra={"gres_type": "gpu"}),
    "node_gres_used": _per_node(lambda v, n: v.alloc_gpus(n), extra={"gres_type": "gpu"}),
    "node_drain_reason": _labelled(
        lambda v: [
            (
                {"node": v.cluster.nodes[e.key[0]].name, "reason": e.get("reason")},
                where(window_mask(v.n, [(e.start, e.end)]), v.const(1)),
            )
            for f in v.sim.faults.faults
            for e in f.effects
            if e.kind == "node_state"
        ]
    ),
    "node_drain_since": _labelled(
        lambda v: [
            (
                {"node": v.cluster.nodes[e.key[0]].name},
                where(window_mask(v.n, [(e.start, e.end)]), v.const(v.sim.window.time(e.start))),
            )
            for f in v.sim.faults.faults
            for e in f.effects
            if e.kind == "node_state"
        ]
    ),
    "cpus_alloc": _plain(lambda v: _cpus(v, _gpus_alloc(v))),
    "cpus_idle": _plain(lambda v: _cpus(v, _gpus_idle(v))),
    "cpus_other": _plain(lambda v: _cpus(v, _gpus_other(v))),
    "cpus_total": _plain(lambda v: v.listed(per_node=lambda n: CPUS_PER_NODE)),
    "gpus_alloc": _plain(_gpus_alloc),
    "gpus_idle": _plain(_gpus_idle),
    "gpus_other": _plain(_gpus_other),
    "gpus_total": _plain(_gpus_total),
    "gpus_utilization": _plain(lambda v: [a / t for a, t in zip(_gpus_alloc(v), _gpus_total(v))]),
    "partition_cpus_allocated": _by_partition(lambda v, p: _cpus(v, _gpus_alloc(v, p))),
    "partition_cpus_idle": _by_partition(lambda v, p: _cpus(v, _gpus_idle(v, p))),
    "partition_cpus_other": _by_partition(lambda v, p: _cpus(v, _gpus_other(v, p))),
    "partition_cpus_total": _by_partition(lambda v, p: v.listed(p, lambda n: CPUS_PER_NODE)),
    "partition_jobs_pending": _by_partition(lambda v, p: v.pending(p)),
    "partition_jobs_running": _by_partition(lambda v, p: v.running(lambda j: j.partition == p)),
    "partition_gpus_idle": _by_partition(lambda v, p: _gpus_idle(v, p)),
    "partition_gpus_allocated": _by_partition(lambda v, p: _gpus_alloc(v, p)),
    "queue_pending": _labelled(lambda v: list(_pending_by_user_partition(v))),
    "cores_pending": _labelled(lambda v: list(_pending_by_user_partition(v, cores=True))),
    "queue_running": _labelled(lambda v: list(_running_by_user_partition(v))),
    "cores_running": _labelled(lambda v: list(_running_by_user_partition(v, lambda j: j.cpus))),
    "queue_suspended": _labelled(lambda v: []),
    "queue_preempted": _labelled(lambda v: []),
    "queue_failed": _finished_by_user_partition("FAILED"),
    "queue_timeout": _finished_by_user_partition("TIMEOUT"),
    "queue_node_fail": _finished_by_user_partition("NODE_FAIL"),
    "queue_cancelled": _finished_by_user_partition("CANCELLED"),
    "queue_completed": _finished_by_user_partition("COMPLETED"),
    "jobs_pending": _plain(_all_pending),
    "jobs_running": _plain(lambda v: v.running()),
    "jobs_suspended": _plain(lambda v: v.const(0)),
    "jobs_completing": _plain(lambda v: v.const(0)),
    "jobs_configuring": _plain(lambda v: v.const(0)),
    "jobs_preempted": _plain(lambda v: v.const(0)),
    "jobs_completed": _plain(lambda v: v.finished("COMPLETED")),
    # OUT_OF_MEMORY has no gauge of its own here; squeue's OOM state is counted with the failures (inference).
    "jobs_failed": _plain(lambda v: [a + b for a, b in zip(v.finished("FAILED"), v.finished("OUT_OF_MEMORY"))]),
    "jobs_timeout": _plain(lambda v: v.finished("TIMEOUT")),
    "jobs_node_fail": _plain(lambda v: v.finished("NODE_FAIL")),
    "jobs_cancelled": _plain(lambda v: v.finished("CANCELLED")),
    "jobs_cores_running": _plain(lambda v: v.running(weight=lambda j: j.cpus)),
    "jobs_cores_pending": _plain(lambda v: [p * CPUS_PER_NODE for p in _all_pending(v)]),
    "account_jobs_pending": _by_account(lambda v, a: v.const(0)),
    "account_jobs_running": _by_account(lambda v, a: v.running(lambda j: j.account == a)),
    "account_cpus_running": _by_account(lambda v, a: v.running(lambda j: j.account == a, lambda j: j.cpus)),
    "account_gpus_running": _by_account(lambda v, a: v.running(lambda j: j.account == a, lambda j: len(j.gpus))),
    "account_jobs_suspended": _by_account(lambda v, a: v.const(0)),
    "user_jobs_pending": _by_user(
        lambda v, u: (
            [
                sum(c)
                for c in zip(*(v.pending(p, u) for p in v.cluster.partitions if u in dict(PENDING_USERS.get(p, ()))))
            ]
            if any(u in dict(PENDING_USERS.get(p, ())) for p in v.cluster.partitions)
            else v.const(0)
        )
    ),
    "user_jobs_running": _by_user(lambda v, u: v.running(lambda j: j.user == u)),
    "user_cpus_running": _by_user(lambda v, u: v.running(lambda j: j.user == u, lambda j: j.cpus)),
    "user_gpus_running": _by_user(lambda v, u: v.running(lambda j: j.user == u, lambda j: len(j.gpus))),
    "user_jobs_suspended": _by_user(lambda v, u: v.const(0)),
    "account_fairshare": _by_account(lambda v, a: v.const(round(0.3 + 0.6 * seeded(v.sim.seed, "fs", a).random(), 3))),
    "user_fairshare": _labelled(
        lambda v: [
            ({"account": a, "user": u}, v.const(round(0.2 + 0.7 * seeded(v.sim.seed, "fs", u).random(), 3)))
            for u, a in sorted({(j.user, j.account) for j in v.cluster.jobs})
        ]
    ),
    "scheduler_backfilled_jobs_since_start": _plain(
        lambda v: _whole(accumulate([0.02 * v.sim.window.step] * v.n, 1200))
    ),
    "scheduler_jobs_submitted": _plain(lambda v: [a + b for a, b in zip(v.started_total(3000), _all_pending(v))]),
    "scheduler_jobs_started": _plain(lambda v: v.started_total(3000)),
    "scheduler_jobs_completed": _plain(lambda v: v.ended_total(2600, ("COMPLETED",))),
    "scheduler_jobs_canceled": _plain(lambda v: v.ended_total(150, ("CANCELLED",))),
    "scheduler_jobs_failed": _plain(lambda v: v.ended_total(240, ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"))),
    "info": _labelled(
        lambda v: (
            [({"type": "general", "binary": "", "version": SLURM_VERSION}, v.const(1))]
            + [
                ({"type": "binary", "binary": b, "version": SLURM_VERSION}, v.const(1))
                for b in ("sacct", "scontrol", "sdiag", "sinfo", "squeue", "sshare")
            ]
        )
    ),
    "collector_success": _labelled(lambda v: [({"collector": c}, v.const(1)) for c in SCKYZO_COLLECTORS]),
    "collector_duration": _labelled(
        lambda v: [({"collector": c}, v.const(0.05 + 0.02 * k)) for k, c in enumerate(SCKYZO_COLLECTORS)]
    ),
}

_NATIVE_NODE_STATES = {
    "nodes_alloc": ("allocated",),
    "nodes_mixed": ("mixed",),
    "nodes_idle": ("idle",),
    "nodes_down": ("down",),
    "nodes_drain": ("drained", "draining"),
    "nodes_drained": ("drained",),
    "nodes_draining": ("draining",),
    "nodes_noresp": ("down",),
}
_NATIVE_JOB_STATES = {
    "jobs_completed": "COMPLETED",
    "jobs_failed": "FAILED",
    "jobs_cancelled": "CANCELLED",
    "jobs_timeout": "TIMEOUT",
    "jobs_node_failed": "NODE_FAIL",
    "jobs_outofmemory": "OUT_OF_MEMORY",
}


def _native_jobs_total(v: SlurmView, partition=None) -> list[float]:
    pending = v.pending(partition) if partition else _all_pending(v)
    pred = (lambda j: j.partition == partition) if partition else (lambda j: True)
    finished = [sum(c) for c in zip(*(v.finished(s, pred) for s in TERMINAL))]
    return [a + b + c for a, b, c in zip(v.running(pred), pending, finished)]


NATIVE: dict[str, Callable[[SlurmView], Iterator[tuple[dict, list]]]] = {
    "node_cpus": _per_node(lambda v, n: v.const(CPUS_PER_NODE), status=False),
    "node_cpus_alloc": _per_node(lambda v, n: [v.cpus_of(a, n.gpus) for a in v.alloc_gpus(n)], status=False),
    "node_cpus_effective": _per_node(lambda v, n: v.const(CPUS_PER_NODE), status=False),
    "node_cpus_idle": _per_node(
        lambda v, n: [CPUS_PER_NODE - v.cpus_of(a, n.gpus) for a in v.alloc_gpus(n)], status=False
    ),
    "node_gpus": _per_node(lambda v, n: v.const(n.gpus), status=False),
    "node_gpus_alloc": _per_node(lambda v, n: v.alloc_gpus(n), status=False),
    "node_memory_alloc": _per_node(
        lambda v, n: [MEMORY_BYTES * 0.85 * a / n.gpus for a in v.alloc_gpus(n)], status=False
    ),
    "node_memory_effective": _per_node(lambda v, n: v.const(MEMORY_BYTES * 0.95), status=False),
    "node_memory_free": _per_node(
        lambda v, n: [MEMORY_BYTES * (0.9 - 0.5 * a / n.gpus) for a in v.alloc_gpus(n)], status=False
    ),
    "node_memory": _per_node(lambda v, n: v.const(MEMORY_BYTES), status=False),
    "nodes": _plain(lambda v: v.listed()),
    **{s: _plain(lambda v, states=states: v.count_nodes(states)) for s, states in _NATIVE_NODE_STATES.items()},
    "jobs": _plain(_native_jobs_total),
    "jobs_pending": _plain(_all_pending),
    "jobs_running": _plain(lambda v: v.running()),
    **{s: _plain(lambda v, state=state: v.finished(state)) for s, state in _NATIVE_JOB_STATES.items()},
    "jobs_started": _plain(lambda v: v.started_total(3000)),
    "jobs_cpus_alloc": _plain(lambda v: v.running(weight=lambda j: j.cpus)),
    "jobs_gpus_alloc": _plain(lambda v: v.running(weight=lambda j: len(j.gpus))),
    "jobs_memory_alloc": _plain(lambda v: v.running(weight=lambda j: j.memory_bytes)),
    "jobs_nodes_alloc": _plain(lambda v: v.running(weight=lambda j: len(j.nodes))),
    "partitions": _plain(lambda v: v.const(len(v.cluster.partitions))),
    "partition_jobs": _by_partition(_native_jobs_total),
    "partition_jobs_pending": _by_partition(lambda v, p: v.pending(p)),
    "partition_jobs_running": _by_partition(lambda v, p: v.running(lambda j: j.partition == p)),
    "partition_jobs_failed": _by_partition(lambda v, p: v.finished("FAILED", lambda j: j.partition == p)),
    "partition_jobs_outofmemory": _by_partition(lambda v, p: v.finished("OUT_OF_MEMORY", lambda j: j.partition == p)),
    "partition_jobs_node_failed": _by_partition(lambda v, p: v.finished("NODE_FAIL", lambda j: j.partition == p)),
    "partition_jobs_cpus_alloc": _by_partition(lambda v, p: v.running(lambda j: j.partition == p, lambda j: j.cpus)),
    "partition_jobs_gpus_alloc": _by_partition(
        lambda v, p: v.running(lambda j: j.partition == p, lambda j: len(j.gpus))
    ),
    "partition_cpus": _by_partition(lambda v, p: v.listed(p, lambda n: CPUS_PER_NODE)),
    "partition_gpus": _by_partition(lambda v, p: v.listed(p, lambda n: n.gpus)),
    "partition_nodes": _by_partition(lambda v, p: v.listed(p)),
    **{
        f"partition_nodes_{k}": _by_partition(lambda v, p, states=states: v.count_nodes(states, p))
        for k, states in {
            "alloc": ("allocated",),
            "idle": ("idle",),
            "mixed": ("mixed",),
            "down": ("down",),
            "drain": ("drained", "draining"),
            "drained": ("drained",),
            "draining": ("draining",),
            "fail": ("fail",),
            "maint": ("maint",),
            "no_resp": ("down",),
            "planned": ("planned",),
        }.items()
    },
    "partition_nodes_cpus_alloc": _by_partition(lambda v, p: _cpus(v, _gpus_alloc(v, p))),
    "partition_nodes_cpus_idle": _by_partition(lambda v, p: _cpus(v, _gpus_idle(v, p))),
    "partition_nodes_cpus_efctv": _by_partition(lambda v, p: v.listed(p, lambda n: CPUS_PER_NODE)),
    "user_jobs_running": _by_user(lambda v, u: v.running(lambda j: j.user == u), "username"),
    "user_jobs_pending": _by_user(lambda v, u: v.const(0), "username"),
    "user_jobs_gpus_alloc": _by_user(lambda v, u: v.running(lambda j: j.user == u, lambda j: len(j.gpus)), "username"),
    "account_jobs_running": _by_account(lambda v, a: v.running(lambda j: j.account == a)),
    "account_jobs_pending": _by_account(lambda v, a: v.const(0)),
    "account_jobs_gpus_alloc": _by_account(lambda v, a: v.running(lambda j: j.account == a, lambda j: len(j.gpus))),
    "sdiag_jobs_submitted": _plain(lambda v: [a + b for a, b in zip(v.started_total(3000), _all_pending(v))]),
    "sdiag_jobs_started": _plain(lambda v: v.started_total(3000)),
    "sdiag_jobs_completed": _plain(lambda v: v.ended_total(2600, ("COMPLETED",))),
    "sdiag_jobs_canceled": _plain(lambda v: v.ended_total(150, ("CANCELLED",))),
    "sdiag_jobs_failed": _plain(lambda v: v.ended_total(240, ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"))),
    "sdiag_jobs_pending": _plain(_all_pending),
    "sdiag_jobs_running": _plain(lambda v: v.running()),
    "schedule_cycle_tot": _plain(lambda v: accumulate([0.002 * v.sim.window.step] * v.n, 86.0)),
    "schedule_cycle_cnt": _plain(lambda v: _whole(accumulate([0.5 * v.sim.window.step] * v.n, 43000))),
    "schedule_queue_len": _plain(_all_pending),
    "bf_cycle_cnt": _plain(lambda v: _whole(accumulate([v.sim.window.step / 30] * v.n, 2900))),
    "bf_when_last_cycle": _plain(lambda v: [float(v.sim.window.time(i) - 12) for i in range(v.n)]),
    "backfilled_jobs": _plain(lambda v: _whole(accumulate([0.02 * v.sim.window.step] * v.n, 1200))),
}
# States nothing in the model produces: the controller reports them, as 0.
for _name in (
    "nodes_blocked",
    "nodes_completing",
    "nodes_fail",
    "nodes_future",
    "nodes_invalid_reg",
    "nodes_maint",
    "nodes_planned",
    "nodes_powered_down",
    "nodes_reboot_issued",
    "nodes_reboot_req",
    "nodes_resv",
    "nodes_unknown",
    "jobs_completing",
    "jobs_configuring",
    "jobs_preempted",
    "jobs_requeued",
    "jobs_suspended",
    "jobs_hold",
    "jobs_bootfail",
):
    NATIVE.setdefault(_name, _plain(lambda v: v.const(0)))
for _name in SCHEDULER_STATS:
    SCKYZO.setdefault(_name, _plain(lambda v, name=_name: _stat(v, name))) if _name.startswith(
        "scheduler"
    ) else NATIVE.setdefault(_name, _plain(lambda v, name=_name: _stat(v, name)))


def _jontk_state(v: SlurmView, job: Job) -> list:
    w = v.sim.window
    first, last = v.span(job)
    gone = w.index(job.end + MIN_JOB_AGE)
    return ["RUNNING" if first <= i < last else job.end_state if last <= i < gone else None for i in range(v.n)]


def _jontk(signal: str):
    def items(v: SlurmView):
        w = v.sim.window
        for job in v.cluster.jobs:
            states = _jontk_state(v, job)
            if not any(states):
                continue
            base = {"job_id": job.id, "job_name": job.name, "user": job.user, "partition": job.partition}
            if signal in ("job_info", "job_state"):
                for state in dict.fromkeys(s for s in states if s):
                    mask = [s == state for s in states]
                    labels = {**base, "state": state}
                    if signal == "job_info":
                        labels.update(JONTK_HARDCODED)
                    yield labels, where(mask, v.const(1 if signal == "job_info" or state == "RUNNING" else 0))
                continue
            present = [s is not None for s in states]
            running = [s == "RUNNING" for s in states]
            values = {
                "job_queue_time": v.const(600 + int(job.id) % 1800),
                "job_run_time": [max(0, w.offset(i) - job.start) for i in range(v.n)],
                "job_cpus": v.const(job.cpus),
                "job_memory": v.const(job.memory_bytes),
                "job_nodes": v.const(len(job.nodes)),
            }[signal]
            yield base, where(running if signal == "job_run_time" else present, values)

    return lambda v: iter(items(v))


def _emit(sim, exporter: str, table: dict, view: SlurmView) -> Iterator[Family]:
    source = sim.sources[exporter]
    target = sim.target(exporter, SLURM_CONTROLLER)
    for signal in source.exporter.signals():
        if signal not in table:
            continue
        metric = source.metric(signal)

        def series(signal=signal, metric=metric):
            for labels, values in table[signal](view):
                yield {**labels, **target}, to_unit(values, metric)

        yield Family(metric.name, metric.type, metric.help, series())


def families(sim) -> Iterator[Family]:
    view = SlurmView(sim)
    if sim.enabled("slurm"):
        table = SCKYZO if sim.config["exporters"]["slurm"]["flavour"] == "sckyzo" else NATIVE
        yield from _emit(sim, "slurm", table, view)
    if sim.enabled("job_info") and sim.job_info_source == "jontk":
        table = {
            s: _jontk(s)
            for s in ("job_info", "job_state", "job_queue_time", "job_run_time", "job_cpus", "job_memory", "job_nodes")
        }
        yield from _emit(sim, "job_info", table, view)
