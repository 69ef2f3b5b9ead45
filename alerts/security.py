"""Security alerts: Falco rule matches and Tetragon enforcement, per node.

Falco's rules_matches_total and Tetragon's policy and action counters only appear with their first match,
already at 1 or more: rate() and increase() never see that first step, and a critical event is often a
single match. So an event alert fires on a counter that rose within the event window or on a series that
did not exist one window ago (hpcobs.lang.promql.rise_within, which the security records use too). Reading the raw
counters is cheap here (the selection is filtered on a priority, a few rule names or policies, and only matched
rules have series) and needed: the records keep per-node totals by priority and per-rule totals without the node.

An alert on matches of a Falco rule takes its severity from that rule's priority, as SecurityFalcoCritical draws the
line (security_falco_critical_priority): Critical and above pages; Error, Warning and Notice are a ticket for the
security team's queue (severity warning, which the default routes send to the security channel, not the pager).
Falco's own levels say how sure a rule is that something is wrong: the shipped outbound rule is Notice (a job
downloading from the internet is its usual match) and the checkpoint rule Warning (a backup tool or an
administrator is its usual match), so neither wakes anyone up; a site that wants them paged routes them by name.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

from hpcobs.security import names as security_content
from hpcobs.security.names import FalcoRule

from hpcobs.authoring.alert_cases import standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Sample, Series, alert
from hpcobs.authoring.synthetic import falco_match, series, tetragon_action, tetragon_event
from hpcobs.lang.escape import go_template_text
from hpcobs.lang.promql import duration, duration_seconds, one_of, rise_within
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

# A first match at the 11th scrape: the series starts at 1.
APPEAR = "_x10 1x30"
# Three matches at the 11th scrape, then one every other scrape.
KEEPS_MATCHING = "_x10 3+0.5x30"
SHELL = "Terminal shell in container"
UNRELATED_RULE = "Read sensitive file untrusted"

THRESHOLDS = (
    declare.duration(
        "security_event_window",
        "10m",
        "How long a Falco rule match or a Tetragon event keeps its security alert active (SecurityFalcoCritical, "
        "SecurityUnexpectedOutbound, SecurityCheckpointForeignRead, SecurityTetragonEnforcement: they have no "
        "`for:`).",
    ),
    declare.number(
        "security_falco_critical_priority",
        2,
        "Falco native priority number at or below which a match pages (0 Emergency, 1 Alert, 2 Critical): "
        "SecurityFalcoCritical's rules, and the severity of SecurityUnexpectedOutbound and "
        "SecurityCheckpointForeignRead from their shipped rule's priority (critical at or below it, warning above).",
        expected="a Falco priority number, 0 (Emergency) to 7 (Debug)",
        whole=True,
        minimum=0,
        maximum=7,
    ),
    declare.names(
        "security_tetragon_enforcement_actions",
        ["signal", "override", "notify_enforcer"],
        "Tetragon selector action label values that enforce (kill or deny), SecurityTetragonEnforcement; monitor_* "
        "only observe.",
    ),
    declare.duration(
        "security_falco_drops_for",
        "10m",
        "How long Falco may keep dropping kernel events or alerts before SecurityFalcoDroppingEvents.",
    ),
)


def groups(ctx: Context) -> list[Group]:
    events = _Events(ctx)
    rules = [
        _falco_critical(events),
        _unexpected_outbound(events),
        _checkpoint_foreign_read(events),
        _tetragon_enforcement(events),
        _falco_dropping_events(events),
    ]
    return [Group("hpcobs-security-alerts", domain="security", interval=ctx.evaluation_interval, rules=rules)]


@dataclass(frozen=True)
class _Events:
    """What the event alerts share: the event window, its evaluation times and the test series."""

    ctx: Context

    @cached_property
    def window(self) -> str:
        return self.ctx.thresholds.security_event_window

    @cached_property
    def step(self) -> int:
        return duration_seconds(self.ctx.scrape_interval)

    @cached_property
    def node_alert(self) -> partial[Alert]:
        return alerts_of("security", DashboardUid.SECURITY, Team.SECURITY)

    @cached_property
    def event_alert(self) -> partial[Alert]:
        """An alert on matches within the event window: it has no `for`."""
        no_for = (
            "a match is a single event, a counter step that need not repeat: a `for` would drop a lone match. "
            f"The alert stays active for {self.window} (security_event_window) after the last match instead"
        )
        return partial(self.node_alert, for_=None, no_for_reason=no_for)

    @property
    def where(self) -> str:
        return f"cluster {label(self.ctx.cluster)}"

    @property
    def appears_at(self) -> str:
        """Just after a first match (APPEAR)."""
        return duration(13 * self.step)

    @property
    def later(self) -> str:
        """A few scrapes into KEEPS_MATCHING."""
        return duration(16 * self.step)

    @property
    def quiet_at(self) -> str:
        """When a match of old_then_quiet() has left the window."""
        return duration(21 * self.step + duration_seconds(self.window) + 6 * self.step)

    def rose(self, exporter: str, signal: str, by: tuple[str, ...], matchers: dict[str, str]) -> str:
        """Counters of matching series that rose within the window, or appeared within it."""
        rise = self.ctx.select(
            exporter, [signal], by, op="sum", where=matchers, over=lambda e: rise_within(e, self.window)
        )
        return f"{rise} > 0"

    def on_node(self, node: str = "n1", **labels: str) -> list[Sample]:
        return [alert(**self.ctx.cluster_labels, node=node, **labels)]

    def falco(self, values: str, rule: str, priority: str, node: str = "n1") -> Series:
        return falco_match(self.ctx, values, node=node, rule=rule, priority=priority)

    def tetragon(self, values: str, policy: str, node: str = "n1") -> Series:
        return tetragon_event(self.ctx, values, node=node, policy=policy, binary="/usr/bin/rsync")

    @cached_property
    def guard_policy(self) -> str:
        return security_content.tetragon_policy(self.ctx.thresholds, "checkpoint-guard").name

    def action(self, values: str, name: str, node: str = "n1") -> Series:
        return tetragon_action(self.ctx, values, node=node, policy=self.guard_policy, action=name)

    def old_then_quiet(self, build: Callable[..., Series], **labels: str) -> list[Series]:
        """A match long ago, nothing since: outside the window at quiet_at."""
        late = duration_seconds(self.window) // self.step + 10
        return [build(f"1x20 2x{late + 30}", **labels)]


def severity(ctx: Context, rule: FalcoRule) -> str:
    """The severity of an alert on a Falco rule's matches: critical (a page) at the priorities SecurityFalcoCritical
    pages for, warning (the security team's queue) below them."""
    return "critical" if int(rule.priority_number) <= ctx.thresholds.security_falco_critical_priority else "warning"


def _falco_critical(events: _Events) -> Alert:
    critical = events.ctx.thresholds.security_falco_critical_priority
    priorities = {"priority": one_of([str(priority) for priority in range(critical + 1)])}
    ssh = "Disallowed SSH Connection"
    # The configured level, the one above it (more severe) and the one just below it, as Falco writes them.
    level, above, below = str(critical), str(max(critical - 1, 0)), str(critical + 1)
    return events.event_alert(
        "SecurityFalcoCritical",
        severity="critical",
        expr=events.rose("falco", "rule_matches", ("node", "rule_name", "priority"), priorities),
        summary="Falco matched a rule of priority Critical or above.",
        description=f'Falco rule "{label("rule_name")}" (priority {label("priority")}: 0 Emergency, 1 Alert, '
        f"2 Critical) matched on {label('node')} ({events.where}) within the last {events.window}. Read "
        "the Falco output on the node for the process, user and job, and isolate the node if it is real.",
        fires_on=[
            Case(
                "the first match at the configured priority (Critical by default) creates the series at 1",
                at=events.appears_at,
                series=[events.falco(APPEAR, SHELL, level)],
                expect=events.on_node(rule_name=SHELL, priority=level),
            ),
            Case(
                "a rule of a more severe priority (Alert by default) that matched before matches again",
                at=duration(32 * events.step),  # the scrape after the second match
                series=[events.falco("1x30 2x30", ssh, above, node="n2")],
                expect=events.on_node("n2", rule_name=ssh, priority=above),
            ),
        ],
        silent_on=[
            Case(
                "no critical rule has matched",
                at=duration(40 * events.step),
                series=[events.falco("0+1x40", UNRELATED_RULE, below)],
            ),
            Case(
                "a match just below the configured priority (Error by default)",
                at=events.appears_at,
                series=[events.falco(APPEAR, UNRELATED_RULE, below)],
            ),
            Case(
                f"a match at the configured priority older than {events.window}",
                at=events.quiet_at,
                series=events.old_then_quiet(events.falco, rule=SHELL, priority=level),
            ),
        ],
    )


def _unexpected_outbound(events: _Events) -> Alert:
    rules = events.ctx.thresholds.security_outbound_rules
    outbound = rules[0]
    shipped = security_content.falco_rule(events.ctx.thresholds, "outbound")
    priority = shipped.priority_number
    return events.event_alert(
        "SecurityUnexpectedOutbound",
        severity=severity(events.ctx, shipped),
        expr=events.rose("falco", "rule_matches", ("node", "rule_name"), {"rule_name": one_of(rules)}),
        summary="A compute node opened an unexpected outbound connection.",
        description=f'Falco rule "{label("rule_name")}" matched on {label("node")} ({events.where}) within the last '
        f"{events.window}: a process connected outside the allowed destinations (data or model weights "
        "leaving the cluster?). Find the process and its job from the Falco output and squeue -w.",
        fired_by=("unexpected_outbound",),
        fires_on=[
            Case(
                "three matches, then one a minute",
                at=events.later,
                series=[events.falco(KEEPS_MATCHING, outbound, priority)],
                expect=events.on_node(rule_name=outbound),
            )
        ],
        silent_on=[
            Case("only other rules match", at=events.later, series=[events.falco(KEEPS_MATCHING, UNRELATED_RULE, "4")]),
            Case(
                f"the last outbound match is older than {events.window}",
                at=events.quiet_at,
                series=events.old_then_quiet(events.falco, rule=outbound, priority=priority),
            ),
        ],
    )


def _checkpoint_foreign_read(events: _Events) -> Alert:
    rules, policies = (
        events.ctx.thresholds.security_checkpoint_rules,
        events.ctx.thresholds.security_checkpoint_policies,
    )
    rule, policy = rules[0], policies[0]
    reads = security_content.checkpoint_foreign_reads(events.ctx.thresholds)
    shipped = security_content.falco_rule(events.ctx.thresholds, "checkpoint")
    priority = shipped.priority_number
    falco_read = events.falco(KEEPS_MATCHING, rule, priority, node="n3")
    tetragon_read = events.tetragon("_x10 2+0.5x30", policy, node="n3")
    return events.event_alert(
        "SecurityCheckpointForeignRead",
        severity=severity(events.ctx, shipped),
        expr=f"{events.rose('falco', 'rule_matches', ('node',), reads.falco)} or "
        f"{events.rose('tetragon', 'policy_events', ('node',), reads.tetragon)}",
        summary="A process outside the owning job read a training checkpoint.",
        description=f"On {label('node')} ({events.where}) a process outside the owning job opened a checkpoint within "
        f"the last {events.window} (Falco rules {go_template_text(', '.join(rules))} or Tetragon "
        f"policies {go_template_text(', '.join(policies))}). Identify the binary and user with tetra "
        "getevents or the Falco output; model weights may be leaving with it.",
        fired_by=("checkpoint_foreign_read",),
        fires_on=[
            Case(
                "the Falco rule and the Tetragon policy both match: one alert for the node",
                at=events.appears_at,
                series=[falco_read, tetragon_read],
                expect=events.on_node("n3"),
            ),
            Case(
                "only Tetragon sees it (Falco rule not deployed)",
                at=events.later,
                series=[tetragon_read],
                expect=events.on_node("n3"),
            ),
            Case(
                "only Falco sees it",
                at=events.appears_at,
                series=[events.falco(APPEAR, rule, priority, node="n3")],
                expect=events.on_node("n3"),
            ),
        ],
        silent_on=[
            Case(
                "another Tetragon policy and another Falco rule",
                at=events.later,
                series=[
                    events.tetragon("_x10 2+0.5x30", "hpcobs-exec-audit", node="n3"),
                    events.falco(KEEPS_MATCHING, UNRELATED_RULE, "4", node="n3"),
                ],
            ),
            Case(
                f"the last read is older than {events.window}",
                at=events.quiet_at,
                series=events.old_then_quiet(events.tetragon, policy=policy)
                + events.old_then_quiet(events.falco, rule=rule, priority=priority),
            ),
        ],
    )


def _tetragon_enforcement(events: _Events) -> Alert:
    actions = events.ctx.thresholds.security_tetragon_enforcement_actions
    enforcing = actions[0]
    return events.event_alert(
        "SecurityTetragonEnforcement",
        severity="warning",
        expr=events.rose("tetragon", "selector_actions", ("node", "policy", "action"), {"action": one_of(actions)}),
        summary="Tetragon killed a process or denied a call.",
        description=f"Tetragon policy {label('policy')} enforced ({label('action')}) on {label('node')} "
        f"({events.where}) within the last {events.window}: an attack was stopped, or a legitimate job "
        "was killed by a policy that is too broad. Check with tetra getevents and tell the job's owner.",
        fires_on=[
            Case(
                "the first kill creates the series",
                at=events.appears_at,
                series=[events.action(APPEAR, enforcing)],
                expect=events.on_node(policy=events.guard_policy, action=enforcing),
            )
        ],
        silent_on=[
            Case(
                "monitor-only and post actions do not enforce",
                at=events.appears_at,
                series=[events.action(APPEAR, "monitor_" + enforcing), events.action("_x10 1+1x30", "post")],
            ),
            Case(
                f"the last kill is older than {events.window}",
                at=events.quiet_at,
                series=events.old_then_quiet(events.action, name=enforcing),
            ),
        ],
    )


def _falco_dropping_events(events: _Events) -> Alert:
    ctx = events.ctx
    for_ = ctx.thresholds.security_falco_drops_for
    # The first drop shows in rate() one scrape after the 10th.
    when = timing(ctx, for_, 11)
    length = when.hold // events.step + 40
    dropping = f"0x10 0+50x{when.hold // events.step + 30}"

    def dropped(signal: str) -> str:
        return ctx.select("falco", [signal], ("node",), op="sum", over=lambda e: f"rate({e}[{ctx.rate_window}])")

    def drops(scap: str, queue: str) -> list[Series]:
        return [
            series(ctx, "falco", "scap_drops", scap, node="n1"),
            series(ctx, "falco", "outputs_queue_drops", queue, node="n1"),
        ]

    return events.node_alert(
        "SecurityFalcoDroppingEvents",
        severity="warning",
        expr=f"{dropped('scap_drops')} > 0 or {dropped('outputs_queue_drops')} > 0",
        for_=for_,
        summary="Falco is dropping kernel events or alerts: it is partly blind.",
        description=f"Falco on {label('node')} ({events.where}) has dropped kernel events or queued alerts for "
        f"{for_}: rules can miss what happens on the node. Raise the ring buffer size or reduce the "
        "syscalls Falco traces.",
        **standard_cases(
            when,
            fault="the kernel ring buffer keeps overflowing",
            fault_series=drops(dropping, f"0x{length}"),
            expect=events.on_node(),
            healthy="no drop",
            healthy_series=drops(f"0x{length}", f"0x{length}"),
            pending=f"dropping for less than {for_}",
            also_fires=[
                when.fires("the outputs queue keeps dropping alerts", drops(f"0x{length}", dropping), events.on_node())
            ],
            also_silent=[when.silent("one burst of drops", drops(f"0x10 100x{length - 11}", f"0x{length}"))],
        ),
    )
