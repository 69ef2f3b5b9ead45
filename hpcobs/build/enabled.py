"""What `exporters.<id>.enabled: false` takes out of a build (docs/configuration.md#what-enabled-does).

Content is written for every exporter; this module removes, from the content built, whatever reads a disabled
one, following the PromQL dependency graph rather than any list kept by hand:

- the raw metric names of the disabled exporters (every deployed version, prefixes and overrides applied) that
  no enabled exporter also exposes are off;
- a record reading a name that is off is removed and its own name is off, transitively; an alert reading one
  is removed; a group left with no rule goes;
- a dashboard query reading one is removed (hpcobs.authoring.dashboard.narrowed: then panels, rows and
  dashboards left with no query), and links to a dashboard removed go;
- an inhibition whose source or target alerts are none written goes, and one naming some keeps those written;
- the Falco rules and the Tetragon policies go with their exporter: Falco's and Tetragon's metrics are how
  hpcobs sees them run, and nothing else reads them;
- a Grafana datasource not provisioned (`grafana.datasources.<kind>.enabled: false`) is off for the dashboards by
  the same rule: its queries, links into Explore on it and text panels linking there go, then the panels left with
  no query and the variables nothing left refers to.

The Alertmanager routes a site must write follow: a team that no alert left carries needs none
(hpcobs.build.pipeline).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hpcobs.authoring.dashboard import DashboardSpec, Off, narrowed
from hpcobs.authoring.rules import Alert, Group, Record
from hpcobs.exporters.sources import Sources
from hpcobs.lang import lint
from hpcobs.settings.config import Config
from hpcobs.targets.provisioning import enabled_datasources

# An Alertmanager matcher selecting alerts by name: `alertname="A"` or `alertname=~"A|B"`.
_ALERTNAME = re.compile(r'alertname=~?"([A-Za-z0-9_|]*)"')


@dataclass
class Disabled:
    """The metric names a build must not read: the disabled exporters' and, once rules are pruned, their records'."""

    names: set[str]
    exporters: frozenset[str]
    datasources: frozenset[str]  # the Grafana datasource kinds not provisioned

    @classmethod
    def of(cls, sources: Sources, config: Config) -> Disabled:
        on = {metric.name for source in sources.enabled() for metric in source.metrics()}
        off = [source for source in sources if not source.enabled]
        names = {metric.name for source in off for metric in source.metrics()} - on
        datasources = set(config.get("grafana", "datasources")) - set(enabled_datasources(config))
        return cls(names, frozenset(source.id for source in off), frozenset(datasources))

    def reads_off(self, expr: str) -> bool:
        return not lint.metric_names(expr).isdisjoint(self.names)

    def rule_groups(self, by_domain: Mapping[str, Sequence[Group]]) -> dict[str, list[Group]]:
        """The groups without the rules that read what is off (records transitively, whatever their group order)."""
        kept = {domain: list(groups) for domain, groups in by_domain.items()}
        changed = True
        while changed:
            changed = False
            for groups in kept.values():
                for index, group in enumerate(groups):
                    reads_off = [self.reads_off(rule.expr) for rule in group.rules]
                    if not any(reads_off):
                        continue
                    changed = True
                    off = [rule for rule, gone in zip(group.rules, reads_off, strict=True) if gone]
                    self.names.update(rule.record for rule in off if isinstance(rule, Record))
                    rules = [rule for rule, gone in zip(group.rules, reads_off, strict=True) if not gone]
                    groups[index] = dataclasses.replace(group, rules=rules)
        pruned = {domain: [g for g in groups if g.rules] for domain, groups in kept.items()}
        return {domain: groups for domain, groups in pruned.items() if groups}

    def dashboards(self, specs: Sequence[DashboardSpec]) -> list[DashboardSpec]:
        """The dashboards without the queries that read what is off or a datasource not provisioned, those left with
        no query not generated, and no link to one of those or into such a datasource."""
        removed: set[str] = set()
        while True:
            off = Off(self.reads_off, removed, self.datasources)
            kept = [d for spec in specs if spec.uid not in removed and (d := narrowed(spec, off))]
            gone = {spec.uid for spec in specs} - {spec.uid for spec in kept}
            if gone == removed:
                return kept
            removed = gone


def inhibitions(rules: Sequence[dict[str, Any]], alerts: set[str]) -> list[dict[str, Any]]:
    """The inhibitions of the alerts a build writes (`alerts`: its Prometheus and Loki alert names): a matcher
    naming alerts keeps those written; an inhibition whose source or target matcher names none can never apply,
    and goes."""
    kept = []
    for rule in rules:
        sides = {side: [_within(m, alerts) for m in rule[side]] for side in ("source_matchers", "target_matchers")}
        if all(m is not None for matchers in sides.values() for m in matchers):
            kept.append({**rule, **sides})
    return kept


def _within(matcher: str, alerts: set[str]) -> str | None:
    """A positive alertname matcher naming only the alerts written (None when it names none); others as they are."""
    match = _ALERTNAME.fullmatch(matcher)
    if match is None:
        return matcher
    named = match.group(1).split("|")
    left = [name for name in named if name in alerts]
    if not left:
        return None
    if len(left) == len(named):
        return matcher
    return f'alertname="{left[0]}"' if len(left) == 1 else f'alertname=~"{"|".join(left)}"'


def alerts_reading_only(by_domain: Mapping[str, Sequence[Group]], names: set[str], raw: set[str]) -> list[Alert]:
    """The alerts whose every raw series read (`raw`: every exporter's metric names), directly or through records,
    is one of `names`: the alerts an exporter's silence leaves without data, and no other evidence."""
    rules = [rule for groups in by_domain.values() for group in groups for rule in group.rules]
    produced = {rule.record: rule.expr for rule in rules if isinstance(rule, Record)}

    def read(expr: str, seen: frozenset[str]) -> set[str]:
        found = set()
        for name in lint.metric_names(expr):
            if name in produced and name not in seen:
                found |= read(produced[name], seen | {name})
            elif name in raw:
                found.add(name)
        return found

    return [rule for rule in rules if isinstance(rule, Alert) and set() < read(rule.expr, frozenset()) <= names]
