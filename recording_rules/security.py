"""Security: Falco rule matches and Tetragon policy events per node and cluster (DESIGN.md §8).

Per node only totals by priority are recorded; per rule and per policy only cluster-wide: a series per
node and rule would be the largest recorded group. The security dashboard's per-rule view of one node
reads the raw counters.

Falco's rules_matches_total has no host label (the scrape's instance is the host) and appears only
after a rule's first match; `priority` is Falco's number, 0 Emergency ... 7 Debug.
"""
from hpcobs.context import Context
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, sample
from hpcobs.synthetic import series


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = {c: ctx.config.get("cluster", "name")}
    w = ctx.rate_window

    def rate(exporter: str, signal: str, by: tuple[str, ...]) -> str:
        return ctx.select(exporter, [signal], by, over=lambda e: f"rate({e}[{w}])", op="sum")

    falco = [series(ctx, "falco", "rule_matches", "0+3x20", node="n1", rule_name="Unexpected outbound connection",
                    priority="4", source="syscall"),
             series(ctx, "falco", "rule_matches", "0+6x20", node="n2", rule_name="Unexpected outbound connection",
                    priority="4", source="syscall"),
             series(ctx, "falco", "rule_matches", "0+30x20", node="n2", rule_name="Read sensitive file untrusted",
                    priority="3", source="syscall")]
    tetragon = [series(ctx, "tetragon", "policy_events", "0+15x20", node="n1", policy="checkpoint-guard",
                       hook="kprobe:security_file_open", binary="/usr/bin/curl", namespace="", pod="", workload="",
                       node_name="")]
    outbound = "Unexpected outbound connection"

    return [Group("hpcobs-security", domain="security", interval=ctx.scrape_interval, rules=[
        Record("node:falco_events:rate", rate("falco", "rule_matches", ("node", "priority")),
               tests=[Case("Falco rule matches per second by node and priority", at="5m", series=falco,
                           expect=[sample(0.1, **cl, node="n1", priority="4"), sample(0.2, **cl, node="n2", priority="4"),
                                   sample(1, **cl, node="n2", priority="3")])]),
        Record("cluster:falco_events:rate", rate("falco", "rule_matches", ("rule_name", "priority")),
               tests=[Case("Falco rule matches per second by rule across the cluster", at="5m", series=falco,
                           expect=[sample(0.30000000000000004, **cl, rule_name=outbound, priority="4"),
                                   sample(1, **cl, rule_name="Read sensitive file untrusted", priority="3")])]),
        Record("node:tetragon_policy_events:rate", rate("tetragon", "policy_events", ("node",)),
               tests=[Case("Tetragon policy events per second by node", at="5m", series=tetragon,
                           expect=[sample(0.5, **cl, node="n1")])]),
        Record("cluster:tetragon_policy_events:rate", rate("tetragon", "policy_events", ("policy",)),
               tests=[Case("Tetragon policy events per second by policy", at="5m", series=tetragon,
                           expect=[sample(0.5, **cl, policy="checkpoint-guard")])]),
    ])]
