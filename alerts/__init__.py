"""Alerting rules, one module per domain; each exposes groups(ctx) -> list[Group].

Each alert is one spec: a call of its family's Alert factory (hpcobs.authoring.rules.alerts_of) with the same
keywords in the same order (name, severity, team, expr, for_, summary, description, fired_by) and then its proof,
the standard cases hpcobs.authoring.alert_cases derives from the alert's `for` and the fault's onset plus the
hand-written cases that prove something specific. Alerts therefore look alike in shape on purpose (a duplicate-code
scan lists them as same-shape pairs): what they share as logic (case timing, test series, runbook and dashboard) is
written once in hpcobs.authoring.alert_cases, hpcobs.authoring.synthetic and hpcobs.authoring.rules.
"""

from . import exporters, gpu, gpu_fleet, gpu_hardware, jobs, network, security, slurm, storage, training

MODULES = (gpu, gpu_hardware, gpu_fleet, network, storage, training, slurm, exporters, security, jobs)
