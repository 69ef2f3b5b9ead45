"""Recording rules, one module per domain; each exposes groups(ctx) -> list[Group]."""
from . import gpu, jobs, network, security, slurm, storage, training

MODULES = (gpu, jobs, training, network, storage, slurm, security)
