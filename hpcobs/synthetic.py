"""Synthetic raw series exactly as the exporters label them, for rule tests.

Names come from the catalogue for the requested version; labels follow the exporter's templates
(dcgm-exporter: gpu, UUID, pci_bus_id, device, modelName, Hostname|hostname, optional hpc_job).
"""
from __future__ import annotations

import hashlib

from .context import Context
from .promql import si_factor
from .ruletest import Series

GPU_MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.127.05"


def gpu_uuid(node: str, gpu: str) -> str:
    digest = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def dcgm(ctx: Context, signal: str, values: str, *, node: str, gpu: str, version: str | None = None,
         cluster: str | None = None, hpc_job: str | None = None, **extra: str) -> Series:
    """A dcgm-exporter GPU series for `signal` on one GPU."""
    source = ctx.sources["dcgm"]
    version = version or source.versions[0]
    labels = {
        **source.scrape_labels(),
        ctx.cluster: cluster or ctx.config.get("cluster", "name"),
        "instance": f"{node}:9400",
        "gpu": gpu,
        "UUID": gpu_uuid(node, gpu),
        "pci_bus_id": f"00000000:{0x18 + 0x10 * int(gpu):02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": GPU_MODEL,
        source.host_label(version): node,
    }
    driver_label = source.exporter.info_labels(version)[-1]
    labels[driver_label] = DRIVER
    if hpc_job is not None:
        labels["hpc_job"] = hpc_job
    labels.update(extra)
    return Series(source.name(signal, version), labels, values)


def raw_value(ctx: Context, signal: str, version: str, si_value: float) -> float:
    """The value a dcgm-exporter version exposes for a quantity given in SI units."""
    unit = ctx.sources["dcgm"].exporter.metric(signal, version).unit
    return round(si_value / si_factor(unit), 9)
