"""Security alerts (DESIGN.md §10): Falco rule matches and Tetragon enforcement, per node.

Falco's rules_matches_total and Tetragon's policy and action counters only appear with their first match,
already at 1 or more: rate() and increase() never see that first step, and a critical event is often a
single match. So an event alert fires on a counter that rose within the event window or on a series that
did not exist one window ago (hpcobs.promql.rise_within, which the security records use too). Reading the raw counters is cheap here (the selection is filtered on a
priority, a few rule names or policies, and only matched rules have series) and needed: the records keep
per-node totals by priority and per-rule totals without the node.
"""
from hpcobs.context import Context
from hpcobs.escape import go_template_text
from hpcobs.promql import duration, duration_seconds, one_of, rise_within
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import series

DASHBOARD = "hpcobs-security"


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    step = duration_seconds(ctx.scrape_interval)
    window = th["security_event_window"]
    window_s = duration_seconds(window)
    where = f"cluster {label(c)}"
    no_for = (f"a match is a single event, a counter step that need not repeat: a `for` would drop a lone match. "
              f"The alert stays active for {window} (security_event_window) after the last match instead")

    def event(exporter: str, signal: str, by: tuple[str, ...], matchers: dict[str, str]) -> str:
        """Counters of matching series that rose within the window, or appeared within it."""
        rise = ctx.select(exporter, [signal], by, op="sum", where=matchers, over=lambda e: rise_within(e, window))
        return f"{rise} > 0"

    critical = th["security_falco_critical_priority"]
    priorities = {"priority": one_of([str(p) for p in range(critical + 1)])}
    outbound_rules, checkpoint_rules = th["security_outbound_rules"], th["security_checkpoint_rules"]
    policies, actions = th["security_checkpoint_policies"], th["security_tetragon_enforcement_actions"]

    # -- synthetic data ------------------------------------------------------------------------------
    late = window_s // step + 10                # scrapes: a match older than the window
    appear = "_x10 1x30"                        # a first match at the 11th scrape: the series starts at 1
    appears_at, later = duration(13 * step), duration(16 * step)

    def falco(values: str, rule: str, priority: str, node="n1"):
        return series(ctx, "falco", "rule_matches", values, node=node, rule_name=rule, priority=priority, source="syscall")

    def tetragon(values: str, policy: str, node="n1", binary="/usr/bin/rsync"):
        return series(ctx, "tetragon", "policy_events", values, node=node, policy=policy,
                      hook="kprobe:security_file_open", binary=binary, namespace="", pod="", workload="", node_name="")

    def action(values: str, name: str, policy="hpcobs-checkpoint-guard", node="n1"):
        return series(ctx, "tetragon", "selector_actions", values, node=node, action=name, policy=policy,
                      hook="kprobe:security_file_open", hook_index="0", policy_namespace="", selector_index="0",
                      selector_label="")

    def old_then_quiet(build, **kw):
        """A match long ago, nothing since: outside the window at the evaluation time."""
        return [build(f"1x20 2x{late + 30}", **kw)]

    quiet_at = duration(21 * step + window_s + 6 * step)
    shell = "Terminal shell in container"
    outbound = outbound_rules[0]
    checkpoint_rule, policy = checkpoint_rules[0], policies[0]
    enforcing = actions[0]
    drops_for = duration_seconds(th["security_falco_drops_for"])

    def dropped(signal: str) -> str:
        return ctx.select("falco", [signal], ("node",), op="sum", over=lambda e: f"rate({e}[{ctx.rate_window}])")

    def drops(signal: str, values: str, node="n1"):
        return series(ctx, "falco", signal, values, node=node)

    dropping = f"0x10 0+50x{drops_for // step + 30}"
    drops_len = drops_for // step + 40

    return [Group("hpcobs-security-alerts", domain="security", interval=ctx.scrape_interval, rules=[
        Alert(
            "SecurityFalcoCritical", severity="critical", team="security",
            expr=event("falco", "rule_matches", ("node", "rule_name", "priority"), priorities),
            for_=None, no_for_reason=no_for,
            summary="Falco matched a rule of priority Critical or above.",
            description=f"Falco rule \"{label('rule_name')}\" (priority {label('priority')}: 0 Emergency, 1 Alert, "
                        f"2 Critical) matched on {label('node')} ({where}) within the last {window}. Read the Falco "
                        "output on the node for the process, user and job, and isolate the node if it is real.",
            runbook="security", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[
                Case("the first Critical match creates the series at 1", at=appears_at,
                     series=[falco(appear, shell, "2")], expect=[alert(**cl, node="n1", rule_name=shell, priority="2")]),
                Case("an Alert-priority rule that matched before matches again", at=duration(40 * step),
                     series=[falco("1x30 2x30", "Disallowed SSH Connection", "1", node="n2")],
                     expect=[alert(**cl, node="n2", rule_name="Disallowed SSH Connection", priority="1")]),
            ],
            silent_on=[
                Case("no critical rule has matched", at=duration(40 * step),
                     series=[falco("0+1x40", "Read sensitive file untrusted", "4")]),
                Case("an Error-priority match, just below Critical", at=appears_at,
                     series=[falco(appear, "Read sensitive file untrusted", "3")]),
                Case(f"a Critical match older than {window}", at=quiet_at,
                     series=old_then_quiet(falco, rule=shell, priority="2")),
            ],
        ),
        Alert(
            "SecurityUnexpectedOutbound", severity="critical", team="security",
            expr=event("falco", "rule_matches", ("node", "rule_name"), {"rule_name": one_of(outbound_rules)}),
            for_=None, no_for_reason=no_for,
            summary="A compute node opened an unexpected outbound connection.",
            description=f"Falco rule \"{label('rule_name')}\" matched on {label('node')} ({where}) within the last "
                        f"{window}: a process connected outside the allowed destinations (data or model weights "
                        "leaving the cluster?). Find the process and its job from the Falco output and squeue -w.",
            runbook="security", dashboard=DASHBOARD, dashboard_vars=(c, "node"), fired_by=("unexpected_outbound",),
            fires_on=[Case("three matches, then one a minute", at=later,
                           series=[falco("_x10 3+0.5x30", outbound, "5")],
                           expect=[alert(**cl, node="n1", rule_name=outbound)])],
            silent_on=[
                Case("only other rules match", at=later,
                     series=[falco("_x10 3+0.5x30", "Read sensitive file untrusted", "4")]),
                Case(f"the last outbound match is older than {window}", at=quiet_at,
                     series=old_then_quiet(falco, rule=outbound, priority="5")),
            ],
        ),
        Alert(
            "SecurityCheckpointForeignRead", severity="critical", team="security",
            expr=f"{event('falco', 'rule_matches', ('node',), {'rule_name': one_of(checkpoint_rules)})} or "
                 f"{event('tetragon', 'policy_events', ('node',), {'policy': one_of(policies)})}",
            for_=None, no_for_reason=no_for,
            summary="A process outside the owning job read a training checkpoint.",
            description=f"On {label('node')} ({where}) a process outside the owning job opened a checkpoint within "
                        f"the last {window} (Falco rules {go_template_text(', '.join(checkpoint_rules))} or Tetragon "
                        f"policies {go_template_text(', '.join(policies))}). Identify the binary and user with tetra "
                        "getevents or the Falco output; model weights may be leaving with it.",
            runbook="security", dashboard=DASHBOARD, dashboard_vars=(c, "node"), fired_by=("checkpoint_foreign_read",),
            fires_on=[
                Case("the Falco rule and the Tetragon policy both match: one alert for the node", at=appears_at,
                     series=[falco("_x10 3+0.5x30", checkpoint_rule, "4", node="n3"),
                             tetragon("_x10 2+0.5x30", policy, node="n3")],
                     expect=[alert(**cl, node="n3")]),
                Case("only Tetragon sees it (Falco rule not deployed)", at=later,
                     series=[tetragon("_x10 2+0.5x30", policy, node="n3")], expect=[alert(**cl, node="n3")]),
                Case("only Falco sees it", at=appears_at,
                     series=[falco(appear, checkpoint_rule, "4", node="n3")], expect=[alert(**cl, node="n3")]),
            ],
            silent_on=[
                Case("another Tetragon policy and another Falco rule", at=later,
                     series=[tetragon("_x10 2+0.5x30", "hpcobs-exec-audit", node="n3"),
                             falco("_x10 3+0.5x30", "Read sensitive file untrusted", "4", node="n3")]),
                Case(f"the last read is older than {window}", at=quiet_at,
                     series=old_then_quiet(tetragon, policy=policy) + old_then_quiet(falco, rule=checkpoint_rule, priority="4")),
            ],
        ),
        Alert(
            "SecurityTetragonEnforcement", severity="warning", team="security",
            expr=event("tetragon", "selector_actions", ("node", "policy", "action"), {"action": one_of(actions)}),
            for_=None, no_for_reason=no_for,
            summary="Tetragon killed a process or denied a call.",
            description=f"Tetragon policy {label('policy')} enforced ({label('action')}) on {label('node')} ({where}) "
                        f"within the last {window}: an attack was stopped, or a legitimate job was killed by a policy "
                        "that is too broad. Check with tetra getevents and tell the job's owner.",
            runbook="security", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case("the first kill creates the series", at=appears_at, series=[action(appear, enforcing)],
                           expect=[alert(**cl, node="n1", policy="hpcobs-checkpoint-guard", action=enforcing)])],
            silent_on=[
                Case("monitor-only and post actions do not enforce", at=appears_at,
                     series=[action(appear, "monitor_" + enforcing), action("_x10 1+1x30", "post")]),
                Case(f"the last kill is older than {window}", at=quiet_at,
                     series=old_then_quiet(action, name=enforcing)),
            ],
        ),
        Alert(
            "SecurityFalcoDroppingEvents", severity="warning", team="security",
            expr=f"{dropped('scap_drops')} > 0 or {dropped('outputs_queue_drops')} > 0",
            for_=th["security_falco_drops_for"],
            summary="Falco is dropping kernel events or alerts: it is partly blind.",
            description=f"Falco on {label('node')} ({where}) has dropped kernel events or queued alerts for "
                        f"{th['security_falco_drops_for']}: rules can miss what happens on the node. Raise the ring "
                        "buffer size or reduce the syscalls Falco traces.",
            runbook="security", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case("the kernel ring buffer keeps overflowing", at=duration(11 * step + drops_for + 10 * step),
                           series=[drops("scap_drops", dropping), drops("outputs_queue_drops", f"0x{drops_len}")],
                           expect=[alert(**cl, node="n1")]),
                      Case("the outputs queue keeps dropping alerts", at=duration(11 * step + drops_for + 10 * step),
                           series=[drops("scap_drops", f"0x{drops_len}"), drops("outputs_queue_drops", dropping)],
                           expect=[alert(**cl, node="n1")])],
            silent_on=[
                Case("no drop", at=duration(11 * step + drops_for + 10 * step),
                     series=[drops("scap_drops", f"0x{drops_len}"), drops("outputs_queue_drops", f"0x{drops_len}")]),
                Case("one burst of drops", at=duration(11 * step + drops_for + 10 * step),
                     series=[drops("scap_drops", f"0x10 100x{drops_len - 11}")]),
                Case(f"dropping for less than {th['security_falco_drops_for']}", at=duration(11 * step + drops_for - 3 * step),
                     series=[drops("scap_drops", dropping)]),
            ],
        ),
    ])]
