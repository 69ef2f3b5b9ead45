"""Synthetic raw series exactly as the exporters label them, for rule tests.

Names come from the catalogue for the requested version; labels follow the exporter's templates
(dcgm-exporter: gpu, UUID, pci_bus_id, device, modelName, Hostname|hostname, optional hpc_job), the same
label values the simulator emits (hpcobs.exporters.labels).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from hpcobs.authoring.context import Context
from hpcobs.authoring.ruletest import Series
from hpcobs.exporters import catalogue
from hpcobs.exporters.labels import (
    DCGM_EXP_WINDOW_MS,
    EXPORTER_PORTS,
    SLURM_CONTROLLER,
    amd_gpu_labels,
    dcgm_gpu_labels,
)

# For content's cases (hpcobs.exporters is not importable there).
from hpcobs.exporters.labels import H100_GPU_MAX_OPERATING_CELSIUS as H100_GPU_MAX_OPERATING_CELSIUS
from hpcobs.exporters.labels import H100_MEMORY_MAX_OPERATING_CELSIUS as H100_MEMORY_MAX_OPERATING_CELSIUS
from hpcobs.exporters.labels import REMOTE_HOSTENGINE as REMOTE_HOSTENGINE
from hpcobs.lang.promql import si_factor


def dcgm(
    ctx: Context,
    signal: str,
    values: str,
    *,
    node: str,
    gpu: str,
    version: str | None = None,
    cluster: str | None = None,
    hpc_job: str | None = None,
    **extra: str,
) -> Series:
    """A dcgm-exporter GPU series for `signal` on one GPU."""
    source = ctx.sources["dcgm"]
    version = version or source.versions[0]
    labels = {
        **source.scrape_labels(),
        ctx.cluster: cluster or ctx.config.get("cluster", "name"),
        "instance": f"{node}:{EXPORTER_PORTS['dcgm']}",
        **dcgm_gpu_labels(source, version, node, gpu),
    }
    if hpc_job is not None:
        labels["hpc_job"] = hpc_job
    labels.update(extra)
    return Series(source.name(signal, version), labels, values)


def dcgm_xid_count(ctx: Context, code: int | None, values: str, *, node: str, gpu: str, **labels: str) -> Series:
    """dcgm-exporter's Xid count collector on one GPU: the Xids of `code` DCGM recorded in the exporter's window,
    or, with `code` None, the one series (no `xid` label, value 0) of a GPU with no Xid in the window
    (internal/pkg/collector/expcollector.go getMetrics)."""
    xid = {} if code is None else {"xid": str(code)}
    return dcgm(
        ctx, "xid_count", values, node=node, gpu=gpu, window_size_in_ms=str(DCGM_EXP_WINDOW_MS), **xid, **labels
    )


def _unit(ctx: Context, exporter_id: str, signal: str, version: str | None) -> str:
    metric = ctx.sources[exporter_id].exporter.metric(signal, version)
    if metric is None:
        raise KeyError(f"{exporter_id} {version} does not expose {signal}")
    return metric.unit


def raw_value(ctx: Context, signal: str, version: str | None, si_value: float) -> float:
    """The value a dcgm-exporter version exposes for a quantity given in SI units."""
    return round(si_value / si_factor(_unit(ctx, "dcgm", signal, version)), 9)


# One value of promtool's input series notation: `_`, `stale`, `a`, `axn`, `a+bxn`, `a-bxn`, `_xn`.
_NUMBER = r"(?:Inf|NaN|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_ITEM = re.compile(rf"(?P<start>[+-]?{_NUMBER})(?:(?P<op>[+-])(?P<step>{_NUMBER}))?(?P<times>x\d+)?")


def raw_values(ctx: Context, exporter_id: str, signal: str, si_values: str, version: str | None = None) -> str:
    """A promtool input series written in SI units ("0.8x10", "0x100 0.01 0x79", "0+12000x40"), converted value
    by value (start and step; repeat counts, `_`, `stale`, Inf and NaN unchanged) to what the exporter version
    exposes."""
    factor = si_factor(_unit(ctx, exporter_id, signal, version))

    def raw(number: str) -> str:
        if number.lstrip("+-") in ("Inf", "NaN"):
            return number
        value = round(float(number) / factor, 9)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)

    def item(text: str) -> str:
        if re.fullmatch(r"_(x\d+)?|stale", text):
            return text
        match = _ITEM.fullmatch(text)
        if match is None:
            raise ValueError(f"not a promtool series value: {text!r} (in {si_values!r})")
        step = f"{match['op']}{raw(match['step'])}" if match["step"] else ""
        return f"{raw(match['start'])}{step}{match['times'] or ''}"

    return " ".join(item(text) for text in si_values.split())


def first_gpu_exporter(ctx: Context) -> str:
    """The GPU exporter test series come from when a case names none: dcgm-exporter if enabled, else AMD's."""
    return "dcgm" if ctx.sources["dcgm"].enabled else "amd"


