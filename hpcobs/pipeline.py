"""config -> rules -> alerts -> dashboards -> rendered files. Pure: nothing is written here."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import alerts
import dashboards
import recording_rules
from alerts import alertmanager

from . import dashboard as dashboard_engine
from . import lint, promtest, provisioning
from .config import Config
from .context import Context
from .render import GENERATED, json_text, yaml_text
from .rules import Group, Record

RULES_DIR = "prometheus/rules"
TESTS_DIR = "prometheus/tests"
# The recording groups of other domains a domain's tests read, one file per test file. A folder of its own:
# `promtool test rules prometheus/tests/*.yaml` takes every YAML file directly in prometheus/tests/ for a test.
TEST_RULES_DIR = f"{TESTS_DIR}/rules"


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
        # The tests load the domain's own rule file as deployed, so they prove exactly what Prometheus runs.
        rule_files = [f"../rules/{domain}.rules.yaml"]
        read = recording_groups_read(groups, domain)
        if read:
            files[f"{TEST_RULES_DIR}/{domain}.rules.yaml"] = yaml_text(
                {"groups": [g.to_dict(grafana_url, runbook_base) for g in read]}, GENERATED)
            rule_files.insert(0, f"rules/{domain}.rules.yaml")
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


def recording_groups_read(groups: dict[str, list[Group]], domain: str) -> list[Group]:
    """The recording rules of other domains that the domain's rules read, transitively, as their groups in
    dependency order: with the domain's own rule file, all that its test file loads. promtool evaluates
    every loaded rule at every step of every test, so alerts and unread groups of other domains stay out."""
    producer = {r.record: g for gs in groups.values() for g in gs for r in g.rules if isinstance(r, Record)}
    read: set[str] = set()
    todo = list(groups[domain])
    while todo:
        for name in _names_read(todo.pop()):
            group = producer.get(name)
            if group is not None and group.domain != domain and group.name not in read:
                read.add(group.name)
                todo.append(group)
    recording = [replace(g, rules=[r for r in g.rules if isinstance(r, Record)])
                 for gs in groups.values() for g in gs if g.name in read]
    return [g for layer in layers(recording) for g in layer]


def _names_read(group: Group) -> set[str]:
    return {name for rule in group.rules for name in lint.metric_names(rule.expr)}


def layers(groups: list[Group]) -> list[list[Group]]:
    """Groups ordered by dependency: a group only reads raw series or records of earlier layers.

    Rulers evaluate groups independently, and backfilling (promtool tsdb create-blocks-from rules,
    vmalert replay) sees only what is already stored, so records are replayed layer by layer.
    """
    producer = {r.record: g.name for g in groups for r in g.rules if isinstance(r, Record)}
    needs = {g.name: {producer[n] for n in _names_read(g) if n in producer} - {g.name} for g in groups}
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
