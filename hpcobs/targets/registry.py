"""Every output target, once (hpcobs.targets.base): hpcobs.build.pipeline writes their files, hpcobs.build.validate
checks them and hpcobs.delivery.semantic_diff compares them by looping over this list. A new target is a module
and a line here (docs/architecture.md#add-an-output-target)."""

from __future__ import annotations

from hpcobs.targets import (
    alertmanager,
    dashboards,
    falco,
    loki,
    prometheus,
    promtest,
    provisioning,
    rule_targets,
    scale_out,
    scrape,
    tetragon,
)
from hpcobs.targets.base import Target

TARGETS: list[Target] = [
    prometheus.TARGET,
    promtest.TARGET,
    scrape.TARGET,
    scale_out.TARGET,
    rule_targets.KUBERNETES,
    rule_targets.MIMIR,
    alertmanager.TARGET,
    loki.TARGET,
    falco.TARGET,
    tetragon.TARGET,
    dashboards.TARGET,
    provisioning.TARGET,
]


def owner(path: str) -> Target | None:
    """The target that owns this path under out/, None for a path no target writes."""
    return next((target for target in TARGETS if target.owns(path)), None)