def gpu_si_series(
    ctx: Context,
    canonical: str,
    si_values: str,
    *,
    node: str,
    gpu: str,
    hpc_job: str | None = None,
    vendor: str | None = None,
    version: str | None = None,
    **extra: str,
) -> Series:
    """A raw series of a canonical per-GPU quantity (catalogue `canonical:`), values given in SI units (ratios,
    bytes, joules, watts) and converted to the exporter's. From `vendor` ("dcgm" or "amd") or else from the
    first enabled GPU exporter, dcgm-exporter before AMD; dcgm-exporter's `version` defaults to the first
    deployed one."""
    vendor = vendor or first_gpu_exporter(ctx)
    source = ctx.sources[vendor]
    signal = source.exporter.signals_for(canonical)[0]
    if vendor == "dcgm":
        version = version or source.versions[0]
        return dcgm(
            ctx,
            signal,
            raw_values(ctx, "dcgm", signal, si_values, version),
            node=node,
            gpu=gpu,
            version=version,
            hpc_job=hpc_job,
            **extra,
        )
    return amd(ctx, signal, raw_values(ctx, "amd", signal, si_values), node=node, gpu=gpu, hpc_job=hpc_job, **extra)


def gpu_utilization(
    ctx: Context,
    ratios: str,
    *,
    node: str,
    gpu: str,
    hpc_job: str | None = None,
    vendor: str | None = None,
    version: str | None = None,
    **extra: str,
) -> Series:
    """Utilisation of one GPU written as 0-1 ratios, as gpu_si_series() writes it."""
    return gpu_si_series(
        ctx, "utilization", ratios, node=node, gpu=gpu, hpc_job=hpc_job, vendor=vendor, version=version, **extra
    )


def series(
    ctx: Context,
    exporter_id: str,
    signal: str,
    values: str,
    *,
    node: str,
    exporter_version: str | None = None,
    cluster: str | None = None,
    **labels: str,
) -> Series:
    """A series of any exporter, labels given by their canonical names (hpc_job, gpu...) and mapped to the
    exporter's own (job_id, gpu_id...); plus its scrape labels, the cluster label and its host label."""
    source = ctx.sources[exporter_id]
    version = exporter_version or source.versions[0]
    raw = source.canonical_labels(version)
    host = source.host_label(version)
    all_labels = {
        **source.scrape_labels(),
        ctx.cluster: cluster or ctx.config.get("cluster", "name"),
        host: f"{node}:{EXPORTER_PORTS.get(source.exporter.id, EXPORTER_PORTS['node_exporter'])}"
        if host == "instance"
        else node,
    }
    for name, value in labels.items():
        # A label carried inside another (node in instance) keeps its canonical name here.
        raw_name = raw.get(name, name)
        all_labels[raw_name if isinstance(raw_name, str) else name] = value
    return Series(source.name(signal, version), all_labels, values)


def amd(
    ctx: Context,
    signal: str,
    values: str,
    *,
    node: str,
    gpu: str,
    cluster: str | None = None,
    hpc_job: str | None = None,
    **extra: str,
) -> Series:
    """An AMD Device Metrics Exporter GPU series (name with the configured prefix); job labels when held."""
    source = ctx.sources["amd"]
    labels = {
        **source.scrape_labels(),
        ctx.cluster: cluster or ctx.config.get("cluster", "name"),
        "instance": f"{node}:{EXPORTER_PORTS['amd']}",
        **amd_gpu_labels(node, 0, gpu),
    }
    if hpc_job is not None:
        labels.update(job_id=hpc_job, job_user="alice", job_partition="gpu")
    labels.update(extra)
    return Series(source.name(signal), labels, values)


# The owner every test job has unless a case says otherwise.
JOB_OWNER = {"user": "alice", "account": "llm", "partition": "gpu"}


def job_info(
    ctx: Context, hpc_job: str, values: str, *, node: str = "n1", job_name: str = "train", **owner: str
) -> Series:
    """The prolog's job-info series of a job (its owner, JOB_OWNER unless given) on one node."""
    return series(
        ctx,
        "job_info",
        "job_info",
        values,
        node=node,
        hpc_job=hpc_job,
        job_name=job_name,
        qos="normal",
        **{**JOB_OWNER, **owner},
    )


def slurm_partition(ctx: Context, canonical: str, values: str, partition: str = "gpu") -> Series:
    """A per-partition series of the Slurm exporter (catalogue `canonical:`), as the controller host exposes it;
    a flavour that also labels the partition's feature set gets one."""
    slurm = ctx.sources["slurm"]
    (signal, *_) = slurm.exporter.signals_for(canonical)
    metric = slurm.metric(signal)
    features = {"active_feature_set": "h100"} if metric is not None and "active_feature_set" in metric.labels else {}
    return series(ctx, "slurm", signal, values, node=SLURM_CONTROLLER, partition=partition, **features)


