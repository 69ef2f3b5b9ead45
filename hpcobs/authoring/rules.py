"""Recording rules, alerts and groups as small declarative objects, plus their rendering to rule files."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from hpcobs.authoring.ruletest import Case
from hpcobs.lang import lint
from hpcobs.lang.escape import go_template_text, url_query
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings.config import Config
from hpcobs.settings.names import DashboardUid, Team

SEVERITIES = ("critical", "warning", "info")
_RECORD_NAME = re.compile(
    r"^(gpu|node|job|account|partition|cluster|user|rank|port|fs|exporter):[a-z0-9_]+:[a-z0-9_]+$"
)
_ALERT_NAME = re.compile(r"^(Gpu|Node|Ib|Storage|Training|Slurm|Security|Exporter)[A-Z][A-Za-z0-9]+$")
# The template actions hpcobs writes: a label (optionally URL-query encoded), or a string printed as is
# (escape.go_template_text writes {{ "{" }}).
_ACTION = re.compile(r'\{\{\s*(?:\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)(\s*\|\s*urlquery)?|"([^"\\]*)")\s*\}\}')


@dataclass(frozen=True)
class LinkBases:
    """Where alert annotations link (runbook_url, dashboard_url), resolved once from the config and the build."""

    grafana: str  # grafana.url
    runbooks: str  # runbooks.base_url
    dashboards: frozenset[str]  # the uids of the dashboards generated: an alert links to no other
    cluster: str  # cluster.label: every dashboard's cluster variable is named after it

    @classmethod
    def of(cls, config: Config, dashboards: Iterable[str] = frozenset(DashboardUid)) -> LinkBases:
        return cls(
            config.get("grafana", "url"),
            config.get("runbooks", "base_url"),
            frozenset(dashboards),
            config.get("cluster", "label"),
        )


# Where an alert's dashboard link lands, from what it is about (the labels it carries in every firing case), the most
# specific first (docs/alerts.md, Dashboard links): a job opens the job's view with the job, a node the node's view
# with the node (and the GPU), anything else its domain's dashboard with the partition or filesystem it names.
JOB_VIEW: tuple[DashboardUid, tuple[str, ...]] = (DashboardUid.TRAINING, ("hpc_job",))
NODE_VIEW: tuple[DashboardUid, tuple[str, ...]] = (DashboardUid.NODE, ("node", "gpu"))
DOMAIN_FILTERS: tuple[str, ...] = ("partition", "fs")


@dataclass
class Record:
    """A recording rule named level:metric:operations, with its expected-output tests."""

    record: str
    expr: str
    tests: list[Case] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _RECORD_NAME.match(self.record):
            raise ValueError(f"recording rule {self.record!r} does not follow level:metric:operations")

    def to_dict(self) -> dict:
        out: dict[str, str | dict[str, str]] = {"record": self.record, "expr": self.expr}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True)
class Lookup:
    """An annotation filled in when the alert is evaluated, by the `query` template function: what the alert's labels
    do not say, and must not say because it changes under the alert (the job on a GPU). Prometheus
    (template/template.go), vmalert (app/vmalert/templates/template.go) and promtool's unit tests (cmd/promtool/
    unittest.go builds its rule manager with EngineQueryFunc) all run it. Only a PromQL engine computes its text, so
    each firing case states what it must read (`Sample.annotations`)."""

    template: str  # Go template text, `query` included
    reads: tuple[str, ...]  # the recorded series its queries read: loaded and evaluated before the alert in its tests


@dataclass
class Alert:
    """An alert with its routing facts and its proof: cases where it fires and cases where it stays silent."""

    alert: str
    severity: str
    team: Team  # rendered as its plain string value
    expr: str
    for_: str | None
    summary: str
    description: str
    runbook: str  # docs/runbooks/<runbook>.md, section named like the alert
    dashboard: DashboardUid  # its domain's dashboard: where it links when it is about no one job or node (view())
    fires_on: list[Case]
    silent_on: list[Case]
    no_for_reason: str | None = None  # why there is no `for:` (the runbook repeats it)
    labels: dict[str, str] = field(default_factory=dict)
    fired_by: tuple[str, ...] = ()  # simulator scenarios (hpcobs.proof.simulate) that must fire it live
    lookups: dict[str, Lookup] = field(default_factory=dict)  # annotations a query fills in at evaluation
    # How long it keeps firing once its condition ends: an inhibition's source that must outlast the windows its
    # targets read, or a target left alone by a cause that resolved first notifies for a fault already explained.
    keep_firing_for: str | None = None
    # Its `node` label names a host serving the whole cluster (the Slurm controller, a Lustre server), not a
    # compute node of the node view: it links to its domain's dashboard.
    server_host: bool = False

    def view(self) -> tuple[DashboardUid, tuple[str, ...]]:
        """The dashboard its link opens and the labels it passes as that dashboard's variables, besides the
        cluster (JOB_VIEW, NODE_VIEW, else its domain's dashboard with the DOMAIN_FILTERS it carries)."""
        carried = self.labels_carried()
        if "hpc_job" in carried:
            uid, labels = JOB_VIEW
        elif "node" in carried and not self.server_host:
            uid, labels = NODE_VIEW
        else:
            uid, labels = self.dashboard, DOMAIN_FILTERS
        return uid, tuple(label for label in labels if label in carried)

    def names_read(self) -> set[str]:
        """The metric names the alert reads: its expression's and its lookups'."""
        return lint.metric_names(self.expr) | {name for lookup in self.lookups.values() for name in lookup.reads}

    def labels_carried(self) -> set[str]:
        """The label names the alert carries in every case it fires on: what an inhibition's `equal` can use."""
        carried = {"severity", "team", *self.labels}
        return carried | set.intersection(*(set(sample.labels) for case in self.fires_on for sample in case.expect))

    def __post_init__(self) -> None:
        problems = []
        if not _ALERT_NAME.match(self.alert):
            problems.append(
                "name must be CamelCase with a domain prefix "
                "(Gpu, Node, Ib, Storage, Training, Slurm, Security, Exporter)"
            )
        # The enums, not strings that happen to match them today: names.py is where a team or uid changes.
        if not isinstance(self.team, Team):
            problems.append("team must be a hpcobs.settings.names.Team")
        if not isinstance(self.dashboard, DashboardUid):
            problems.append("dashboard must be a hpcobs.settings.names.DashboardUid")
        if self.severity not in SEVERITIES:
            problems.append(f"severity must be one of {SEVERITIES}")
        if not self.summary.endswith(".") or "{{" in self.summary:
            problems.append("summary must be static text ending with a period")
        if self.for_ is None and not self.no_for_reason:
            problems.append("needs `for_` or a `no_for_reason`")
        for duration in (self.for_, self.keep_firing_for):
            if duration is not None:
                duration_seconds(duration)
        if not self.fires_on or not self.silent_on:
            problems.append("needs at least one fires_on case and one silent_on case")
        unstated = {
            key for case in self.fires_on for s in case.expect for key in self.lookups if key not in s.annotations
        }
        if unstated:
            problems.append(f"every firing case must state what its lookups {sorted(unstated)} read")
        if problems:
            raise ValueError(f"alert {self.alert}: " + "; ".join(problems))

    def annotations(self, links: LinkBases) -> dict[str, str]:
        """Annotation templates; label values enter the dashboard URL query encoded by Go's urlquery. The URL
        always has a query (the cluster), so a notification template appends the time around the alert with `&`
        (hpcobs.targets.alertmanager_templates)."""
        uid, labels = self.view()
        query = "&".join(f"var-{label}={{{{ $labels.{label} | urlquery }}}}" for label in (links.cluster, *labels))
        annotations = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": f"{go_template_text(links.runbooks)}/{self.runbook}.md#{self.alert.lower()}",
            **{key: lookup.template for key, lookup in self.lookups.items()},
        }
        if uid in links.dashboards:  # a dashboard whose exporters are all disabled is not generated
            annotations["dashboard_url"] = f"{go_template_text(links.grafana)}/d/{uid}?{query}"
        return annotations

    def all_labels(self) -> dict[str, str]:
        # Plain strings: YAML dumpers do not know the enums.
        return {"severity": self.severity, "team": str(self.team), **self.labels}

    def to_dict(self, links: LinkBases) -> dict:
        out = {
            "alert": self.alert,
            "expr": self.expr,
            "labels": self.all_labels(),
            "annotations": self.annotations(links),
        }
        if self.for_:
            out["for"] = self.for_
        if self.keep_firing_for:
            out["keep_firing_for"] = self.keep_firing_for
        return out


