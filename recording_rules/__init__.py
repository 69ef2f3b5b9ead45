"""Recording rules, one module per domain; each exposes groups(ctx) -> list[Group]."""

from . import gpu, gpu_health, jobs, network, security, slurm, storage, training

MODULES = (gpu, gpu_health, jobs, training, network, storage, slurm, security)
