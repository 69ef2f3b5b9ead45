"""A fleet's week as scenarios: unexpected faults at the Llama 3 mix, each with its ground truth, and the
background a healthy week has and no alert should page for (docs/simulator.md#a-weeks-workload).

    plan = schedule(cluster, seed=1, rate=REAL_RATE)
    Simulation(config, ..., scenarios=plan.specs)    # or --scenario plan.scenarios
    plan.truth                                       # class, scenario, onset, end, entity of every fault

Faults arrive as a Poisson process of `rate` interruptions per GPU-day over the NVIDIA GPUs; each draws its class
by the Llama 3 shares, one of the class's scenario kinds, and a target no other fault or background event holds
around that time, so that no event hides another's signal. Deterministic from (cluster, seed, rate).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hpcobs.proof.simulate.background import REBOOT_SECONDS
from hpcobs.proof.simulate.core import seeded
from hpcobs.proof.simulate.model import Cluster, Job
from hpcobs.proof.simulate.scenarios import INF, REALISTIC_WEEK, Spec

DAY = 86400
# "The Llama 3 Herd of Models" (arXiv:2407.21783, section 3.3.4 and Table 5): 419 unexpected interruptions in a
# 54-day snapshot of pre-training on 16,384 H100 GPUs.
REAL_RATE = 419 / (54 * 16_384)  # interruptions per GPU-day, 0.474e-3


@dataclass(frozen=True)
class Variant:
    """A scenario kind that shows a fault class as the exporters do, and what it lands on: a GPU, an HCA port,
    the same rail port of every node on one leaf switch, a node, or the hero job."""

    kind: str
    entity: str  # gpu | hca | leaf | node | job
    # Where it may land: nvidia, batch or extended (nodes with the dcgm CSV's optional fields); for a job, hero (the
    # hero job) or training (any training job running all along)
    nodes: str = "nvidia"


@dataclass(frozen=True)
class FaultClass:
    name: str
    share: float  # percent of the 419, as Table 5 gives it
    variants: tuple[Variant, ...]  # empty: no exporter shows it
    repair_hours: tuple[float, float]


def _on(entity: str, *kinds: str, nodes: str = "nvidia") -> tuple[Variant, ...]:
    return tuple(Variant(kind, entity, nodes) for kind in kinds)


# Xid codes as NVIDIA's Xid catalog describes them (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html;
# classes in hpcobs/exporters/catalogue/dcgm.yaml). Table 5 counts NVLink failures as "faulty GPU".
LLAMA3_MIX = (
    FaultClass("faulty GPU", 30.1, _on("gpu", "xid79", "xid74"), (2, 8)),  # fell off the bus; NVLink error
    # HBM3: a double-bit error (Xid 48) and the row remapper's pending remap (63) or failure (64).
    FaultClass("GPU HBM3 memory", 17.2, _on("gpu", "dbe", "row_remap_pending", "row_remap_failure"), (1, 6)),
    # The job's own stack fails on the GPU: application-class Xids, the job owner's to fix.
    FaultClass("software bug", 12.9, _on("gpu", "xid13", "xid31", "xid43"), (0.5, 2)),
    # A cable: one port flaps, retrains, errors or runs narrow. A switch: that rail's port down on its whole leaf.
    FaultClass(
        "network switch/cable",
        8.4,
        _on("hca", "ib_link_flap", "ib_link_errors", "ib_symbol_errors", "ib_link_degraded")
        + _on("leaf", "ib_port_down"),
        (0.3, 1),
    ),
    # Unplanned host work takes a node out; batch nodes only: the simulator ends the hero job on a node that goes
    # down, which would leave the job-level faults after it without a job.
    FaultClass("host maintenance", 7.6, _on("node", "slurm_nodes_down", nodes="batch"), (2, 8)),
    # SRAM: uncorrectable ECC errors the driver contains (Xid 94, the process dies) or cannot (95, reset the GPU).
    FaultClass("GPU SRAM memory", 4.5, _on("gpu", "xid94", "xid95"), (1, 4)),
    FaultClass("GPU system processor", 4.1, _on("gpu", "xid119", "xid120"), (1, 4)),  # GSP RPC timeout, GSP error
    FaultClass("NIC", 1.7, _on("hca", "ib_port_down", "ib_port_init"), (1, 4)),
    # Any training job running all along the hang: the hero job or a single-node batch job (NVLink collectives).
    FaultClass("NCCL watchdog timeout", 1.7, _on("job", "training_hang", nodes="training"), (0.3, 1)),
    FaultClass("silent data corruption", 1.4, (), (0, 0)),  # wrong numbers, no exporter signal
    FaultClass("GPU thermal interface/sensor", 1.4, _on("gpu", "thermal", "hbm_thermal"), (0.3, 1.5)),
    # The rest, each under 1%: SSD, power supply, chassis, IO expansion board, dependency, CPU, system memory.
    FaultClass("other host hardware", 9.0, _on("node", "slurm_nodes_down", nodes="batch"), (2, 12)),
)

# A rail-optimised fabric connects rail r of a scalable unit's 32 nodes to one leaf switch (NVIDIA DGX SuperPOD
# H100 reference architecture: 32 nodes per SU, one leaf per rail).
LEAF_NODES = 32
# Around each event its entity is held this long more, so an alert's `for:` and resolution see one cause only.
MARGIN = 900
# Scenarios that hang the job on their GPU (scenarios._xid79: the rank dies, the job waits in its collective): they
# hold that job too, so that no hang, evaluation or checkpoint of it overlaps them.
HANGS_JOB = frozenset({"xid79"})
# Scenarios that take a node out of Slurm's hands while they hold it (a drain, a node not yet or no longer in the
# cluster): the jobs that would have started on it then are not run, so they hold the node until those jobs' ends
# too, lest a fault be placed on a job that does not run.
REMOVES_JOBS = frozenset({"planned_maintenance", "node_joins", "node_leaves"})
# A node joins or leaves once in a window: the node added is not the one removed.
CHANGES_MEMBERSHIP = frozenset({"node_joins", "node_leaves"})
# How long a background event holds its entity: a sticky Xid stays for the week, but alerts read it over minutes.
BACKGROUND_HOLD = 3600


@dataclass(frozen=True)
class Background:
    """A benign event kind, how often it comes and how long it lasts, and why no alert should page for it."""

    kind: str
    entity: str | None  # gpu | node | job | None (cluster-wide)
    per_day: float
    duration: int | None  # None: the kind takes no duration (a node joining or leaving is for good)
    why: str
    # Where it may land: nvidia, batch or extended (nodes with the dcgm CSV's optional fields), busy (a batch node
    # running a job at the start) or ending (a batch node whose job, if any, ends within DRAIN_WAIT); for a job, hero
    # (the hero job) or training (any training job running all along)
    nodes: str = "nvidia"


# A planned reboot waits for the node's job: the week drains nodes whose job, if any, ends within this, and reboots
# them when it has (the maintenance window ends REBOOT_SECONDS after).
DRAIN_WAIT = 1800
BACKGROUND = (
    Background("evaluation_pass", "job", 4, 480, "the hero job evaluates: no optimizer step for 8 minutes", "hero"),
    Background(
        "checkpoint_long", "job", 1, 1500, "a large checkpoint: no step for 25 minutes, written at full rate", "hero"
    ),
    Background("thermal_burst", "gpu", 6, 120, "a two-minute thermal excursion, shorter than any thermal alert"),
    Background("sbe", "gpu", 4, 60, "one corrected single-bit ECC error"),
    Background("exporter_down", "node", 4, 30, "a scrape timeout: one missed dcgm-exporter scrape"),
    Background("exporter_down", "node", 1, 120, "dcgm-exporter restarted (upgrade, config change)"),
    Background("node_exporter_down", "node", 4, 30, "a scrape timeout: one missed node_exporter scrape"),
    Background("power_excursion", "gpu", 4, 90, "a GPU's draw overshoots its power limit, capped within 90 s"),
    # Rolling kernel and firmware patching: about 1.5% of a 128-node fleet a day, each node rebooted once its job ends.
    Background(
        "planned_maintenance",
        "node",
        2,
        REBOOT_SECONDS,
        "a node drained for planned maintenance and rebooted once its job ended",
        "ending",
    ),
    Background("job_xid13", "gpu", 1, INF, "a user's job dies of its own graphics engine exception", "busy"),
    Background("job_xid31", "gpu", 1, INF, "a user's job dies of a bad GPU memory access", "busy"),
    Background("job_xid43", "gpu", 1, INF, "a user's job dies and stops the GPU (its own bug)", "busy"),
)
# Once in a window, at these fractions of it, whatever its length (a week has about one of each): a node added to the
# cluster, Prometheus restarted (an upgrade), a node removed. Each holds its node on the side where it is absent.
ONCE = (
    (0.3, Background("node_joins", "node", 0, None, "a node added to the cluster: its series appear", "batch")),
    (0.5, Background("prometheus_restart", None, 0, 90, "Prometheus restarted: a 90 s gap in every series")),
    (0.7, Background("node_leaves", "node", 0, None, "a node removed from the cluster: its series vanish", "batch")),
)
# Long queues at peak hours: pending jobs pile up from 09:00 to 12:00 every day of the window.
PEAK = (9 * 3600, 3 * 3600)
# A rolling driver update on the third day: one node every 20 minutes, this many nodes.
ROLLING_UPDATE = (2 * DAY + 10 * 3600, 1200, 8)


@dataclass(frozen=True)
class Truth:
    """One injected fault as the scorecard counts it: its class, the scenario(s) that show it (none when the
    class has no signal), when it began and ended (seconds from the window start) and what it hit."""

    fault_class: str
    kind: str | None
    onset: int
    end: int
    entity: dict[str, str]
    specs: tuple[Spec, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The week as planned: every fault drawn (the ground truth) and the background events placed around them."""

    truth: tuple[Truth, ...]
    background: dict[Spec, str]  # each event and why it is benign (a spec twice would be one event)

    @property
    def specs(self) -> list[Spec]:
        return [s for t in self.truth for s in t.specs] + list(self.background) or [Spec("healthy")]

    @property
    def scenarios(self) -> str:
        """The plan as --scenario text."""
        return ",".join(s.text for s in self.specs)


