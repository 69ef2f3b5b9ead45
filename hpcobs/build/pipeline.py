"""config -> content -> the files of every output target. Pure: nothing is written here.

The only module that imports the content: it builds the model (hpcobs.targets.base.Model) from the content
packages and hands it to each registered target (hpcobs.targets.registry)."""

from __future__ import annotations

from collections import defaultdict

# The content packages, by their installed names (mypy reads their folders as top-level packages: pyproject.toml).
import hpcobs.alerts as alerts
import hpcobs.dashboards as dashboards
import hpcobs.recording_rules as recording_rules
from hpcobs.alerts import alertmanager, logs
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, LinkBases
from hpcobs.build import cardinality, enabled
from hpcobs.errors import UserError
from hpcobs.security import falco, tetragon
from hpcobs.settings import config as config_module
from hpcobs.settings import config_checks
from hpcobs.settings.config import Config
from hpcobs.targets import registry
from hpcobs.targets.base import Model

# Where tests/test_review.py still reads the rule files' folder; it belongs to hpcobs.targets.prometheus.


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


def model(config: Config) -> Model:
    """The content built from the config, before any format, without what reads a disabled exporter
    (hpcobs.build.enabled); refused when a team whose alerts are built has no route, or when its recording rules
    are over the cardinality budget, so that no command (build, check, diff, deploy) ships such a config."""
    ctx = Context(config)
    off = enabled.Disabled.of(ctx.sources, config)
    groups = off.rule_groups(rule_groups(ctx))
    _within_budget(config, ctx, groups)
    specs = off.dashboards([module.dashboard(ctx) for module in dashboards.MODULES])
    log_groups = logs.loki_groups(ctx)
    alerts = [rule for gs in groups.values() for g in gs for rule in g.rules if isinstance(rule, Alert)]
    alerts += [log.rule for group in log_groups for log in group.rules if isinstance(log.rule, Alert)]
    unrouted = config_checks.unrouted_teams(config.data, {str(alert.team) for alert in alerts})
    if unrouted:
        raise config_module.refusal(config, unrouted)
    return Model(
        config=config,
        links=LinkBases.of(config, (spec.uid for spec in specs)),
        rule_groups=groups,
        dashboards=specs,
        inhibitions=enabled.inhibitions(
            alertmanager.inhibitions(
                ctx,
                lambda role: enabled.alerts_reading_only(
                    groups,
                    {metric.name for metric in ctx.sources[role].metrics()},
                    {metric.name for source in ctx.sources for metric in source.metrics()},
                ),
            ),
            {alert.alert for alert in alerts},
        ),
        log_groups=log_groups,
        falco_rules=[] if "falco" in off.exporters else falco.document(ctx),
        tetragon_policies={} if "tetragon" in off.exporters else tetragon.documents(ctx),
    )


def generate(config: Config) -> dict[str, str]:
    """Every output file, by path relative to out/: each target's, which must lie where it says it writes."""
    built = model(config)
    files: dict[str, str] = {}
    for target in registry.TARGETS:
        written = target.files(built)
        misplaced = sorted(path for path in written if registry.owner(path) is not target)
        if misplaced:
            raise ValueError(f"target {target.name} writes outside its paths {target.paths}: {misplaced}")
        files.update(written)
    return dict(sorted(files.items()))


def built_rule_groups(ctx: Context) -> dict[str, list[Group]]:
    """Every rule group as the build writes it: without what reads a disabled exporter."""
    return enabled.Disabled.of(ctx.sources, ctx.config).rule_groups(rule_groups(ctx))


def estimate(ctx: Context, groups: dict[str, list[Group]]) -> cardinality.Estimate:
    """The cost of the recording rules on the reference cluster (hpcobs.build.cardinality)."""
    return cardinality.estimate([g for gs in groups.values() for g in gs], ctx.sources, ctx.cluster)


def _within_budget(config: Config, ctx: Context, groups: dict[str, list[Group]]) -> None:
    """Refuse, in one line, a config whose recording rules are over `cardinality.budget_percent`; the default
    config's estimate, built only then, shows which groups the site made grow."""
    budget = config.get("cardinality", "budget_percent")
    site = estimate(ctx, groups)
    if site.percent <= budget:
        return
    default_ctx = Context(config_module.load(None))
    default = estimate(default_ctx, built_rule_groups(default_ctx))
    raise UserError(cardinality.overrun(site, default, budget, config.origin[-1]))


def budget_report(config: Config) -> list[str]:
    """The cardinality budget of the recording rules on the reference cluster, as `python build.py` prints it."""
    ctx = Context(config)
    return cardinality.report(estimate(ctx, built_rule_groups(ctx)), config.get("cardinality", "budget_percent"))
