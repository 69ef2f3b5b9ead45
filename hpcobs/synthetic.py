"""Synthetic raw series exactly as the exporters label them, for rule tests.

Names come from the catalogue for the requested version; labels follow the exporter's templates
(dcgm-exporter: gpu, UUID, pci_bus_id, device, modelName, Hostname|hostname, optional hpc_job), the same
label values the simulator emits (hpcobs.simulate.labels).
"""
from __future__ import annotations

from .context import Context
from .promql import si_factor
from .ruletest import Series
from .simulate.labels import DRIVER, GPU_MODEL, amd_gpu_labels, dcgm_gpu_labels, gpu_uuid  # noqa: F401  (re-exported)
from .simulate.model import EXPORTER_PORTS


def dcgm(ctx: Context, signal: str, values: str, *, node: str, gpu: str, version: str | None = None,
         cluster: str | None = None, hpc_job: str | None = None, **extra: str) -> Series:
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


def raw_value(ctx: Context, signal: str, version: str, si_value: float) -> float:
    """The value a dcgm-exporter version exposes for a quantity given in SI units."""
    unit = ctx.sources["dcgm"].exporter.metric(signal, version).unit
    return round(si_value / si_factor(unit), 9)


def series(ctx: Context, exporter_id: str, signal: str, values: str, *, node: str, exporter_version: str | None = None,
           cluster: str | None = None, **labels: str) -> Series:
    """A series of any exporter, labels given by their canonical names (hpc_job, gpu...) and mapped to the
    exporter's own (job_id, gpu_id...); plus its scrape labels, the cluster label and its host label."""
    source = ctx.sources[exporter_id]
    version = exporter_version or source.versions[0]
    raw = source.exporter.canonical_labels(version)
    host = source.host_label(version)
    all_labels = {**source.scrape_labels(), ctx.cluster: cluster or ctx.config.get("cluster", "name"),
                  host: f"{node}:{EXPORTER_PORTS.get(source.exporter.id, EXPORTER_PORTS['node_exporter'])}"
                  if host == "instance" else node}
    all_labels.update({raw.get(name, name) if isinstance(raw.get(name, name), str) else name: value
                       for name, value in labels.items()})
    return Series(source.name(signal, version), all_labels, values)


def amd(ctx: Context, signal: str, values: str, *, node: str, gpu: str, cluster: str | None = None,
        hpc_job: str | None = None, **extra: str) -> Series:
    """An AMD Device Metrics Exporter GPU series (name with the configured prefix); job labels when held."""
    source = ctx.sources["amd"]
    labels = {**source.scrape_labels(), ctx.cluster: cluster or ctx.config.get("cluster", "name"),
              "instance": f"{node}:{EXPORTER_PORTS['amd']}", **amd_gpu_labels(node, 0, gpu)}
    if hpc_job is not None:
        labels.update(job_id=hpc_job, job_user="alice", job_partition="gpu")
    labels.update(extra)
    return Series(source.name(signal), labels, values)

