"""Named, composable faults. A scenario is resolved against the cluster into a Fault: a concrete target
(node, GPU, HCA, job...), the effects the emitters apply, and the expected signals a live test checks.

    healthy,xid79:start=20m,ib_port_down:node=gpu002:hca=mlx5_3:duration=5m

Parameters: start and duration (Prometheus durations, from the simulation start; duration "inf" = until
the end), node, gpu, hca, job; each kind takes only those it reads (Kind.params). Defaults: start 10m, a
per-kind duration, and a target picked from the cluster's roles (model.py) so that composed scenarios land
on different GPUs, ports and nodes. A mistake is a ScenarioError naming the item, the problem and the fix.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hpcobs.errors import UserError
from hpcobs.exporters.labels import EXPORTER_PORTS
from hpcobs.exporters.sources import Sources
from hpcobs.lang.promql import duration, duration_seconds, si_factor
from hpcobs.proof.simulate.core import UP, Window, window_mask
from hpcobs.proof.simulate.expect import Expectation
from hpcobs.proof.simulate.model import (
    FOREVER,
    LUSTRE_FS,
    LUSTRE_OST_KIB,
    LUSTRE_SERVERS,
    NFS_SCRATCH,
    Cluster,
    Job,
    Node,
)
from hpcobs.proof.simulate.storage import MDT_KIB, osts
from hpcobs.proof.simulate.training import EVAL_OUTPUTS, GRADIENTS, SHARDS, allreduce_time_us, communicators, exec_us
from hpcobs.security import names as security_content
from hpcobs.settings.thresholds import Thresholds

DEFAULT_START = 600
INF = FOREVER

# err_msg label values, worded as dcgm-exporter's xid_errors.go table (NVIDIA/dcgm-exporter).
XID_MESSAGES = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    46: "GPU stopped processing",
    48: "DBE (Double Bit Error) ECC Error",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    154: "GPU Recovery Action Changed",
}


PARAMETERS = ("start", "duration", "node", "gpu", "hca", "job")
TIMING = ("start", "duration")
REALISTIC_WEEK = "realistic_week"
XID_CODE = re.compile(r"xid([1-9][0-9]{0,2})")  # any Xid code, as NVIDIA numbers them (1..999)


class ScenarioError(UserError):
    """A scenario that cannot run: `scenario ITEM: problem; fix` (the command line names it --scenario ITEM)."""

    def __init__(self, item: str, problem: str, fix: str):
        self.item, self.problem, self.fix = item, problem, fix
        super().__init__(f"scenario {item}: {problem}; {fix}")


@dataclass(frozen=True)
class Spec:
    """A scenario as asked for (CLI text or code); targets left None are picked by the resolver."""

    kind: str
    start: int | None = None
    duration: int | None = None
    node: str | None = None
    gpu: int | None = None
    hca: str | None = None
    job: str | None = None

    @classmethod
    def parse(cls, text: str) -> list[Spec]:
        """`a,b:start=20m:node=gpu002` as specs. Every mistake is a ScenarioError naming the item and the fix;
        an empty list is one (a healthy cluster is asked for by name)."""
        items = [part.strip() for part in text.split(",")]
        if not any(items):
            raise ScenarioError(
                text,
                "no scenario given",
                "name at least one, e.g. healthy for a cluster without faults (--list-scenarios lists them)",
            )
        specs: list[Spec] = []
        for item in items:
            if not item:
                raise ScenarioError(text, "an empty scenario between commas", "remove the extra comma")
            spec = cls._parse_item(item)
            if spec in specs:
                raise ScenarioError(item, "listed twice", "remove one, or give it another target or start=")
            specs.append(spec)
        return specs

    @classmethod
    def _parse_item(cls, item: str) -> Spec:
        name, *params = item.split(":")
        takes = parameters(name, item)
        fields: dict = {}
        for param in params:
            key, sep, value = param.partition("=")
            if not sep or key not in PARAMETERS:
                near = difflib.get_close_matches(key, PARAMETERS, n=1)
                raise ScenarioError(
                    item,
                    f"{param!r} is not key=value with key one of {', '.join(PARAMETERS)}",
                    f"did you mean {near[0]}=?" if near else f"e.g. {name}:start=10m",
                )
            if key not in takes:
                raise ScenarioError(
                    item,
                    f"{name} takes no {key}=",
                    f"it takes {', '.join(takes)}" if takes else "remove it: this scenario takes no parameters",
                )
            if key in fields:
                raise ScenarioError(item, f"{key}= given twice", "keep one")
            fields[key] = _value(key, value, item)
        return cls(name, **fields)

    @property
    def text(self) -> str:
        """The spec as --scenario text."""
        params = [(key, getattr(self, key)) for key in PARAMETERS if getattr(self, key) is not None]
        return ":".join([self.kind] + [f"{key}={_duration_text(v) if key in TIMING else v}" for key, v in params])


def parameters(name: str, item: str) -> tuple[str, ...]:
    """The parameters a scenario takes; unknown names are a ScenarioError suggesting the closest."""
    if name == REALISTIC_WEEK:
        return ()
    return kind_named(name, item).params


def kind_named(name: str, item: str) -> Kind:
    """The registered kind of a scenario name; any xid<N> is an Xid of code N."""
    if name in KINDS:
        return KINDS[name]
    if XID_CODE.fullmatch(name):
        return KINDS["xid48"]
    if not name:
        raise ScenarioError(item, "no scenario name", "write name:key=value, e.g. xid79:start=10m")
    if re.fullmatch(r"xid[0-9]+", name):
        raise ScenarioError(item, f"{name} is not an Xid code", "use xid1..xid999 without leading zeros, e.g. xid79")
    near = difflib.get_close_matches(name.lower(), [*KINDS, REALISTIC_WEEK], n=1)
    raise ScenarioError(
        item,
        f"unknown scenario {name!r}",
        f"did you mean {near[0]}? (--list-scenarios lists them)"
        if near
        else "--list-scenarios lists them; xid<N> is any Xid code",
    )


# What each parameter value must look like, as the fix of a refused value.
_EXAMPLES = {
    "start": "a duration from the simulation start, e.g. start=10m or start=1h30m",
    "duration": "a duration, e.g. duration=20m, or duration=inf for until the end",
    "gpu": "a GPU index from 0, e.g. gpu=0",
    "node": "a node name, e.g. node=gpu001",
    "hca": "an HCA name, e.g. hca=mlx5_0",
    "job": "a Slurm job id, e.g. job=400001",
}


def _value(key: str, value: str, item: str):
    if key == "gpu":
        if not re.fullmatch(r"[0-9]+", value):
            raise ScenarioError(item, f"gpu={value} is not a GPU index", f"give {_EXAMPLES[key]}")
        return int(value)
    if key not in TIMING:
        if not value:
            raise ScenarioError(item, f"{key}= has no value", f"give {_EXAMPLES[key]}")
        return value
    if value == "inf":
        if key == "duration":
            return INF
        raise ScenarioError(item, "start=inf never comes", f"give {_EXAMPLES[key]}")
    try:
        seconds = duration_seconds(value)
    except ValueError:
        raise ScenarioError(item, f"{key}={value} is not a duration", f"give {_EXAMPLES[key]}") from None
    if key == "duration" and seconds == 0:
        raise ScenarioError(item, "duration=0s lasts no time", f"give {_EXAMPLES[key]}")
    return seconds


def _span(first, last) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _duration_text(seconds: int) -> str:
    return "inf" if seconds >= INF else duration(seconds)


@dataclass(frozen=True)
class Effect:
    """What an emitter changes: kind, the thing it applies to, a scrape-index window and parameters."""

    kind: str
    key: tuple
    start: int
    end: int
    data: tuple = ()

    def get(self, name: str, default=None):
        return dict(self.data).get(name, default)


@dataclass(frozen=True)
class Fault:
    kind: str
    start: int  # seconds from the simulation start
    end: int
    target: dict[str, str]
    summary: str
    effects: tuple[Effect, ...] = ()
    expectations: tuple[Expectation, ...] = ()


class Faults:
    """The resolved scenarios plus an index the emitters query by (kind, key)."""

    def __init__(self, cluster: Cluster, faults: list[Fault]):
        self.cluster = cluster
        self.faults = tuple(faults)
        self._index: dict[tuple, list[Effect]] = {}
        for fault in faults:
            for effect in fault.effects:
                self._index.setdefault((effect.kind, effect.key), []).append(effect)

    def effects(self, kind: str, *key) -> list[Effect]:
        return self._index.get((kind, key), [])

    def windows(self, kind: str, *key) -> list[tuple[int, int]]:
        return [(e.start, e.end) for e in self.effects(kind, *key)]

    def mask(self, kind: str, *key) -> list[bool] | None:
        """Scrapes inside any window of this effect; None when there is none (the common, cheap case)."""
        wins = self.windows(kind, *key)
        return window_mask(self.cluster.window.steps, wins) if wins else None

    @property
    def expectations(self) -> list[Expectation]:
        return [e for f in self.faults for e in f.expectations]


class Scene:
    """What a resolver works with: the cluster, the sources and helpers for targets and expectations."""

    def __init__(self, sources: Sources, thresholds: Thresholds, cluster: Cluster, seed: int):
        self.sources, self.thresholds, self.cluster, self.seed = sources, thresholds, cluster, seed
        self.window: Window = cluster.window
        self.jobs = {j.id: j for j in cluster.jobs}
        self.spec = Spec("")  # the scenario being resolved

    @property
    def kind(self) -> str:
        return self.spec.kind

    def refuse(self, problem: str, fix: str) -> ScenarioError:
        return ScenarioError(self.spec.text, problem, fix)

    # -- time ------------------------------------------------------------------------------------
    def idx(self, seconds: int) -> int:
        return self.window.index(seconds)

    def fits(self, at: int) -> bool:
        """A query at `at` sees a sample of the last scrape only when at <= the last scrape's time."""
        return 0 <= at <= self.window.duration - self.window.step

    # -- targets ---------------------------------------------------------------------------------
    def node(self, spec: Spec, default: int | None, vendor: str = "nvidia") -> Node:
        if spec.node is not None:
            try:
                node = self.cluster.node(spec.node)
            except StopIteration:
                raise self.refuse(f"no node named {spec.node!r}", f"use one of {self._node_names()}") from None
        elif default is None:
            raise self.refuse("the cluster has no node for its default target", "add --nodes or name one with node=")
        else:
            node = self.cluster.nodes[default]
        if node.vendor != vendor:
            raise self.refuse(
                f"node {node.name} is {node.vendor}, the scenario needs {vendor}",
                f"name a {vendor} node: {self._node_names(vendor)}",
            )
        return node

    def _node_names(self, vendor: str | None = None) -> str:
        """The node names as ranges, e.g. gpu001..gpu006, amd001..amd002."""
        ranges = []
        for prefix in ("gpu", "amd"):
            names = [n.name for n in self.cluster.nodes if n.name.startswith(prefix) and vendor in (None, n.vendor)]
            if names:
                ranges.append(_span(names[0], names[-1]))
        return ", ".join(ranges) or "none"

    def hero(self, position: int) -> int | None:
        hero = self.cluster.roles.hero
        return hero[position] if hero else None

    def batch(self, position: int) -> int | None:
        batch = self.cluster.roles.batch
        return batch[position % len(batch)] if batch else None

    def gpu(self, spec: Spec, node: Node, default: int) -> int:
        gpu = spec.gpu if spec.gpu is not None else default % node.gpus
        if not 0 <= gpu < node.gpus:
            raise self.refuse(
                f"{node.name} has GPUs {_span(0, node.gpus - 1)}, not {gpu}", f"use gpu={_span(0, node.gpus - 1)}"
            )
        return gpu

    def hca(self, spec: Spec, node: Node, default: int) -> str:
        hca = spec.hca or node.hcas[default % len(node.hcas)]
        if hca not in node.hcas:
            raise self.refuse(
                f"{node.name} has HCAs {_span(node.hcas[0], node.hcas[-1])}, not {hca!r}",
                f"use hca={_span(node.hcas[0], node.hcas[-1])}",
            )
        return hca

    def job(self, spec: Spec, default: str | None) -> Job:
        job_id = spec.job or default
        if job_id not in self.jobs:
            hero = self.cluster.roles.hero_job
            raise self.refuse(
                f"no job {job_id!r} in the cluster",
                f"use job={hero} (the hero job)" if hero else "add --nodes: the cluster runs no such job",
            )
        return self.jobs[job_id]

    def running(self, job: Job, at: int) -> bool:
        return job.start <= at < job.end

    def job_on(self, node: int, at: int) -> Job | None:
        return next((j for j in self.jobs.values() if node in j.nodes and self.running(j, at)), None)

    # -- edits of the job timeline ---------------------------------------------------------------
    def end_job(self, job: Job, at: int, state: str) -> None:
        self.jobs[job.id] = replace(job, end=at, end_state=state)

    def block_node(self, node: int, start: int, end: int, kill: str | None) -> None:
        """No job starts on the node in [start, end); with `kill`, the job running at start ends then."""
        for job in list(self.jobs.values()):
            if node not in job.nodes:
                continue
            if kill and job.start < start < job.end:
                self.end_job(job, start, kill)
            elif start <= job.start < end:
                del self.jobs[job.id]

    # -- catalogue lookups for expectations ------------------------------------------------------
    def metric(self, exporter: str, signal: str, node: Node | None = None):
        source = self.sources[exporter]
        version = node.version if exporter == "dcgm" and node is not None else None
        return source.metric(signal, version)

    def selector(self, exporter: str, signal: str, on: Node | None = None, **labels: str):
        """(name, unit, labels): scrape labels, the host label when `on` a node, then `labels`."""
        source = self.sources[exporter]
        metric = self.metric(exporter, signal, on)
        if metric is None:
            raise self.refuse(
                f"{exporter} on {on.name if on else 'the cluster'} does not expose {signal}",
                "name another node=, or enable the exporter version that has it in the config",
            )
        out = dict(source.scrape_labels())
        if on is not None:
            version = on.version if exporter == "dcgm" else None
            node = source.canonical_labels(version)["node"]
            label = node if isinstance(node, str) else node["label"]
            # The label the node is read from (exporters.<role>.node_from): instance holds it as host:port.
            out[label] = f"{on.name}:{_port(exporter)}" if label == "instance" else on.name
        out.update(labels)
        return metric.name, metric.unit, out

    def expect(
        self,
        description: str,
        exporter: str,
        signal: str,
        on: Node | None,
        function: str,
        op: str | None,
        si_value: float | None,
        at: int,
        window: int = 0,
        divisor: str | None = None,
        raw: bool = False,
        **labels: str,
    ) -> list[Expectation]:
        """One expectation (a list: empty when `at` falls outside the simulated window).

        si_value is converted to the metric's unit unless raw (counts, codes, ratios of rates).
        """
        if not self.fits(at) or at - window < 0:
            return []
        name, unit, selector = self.selector(exporter, signal, on, **labels)
        value = si_value if raw or si_value is None else si_value / si_factor(unit)
        divisor_name = self.metric(exporter, divisor, on).name if divisor else None
        return [Expectation(self.kind, description, name, selector, function, op, value, at, window, divisor_name)]


