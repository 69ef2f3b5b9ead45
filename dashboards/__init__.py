"""The dashboards, one module per dashboard; each exposes dashboard(ctx) -> DashboardSpec (uids in common.py)."""

from . import gpu_cluster, network_storage, security, slurm_jobs, training

MODULES = (gpu_cluster, network_storage, training, security, slurm_jobs)