def alerts_of(
    runbook: str, dashboard: DashboardUid, team: Team | None = None, server_host: bool = False
) -> partial[Alert]:
    """Alert(...) with what a family of alerts shares: its runbook page, its domain's dashboard, whether its node
    label names a server of the whole cluster and, when every one goes to the same team, the team."""
    if team is None:
        return partial(Alert, runbook=runbook, dashboard=dashboard, server_host=server_host)
    return partial(Alert, runbook=runbook, dashboard=dashboard, server_host=server_host, team=team)


def label(name: str) -> str:
    """`{{ $labels.name }}`, for annotation templates."""
    return f"{{{{ $labels.{name} }}}}"


def render_template(text: str, labels: dict[str, str]) -> str:
    """Expand an annotation template the way Prometheus does, for the actions hpcobs writes:
    {{ $labels.x }} (a missing label is empty), {{ $labels.x | urlquery }} and {{ "text" }}."""
    out, pos = [], 0
    for action in _ACTION.finditer(text):
        out.append(_literal_text(text[pos : action.start()], text))
        name, pipe, literal = action.groups()
        if name is None:
            out.append(literal)
        else:
            value = labels.get(name, "")
            out.append(url_query(value) if pipe else value)
        pos = action.end()
    out.append(_literal_text(text[pos:], text))
    return "".join(out)


def _literal_text(chunk: str, text: str) -> str:
    # A `{` outside the supported actions would open an action (or a parse error) in Go's template.
    if "{" in chunk:
        raise ValueError(f"annotations support only $labels.x, $labels.x | urlquery and string actions: {text!r}")
    return chunk


@dataclass
class Group:
    """A rule group; `domain` names the output file out/prometheus/rules/<domain>.rules.yaml."""

    name: str
    domain: str
    interval: str
    rules: Sequence[Record | Alert]

    def to_dict(self, links: LinkBases) -> dict:
        return {
            "name": self.name,
            "interval": self.interval,
            "rules": [rule.to_dict(links) if isinstance(rule, Alert) else rule.to_dict() for rule in self.rules],
        }


def names_read(rule: Record | Alert) -> set[str]:
    """The metric names a rule reads (an alert's lookups included)."""
    return rule.names_read() if isinstance(rule, Alert) else lint.metric_names(rule.expr)


def _names_read(group: Group) -> set[str]:
    return {name for rule in group.rules for name in names_read(rule)}


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