class _Holds:
    """When each entity (a node index, or "job:<id>") is held by an event; `free` adds the margins."""

    def __init__(self) -> None:
        self._held: dict[object, list[tuple[int, int]]] = {}

    def free(self, keys, start: int, end: int) -> bool:
        return all(e <= start - MARGIN or s >= end + MARGIN for k in keys for s, e in self._held.get(k, ()))

    def hold(self, keys, start: int, end: int) -> None:
        for k in keys:
            self._held.setdefault(k, []).append((start, end))


class _Draw:
    """Targets for a plan: the cluster's candidates per entity and what is already held."""

    def __init__(self, cluster: Cluster, rng: random.Random):
        self.cluster, self.rng, self.holds = cluster, rng, _Holds()
        nvidia = [n for n in cluster.nodes if n.vendor == "nvidia"]
        self.nodes = {
            "nvidia": nvidia,
            "batch": [cluster.nodes[i] for i in cluster.roles.batch],
            # driver_drift reads the node's optional fields (scenarios._spare_hero): not on a default-CSV node
            "extended": [n for n in nvidia if n.csv == "extended"],
        }
        self.leaves = [nvidia[i : i + LEAF_NODES] for i in range(0, len(nvidia), LEAF_NODES)]

    def training_jobs(self, start: int, end: int) -> list[Job]:
        """Training jobs on NVIDIA nodes that run over all of [start, end]: the hero job, and batch jobs whose node
        nothing held since the job began (a node down before would have ended or removed the job)."""
        nvidia, hero = {n.index for n in self.nodes["nvidia"]}, self.cluster.roles.hero_job
        return [
            j
            for j in self.cluster.jobs
            if j.training and j.start <= start and end <= j.end and set(j.nodes) <= nvidia
            if j.id == hero or self.holds.free(j.nodes, j.start, end)
        ]

    def candidates(self, where: str, start: int) -> list:
        """Nodes an event may land on; busy and ending depend on the jobs running at `start`."""
        if where not in ("busy", "ending"):
            return self.nodes[where]
        out = []
        for node in self.nodes["batch"]:
            job = next((j for j in self.cluster.jobs_on(node.index) if _runs(j, start)), None)
            # The job ends early (its own Xid): nothing may have held its node over its life, before (a node down
            # may have ended or removed it) nor after (a fault on it would find it gone).
            if where == "busy":
                runs = job is not None and job.end > start + self.cluster.window.step
                fits = runs and job is not None and self.holds.free((node.index,), job.start, job.end)
            else:
                fits = job is None or job.end <= start + DRAIN_WAIT
            if fits:
                out.append(node)
        return out

    def target(
        self, kind: str, entity: str | None, start: int, end: int, where: str = "nvidia", since: int | None = None
    ) -> list | None:
        """The specs' target fields (one per spec) on something free over [since or start, end], or None after a few
        tries."""
        for _ in range(20):
            fields, keys = self._pick(entity, where, start, end)
            if fields is None:
                return None
            if kind in HANGS_JOB:
                node = self.cluster.node(fields[0]["node"]).index
                keys += tuple(
                    f"job:{j.id}" for j in self.cluster.jobs_on_gpu(node, fields[0]["gpu"]) if _runs(j, start)
                )
            held, until = (start if since is None else since), end
            if kind in REMOVES_JOBS:
                node = self.cluster.node(fields[0]["node"]).index
                until = max([end] + [j.end for j in self.cluster.jobs_on(node) if held <= j.start < end])
            member = (f"member:{fields[0]['node']}",) if kind in CHANGES_MEMBERSHIP else ()
            if self.holds.free(keys, held, until) and self.holds.free(member, 0, self.cluster.window.duration):
                self.holds.hold(keys, held, until)
                self.holds.hold(member, 0, self.cluster.window.duration)
                return fields
        return None

    def _pick(self, entity: str | None, where: str, start: int, end: int):
        rng = self.rng
        if entity is None:
            return [{}], ()
        if entity == "job" and where == "hero":
            hero = self.cluster.roles.hero_job
            return ([{"job": hero}], (f"job:{hero}",)) if hero else (None, ())
        if entity == "job":
            jobs = self.training_jobs(start, end)
            if not jobs:
                return None, ()
            # Weighted by GPUs, as faults come per GPU; a batch job holds its node too (a node fault would end it).
            job = rng.choices(jobs, [len(j.gpus) for j in jobs])[0]
            return [{"job": job.id}], (f"job:{job.id}",) + (() if job.id == self.cluster.roles.hero_job else job.nodes)
        if entity == "leaf":
            leaf = rng.choice(self.leaves) if self.leaves else []
            if not leaf:
                return None, ()
            hca = rng.choice(leaf[0].hcas)
            return [{"node": n.name, "hca": hca} for n in leaf], tuple(n.index for n in leaf)
        nodes = self.candidates(where, start)
        if not nodes:
            return None, ()
        node = rng.choice(nodes)
        fields: dict[str, str | int] = {"node": node.name}
        if entity == "gpu":
            fields["gpu"] = rng.randrange(node.gpus)
        elif entity == "hca":
            fields["hca"] = rng.choice(node.hcas)
        return [fields], (node.index,)


