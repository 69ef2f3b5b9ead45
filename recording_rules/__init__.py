"""Recording rules, one module per domain; each exposes groups(ctx) -> list[Group].

Each record is one spec: Record(name, expression, tests=[Case(...)]) with its own expected values, one function
per group or family of records. Records of one family (node means of optional GPU fields, per-port rates) look
alike in shape on purpose (a duplicate-code scan lists them as same-shape pairs); where only names differ they
are table rows (network RATES, storage LUSTRE_RATES), and what they share as logic (selection across exporter
versions, aggregation, test series) is written once in hpcobs.authoring.context, hpcobs.lang.promql and
hpcobs.authoring.synthetic.
"""

from . import gpu, gpu_health, jobs, network, security, slurm, storage, training

MODULES = (gpu, gpu_health, jobs, training, network, storage, slurm, security)
