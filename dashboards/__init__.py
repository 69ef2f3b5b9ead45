"""The dashboards, one module per dashboard; each exposes dashboard(ctx) -> DashboardSpec (uids in
hpcobs.settings.names).

Each panel is one spec: a call of a builder of hpcobs.authoring.dashboard (timeseries, stat, table, heatmap...) with its
title, query, unit and description as keywords, one function per row. Panels therefore look alike in shape on
purpose (a duplicate-code scan lists them as same-shape pairs): what they share as logic (datasources, legends,
thresholds, layout, schema checks) is written once in hpcobs.authoring.dashboard, and shared queries and variables in
dashboards/common.py.
"""

from . import gpu_cluster, network_storage, node, security, slurm_jobs, training

MODULES = (gpu_cluster, node, network_storage, training, security, slurm_jobs)
