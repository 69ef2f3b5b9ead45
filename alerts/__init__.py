"""Alerting rules, one module per domain; each exposes groups(ctx) -> list[Group]."""
from . import gpu

MODULES = (gpu,)
