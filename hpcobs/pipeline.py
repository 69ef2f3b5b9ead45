"""config -> rules -> alerts -> dashboards -> rendered files (DESIGN.md §3). Pure: nothing is written here."""
from __future__ import annotations

from collections import defaultdict

import alerts
import dashboards
import recording_rules
from alerts import alertmanager

from . import dashboard as dashboard_engine
from . import promtest, provisioning
from .config import Config
from .context import Context
from .render import GENERATED, json_text, yaml_text
from .rules import Group

RULES_DIR = "prometheus/rules"
TESTS_DIR = "prometheus/tests"


def rule_groups(ctx: Context) -> dict[str, list[Group]]:
    """Every group, by domain: recording groups first, then alerting groups, in module order."""
    by_domain: dict[str, list[Group]] = defaultdict(list)
    for module in recording_rules.MODULES + alerts.MODULES:
        for group in module.groups(ctx):
            by_domain[group.domain].append(group)
    names = [g.name for groups in by_domain.values() for g in groups]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"rule group names used twice: {duplicated}")
    return dict(by_domain)


def generate(config: Config) -> dict[str, str]:
    """Every output file, by path relative to out/."""
    ctx = Context(config)
    grafana_url = config.get("grafana", "url")
    runbook_base = config.get("runbooks", "base_url")
    files: dict[str, str] = {}

    groups = rule_groups(ctx)
    for domain, domain_groups in groups.items():
        files[f"{RULES_DIR}/{domain}.rules.yaml"] = yaml_text(
            {"groups": [g.to_dict(grafana_url, runbook_base) for g in domain_groups]}, GENERATED)
        rule_files = [f"../rules/{d}.rules.yaml" for d in domains_needed(groups, domain)]
        files[f"{TESTS_DIR}/{domain}.tests.yaml"] = yaml_text(
            promtest.test_file(domain_groups, rule_files, ctx.scrape_interval, grafana_url, runbook_base), GENERATED)

    files["alertmanager/alertmanager.yml"] = yaml_text(alertmanager.config(ctx), GENERATED)

    folder = config.get("grafana", "folder")
    for module in dashboards.MODULES:
        spec = module.dashboard(ctx)
        files[f"grafana/dashboards/{folder}/{spec.uid}.json"] = json_text(dashboard_engine.build(spec))
    files["grafana/provisioning/dashboards/hpcobs.yaml"] = yaml_text(provisioning.dashboards_provider(), GENERATED)
    files["grafana/provisioning/datasources/hpcobs.yaml"] = yaml_text(provisioning.datasources(config), GENERATED)
    return dict(sorted(files.items()))


def domains_needed(groups: dict[str, list[Group]], domain: str) -> list[str]:
    """The domain and every domain whose records it reads, transitively: a test file loads only those
    rule files (promtool evaluates every loaded group at every step, so fewer files, faster tests)."""
    from . import lint
    producer = {r.record: d for d, gs in groups.items() for g in gs for r in g.rules if hasattr(r, "record")}
    needed, todo = set(), [domain]
    while todo:
        current = todo.pop()
        if current in needed:
            continue
        needed.add(current)
        todo += [producer[n] for g in groups[current] for r in g.rules for n in lint.metric_names(r.expr)
                 if n in producer]
    return sorted(needed)


def layers(groups: list[Group]) -> list[list[Group]]:
    """Groups ordered by dependency: a group only reads raw series or records of earlier layers.

    Rulers evaluate groups independently, and backfilling (promtool tsdb create-blocks-from rules,
    vmalert replay) sees only what is already stored, so records are replayed layer by layer.
    """
    from . import lint
    producer = {r.record: g.name for g in groups for r in g.rules if hasattr(r, "record")}
    needs = {g.name: {producer[n] for r in g.rules for n in lint.metric_names(r.expr) if n in producer} - {g.name}
             for g in groups}
    ordered, placed = [], set()
    while len(placed) < len(groups):
        ready = [g for g in groups if g.name not in placed and needs[g.name] <= placed]
        if not ready:
            raise ValueError(f"rule groups depend on each other in a cycle: {sorted(set(needs) - placed)}")
        ordered.append(ready)
        placed |= {g.name for g in ready}
    return ordered


def budget_report(config: Config) -> list[str]:
    """The cardinality budget of the recording rules on the reference cluster (hpcobs.cardinality)."""
    from . import cardinality
    ctx = Context(config)
    groups = [g for domain_groups in rule_groups(ctx).values() for g in domain_groups]
    return cardinality.report(groups, ctx.sources, ctx.cluster)
