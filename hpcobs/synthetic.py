"""Synthetic raw series exactly as the exporters label them, for rule tests.

Names come from the catalogue for the requested version; labels follow the exporter's templates
(dcgm-exporter: gpu, UUID, pci_bus_id, device, modelName, Hostname|hostname, optional hpc_job), the same
label values the simulator emits (hpcobs.exporter_labels).
"""
from __future__ import annotations

import re

from .context import Context
from .exporter_labels import EXPORTER_PORTS, amd_gpu_labels, dcgm_gpu_labels
from .promql import si_factor
from .ruletest import Series


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


# One value of promtool's input series notation: `_`, `stale`, `a`, `axn`, `a+bxn`, `a-bxn`, `_xn`.
_NUMBER = r"(?:Inf|NaN|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_ITEM = re.compile(rf"(?P<start>[+-]?{_NUMBER})(?:(?P<op>[+-])(?P<step>{_NUMBER}))?(?P<times>x\d+)?")


def raw_values(ctx: Context, exporter_id: str, signal: str, si_values: str, version: str | None = None) -> str:
    """A promtool input series written in SI units ("0.8x10", "0x100 0.01 0x79", "0+12000x40"), converted value
    by value (start and step; repeat counts, `_`, `stale`, Inf and NaN unchanged) to what the exporter version
    exposes."""
    unit = ctx.sources[exporter_id].exporter.metric(signal, version).unit
    factor = si_factor(unit)

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


def gpu_si_series(ctx: Context, canonical: str, si_values: str, *, node: str, gpu: str, hpc_job: str | None = None,
                  vendor: str | None = None, version: str | None = None, **extra: str) -> Series:
    """A raw series of a canonical per-GPU quantity (catalogue `canonical:`), values given in SI units (ratios,
    bytes, joules, watts) and converted to the exporter's. From `vendor` ("dcgm" or "amd") or else from the
    first enabled GPU exporter, dcgm-exporter before AMD; dcgm-exporter's `version` defaults to the first
    deployed one."""
    vendor = vendor or ("dcgm" if ctx.sources["dcgm"].enabled else "amd")
    source = ctx.sources[vendor]
    signal = source.exporter.signals_for(canonical)[0]
    if vendor == "dcgm":
        version = version or source.versions[0]
        return dcgm(ctx, signal, raw_values(ctx, "dcgm", signal, si_values, version), node=node, gpu=gpu,
                    version=version, hpc_job=hpc_job, **extra)
    return amd(ctx, signal, raw_values(ctx, "amd", signal, si_values), node=node, gpu=gpu, hpc_job=hpc_job, **extra)



def gpu_utilization(ctx: Context, ratios: str, **kw) -> Series:
    """Utilisation of one GPU written as 0-1 ratios, from the first enabled GPU exporter (or `vendor`)."""
    return gpu_si_series(ctx, "utilization", ratios, **kw)

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