def slurm_controller(ctx: Context, signal: str, values: str) -> Series:
    """A cluster-wide series of the Slurm exporter (a node total, an sdiag value), as the controller host exposes it."""
    return series(ctx, "slurm", signal, values, node=SLURM_CONTROLLER)


def slurm_partition_nodes(ctx: Context, partition: str, nodes: int, drained: int, samples: int) -> list[Series]:
    """A partition of `nodes` nodes, the first `drained` of them drained and the others idle, as the Slurm exporter
    reports it: its drain count, and its nodes one by one where the exporter has per-node series (SckyzO, status
    as sinfo prints it) or else its node total (Slurm's own metrics)."""
    slurm = ctx.sources["slurm"]
    held = f"{{}}x{samples}"
    out = [slurm_partition(ctx, "partition_nodes_drain", held.format(drained), partition)]
    if not slurm.exporter.signals_for("node_state"):
        return [*out, slurm_partition(ctx, "partition_nodes_total", held.format(nodes), partition)]
    (signal, *_) = slurm.exporter.signals_for("node_state")
    return out + [
        series(
            ctx,
            "slurm",
            signal,
            held.format(1),
            node=f"{partition}{i:04d}",
            status="drained" if i < drained else "idle",
            partition=partition,
        )
        for i in range(nodes)
    ]


def falco_match(ctx: Context, values: str, *, node: str, rule: str, priority: str) -> Series:
    """Falco's match counter of one rule on one node (syscall source)."""
    return series(ctx, "falco", "rule_matches", values, node=node, rule_name=rule, priority=priority, source="syscall")


# The Kubernetes labels Tetragon leaves empty outside Kubernetes (bare-metal HPC nodes).
_TETRAGON_EVENT_K8S = {"namespace": "", "pod": "", "workload": "", "node_name": ""}
_TETRAGON_ACTION_K8S = {"policy_namespace": "", "selector_index": "0", "selector_label": ""}


def tetragon_event(
    ctx: Context, values: str, *, node: str, policy: str, binary: str, hook: str = "kprobe:security_file_open"
) -> Series:
    """Tetragon's event counter of one tracing policy and binary on one node."""
    return series(
        ctx,
        "tetragon",
        "policy_events",
        values,
        node=node,
        policy=policy,
        hook=hook,
        binary=binary,
        **_TETRAGON_EVENT_K8S,
    )


def tetragon_action(
    ctx: Context, values: str, *, node: str, policy: str, action: str, hook: str = "kprobe:security_file_open"
) -> Series:
    """Tetragon's counter of one selector action (signal, override, monitor_*...) of a policy on one node."""
    return series(
        ctx,
        "tetragon",
        "selector_actions",
        values,
        node=node,
        action=action,
        policy=policy,
        hook=hook,
        hook_index="0",
        **_TETRAGON_ACTION_K8S,
    )


def phase_counters(
    ctx: Context, phases: Mapping[tuple[str, str], Mapping[str, float]], values: Callable[[float], str], job: str
) -> list[Series]:
    """The training helper's phase counters of a job: for each (rank, node) and phase, the series `values` makes
    of its seconds per step."""
    return [
        series(ctx, "training", "phase_seconds", values(seconds), node=node, hpc_job=job, rank=rank, phase=phase)
        for (rank, node), per_phase in phases.items()
        for phase, seconds in per_phase.items()
    ]


def nccl_collective(
    ctx: Context,
    signal: str,
    values: str,
    *,
    collective: str,
    gpu: str,
    message_size: str,
    algo_proto: str,
    node: str = "n1",
    hpc_job: str = "42",
    n_nodes: str = "2",
    nranks: str = "16",
) -> Series:
    """An NCCL Inspector series (coll_exec_time, coll_busbw) of one collective of a communicator, by default one
    across the 2 nodes and 16 GPUs of a job."""
    return series(
        ctx,
        "nccl_inspector",
        signal,
        values,
        node=node,
        hpc_job=hpc_job,
        gpu=gpu,
        version="v5.1",
        comm_name="0x7f3a",
        n_nodes=n_nodes,
        nranks=nranks,
        collective=collective,
        message_size=message_size,
        algo_proto=algo_proto,
    )


def up_series(ctx: Context, role: str, values: str, host: str = "n1") -> Series:
    """`up` of the role's target on `host`, as Prometheus writes it: the role's scrape labels, the cluster, and an
    `instance` of host and the exporter's port."""
    source = ctx.sources[role]
    port = EXPORTER_PORTS.get(source.exporter.id, EXPORTER_PORTS["node_exporter"])
    labels = {**source.scrape_labels(), ctx.cluster: ctx.config.get("cluster", "name"), "instance": f"{host}:{port}"}
    return Series(catalogue.up_name(), labels, values)