def _port(exporter: str) -> int:
    return EXPORTER_PORTS[exporter]


# ---------------------------------------------------------------------------------------------
# The scenario kinds. Each resolver returns one Fault; `kinds()` lists them with their documentation.

Resolver = Callable[[Scene, Spec, int, int], Fault]


@dataclass(frozen=True)
class Kind:
    name: str
    duration: int
    doc: str
    resolve: Resolver = field(repr=False)
    params: tuple[str, ...] = TIMING  # what a --scenario item of this kind may set


KINDS: dict[str, Kind] = {}


def kind(name: str, duration: int, doc: str, targets: tuple[str, ...] = (), timing: tuple[str, ...] = TIMING):
    """Register a resolver; `targets` are the node/gpu/hca/job parameters it reads, `timing` start and duration
    unless the kind has no window (healthy) or is an instant (oom_kill)."""

    def register(fn: Resolver) -> Resolver:
        KINDS[name] = Kind(name, duration, doc, fn, timing + targets)
        return fn

    return register


def _gpu_fault(scene: Scene, spec: Spec, default_node: int | None, default_gpu: int):
    if not scene.sources["dcgm"].enabled:
        raise scene.refuse("needs dcgm-exporter", "set exporters.dcgm.enabled: true in the config")
    node = scene.node(spec, default_node)
    gpu = scene.gpu(spec, node, default_gpu)
    return node, gpu, {"node": node.name, "gpu": str(gpu)}


def _reset_after(scene: Scene, node: Node, end: int) -> tuple[Effect, ...]:
    """A fault that needs a GPU reset ends with a driver reload on the node (counters restart from 0)."""
    return (Effect("driver_reload", (node.index,), scene.idx(end), scene.idx(end) + 1),) if end < INF else ()


def _xid(scene: Scene, node: Node, gpu: int, code: int, start: int, end: int) -> Effect:
    return Effect(
        "xid",
        (node.index, gpu),
        scene.idx(start),
        scene.idx(end),
        (("code", code), ("message", XID_MESSAGES.get(code, "Unknown Error"))),
    )


def _xid_expectation(scene: Scene, node: Node, gpu: int, code: int, start: int) -> list[Expectation]:
    return scene.expect(
        f"Xid {code} on {node.name} GPU {gpu}",
        "dcgm",
        "xid",
        node,
        "value",
        "==",
        code,
        start + scene.window.step,
        raw=True,
        gpu=str(gpu),
        err_code=str(code),
    )


def _xid_class(scene: Scene, code: int) -> str:
    exporter = scene.sources["dcgm"].exporter
    for name in ("fell_off_bus", "drain", "warning", "application"):
        if code in exporter.xids(name):
            return name
    return "unclassified"


