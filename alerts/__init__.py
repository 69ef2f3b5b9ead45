"""Alerting rules, one module per domain; each exposes groups(ctx) -> list[Group]."""
from . import exporters, gpu, jobs, network, security, slurm, storage, training

MODULES = (gpu, network, storage, training, slurm, exporters, security, jobs)