def _drained(cluster: Cluster, node: str, at: int) -> int:
    """The first scrape at which the job running on the node at `at` has ended (`at` when none runs)."""
    ends = [j.end for j in cluster.jobs_on(cluster.node(node).index) if _runs(j, at)]
    step = cluster.window.step
    return max([at] + [-(-end // step) * step for end in ends])


def _runs(job: Job, at: int) -> bool:
    return job.start <= at < job.end


def _aligned(t: float, step: int) -> int:
    return int(t) // step * step


def schedule(cluster: Cluster, seed: int, rate: float, background: bool = True) -> Plan:
    """Faults at `rate` interruptions per NVIDIA GPU-day over the cluster's window, and (unless told not to) the
    week's background around them. Faults are placed first; background events take what they leave free."""
    window = cluster.window
    draw = _Draw(cluster, seeded(seed, "week", rate))
    gpus = sum(n.gpus for n in draw.nodes["nvidia"])
    per_second = rate * gpus / DAY
    truth, t = [], 0.0
    while per_second > 0:
        t += draw.rng.expovariate(per_second)
        if t >= window.duration:
            break
        cls = draw.rng.choices(LLAMA3_MIX, [c.share for c in LLAMA3_MIX])[0]
        start = _aligned(t, window.step)
        end = start + _aligned(draw.rng.uniform(*cls.repair_hours) * 3600, window.step)
        truth.append(_fault(draw, cls, start, end))
    events = _background(draw, window.duration) if background else {}
    return Plan(tuple(truth), events)


def _fault(draw: _Draw, cls: FaultClass, start: int, end: int) -> Truth:
    if not cls.variants:
        return Truth(cls.name, None, start, end, {})
    variant = draw.rng.choice(cls.variants)
    targets = draw.target(variant.kind, variant.entity, start, end, variant.nodes)
    if targets is None:  # every candidate busy (a raised rate on a small cluster): recorded, not injected
        return Truth(cls.name, None, start, end, {"unplaced": variant.kind})
    specs = tuple(Spec(variant.kind, start=start, duration=end - start, **fields) for fields in targets)
    entity = {k: ",".join(dict.fromkeys(str(f[k]) for f in targets)) for k in targets[0]}
    if "job" not in entity:  # the job it interrupts, whose owner may be told
        cluster, where = draw.cluster, targets[0]
        node = cluster.node(where["node"]).index
        on = cluster.jobs_on_gpu(node, where["gpu"]) if "gpu" in where else cluster.jobs_on(node)
        jobs = [j.id for j in on if _runs(j, start)]
        entity.update({"job": jobs[0]} if jobs else {})
    return Truth(cls.name, variant.kind, start, end, entity, specs)


def _background(draw: _Draw, duration: int) -> dict[Spec, str]:
    rng, step, events = draw.rng, draw.cluster.window.step, {}

    def add(kind: str, entity: str | None, start: int, length: int | None, why: str, where: str = "nvidia") -> None:
        if start >= duration:
            return
        # A planned reboot waits for the node's job: hold the node over that wait too.
        hold = min((length or 0) + (DRAIN_WAIT if where == "ending" else 0), BACKGROUND_HOLD)
        held = {"node_joins": (0, start + hold), "node_leaves": (start, duration)}.get(kind, (start, start + hold))
        targets = draw.target(kind, entity, start, held[1], where, since=held[0])
        for fields in targets or ():
            if kind == "planned_maintenance":  # the window lasts until the job has ended and the node rebooted
                length = _drained(draw.cluster, fields["node"], start) - start + REBOOT_SECONDS
            events[Spec(kind, start=start, duration=length, **fields)] = why

    for day in range(-(-duration // DAY)):
        add("queue_backlog", None, day * DAY + PEAK[0], PEAK[1], "long queues at peak hours")
    at, every, count = ROLLING_UPDATE
    for i in range(min(count, len(draw.nodes["nvidia"]))):
        add("driver_drift", "node", at + i * every, INF, "a rolling driver update reaches the node", "extended")
    for fraction, bg in ONCE:
        add(bg.kind, bg.entity, _aligned(fraction * duration, step), bg.duration, bg.why, bg.nodes)
    for bg in BACKGROUND:
        length = INF if bg.duration is None else bg.duration
        for _ in range(int(bg.per_day * duration / DAY)):
            start = _aligned(rng.uniform(0, duration - length if length < INF else duration), step)
            add(bg.kind, bg.entity, start, bg.duration, bg.why, bg.nodes)
    return events


def expand(specs: list[Spec], cluster: Cluster, seed: int) -> list[Spec]:
    """`realistic_week` as the faults it draws at the real rate over the window (no background)."""
    week = [
        schedule(cluster, seed, REAL_RATE, background=False).specs if s.kind == REALISTIC_WEEK else [s] for s in specs
    ]
    return [spec for group in week for spec in group]
