"""The simulated cluster: nodes, GPUs, partitions, users, accounts, Slurm jobs, HCAs, filesystems.

Deterministic from (config, size, seed, window). Every draw uses a Random seeded by the seed and what
is drawn (core.seeded), so one node's jobs do not change when another node is added.

Layout of the NVIDIA nodes (AMD nodes, when exporters.amd is enabled, are the last quarter):
  hero   the first half: one multi-node training job (`hero_job`) on every GPU, running all along;
         most GPU, network and training scenarios target it;
  batch  the middle: single-node training jobs one after the other, with idle gaps between them;
  shared the last node: two interactive jobs sharing one GPU (dcgm-exporter duplicates that GPU's
         series per job) and one allocated GPU left idle for the first 20 minutes.
Times are seconds from the simulation start (negative = before it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property

from hpcobs.exporters.sources import Sources
from hpcobs.proof.simulate.core import Window, seeded

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
FOREVER = 10**9  # "still running after the simulation ends"
MIN_JOB_AGE = 300  # Slurm MinJobAge: finished jobs stay visible this long
# A GPU node has 100+ cores; 16 keeps node_cpu_seconds_total (cpus x 8 modes) from dominating the volume.
CPUS_PER_NODE = 16
MEMORY_BYTES = 2 * 1024**4
GPU_FB_MIB = 81559  # H100 80GB HBM3 as nvidia-smi reports it
GPU_FB_RESERVED_MIB = 530
AMD_VRAM_MIB = 196608  # MI300X 192 GiB
HCAS_PER_NODE_MAX = 8  # one compute HCA per GPU, as on a DGX H100
LUSTRE_FS = "scratch"
LUSTRE_SERVERS = {"mds01": ("MDT0000",), "oss01": ("OST0000", "OST0001"), "oss02": ("OST0002", "OST0003")}
LUSTRE_OST_KIB = 120 * 1024**3  # 120 TiB per OST
NFS_EXPORT = "nfs01:/export/home"
# A second NFS filesystem mounted on every node at a mountpoint no threshold names (shared_fs_full fills it).
NFS_SCRATCH = ("nfs01:/export/scratch", "/scratch", 2e14)  # device, mountpoint, size in bytes
NFS_SERVER_ADDRESS = "10.10.0.2"
USERS = {
    "alice": "llm-pretrain",
    "bob": "llm-pretrain",
    "carol": "vision",
    "dave": "vision",
    "erin": "research",
    "frank": "research",
    "grace": "infra",
}
PARTITIONS = ("train", "interactive", "amd")


@dataclass(frozen=True, slots=True)
class Node:
    index: int
    name: str
    vendor: str  # nvidia | amd
    version: str | None  # dcgm-exporter version family (None on AMD nodes)
    partition: str
    gpus: int
    csv: str  # dcgm collector CSV: "extended" (optional fields on) or "default"

    @property
    def hcas(self) -> tuple[str, ...]:
        return tuple(f"mlx5_{i}" for i in range(min(self.gpus, HCAS_PER_NODE_MAX) or 1))


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    name: str
    user: str
    account: str
    partition: str
    qos: str
    start: int
    end: int
    gpus: tuple[tuple[int, int], ...]  # (node index, gpu index) in rank order
    training: bool = True  # exposes the hpcobs training contract
    nccl: bool = False  # NCCL Inspector enabled
    end_state: str = "COMPLETED"
    idle_gpus: tuple[tuple[int, int], ...] = ()  # allocated but unused until idle_until
    idle_until: int = 0
    step_seconds: float = 2.0
    tokens_per_step: int = 16384  # per rank

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(n for n, _ in self.gpus))

    def gpus_on(self, node: int) -> tuple[int, ...]:
        return tuple(g for n, g in self.gpus if n == node)

    def rank_of(self, node: int, gpu: int) -> int:
        return self.gpus.index((node, gpu))

    @property
    def cpus(self) -> int:
        return len(self.gpus) * max(1, CPUS_PER_NODE // 8)

    @property
    def memory_bytes(self) -> int:
        return len(self.gpus) * 128 * 1024**3


@dataclass(frozen=True)
class Roles:
    """Which nodes and jobs play which part; scenarios pick their default targets from here."""

    hero: tuple[int, ...]
    batch: tuple[int, ...]
    shared: int | None
    amd: tuple[int, ...]
    hero_job: str | None
    interactive_jobs: tuple[str, ...]  # (the first, the one sharing a GPU with it)
    shared_gpu: tuple[int, int] | None
    amd_job: str | None


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    gpus_per_node: int
    roles: Roles
    window: Window = field(repr=False)

    @cached_property
    def _by_node(self) -> dict[int, tuple[Job, ...]]:
        index: dict[int, list[Job]] = {}
        for job in self.jobs:
            for node in job.nodes:
                index.setdefault(node, []).append(job)
        return {k: tuple(v) for k, v in index.items()}

    def jobs_on(self, node: int) -> tuple[Job, ...]:
        return self._by_node.get(node, ())

    def jobs_on_gpu(self, node: int, gpu: int) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs_on(node) if (node, gpu) in j.gpus)

    def job(self, job_id: str) -> Job:
        return next(j for j in self.jobs if j.id == job_id)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def with_jobs(self, jobs) -> Cluster:
        return replace(self, jobs=tuple(sorted(jobs, key=lambda j: int(j.id))))

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(p for p in PARTITIONS if any(n.partition == p for n in self.nodes))


def build(sources: Sources, name: str, nodes: int, gpus_per_node: int, seed: int, window: Window) -> Cluster:
    """The cluster `name`: its nodes split into roles by the enabled GPU exporters, and its job timeline."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("a cluster needs at least one node with one GPU")
    n_amd = max(1, nodes // 4) if sources["amd"].enabled and nodes >= 2 else 0
    if sources["amd"].enabled and not sources["dcgm"].enabled:
        n_amd = nodes
    n_nv = nodes - n_amd
    n_hero = max(1, n_nv // 2) if n_nv else 0
    shared = n_nv - 1 if n_nv >= 2 else None
    roles_nodes = dict(hero=tuple(range(n_hero)), batch=tuple(range(n_hero, n_nv - 1)), amd=tuple(range(n_nv, nodes)))
    versions: list[str | None] = [v for v in sources["dcgm"].versions if v is not None] or [None]
    width = max(3, len(str(nodes)))

    node_list = []
    for i in range(nodes):
        if i >= n_nv:
            node_list.append(Node(i, f"amd{i - n_nv + 1:0{width}d}", "amd", None, "amd", gpus_per_node, "default"))
            continue
        partition = "interactive" if i == shared else "train"
        # One batch node in four runs the shipped default CSV (optional dcgm fields absent).
        csv = "default" if i in roles_nodes["batch"] and i % 4 == 3 else "extended"
        node_list.append(
            Node(i, f"gpu{i + 1:0{width}d}", "nvidia", versions[i % len(versions)], partition, gpus_per_node, csv)
        )

    G = gpus_per_node
    drafts: list[dict] = []
    if n_hero:
        drafts.append(
            dict(
                key="hero",
                name="llama3-8b-pretrain",
                user="alice",
                qos="high",
                partition="train",
                start=-3 * 86400 - 420,
                end=FOREVER,
                nccl=True,
                step_seconds=5.5,
                tokens_per_step=32768,
                gpus=tuple((n, g) for n in roles_nodes["hero"] for g in range(G)),
            )
        )
    if shared is not None:
        h = G // 2
        first = tuple((shared, g) for g in range(0, h + 1)) if G > 1 else ((shared, 0),)
        second = tuple((shared, g) for g in range(h, G)) if G > 1 else ((shared, 0),)
        idle = (second[-1],) if len(second) > 1 else ()
        drafts.append(
            dict(
                key="interactive0",
                name="jupyter",
                user="carol",
                qos="normal",
                partition="interactive",
                start=-7200,
                end=FOREVER,
                training=False,
                gpus=first,
            )
        )
        drafts.append(
            dict(
                key="interactive1",
                name="debug-eval",
                user="erin",
                qos="normal",
                partition="interactive",
                start=min(300, window.duration // 4),
                end=FOREVER,
                training=False,
                gpus=second,
                idle_gpus=idle,
                idle_until=min(300, window.duration // 4) + 1200,
            )
        )
    if n_amd:
        drafts.append(
            dict(
                key="amd",
                name="mi300-finetune",
                user="frank",
                qos="normal",
                partition="amd",
                start=-86400,
                end=FOREVER,
                step_seconds=3.2,
                gpus=tuple((n, g) for n in roles_nodes["amd"] for g in range(G)),
            )
        )
    for node in roles_nodes["batch"]:
        drafts += _batch_jobs(seed, node_list[node], window)

    # Job ids in start order, so the oldest job has the lowest id, as in Slurm.
    drafts.sort(key=lambda d: (d["start"], d["gpus"][0]))
    jobs, keys = [], {}
    for number, draft in enumerate(drafts, start=400001):
        key = draft.pop("key")
        draft["account"] = USERS[draft["user"]]
        jobs.append(Job(id=str(number), **draft))
        keys[key] = str(number)
    roles = Roles(
        hero=roles_nodes["hero"],
        batch=roles_nodes["batch"],
        shared=shared,
        amd=roles_nodes["amd"],
        hero_job=keys.get("hero"),
        interactive_jobs=tuple(keys[k] for k in ("interactive0", "interactive1") if k in keys),
        shared_gpu=(shared, G // 2) if shared is not None else None,
        amd_job=keys.get("amd"),
    )
    return Cluster(name, tuple(node_list), tuple(jobs), G, roles, window)


def _batch_jobs(seed: int, node: Node, window: Window) -> list[dict]:
    """Single-node training jobs back to back with short idle gaps, from before the start to the end."""
    rng = seeded(seed, "batch", node.name)
    users = sorted(USERS)
    t = -int(rng.uniform(0, 3 * 3600))
    out = []
    while t < window.duration:
        length = int(rng.choice((2700, 7200, 14400, 28800)) * rng.uniform(0.7, 1.3))
        state = rng.choices(("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"), (80, 10, 5, 5))[0]
        if t + length > -MIN_JOB_AGE:
            out.append(
                dict(
                    key=f"batch-{node.name}-{t}",
                    name=rng.choice(("sft-7b", "eval-harness", "rlhf-ppo", "vit-l-pretrain", "moe-ablation")),
                    user=rng.choice(users),
                    qos="normal",
                    partition="train",
                    start=t,
                    end=t + length,
                    end_state=state,
                    step_seconds=round(rng.uniform(0.8, 4.0), 2),
                    tokens_per_step=rng.choice((8192, 16384, 32768)),
                    gpus=tuple((node.index, g) for g in range(node.gpus)),
                )
            )
        t += length + int(rng.uniform(180, 900))
    return out