@kind("healthy", 0, "No fault: every GPU of a job is busy, every exporter up, training progresses.", timing=())
def _healthy(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    expectations = []
    at = scene.window.duration - scene.window.step
    hero = scene.cluster.roles.hero_job
    if hero and scene.cluster.roles.hero:
        node = scene.cluster.nodes[scene.cluster.roles.hero[0]]
        if scene.sources["dcgm"].enabled:
            expectations += scene.expect(
                "the hero job's GPU 0 is busy",
                "dcgm",
                "gpu_utilization",
                node,
                "max_over_time",
                ">",
                0.9,
                at,
                window=min(300, at),
                gpu="0",
                hpc_job=hero,
            )
        if scene.sources["training"].enabled:
            expectations += scene.expect(
                "the hero job's rank 0 makes progress",
                "training",
                "steps",
                None,
                "increase",
                ">",
                0,
                at,
                window=min(600, at),
                raw=True,
                hpc_job=hero,
                rank="0",
                node=node.name,
            )
    return Fault("healthy", 0, 0, {}, "no fault", (), tuple(expectations))


@kind(
    "xid79",
    INF,
    "Xid 79, GPU fallen off the bus: the Xid is reported, one scrape later the GPU's series stop; "
    "the rank on it dies and the job hangs. Default target: last hero node, GPU 3.",
    targets=("node", "gpu"),
)
def _xid79(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 3)
    lost = start + 2 * scene.window.step
    effects = [
        _xid(scene, node, gpu, 79, start, end),
        Effect("gpu_lost", (node.index, gpu), scene.idx(lost), scene.idx(end)),
        *_reset_after(scene, node, end),
    ]
    job = scene.job_on(node.index, start)
    if job is not None and job.training:
        effects += [
            Effect("rank_lost", (job.id, job.rank_of(node.index, gpu)), scene.idx(start), scene.idx(end)),
            Effect("job_hang", (job.id,), scene.idx(start), scene.idx(end)),
        ]
        target["job"] = job.id
    expectations = _xid_expectation(scene, node, gpu, 79, start)
    expectations += scene.expect(
        f"{node.name} GPU {gpu} series stop",
        "dcgm",
        "gpu_utilization",
        node,
        "absent",
        None,
        None,
        lost + 360,
        window=300,
        gpu=str(gpu),
    )
    return Fault("xid79", start, end, target, f"Xid 79 on {node.name} GPU {gpu}", tuple(effects), tuple(expectations))


def _xid_code(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    code = int(spec.kind[3:])
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 1)
    effects = (_xid(scene, node, gpu, code, start, end), *_reset_after(scene, node, end))
    return Fault(
        spec.kind,
        start,
        end,
        {**target, "class": _xid_class(scene, code)},
        f"Xid {code} ({_xid_class(scene, code)} class) on {node.name} GPU {gpu}",
        effects,
        tuple(_xid_expectation(scene, node, gpu, code, start)),
    )


for _code, _doc in (
    (48, "drain class: double-bit ECC error, the node must be drained"),
    (13, "application class: graphics engine exception, the job owner's problem"),
):
    kind(
        f"xid{_code}",
        INF,
        f"Xid {_code}, {_doc}. Sticky until a driver reload (a finite duration ends "
        "with one, resetting the node's energy and volatile counters). Any code works: "
        "xid<N>. Default target: first hero node, GPU 1.",
        targets=("node", "gpu"),
    )(_xid_code)


@kind(
    "xid_overwritten",
    INF,
    "Xid 48 (double-bit ECC) followed within the same scrape by its follow-on Xid 45 (preemptive cleanup): "
    "dcgm-exporter's last-value Xid field shows only 45, the Xid count collector (extended CSV) counts both for "
    "its 5-minute window (NVIDIA/DCGM issue 235: Xid 62 seen only as 45). Default: first hero node, GPU 7.",
    targets=("node", "gpu"),
)
def _xid_overwritten(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 7)
    drain, follow_on = 48, 45
    # Effects starting at the same scrape replace each other in the order given (hpcobs.proof.simulate.gpu._xid_parts).
    effects = (_xid(scene, node, gpu, drain, start, end), _xid(scene, node, gpu, follow_on, start, end))
    expectations = _xid_expectation(scene, node, gpu, follow_on, start)
    expectations += scene.expect(
        f"the last-value Xid field never shows {drain} on {node.name} GPU {gpu}",
        "dcgm",
        "xid",
        node,
        "absent",
        None,
        None,
        start + 2 * scene.window.step,
        window=2 * scene.window.step,
        gpu=str(gpu),
        err_code=str(drain),
    )
    if node.csv == "extended":
        expectations += scene.expect(
            f"the Xid count collector counted Xid {drain} on {node.name} GPU {gpu}",
            "dcgm",
            "xid_count",
            node,
            "value",
            "==",
            1,
            start + scene.window.step,
            raw=True,
            gpu=str(gpu),
            xid=str(drain),
        )
    return Fault(
        "xid_overwritten",
        start,
        end,
        target,
        f"Xid {drain} overwritten by Xid {follow_on} on {node.name} GPU {gpu}",
        (*effects, *_reset_after(scene, node, end)),
        tuple(expectations),
    )


@kind(
    "dbe",
    INF,
    "Uncorrectable (double-bit) ECC error: volatile and aggregate DBE counters +1, an "
    "uncorrectable row remap, remap pending, Xid 48, MEM health FAIL. Default: first hero node, GPU 2.",
    targets=("node", "gpu"),
)
def _dbe(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 2)
    s, e, key = scene.idx(start), scene.idx(end), (node.index, gpu)
    effects = (
        *(
            Effect("bump", key, s, s + 1, (("signal", sig),))
            for sig in ("ecc_dbe_volatile", "ecc_dbe_aggregate", "row_remap_uncorrectable")
        ),
        Effect("flag", key, s, e, (("signal", "row_remap_pending"),)),
        Effect("health", key, s, e, (("watch", "MEM"), ("status", 20), ("code", "DCGM_FR_VOLATILE_DBE_DETECTED"))),
        _xid(scene, node, gpu, 48, start, end),
        *_reset_after(scene, node, end),
    )
    at = start + 2 * scene.window.step
    expectations = scene.expect(
        "volatile DBE counter increased",
        "dcgm",
        "ecc_dbe_volatile",
        node,
        "increase",
        ">",
        0,
        at,
        window=300,
        raw=True,
        gpu=str(gpu),
    )
    expectations += scene.expect(
        "uncorrectable row remap",
        "dcgm",
        "row_remap_uncorrectable",
        node,
        "increase",
        ">",
        0,
        at,
        window=300,
        raw=True,
        gpu=str(gpu),
    )
    expectations += _xid_expectation(scene, node, gpu, 48, start)
    return Fault(
        "dbe", start, end, target, f"double-bit ECC error on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


@kind(
    "sbe",
    60,
    "A single correctable (single-bit) ECC error: the volatile SBE counter +1 (extended CSV), nothing else. "
    "Default: last hero node, GPU 4.",
    targets=("node", "gpu"),
)
def _sbe(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    """DCGM_FI_DEV_ECC_SBE_VOL_TOTAL (DCGM field 310, catalogue dcgm.yaml) counts it; the driver corrects it, so no
    Xid (Xid 92 is a high single-bit error *rate*, NVIDIA's Xid catalog), no health change (DCGM's MEM watch fails on
    double-bit errors, DCGM_FR_VOLATILE_DBE_DETECTED) and no row remap (the remapper acts on uncorrectable errors;
    a remap for repeated correctable errors at one address is not emulated)."""
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 4)
    s = scene.idx(start)
    effects = (Effect("bump", (node.index, gpu), s, s + 1, (("signal", "ecc_sbe_volatile"),)),)
    expectations = []
    if node.csv == "extended":  # default-counters.csv leaves the field commented out
        expectations = scene.expect(
            "volatile SBE counter increased",
            "dcgm",
            "ecc_sbe_volatile",
            node,
            "increase",
            ">",
            0,
            start + 2 * scene.window.step,
            window=300,
            raw=True,
            gpu=str(gpu),
        )
    return Fault(
        "sbe", start, end, target, f"one corrected ECC error on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


def _row_remap(scene: Scene, spec: Spec, start: int, end: int, state: str, default_gpu: int, xid: int) -> Fault:
    """An uncorrectable remapped row, then the remap state flag (`failure` or `pending`) and its Xid."""
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), default_gpu)
    s, e, key = scene.idx(start), scene.idx(end), (node.index, gpu)
    effects = (
        Effect("bump", key, s, s + 1, (("signal", "row_remap_uncorrectable"),)),
        Effect("flag", key, s, e, (("signal", f"row_remap_{state}"),)),
        _xid(scene, node, gpu, xid, start, end),
        *_reset_after(scene, node, end),
    )
    expectations = scene.expect(
        f"row remap {state} flag",
        "dcgm",
        f"row_remap_{state}",
        node,
        "value",
        "==",
        1,
        start + scene.window.step,
        raw=True,
        gpu=str(gpu),
    )
    return Fault(
        f"row_remap_{state}",
        start,
        end,
        target,
        f"row remap {state} on {node.name} GPU {gpu}",
        effects,
        tuple(expectations),
    )


@kind(
    "row_remap_failure",
    INF,
    "Row remapping failed (no spare rows; RMA): ROW_REMAP_FAILURE = 1, Xid 64. Default: last hero node, GPU 5.",
    targets=("node", "gpu"),
)
def _row_remap_failure(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    return _row_remap(scene, spec, start, end, "failure", 5, 64)


@kind(
    "row_remap_pending",
    INF,
    "A row remap is pending (GPU reset needed): uncorrectable remapped rows +1, "
    "ROW_REMAP_PENDING = 1 (extended CSV), Xid 63. Default: last hero node, GPU 6.",
    targets=("node", "gpu"),
)
def _row_remap_pending(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    return _row_remap(scene, spec, start, end, "pending", 6, 63)


@kind(
    "row_remap_budget",
    INF,
    "A memory bank runs out of spare rows: uncorrectable remapped rows +1, BANKS_REMAP_ROWS_AVAIL_NONE = 1 "
    "(extended CSV), Xid 63; the GPU keeps working. Default: last hero node, GPU 1.",
    targets=("node", "gpu"),
)
def _row_remap_budget(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 1)
    s, e, key = scene.idx(start), scene.idx(end), (node.index, gpu)
    effects = (
        Effect("bump", key, s, s + 1, (("signal", "row_remap_uncorrectable"),)),
        Effect("flag", key, s, e, (("signal", "row_remap_banks_exhausted"),)),
        _xid(scene, node, gpu, 63, start, end),
    )
    expectations = scene.expect(
        "a bank with no spare row",
        "dcgm",
        "row_remap_banks_exhausted",
        node,
        "value",
        "==",
        1,
        start + scene.window.step,
        raw=True,
        gpu=str(gpu),
    )
    return Fault(
        "row_remap_budget",
        start,
        end,
        target,
        f"row-remap budget low on {node.name} GPU {gpu}",
        effects,
        tuple(expectations),
    )


@kind(
    "recovery_action",
    INF,
    "The driver asks for a GPU reset: Xid 154 (GPU Recovery Action Changed) and GPU_RECOVERY_ACTION = 1 (extended "
    "CSV) until the reset ends the fault. Default: first hero node, GPU 3.",
    targets=("node", "gpu"),
)
def _recovery_action(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 3)
    s, e, key = scene.idx(start), scene.idx(end), (node.index, gpu)
    effects = (
        Effect("flag", key, s, e, (("signal", "gpu_recovery_action"),)),
        _xid(scene, node, gpu, 154, start, end),
        *_reset_after(scene, node, end),
    )
    expectations = scene.expect(
        "recovery action GPU reset",
        "dcgm",
        "gpu_recovery_action",
        node,
        "value",
        "==",
        1,
        start + scene.window.step,
        raw=True,
        gpu=str(gpu),
    )
    expectations += _xid_expectation(scene, node, gpu, 154, start)
    return Fault(
        "recovery_action",
        start,
        end,
        target,
        f"GPU reset asked for on {node.name} GPU {gpu}",
        effects,
        tuple(expectations),
    )


@kind(
    "hbm_thermal",
    1200,
    "HBM hot while the GPU is not: memory temperature 95 C, at the H100's memory limit, GPU temperature normal. "
    "Default: last hero node, GPU 2.",
    targets=("node", "gpu"),
)
def _hbm_thermal(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 2)
    effects = (Effect("hbm_thermal", (node.index, gpu), scene.idx(start), scene.idx(end)),)
    at = min(end, scene.window.duration) - scene.window.step
    expectations = scene.expect("HBM hot", "dcgm", "memory_temperature", node, "value", ">", 94, at, gpu=str(gpu))
    return Fault("hbm_thermal", start, end, target, f"HBM hot on {node.name} GPU {gpu}", effects, tuple(expectations))


@kind(
    "thermal",
    1200,
    "Thermal / HW slowdown: GPU at 92 C, SM clock halved, power down, hw_slowdown and "
    "hw_thermal clock events, thermal violation time grows. Default: first hero node, GPU 4.",
    targets=("node", "gpu"),
)
def _thermal(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 4)
    key, s, e = (node.index, gpu), scene.idx(start), scene.idx(end)
    effects = (
        Effect("thermal", key, s, e),
        Effect("health", key, s, e, (("watch", "THERMAL"), ("status", 10), ("code", "DCGM_FR_CLOCKS_EVENT_THERMAL"))),
    )
    at = min(end, scene.window.duration) - scene.window.step
    expectations = scene.expect("GPU hot", "dcgm", "gpu_temperature", node, "value", ">", 88, at, gpu=str(gpu))
    expectations += scene.expect("SM clock halved", "dcgm", "sm_clock", node, "value", "<", 1.2e9, at, gpu=str(gpu))
    expectations += scene.expect(
        "thermal violation time grows",
        "dcgm",
        "thermal_violation",
        node,
        "increase",
        ">",
        0,
        at,
        window=300,
        raw=True,
        gpu=str(gpu),
    )
    return Fault(
        "thermal", start, end, target, f"thermal slowdown on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


@kind(
    "thermal_burst",
    120,
    "A two-minute thermal slowdown (as `thermal`, briefly): dcgm-exporter counts it in 4 of the 10 samples of its "
    "clock-events window, for as long as the window, and never in the share GpuThermalSlowdown needs. "
    "Default: last hero node, GPU 0.",
    targets=("node", "gpu"),
)
def _thermal_burst(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 0)
    thresholds = scene.thresholds
    window = duration_seconds(thresholds.gpu_clock_events_window)
    needed = thresholds.gpu_clock_event_share * window / duration_seconds(thresholds.gpu_clock_events_sample_interval)
    counted = scene.expect(
        "the burst is counted in the exporter's clock-events window",
        "dcgm",
        "clock_events",
        node,
        "max_over_time",
        ">",
        0,
        end,
        window=end - start,
        raw=True,
        gpu=str(gpu),
        clock_event="hw_thermal",
    )
    counted += scene.expect(
        "never in the share of the window's samples GpuThermalSlowdown needs",
        "dcgm",
        "clock_events",
        node,
        "max_over_time",
        "<",
        needed,
        end + window,
        window=end - start + window,
        raw=True,
        gpu=str(gpu),
        clock_event="hw_thermal",
    )
    effects = (Effect("thermal", (node.index, gpu), scene.idx(start), scene.idx(end)),)
    return Fault(
        "thermal_burst", start, end, target, f"thermal burst on {node.name} GPU {gpu}", effects, tuple(counted)
    )


@kind(
    "pcie_link_degraded",
    1200,
    "A busy GPU's PCIe link trained at x8 of its x16 (extended CSV: DCGM_FI_DEV_PCIE_LINK_WIDTH). "
    "Default: last hero node, GPU 1.",
    targets=("node", "gpu"),
)
def _pcie_link_degraded(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 1)
    expectations = scene.expect(
        "the link runs at x8",
        "dcgm",
        "pcie_link_width",
        node,
        "value",
        "==",
        8,
        min(end, start + 600),
        raw=True,
        gpu=str(gpu),
    )
    effects = (Effect("pcie_link_degraded", (node.index, gpu), scene.idx(start), scene.idx(end)),)
    return Fault(
        "pcie_link_degraded",
        start,
        end,
        target,
        f"PCIe link at x8 on {node.name} GPU {gpu}",
        effects,
        tuple(expectations),
    )


@kind(
    "nvlink_errors",
    1200,
    "NVLink CRC flit/data, replay and recovery error counters climb; NVLINK health WARN. "
    "Default: first hero node, GPU 5.",
    targets=("node", "gpu"),
)
def _nvlink(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 5)
    key, s, e = (node.index, gpu), scene.idx(start), scene.idx(end)
    effects = (
        Effect("nvlink_errors", key, s, e),
        Effect("health", key, s, e, (("watch", "NVLINK"), ("status", 10), ("code", "DCGM_FR_NVLINK_ERROR_THRESHOLD"))),
    )
    at = min(end, start + 600)
    expectations = []
    for signal in ("nvlink_crc_flit_errors", "nvlink_replay_errors"):
        expectations += scene.expect(
            f"{signal} increase", "dcgm", signal, node, "increase", ">", 0, at, window=300, raw=True, gpu=str(gpu)
        )
    return Fault(
        "nvlink_errors", start, end, target, f"NVLink errors on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


@kind(
    "pcie_replay_storm",
    1200,
    "PCIe replay counter climbs at ~200/s and PCIe throughput halves; PCIE health WARN. "
    "Default: first hero node, GPU 6.",
    targets=("node", "gpu"),
)
def _pcie(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(0), 6)
    key, s, e = (node.index, gpu), scene.idx(start), scene.idx(end)
    effects = (
        Effect("pcie_replays", key, s, e),
        Effect("health", key, s, e, (("watch", "PCIE"), ("status", 10), ("code", "DCGM_FR_PCI_REPLAY_RATE"))),
    )
    expectations = scene.expect(
        "PCIe replays climb",
        "dcgm",
        "pcie_replay",
        node,
        "increase",
        ">",
        1000,
        min(end, start + 600),
        window=300,
        raw=True,
        gpu=str(gpu),
    )
    return Fault(
        "pcie_replay_storm",
        start,
        end,
        target,
        f"PCIe replay storm on {node.name} GPU {gpu}",
        effects,
        tuple(expectations),
    )


@kind(
    "idle_gpus",
    4500,
    "Allocated but idle: the GPUs only the second interactive job holds (not the shared one) "
    "drop to 0% utilisation while their memory stays allocated (default 75 min).",
    targets=("job", "gpu"),
)
def _idle(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    jobs = scene.cluster.roles.interactive_jobs
    job = scene.job(spec, jobs[-1] if jobs else None)
    shared = scene.cluster.roles.shared_gpu
    gpus = [(n, g) for n, g in job.gpus if (n, g) != shared] or list(job.gpus)
    if spec.gpu is not None:
        held = ",".join(str(g) for _, g in gpus)
        gpus = [(n, g) for n, g in gpus if g == spec.gpu]
        if not gpus:
            raise scene.refuse(
                f"job {job.id} holds GPUs {held} without sharing them, not GPU {spec.gpu}",
                "use gpu=" + held.replace(",", " or gpu="),
            )
    effects = tuple(Effect("gpu_idle", key, scene.idx(start), scene.idx(end)) for key in gpus)
    node = scene.cluster.nodes[gpus[0][0]]
    span = min(3600, end - start, scene.window.duration - start - scene.window.step)
    expectations = (
        scene.expect(
            f"job {job.id} GPU {gpus[0][1]} at 0% for {span}s",
            "dcgm",
            "gpu_utilization",
            node,
            "max_over_time",
            "==",
            0,
            start + span,
            window=span,
            raw=True,
            gpu=str(gpus[0][1]),
            hpc_job=job.id,
        )
        if span > 0
        else []
    )
    return Fault(
        "idle_gpus",
        start,
        end,
        {"job": job.id, "node": node.name, "gpus": ",".join(str(g) for _, g in gpus)},
        f"job {job.id} leaves {len(gpus)} allocated GPU(s) idle",
        effects,
        tuple(expectations),
    )


def _ib_fault(scene: Scene, spec: Spec, default_node: int | None, default_hca: int):
    node = scene.node(spec, default_node)
    hca = scene.hca(spec, node, default_hca)
    return node, hca, {"node": node.name, "hca": hca, "port": "1"}


@kind(
    "ib_port_down",
    900,
    "An IB port goes down: state 1 (down), physical state 3 (disabled), link_downed +1, "
    "no traffic. Default: first hero node, mlx5_1 port 1.",
    targets=("node", "hca"),
)
def _ib_down(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(0), 1)
    effects = (Effect("ib_down", (node.index, hca), scene.idx(start), scene.idx(end)),)
    at = start + scene.window.step
    expectations = scene.expect(
        "port state down", "node_exporter", "ib_state", node, "value", "==", 1, at, raw=True, device=hca, port="1"
    )
    expectations += scene.expect(
        "link downed counted",
        "node_exporter",
        "ib_link_downed",
        node,
        "increase",
        ">",
        0,
        start + 120,
        window=300,
        raw=True,
        device=hca,
        port="1",
    )
    return Fault("ib_port_down", start, end, target, f"IB {hca} down on {node.name}", effects, tuple(expectations))


@kind(
    "ib_port_init",
    900,
    "An IB port loses its link and comes back without the subnet manager to activate it: state 2 (INIT), "
    "physical state 5 (LinkUp), link_downed +1, no traffic. Default: last hero node, mlx5_4 port 1.",
    targets=("node", "hca"),
)
def _ib_init(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(-1), 4)
    effects = (Effect("ib_init", (node.index, hca), scene.idx(start), scene.idx(end)),)
    at = start + scene.window.step
    expectations = scene.expect(
        "port state INIT", "node_exporter", "ib_state", node, "value", "==", 2, at, raw=True, device=hca, port="1"
    )
    expectations += scene.expect(
        "physical link up",
        "node_exporter",
        "ib_physical_state",
        node,
        "value",
        "==",
        5,
        at,
        raw=True,
        device=hca,
        port="1",
    )
    return Fault(
        "ib_port_init", start, end, target, f"IB {hca} left in INIT on {node.name}", effects, tuple(expectations)
    )


@kind(
    "ib_link_errors",
    1800,
    "A marginal IB link retrains every 4 minutes without going down: link_error_recovery +1, "
    "local_link_integrity_errors +1 and a burst of 10 symbol errors each time. Default: first hero node, mlx5_5.",
    targets=("node", "hca"),
)
def _ib_link_errors(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(0), 5)
    effects = (Effect("ib_link_errors", (node.index, hca), scene.idx(start), scene.idx(end), (("period", 240),)),)
    at = min(end, start + 900)
    expectations = [
        expectation
        for signal in ("ib_link_error_recovery", "ib_local_link_integrity_errors")
        for expectation in scene.expect(
            f"{signal} counts the recoveries",
            "node_exporter",
            signal,
            node,
            "increase",
            ">=",
            2,
            at,
            window=min(900, at),
            raw=True,
            device=hca,
            port="1",
        )
    ]
    return Fault(
        "ib_link_errors", start, end, target, f"IB {hca} retraining on {node.name}", effects, tuple(expectations)
    )


@kind(
    "ib_link_flap",
    1200,
    "An IB link flaps every 3 minutes (one scrape down, polling); link_downed counts each flap (a failed "
    "recovery, so link_error_recovery does not). Default: last hero node, mlx5_2.",
    targets=("node", "hca"),
)
def _ib_flap(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(-1), 2)
    effects = (Effect("ib_flap", (node.index, hca), scene.idx(start), scene.idx(end), (("period", 180),)),)
    at = min(end, start + 900)
    expectations = scene.expect(
        "link downed several times",
        "node_exporter",
        "ib_link_downed",
        node,
        "increase",
        ">=",
        2,
        at,
        window=min(900, at),
        raw=True,
        device=hca,
        port="1",
    )
    return Fault("ib_link_flap", start, end, target, f"IB {hca} flapping on {node.name}", effects, tuple(expectations))


@kind(
    "ib_symbol_errors",
    1800,
    "Symbol errors (~3/s) and receive errors on an IB port: a bad cable or transceiver. "
    "Default: first hero node, mlx5_3.",
    targets=("node", "hca"),
)
def _ib_symbol(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(0), 3)
    effects = (Effect("ib_symbol_errors", (node.index, hca), scene.idx(start), scene.idx(end)),)
    expectations = scene.expect(
        "symbol errors",
        "node_exporter",
        "ib_symbol_errors",
        node,
        "increase",
        ">",
        0,
        min(end, start + 600),
        window=300,
        raw=True,
        device=hca,
        port="1",
    )
    return Fault(
        "ib_symbol_errors", start, end, target, f"IB symbol errors on {node.name} {hca}", effects, tuple(expectations)
    )


@kind(
    "ib_link_degraded",
    1800,
    "An IB link retrains at a quarter of its rate (1X width instead of 4X: a bad cable or "
    "connector) and its traffic is capped there. Default: last hero node, mlx5_0.",
    targets=("node", "hca"),
)
def _ib_degraded(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, hca, target = _ib_fault(scene, spec, scene.hero(-1), 0)
    effects = (Effect("ib_degraded", (node.index, hca), scene.idx(start), scene.idx(end), (("factor", 0.25),)),)
    expectations = scene.expect(
        "link rate below nominal",
        "node_exporter",
        "ib_rate",
        node,
        "value",
        "<",
        scene.thresholds.ib_port_rate_bytes_per_second,
        start + scene.window.step,
        raw=True,
        device=hca,
        port="1",
    )
    return Fault(
        "ib_link_degraded", start, end, target, f"IB {hca} degraded on {node.name}", effects, tuple(expectations)
    )


@kind(
    "ib_congestion",
    1200,
    "Fabric congestion: port_xmit_wait climbs ~1000x on every HCA of the hero job's nodes, "
    "throughput -40%, NCCL collectives 2x slower, training 1.2x slower.",
    targets=("node",),
)
def _ib_congestion(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    nodes = [scene.node(spec, None)] if spec.node else [scene.cluster.nodes[i] for i in scene.cluster.roles.hero]
    if not nodes:
        raise scene.refuse("the cluster has no hero node", "add --nodes or name one with node=")
    s, e = scene.idx(start), scene.idx(end)
    effects = [Effect("ib_congestion", (n.index, hca), s, e) for n in nodes for hca in n.hcas]
    job = scene.job_on(nodes[0].index, start)
    if job is not None:
        effects += [
            Effect("job_slow", (job.id,), s, e, (("factor", 1.2), ("phase", "comm"))),
            Effect("nccl_slow", (job.id,), s, e, (("factor", 2.0),)),
        ]
    expectations = scene.expect(
        "transmit wait climbs",
        "node_exporter",
        "ib_port_xmit_wait",
        nodes[0],
        "rate",
        ">",
        1e6,
        min(end, start + 600),
        window=300,
        raw=True,
        device=nodes[0].hcas[0],
        port="1",
    )
    return Fault(
        "ib_congestion",
        start,
        end,
        {"nodes": ",".join(n.name for n in nodes)},
        f"IB congestion on {len(nodes)} node(s)",
        tuple(effects),
        tuple(expectations),
    )


@kind(
    "fs_filling",
    2400,
    "Lustre OST0001 fills from 40% to 98% used over the duration (client mounts see the "
    "filesystem's free space shrink with it).",
)
def _fs_filling(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    target = f"{LUSTRE_FS}-OST0001"
    effects = (Effect("ost_fill", (target,), scene.idx(start), scene.idx(end)),)
    at = min(end, scene.window.duration - scene.window.step)
    expectations = []
    if scene.sources["lustre"].enabled and end < INF:
        name, _, labels = scene.selector("lustre", "available_kib", None, component="ost", target=target)
        labels["instance"] = f"oss01:{_port('lustre')}"
        if scene.fits(at) and at >= end - 60:
            expectations.append(
                Expectation("fs_filling", "OST nearly full", name, labels, "value", "<", 0.05 * LUSTRE_OST_KIB, at)
            )
    return Fault("fs_filling", start, end, {"target": target}, f"{target} filling up", effects, tuple(expectations))


@kind(
    "lustre_inodes",
    2400,
    "A job unpacks millions of small files on Lustre: the scratch MDT's inodes go from ~6% to 98% used over the "
    "duration while its space barely moves.",
)
def _lustre_inodes(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    target = f"{LUSTRE_FS}-MDT0000"
    effects = (Effect("inode_fill", (target,), scene.idx(start), scene.idx(end)),)
    at = min(end, scene.window.duration - scene.window.step)
    expectations = []
    if scene.sources["lustre"].enabled and end < INF:
        name, _, labels = scene.selector("lustre", "inodes_free", None, component="mdt", target=target)
        labels["instance"] = f"mds01:{_port('lustre')}"
        if scene.fits(at) and at >= end - 60:
            maximum = MDT_KIB * 1024.0 / 1048576
            expectations.append(
                Expectation("lustre_inodes", "MDT nearly out of inodes", name, labels, "value", "<", 0.05 * maximum, at)
            )
    return Fault(
        "lustre_inodes", start, end, {"target": target}, f"{target} running out of inodes", effects, tuple(expectations)
    )


@kind(
    "lustre_unhealthy",
    1200,
    "An OSS reports its Lustre health_check unhealthy (a target hit an LBUG or went read-only): the exporter on "
    "oss02 turns health from 1 to 0 for the duration. node=X: another Lustre server.",
    targets=("node",),
)
def _lustre_unhealthy(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    host = spec.node or "oss02"
    if host not in LUSTRE_SERVERS:
        raise scene.refuse(
            f"no node named {host!r} among the Lustre servers", f"use one of {', '.join(LUSTRE_SERVERS)}"
        )
    effects = (Effect("lustre_unhealthy", (host,), scene.idx(start), scene.idx(end)),)
    at = min(start + 120, scene.window.duration - scene.window.step)
    expectations = []
    if scene.sources["lustre"].enabled and scene.fits(at):
        name, _, labels = scene.selector("lustre", "healthy", None)
        labels["instance"] = f"{host}:{_port('lustre')}"
        expectations.append(
            Expectation("lustre_unhealthy", "Lustre host unhealthy", name, labels, "value", "==", 0, at)
        )
    return Fault(
        "lustre_unhealthy", start, end, {"node": host}, f"Lustre on {host} unhealthy", effects, tuple(expectations)
    )


@kind(
    "shared_fs_full",
    1200,
    "The shared NFS /scratch fills from 55% to 97% used over the duration; every client's node_exporter reports it.",
)
def _shared_fs_full(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    _, mountpoint, size = NFS_SCRATCH
    effects = (Effect("shared_fill", (mountpoint,), scene.idx(start), scene.idx(end)),)
    at = min(end, scene.window.duration - scene.window.step)
    expectations = []
    if at >= end - 60:
        for node in scene.cluster.nodes[:2]:
            expectations += scene.expect(
                f"{mountpoint} nearly full on {node.name}",
                "node_exporter",
                "fs_avail",
                node,
                "value",
                "<",
                (1 - scene.thresholds.storage_full_ratio) * size,
                at,
                mountpoint=mountpoint,
            )
    summary = f"{mountpoint} filling up"
    return Fault("shared_fs_full", start, end, {"mountpoint": mountpoint}, summary, effects, tuple(expectations))


def _hero_job(scene: Scene, spec: Spec) -> Job:
    return scene.job(spec, scene.cluster.roles.hero_job)


def _rank0(scene: Scene, job: Job) -> tuple[Node, str]:
    return scene.cluster.nodes[job.gpus[0][0]], "0"


@kind(
    "checkpoint_stall",
    1200,
    "The hero job's checkpoint write stalls: Lustre job writes drop to a trickle, no step completes, GPUs wait idle.",
    targets=("job",),
)
def _checkpoint_stall(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    effects = (Effect("job_stall", (job.id,), scene.idx(start), scene.idx(end)),)
    node, rank = _rank0(scene, job)
    at = min(end, start + 600)
    expectations = scene.expect(
        "no step completes",
        "training",
        "steps",
        None,
        "increase",
        "==",
        0,
        at,
        window=300,
        raw=True,
        hpc_job=job.id,
        rank=rank,
        node=node.name,
    )
    return Fault(
        "checkpoint_stall",
        start,
        end,
        {"job": job.id},
        f"checkpoint stall of job {job.id}",
        effects,
        tuple(expectations),
    )


@kind(
    "checkpoint_long",
    1500,
    "The hero job writes a large checkpoint for 25 minutes at a healthy rate (Lustre jobstats): no step completes, "
    "GPUs wait idle, NCCL Inspector's files keep their last dump. A checkpoint, not a hang: TrainingHang stays silent "
    "for training_checkpoint_window.",
    targets=("job",),
)
def _checkpoint_long(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    effects = (Effect("checkpoint", (job.id,), scene.idx(start), scene.idx(end)),)
    node, rank = _rank0(scene, job)
    at = min(end - 60, start + 600)  # 10 minutes without a step, while the checkpoint still writes
    expectations = scene.expect(
        "no step completes",
        "training",
        "steps",
        None,
        "increase",
        "==",
        0,
        at,
        window=300,
        raw=True,
        hpc_job=job.id,
        rank=rank,
        node=node.name,
    )
    if scene.sources["lustre"].enabled:
        expectations += scene.expect(
            "the checkpoint writes at over the stall threshold",
            "lustre",
            "job_write_bytes",
            None,
            "rate",
            ">",
            scene.thresholds.storage_checkpoint_stalled_bytes_per_second / len(osts()),
            at,
            window=300,
            jobid=job.id,
            operation="write",
        )
    return Fault(
        "checkpoint_long", start, end, {"job": job.id}, f"long checkpoint of job {job.id}", effects, tuple(expectations)
    )


@kind(
    "evaluation_pass",
    480,
    "The hero job evaluates for 8 minutes: no optimizer step; its gradient AllReduce (128-129MB) leaves NCCL "
    "Inspector's files, it all-reduces its eval loss in 8-9KB messages and all-gathers its outputs in 512-513MB ones "
    "beside the 64-65MB parameter shards. No collective is slower; AllGather's mean over message sizes is over 4x.",
    targets=("job",),
)
def _evaluation_pass(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    effects = (Effect("evaluate", (job.id,), scene.idx(start), scene.idx(end)),)
    node, _ = _rank0(scene, job)
    job_wide = communicators(job, node.index)[0]
    at = min(end, start + 300)
    n_nodes = str(job_wide.n_nodes)
    expectations = scene.expect(
        "eval outputs all-gathered in 512-513MB messages, 4x the parameter shards' time or more",
        "nccl_inspector",
        "coll_exec_time",
        node,
        "value",
        ">",
        round(4 * exec_us(job_wide, SHARDS), 1),
        at,
        raw=True,
        slurm_job_id=job.id,
        gpu="GPU0",
        n_nodes=n_nodes,
        collective=EVAL_OUTPUTS.collective,
        message_size=EVAL_OUTPUTS.message_size,
    ) + scene.expect(
        "no gradient AllReduce in the dumps",
        "nccl_inspector",
        "coll_exec_time",
        node,
        "absent",
        None,
        None,
        at,
        window=120,
        slurm_job_id=job.id,
        gpu="GPU0",
        n_nodes=n_nodes,
        collective=GRADIENTS.collective,
        message_size=GRADIENTS.message_size,
    )
    return Fault(
        "evaluation_pass", start, end, {"job": job.id}, f"evaluation pass of job {job.id}", effects, tuple(expectations)
    )


@kind(
    "straggler",
    1800,
    "One rank of the hero job, on a slow node, takes 1.6x longer per step, the extra time in its data phase (its "
    "input pipeline); the job slows to its pace. Default: the rank on the last hero node's GPU 0.",
    targets=("job", "node", "gpu"),
)
def _straggler(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    node = scene.node(spec, job.gpus[-1][0])
    gpu = scene.gpu(spec, node, 0)
    if (node.index, gpu) not in job.gpus:
        raise scene.refuse(
            f"job {job.id} has no rank on {node.name} GPU {gpu}", "name a node= and gpu= the job runs on"
        )
    rank = job.rank_of(node.index, gpu)
    s, e = scene.idx(start), scene.idx(end)
    effects = (Effect("rank_slow", (job.id, rank), s, e, (("factor", 1.6), ("phase", "data"))),)
    expectations = scene.expect(
        "straggler's mean step time 1.6x",
        "training",
        "step_seconds",
        None,
        "rate_ratio",
        ">",
        round(1.4 * job.step_seconds, 3),
        min(end, start + 600),
        window=300,
        divisor="steps",
        raw=True,
        hpc_job=job.id,
        rank=str(rank),
        node=node.name,
    ) + scene.expect(
        # At the straggler's pace (1.6x the step), its data phase takes 0.05 + 0.6 of a nominal step per step:
        # 0.65 / 1.6 of its time, where a healthy rank's takes 5%.
        "straggler's data phase takes most of its time",
        "training",
        "phase_seconds",
        None,
        "rate",
        ">",
        0.3,
        min(end, start + 600),
        window=300,
        raw=True,
        hpc_job=job.id,
        rank=str(rank),
        node=node.name,
        phase="data",
    )
    return Fault(
        "straggler",
        start,
        end,
        {"job": job.id, "rank": str(rank), "node": node.name},
        f"rank {rank} of job {job.id} straggles on {node.name}",
        effects,
        tuple(expectations),
    )


@kind(
    "nccl_latency_spike",
    600,
    "NCCL collectives of the hero job across the network take 8x longer (bus bandwidth /8; its NVLink-only "
    "communicators are unaffected); steps 1.3x slower.",
    targets=("job",),
)
def _nccl_spike(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    s, e = scene.idx(start), scene.idx(end)
    effects = (
        Effect("nccl_slow", (job.id,), s, e, (("factor", 8.0),)),
        Effect("job_slow", (job.id,), s, e, (("factor", 1.3), ("phase", "comm"))),
    )
    node, _ = _rank0(scene, job)
    expectations = scene.expect(
        "gradient AllReduce 8x slower",
        "nccl_inspector",
        "coll_exec_time",
        node,
        "value",
        ">",
        round(4 * allreduce_time_us(job), 1),
        start + scene.window.step,
        raw=True,
        slurm_job_id=job.id,
        gpu="GPU0",
        collective=GRADIENTS.collective,
        message_size=GRADIENTS.message_size,
    )
    return Fault(
        "nccl_latency_spike",
        start,
        end,
        {"job": job.id},
        f"NCCL latency spike in job {job.id}",
        effects,
        tuple(expectations),
    )


@kind(
    "training_hang",
    1800,
    "The hero job hangs in a collective: no step progress, last-step timestamp frozen, "
    "GPUs still show 100% utilisation (spinning NCCL kernels) at low power.",
    targets=("job",),
)
def _hang(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    job = _hero_job(scene, spec)
    effects = (Effect("job_hang", (job.id,), scene.idx(start), scene.idx(end)),)
    node, rank = _rank0(scene, job)
    at = min(end, start + 900)
    expectations = scene.expect(
        "no step for 10 minutes",
        "training",
        "last_step_time",
        None,
        "age",
        ">",
        600,
        at,
        raw=True,
        hpc_job=job.id,
        rank=rank,
        node=node.name,
    )
    if scene.sources["dcgm"].enabled:
        expectations += scene.expect(
            "GPU still looks busy", "dcgm", "gpu_utilization", node, "value", ">", 0.9, at, gpu="0", hpc_job=job.id
        )
    return Fault("training_hang", start, end, {"job": job.id}, f"job {job.id} hangs", effects, tuple(expectations))


@kind(
    "slurm_nodes_down",
    2400,
    "A batch node goes down (powered off: its exporters stop, its job ends NODE_FAIL) "
    "and another is drained (its job finishes, nothing new starts). node=X: only X goes down.",
    targets=("node",),
)
def _nodes_down(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    down = scene.node(spec, scene.batch(0))
    drained = None
    if spec.node is None and len(scene.cluster.roles.batch) >= 2:
        drained = scene.cluster.nodes[scene.cluster.roles.batch[1]]
    s, e = scene.idx(start), scene.idx(end)
    effects = [
        Effect("node_state", (down.index,), s, e, (("state", "down"), ("reason", "Not responding"))),
        Effect("host_down", (down.index,), s, e),
    ]
    scene.block_node(down.index, start, end, kill="NODE_FAIL")
    if drained is not None:
        effects.append(
            Effect("node_state", (drained.index,), s, e, (("state", "drain"), ("reason", "GPU health check failed")))
        )
        scene.block_node(drained.index, start, end, kill=None)
    at = start + 120
    expectations = []
    if scene.sources["slurm"].enabled:
        if scene.sources["slurm"].exporter.id == "slurm_sckyzo":
            expectations += scene.expect(
                "node down in Slurm",
                "slurm",
                "node_status",
                None,
                "value",
                "==",
                1,
                at,
                raw=True,
                node=down.name,
                status="down",
                partition=down.partition,
            )
        else:
            expectations += scene.expect(
                "a node down in Slurm", "slurm", "nodes_down", None, "value", ">=", 1, at, raw=True
            )
    expectations += scene.expect(
        "node_exporter of the down node is down",
        "node_exporter",
        "boot_time",
        down,
        "absent",
        None,
        None,
        start + 360,
        window=300,
    )
    target = {"down": down.name, **({"drained": drained.name} if drained else {})}
    return Fault(
        "slurm_nodes_down",
        start,
        end,
        target,
        f"{down.name} down" + (f", {drained.name} drained" if drained else ""),
        tuple(effects),
        tuple(expectations),
    )


@kind("queue_backlog", 2400, "Pending jobs in the train partition climb to ~400 (reason Resources).")
def _backlog(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    effects = (Effect("backlog", ("train",), scene.idx(start), scene.idx(end), (("peak", 400),)),)
    expectations = []
    if scene.sources["slurm"].enabled:
        expectations = scene.expect(
            "train partition backlog",
            "slurm",
            "partition_jobs_pending",
            None,
            "value",
            ">",
            300,
            min(end, scene.window.duration) - scene.window.step,
            raw=True,
            partition="train",
        )
    return Fault(
        "queue_backlog", start, end, {"partition": "train"}, "queue backlog in train", effects, tuple(expectations)
    )


def _sdiag(scene: Scene, kind: str, canonical: str, level: int, start: int, end: int, doc: str) -> Fault:
    """A value of slurmctld's sdiag (both Slurm flavours report it) ramping to `level` over a third of the fault."""
    effects = (Effect("sdiag", (canonical,), scene.idx(start), scene.idx(end), (("peak", level),)),)
    expectations = []
    if scene.sources["slurm"].enabled:
        (signal, *_) = scene.sources["slurm"].exporter.signals_for(canonical)
        at = min(end, scene.window.duration) - scene.window.step
        expectations = scene.expect(doc, "slurm", signal, None, "value", ">", level * 0.9, at, raw=True)
    return Fault(kind, start, end, {}, doc, effects, tuple(expectations))


@kind(
    "slurmdbd_down",
    2400,
    "slurmdbd stops answering: the messages slurmctld holds for it (sdiag DBD Agent queue size) climb to 1.5x "
    "slurmdbd_agent_queue, then drain when it is back.",
)
def _slurmdbd_down(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    level = int(1.5 * scene.thresholds.slurmdbd_agent_queue)
    return _sdiag(scene, "slurmdbd_down", "slurmdbd_agent_queue", level, start, end, "slurmdbd agent queue filling")


@kind(
    "slurmctld_overload",
    2400,
    "An RPC storm (a squeue loop, a job array's completions): slurmctld's server threads climb to 250 of 256.",
)
def _slurmctld_overload(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    return _sdiag(scene, "slurmctld_overload", "slurmctld_server_threads", 250, start, end, "slurmctld threads busy")


@kind(
    "oom_kill",
    0,
    "The job on the first batch node running one is OOM-killed at start: host memory runs out over "
    "3 minutes, the job ends OUT_OF_MEMORY and its GPUs lose the hpc_job label.",
    targets=("node",),
    timing=("start",),
)
def _oom(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    candidates = [scene.node(spec, None).index] if spec.node else list(scene.cluster.roles.batch)
    for index in candidates:
        job = scene.job_on(index, start)
        if job is not None and len(job.nodes) == 1:
            break
    else:
        raise scene.refuse("no batch node runs a job at its start", "add --nodes or move start=")
    node = scene.cluster.nodes[index]
    scene.end_job(job, start, "OUT_OF_MEMORY")
    effects = (Effect("mem_pressure", (index,), scene.idx(start - 180), scene.idx(start)),)
    expectations = scene.expect(
        "host memory exhausted",
        "node_exporter",
        "mem_available",
        node,
        "value",
        "<",
        2 * 1024**3,
        start - scene.window.step,
        raw=True,
    )
    if scene.sources["slurm"].enabled and scene.sources["slurm"].exporter.id == "slurm_native":
        expectations += scene.expect(
            "Slurm counts an OOM job", "slurm", "jobs_outofmemory", None, "value", ">=", 1, start + 60, raw=True
        )
    return Fault(
        "oom_kill",
        start,
        start,
        {"node": node.name, "job": job.id},
        f"job {job.id} OOM-killed on {node.name}",
        effects,
        tuple(expectations),
    )


@kind(
    "exporter_down",
    900,
    "dcgm-exporter on one node stops answering: up = 0, its GPU series are absent. "
    "Default: the last batch node (or the shared node).",
    targets=("node",),
)
def _exporter_down(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    default = scene.batch(-1) if scene.cluster.roles.batch else scene.cluster.roles.shared
    node = scene.node(spec, default)
    effects = (Effect("exporter_down", ("dcgm", node.index), scene.idx(start), scene.idx(end)),)
    source = scene.sources["dcgm"]
    labels = {**source.scrape_labels(), "instance": f"{node.name}:{_port('dcgm')}"}
    at = start + scene.window.step
    expectations = (
        [Expectation("exporter_down", "dcgm-exporter target down", UP, labels, "value", "==", 0, at)]
        if scene.fits(at)
        else []
    )
    return Fault(
        "exporter_down",
        start,
        end,
        {"node": node.name, "exporter": "dcgm"},
        f"dcgm-exporter down on {node.name}",
        effects,
        tuple(expectations),
    )


# -- GPU fleet signals (alerts/gpu_fleet.py) -------------------------------------------------------------------------
# Each on a hero node the other scenarios leave alone (they take the first and the last), with the extended CSV.
OLD_DRIVER = "535.183.01"  # a driver branch older than the fleet's (hpcobs.exporters.labels.DRIVER)


def _spare_hero(scene: Scene, spec: Spec, position: int) -> Node:
    hero = scene.cluster.roles.hero
    node = scene.node(spec, hero[position % len(hero)] if hero else None)
    if node.csv != "extended":
        raise scene.refuse(f"{node.name} runs the default CSV, without the optional fields", "name another node=")
    return node


@kind(
    "fabric_not_ready",
    1800,
    "An NVSwitch node reboots and nvidia-fabricmanager does not start: every GPU's fabric state stays NOT_STARTED "
    "(DCGM_FI_DEV_FABRIC_MANAGER_STATUS 1, extended CSV), then success once it runs. Default: second hero node.",
    targets=("node",),
)
def _fabric_not_ready(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    if not scene.sources["dcgm"].enabled:
        raise scene.refuse("needs dcgm-exporter", "set exporters.dcgm.enabled: true in the config")
    node = _spare_hero(scene, spec, 1)
    s, e = scene.idx(start), scene.idx(end)
    effects = (
        Effect("driver_reload", (node.index,), s, s + 1),
        *(Effect("fabric_not_ready", (node.index, gpu), s, e) for gpu in range(node.gpus)),
    )
    expectations = scene.expect(
        f"{node.name} GPU 0 not in the fabric",
        "dcgm",
        "fabric_manager_status",
        node,
        "value",
        "==",
        1,
        start + scene.window.step,
        raw=True,
        gpu="0",
    )
    return Fault(
        "fabric_not_ready",
        start,
        end,
        {"node": node.name},
        f"Fabric Manager not started on {node.name}",
        effects,
        tuple(expectations),
    )


@kind(
    "ecc_disabled",
    INF,
    "nvidia-smi -e 0 on one GPU: its pending ECC mode turns 0 at once (DCGM_FI_DEV_ECC_PENDING, extended CSV), the "
    "current mode stays 1 until the GPU's next reset, which does not come. Default: second hero node, GPU 0.",
    targets=("node", "gpu"),
)
def _ecc_disabled(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _spare_hero(scene, spec, 1)
    node, gpu, target = _gpu_fault(scene, replace(spec, node=node.name), None, 0)
    effects = (Effect("flag", (node.index, gpu), scene.idx(start), scene.idx(end), (("signal", "ecc_pending"),)),)
    expectations = scene.expect(
        f"ECC off after the next reset on {node.name} GPU {gpu}",
        "dcgm",
        "ecc_pending",
        node,
        "value",
        "==",
        0,
        start + scene.window.step,
        raw=True,
        gpu=str(gpu),
    )
    return Fault(
        "ecc_disabled", start, end, target, f"ECC pending off on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


@kind(
    "dcgm_values_frozen",
    1800,
    "dcgm-exporter on one node keeps serving its last output (as releases before 3.1.3-3.1.2 do once nv-hostengine "
    "restarts): every series repeats its value, up stays 1. Default: third hero node.",
    targets=("node",),
)
def _values_frozen(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _spare_hero(scene, spec, 2)
    effects = (Effect("dcgm_frozen", (node.index,), scene.idx(start), scene.idx(end)),)
    expectations = scene.expect(
        f"{node.name} GPU 0's energy counter does not move",
        "dcgm",
        "energy",
        node,
        "changes",
        "==",
        0,
        start + 600,
        window=300,
        raw=True,
        gpu="0",
    )
    return Fault(
        "dcgm_values_frozen",
        start,
        end,
        {"node": node.name},
        f"dcgm-exporter values frozen on {node.name}",
        effects,
        tuple(expectations),
    )


@kind(
    "driver_drift",
    INF,
    f"One node comes back on another GPU driver ({OLD_DRIVER}): dcgm-exporter's driver label changes on all its "
    "series (a new series per GPU and field). Default: fourth hero node.",
    targets=("node",),
)
def _driver_drift(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _spare_hero(scene, spec, 3)
    effects = (Effect("driver", (node.index,), scene.idx(start), scene.idx(end), (("version", OLD_DRIVER),)),)
    # The driver label's name depends on the node's exporter version: the selector is completed by hand.
    at = start + 300
    name, _, labels = scene.selector("dcgm", "gpu_utilization", node, gpu="0")
    labels[scene.sources["dcgm"].exporter.info_labels(node.version)[-1]] = OLD_DRIVER
    described = f"{node.name} reports driver {OLD_DRIVER}"
    expectations = [Expectation("driver_drift", described, name, labels, "present", None, None, at, 240)]
    return Fault(
        "driver_drift",
        start,
        end,
        {"node": node.name},
        f"{node.name} on driver {OLD_DRIVER}",
        effects,
        tuple(expectations if scene.fits(at) else ()),
    )


@kind(
    "prolog_not_writing",
    1800,
    "The prolog stops writing on one node: no GPU mapping files (series lose hpc_job) "
    "and no job-info series, while the GPUs stay busy. Default: a batch node running a job.",
    targets=("node",),
)
def _prolog(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    roles = scene.cluster.roles
    if spec.node:
        node = scene.node(spec, None)
    else:
        ordered = list(roles.batch[len(roles.batch) // 2 :]) + list(roles.batch[: len(roles.batch) // 2])
        busy = [i for i in ordered if (j := scene.job_on(i, start)) and scene.running(j, start + 600)]
        node = scene.node(spec, busy[0] if busy else roles.shared)
    effects = (Effect("no_mapping", (node.index,), scene.idx(start), scene.idx(end)),)
    at = start + 300
    expectations = scene.expect(
        "busy GPU without hpc_job",
        "dcgm",
        "gpu_utilization",
        node,
        "max_over_time",
        ">",
        0.5,
        at,
        window=240,
        gpu="0",
        hpc_job="",
    )
    return Fault(
        "prolog_not_writing",
        start,
        end,
        {"node": node.name},
        f"prolog not writing on {node.name}",
        effects,
        tuple(expectations),
    )


# Where a foreign read comes from, and the miner a policy kills (Tetragon's selector action label "signal").
FOREIGN_READER = "/usr/bin/rsync"
MINER_BINARY, MINER_ACTION = "/tmp/.x/xmrig", "signal"


def _falco_match(scene: Scene, key: str) -> tuple:
    """A shipped Falco rule's match as its metric carries it: name, priority number, one tag label per tag."""
    rule = security_content.falco_rule(scene.thresholds, key)
    return rule.name, rule.priority_number, tuple((tag, "true") for tag in rule.tags)


def _tetragon_event(scene: Scene, key: str, binary: str) -> tuple:
    """A shipped Tetragon policy's event: policy name, hook, the binary that triggered it."""
    policy = security_content.tetragon_policy(scene.thresholds, key)
    return policy.name, policy.hook, binary


def _security_fault(
    scene: Scene,
    kind: str,
    node: Node,
    start: int,
    end: int,
    what: str,
    falco_rule: tuple,
    tetragon_policy: tuple | None = None,
    action: str | None = None,
) -> Fault:
    """A Falco rule matching on a node from `start`, with a Tetragon policy event and enforcement action
    when given; expectations only for the enabled exporters."""
    rule, priority, tags = falco_rule
    s, e = scene.idx(start), scene.idx(end)
    effects = [Effect("falco_rule", (node.index,), s, e, (("rule", rule), ("priority", priority), ("tags", tags)))]
    target = {"node": node.name, "rule": rule}
    enabled = {name: scene.sources[name].enabled for name in ("falco", "tetragon")}
    expectations = (
        scene.expect(
            "Falco rule matched",
            "falco",
            "rule_matches",
            node,
            "present",
            None,
            None,
            start + 120,
            window=300,
            rule_name=rule,
        )
        if enabled["falco"]
        else []
    )
    if tetragon_policy is not None:
        policy, hook, binary = tetragon_policy
        target["policy"] = policy
        effects.append(
            Effect("tetragon_policy", (node.index,), s, e, (("policy", policy), ("hook", hook), ("binary", binary)))
        )
        if enabled["tetragon"]:
            expectations += scene.expect(
                "Tetragon policy event",
                "tetragon",
                "policy_events",
                node,
                "present",
                None,
                None,
                start + 120,
                window=300,
                policy=policy,
            )
        if action is not None:
            effects.append(
                Effect("tetragon_action", (node.index,), s, e, (("policy", policy), ("hook", hook), ("action", action)))
            )
            if enabled["tetragon"]:
                expectations += scene.expect(
                    "Tetragon enforced the policy",
                    "tetragon",
                    "selector_actions",
                    node,
                    "present",
                    None,
                    None,
                    start + 120,
                    window=300,
                    policy=policy,
                    action=action,
                )
    return Fault(kind, start, end, target, what, tuple(effects), tuple(expectations))


@kind(
    "unexpected_outbound",
    900,
    "Falco rule 'Unexpected outbound connection destination' matches on the first hero "
    "node: 3 matches at start, then one a minute.",
    targets=("node",),
)
def _outbound(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = scene.node(spec, scene.hero(0))
    return _security_fault(
        scene,
        "unexpected_outbound",
        node,
        start,
        end,
        f"outbound connection from {node.name}",
        _falco_match(scene, "outbound"),
    )


@kind(
    "checkpoint_foreign_read",
    600,
    "A process outside the job reads the hero job's checkpoint from the shared node: "
    "a Falco rule match and a Tetragon policy event (kprobe security_file_open).",
    targets=("node",),
)
def _foreign_read(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = scene.node(spec, scene.cluster.roles.shared if scene.cluster.roles.shared is not None else scene.hero(0))
    return _security_fault(
        scene,
        "checkpoint_foreign_read",
        node,
        start,
        end,
        f"checkpoint read by a foreign process on {node.name}",
        _falco_match(scene, "checkpoint"),
        _tetragon_event(scene, "checkpoint-guard", FOREIGN_READER),
    )


@kind(
    "crypto_miner",
    900,
    "A crypto miner in a batch job connects to a mining pool: Falco's CRITICAL miner-pool "
    "rule matches and a Tetragon policy kills the miner (selector action signal), a few times "
    "a minute. Default: last batch node.",
    targets=("node",),
)
def _miner(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = scene.node(spec, scene.batch(-1))
    return _security_fault(
        scene,
        "crypto_miner",
        node,
        start,
        end,
        f"crypto miner on {node.name}",
        _falco_match(scene, "miner"),
        _tetragon_event(scene, "block-miners", MINER_BINARY),
        action=MINER_ACTION,
    )


def kinds() -> dict[str, Kind]:
    return dict(KINDS)


def resolve(specs: list[Spec], sources: Sources, thresholds: Thresholds, cluster: Cluster, seed: int) -> Faults:
    scene = Scene(sources, thresholds, cluster, seed)
    faults = []
    for spec in specs:
        entry = kind_named(spec.kind, spec.text)
        scene.spec = spec
        start = spec.start if spec.start is not None else min(DEFAULT_START, cluster.window.duration // 6)
        if start >= cluster.window.duration:
            raise scene.refuse(
                f"start={_duration_text(start)} is not before the end of the simulation "
                f"({_duration_text(cluster.window.duration)})",
                "start it earlier, or give more --hours",
            )
        start = start // cluster.window.step * cluster.window.step
        length = spec.duration if spec.duration is not None else entry.duration
        end = INF if length >= INF or math.isinf(length) else start + length
        faults.append(entry.resolve(scene, spec, start, end))
    return Faults(cluster.with_jobs(scene.jobs.values()), faults)
