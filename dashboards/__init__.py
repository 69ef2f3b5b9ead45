"""The dashboards, one module per dashboard; each exposes dashboard(ctx) -> DashboardSpec and FOLDER."""
from . import gpu_cluster

MODULES = (gpu_cluster,)
