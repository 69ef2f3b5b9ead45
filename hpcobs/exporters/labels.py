"""What the exporters write on their series, shared by the rule-test series (hpcobs.authoring.synthetic) and the
simulator.

Label *names* come from the catalogue (gpu_labels, host label and driver label per version); the values
here (ports, controller host, model, driver, UUID, PCI bus id) are invented but shaped like the real ones.
"""

from __future__ import annotations

import hashlib

from hpcobs.exporters.sources import Source

# Listen ports of the exporters (label values of `instance`; defaults of each project).
EXPORTER_PORTS = {
    "dcgm": 9400,
    "amd": 5000,
    "node_exporter": 9100,
    "lustre": 32221,
    "falco": 8765,
    "tetragon": 2112,
    "training": 9500,
    "slurm_sckyzo": 9341,
    "slurm_native": 6817,
    "slurm_jontk": 8080,
}
SLURM_CONTROLLER = "slurmctld"  # the host the Slurm exporters run on
# The standalone nv-hostengine a dcgm-exporter started with `-r` connects to (nv-hostengine's default port, the
# example of the code below). dcgm-exporter then labels every series with the host part of this address instead
# of the node's name (NVIDIA/dcgm-exporter d5e5f510 internal/pkg/hostname/hostname.go, parseRemoteHostname): the
# series of a site that reads the node elsewhere (exporters.dcgm.node_from) carry it.
REMOTE_HOSTENGINE = "localhost:5555"
GPU_MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.127.05"
AMD_GPU_MODEL = "AMD Instinct MI300X"
# dcgm-exporter's windowed collectors (Xid count, clock events) label each series with their window: the defaults
# of --xid-count-window-size and --clock-events-count-window-size, 5 minutes (pkg/cmd/app.go).
DCGM_EXP_WINDOW_MS = 300000


def gpu_uuid(node: str, gpu: str | int) -> str:
    digest = hashlib.sha256(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def pci_bus_id(gpu: str | int) -> str:
    return f"00000000:{(0x18 + 0x10 * int(gpu)) % 0x100:02X}:00.0"


def dcgm_gpu_labels(source: Source, version: str | None, node: str, gpu: str | int) -> dict[str, str]:
    """The labels dcgm-exporter puts on every series of one GPU (render_metrics.go gpuMetricsFormat).

    Without hpc_job (added per job by the mapping files) and without the scrape labels. A site that reads the
    node from another label than the exporter's hostname runs it against a standalone nv-hostengine: the hostname
    label is then the hostengine's host, the same on every node.
    """
    hostname = node if source.node_from_host_label else REMOTE_HOSTENGINE.rpartition(":")[0]
    labels = {
        "gpu": str(gpu),
        "UUID": gpu_uuid(node, gpu),
        "pci_bus_id": pci_bus_id(gpu),
        "device": f"nvidia{gpu}",
        "modelName": GPU_MODEL,
        source.host_label(version): hostname,
    }
    labels[source.exporter.info_labels(version)[-1]] = DRIVER
    return labels


def amd_gpu_labels(node: str, node_index: int, gpu: str | int) -> dict[str, str]:
    """The mandatory labels the AMD Device Metrics Exporter puts on a GPU's series (gpuMandatoryLables, v1.5.x),
    without job_id/job_user/job_partition (empty without a job) and without the scrape labels."""
    return {
        "gpu_id": str(gpu),
        "card_model": AMD_GPU_MODEL,
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "spx",
        "gpu_memory_partition_type": "nps1",
        "deployment_mode": "baremetal",
        "serial_number": f"PCB0{node_index:04d}{int(gpu):02d}",
        "hostname": node,
    }


# The temperature limits nvidia-smi -q -d TEMPERATURE reports for an H100 SXM, the GPU the simulator and the rule
# tests model (GPU and Memory Max Operating Temp; DCGM_FI_DEV_GPU_MAX_OP_TEMP and DCGM_FI_DEV_MEM_MAX_OP_TEMP).
H100_GPU_MAX_OPERATING_CELSIUS = 87
H100_MEMORY_MAX_OPERATING_CELSIUS = 95
