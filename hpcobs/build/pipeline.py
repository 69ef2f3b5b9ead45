"""config -> rules -> alerts -> dashboards -> rendered files. Pure: nothing is written here."""

from __future__ import annotations

import posixpath
from collections import defaultdict
from dataclasses import replace

# The content packages, by their installed names (mypy reads their folders as top-level packages: pyproject.toml).
import hpcobs.alerts as alerts
import hpcobs.dashboards as dashboards
import hpcobs.recording_rules as recording_rules
from hpcobs.alerts import alertmanager, logs
from hpcobs.authoring import dashboard as dashboard_engine
from hpcobs.authoring import logs as loki_rules
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, LinkBases, Record
from hpcobs.lang import lint
from hpcobs.lang.render import GENERATED, json_text, yaml_text
from hpcobs.security import falco as falco_rules
from hpcobs.security import tetragon as tetragon_policies
from hpcobs.settings.config import Config
from hpcobs.targets import promtest, provisioning
from hpcobs.targets.rule_targets import files as rule_target_files

RULES_DIR = "prometheus/rules"
# prometheus/tests/<domain>/<rule>.tests.yaml, each loading <rule>.rules.yaml beside it.
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
    links = LinkBases.of(config)
    files: dict[str, str] = {}

    groups = rule_groups(ctx)
    for domain, domain_groups in groups.items():
        files[f"{RULES_DIR}/{domain}.rules.yaml"] = yaml_text(
            {"groups": [g.to_dict(links) for g in domain_groups]}, GENERATED
        )
        for name, tested in rules_by_name(domain_groups).items():
            stem = f"{TESTS_DIR}/{domain}/{name.replace(':', '.')}"
            files[f"{stem}.rules.yaml"] = yaml_text(
                {"groups": [g.to_dict(links) for g in rules_read(groups, tested)]}, GENERATED
            )
            files[f"{stem}.tests.yaml"] = yaml_text(
                promtest.test_file(tested, [f"{posixpath.basename(stem)}.rules.yaml"], ctx.scrape_interval, links),
                GENERATED,
            )

    every_group = [g.to_dict(links) for domain_groups in groups.values() for g in domain_groups]
    files.update(rule_target_files(config, every_group))

    files["alertmanager/alertmanager.yml"] = yaml_text(alertmanager.config(ctx), GENERATED)
    files.update({**falco_rules.files(ctx), **tetragon_policies.files(ctx)})
    files[loki_rules.RULES_FILE] = loki_rules.rule_file(logs.loki_groups(ctx), links)

    folder = config.get("grafana", "folder")
    for module in dashboards.MODULES:
        spec = module.dashboard(ctx)
        files[f"grafana/dashboards/{folder}/{spec.uid}.json"] = json_text(dashboard_engine.build(spec))
    files["grafana/provisioning/dashboards/hpcobs.yaml"] = yaml_text(provisioning.dashboards_provider(), GENERATED)
    files["grafana/provisioning/datasources/hpcobs.yaml"] = yaml_text(provisioning.datasources(config), GENERATED)
    return dict(sorted(files.items()))


def rules_by_name(groups: list[Group]) -> dict[str, list[Record | Alert]]:
    """The rules of these groups by name, in file order: rules sharing a name (an alert's warning and critical
    levels) are tested together, as promtool reports every alert of a name at once."""
    by_name: dict[str, list[Record | Alert]] = defaultdict(list)
    for group in groups:
        for rule in group.rules:
            by_name[rule.record if isinstance(rule, Record) else rule.alert].append(rule)
    return dict(by_name)


def rules_read(groups: dict[str, list[Group]], tested: list[Record | Alert]) -> list[Group]:
    """What a test of these rules loads: them and every recording rule they read, transitively, each in its own
    group (same name and interval, rules in file order) and the groups in dependency order. promtool evaluates
    every loaded rule at every step of every test, so nothing else is loaded; the rules loaded behave as in
    the full files, since everything they read is loaded with them."""
    producers: dict[str, list[Record]] = defaultdict(list)
    for group in (g for gs in groups.values() for g in gs):
        for rule in group.rules:
            if isinstance(rule, Record):
                producers[rule.record].append(rule)
    wanted = {id(rule) for rule in tested}
    todo = list(tested)
    while todo:
        for name in lint.metric_names(todo.pop().expr):
            for rule in producers.get(name, []):
                if id(rule) not in wanted:
                    wanted.add(id(rule))
                    todo.append(rule)
    loaded = [replace(g, rules=[r for r in g.rules if id(r) in wanted]) for gs in groups.values() for g in gs]
    return [g for layer in layers([g for g in loaded if g.rules]) for g in layer]


def _names_read(group: Group) -> set[str]:
    return {name for rule in group.rules for name in lint.metric_names(rule.expr)}


def layers(groups: list[Group]) -> list[list[Group]]:
    """Groups ordered by dependency: a group only reads raw series or records of earlier layers.

    Rulers evaluate groups independently, and backfilling (promtool tsdb create-blocks-from rules,
    vmalert replay) sees only what is already stored, so records are replayed layer by layer.
    """
    producer = {r.record: g.name for g in groups for r in g.rules if isinstance(r, Record)}
    needs = {g.name: {producer[n] for n in _names_read(g) if n in producer} - {g.name} for g in groups}
    ordered: list[list[Group]] = []
    placed: set[str] = set()
    while len(placed) < len(groups):
        ready = [g for g in groups if g.name not in placed and needs[g.name] <= placed]
        if not ready:
            raise ValueError(f"rule groups depend on each other in a cycle: {sorted(set(needs) - placed)}")
        ordered.append(ready)
        placed |= {g.name for g in ready}
    return ordered


def budget_report(config: Config) -> list[str]:
    """The cardinality budget of the recording rules on the reference cluster (hpcobs.build.cardinality)."""
    from hpcobs.build import cardinality

    ctx = Context(config)
    groups = [g for domain_groups in rule_groups(ctx).values() for g in domain_groups]
    return cardinality.report(groups, ctx.sources, ctx.cluster)
