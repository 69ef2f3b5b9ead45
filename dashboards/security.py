"""Security: Falco rule matches and Tetragon policy events over time, critical events, logs (DESIGN.md §11).

Recorded series only. Falco rule names are not typed here: the outbound and checkpoint panels select
the rules listed in config (thresholds.security_outbound_rules / security_checkpoint_rules).
"""
from hpcobs import promql
from hpcobs.context import Context
from hpcobs.dashboard import Column, DashboardSpec, Row, Variable, logs, stat, table, timeseries

from . import common

UID = common.SECURITY
_SPECIAL = set(r"\.^$|?*+()[]{}")


def _regex(names: list[str]) -> str:
    """An RE2 alternation matching exactly these names, written for a PromQL double-quoted string."""
    escaped = ["".join("\\\\" + ch if ch in _SPECIAL else ch for ch in name) for name in names]
    return "|".join(escaped)


def dashboard(ctx: Context) -> DashboardSpec:
    cl = common.in_cluster(ctx)
    nodes = f'{cl}, node=~"$node"'
    step = promql.duration_seconds(ctx.scrape_interval)
    critical = int(ctx.thresholds.get("security_falco_critical_priority", 2))
    crit = "|".join(str(p) for p in range(critical + 1))      # Falco priority: 0 Emergency ... 7 Debug
    outbound = _regex(ctx.thresholds.get("security_outbound_rules") or [])
    checkpoint = _regex(ctx.thresholds.get("security_checkpoint_rules") or [])
    outbound_rules = f'rule_name=~"{outbound or ".*[Oo]utbound.*"}"'
    checkpoint_rules = f'rule_name=~"{checkpoint or ".*[Cc]heckpoint.*"}"'

    critical_nodes = f'node:falco_events:rate{{{nodes}, priority=~"{crit}"}}'
    critical_rules = f'cluster:falco_events:rate{{{cl}, priority=~"{crit}"}}'
    outbound_series = f"cluster:falco_events:rate{{{cl}, {outbound_rules}}}"

    def events(expr: str) -> str:
        """Events over the dashboard's range from a recorded per-second rate."""
        return f"sum_over_time({expr}[$__range]) * {step}"

    overview = Row("Overview", [
        stat("Falco events/s", f"sum(node:falco_events:rate{{{nodes}}}) or vector(0)", unit="eps",
             description="Falco rule matches per second on the selected nodes."),
        stat("Critical Falco events", f"sum({events(critical_nodes)}) or vector(0)", unit="none", thresholds=((None, "green"), (1, "red")),
             description=f"Falco rule matches of priority Critical or above (<= {critical}) over the range."),
        stat("Unexpected outbound connections", f"sum({events(outbound_series)}) or vector(0)", unit="none", thresholds=((None, "green"), (1, "orange")),
             description="Matches of the Falco rules reporting unexpected outbound connections, over the range."),
        stat("Tetragon policy events/s", f"sum(node:tetragon_policy_events:rate{{{nodes}}}) or vector(0)", unit="eps",
             description="Tetragon tracing-policy events per second (kills, overrides, audits) on the selected nodes."),
    ])

    falco = Row("Falco", [
        timeseries("Events by priority", f"sum by (priority) (node:falco_events:rate{{{nodes}}})",
                   legend="priority {{priority}}", unit="eps", width=8, stack=True,
                   description="Falco rule matches per second by priority (0 Emergency, 2 Critical, 4 Warning, "
                               "7 Debug)."),
        timeseries("Events by node", f"sum by (node) (node:falco_events:rate{{{nodes}}})", legend="{{node}}",
                   unit="eps", width=8, description="Falco rule matches per second on each node."),
        timeseries("Events by rule", f"cluster:falco_events:rate{{{cl}}}", legend="{{rule_name}}", unit="eps",
                   width=8, description="Falco rule matches per second by rule, across the cluster."),
        table("Critical events by rule", [
            Column(f"sum by (rule_name, priority) ({events(critical_rules)})",
                   "Events", ((None, "green"), (1, "red")), cell="color-text"),
        ], labels=["rule_name", "priority"], width=12,
            description=f"Falco rules matched at priority Critical or above over the range."),
        table("Critical events by node", [
            Column(f"sum by (node, priority) ({events(critical_nodes)})",
                   "Events", ((None, "green"), (1, "red")), cell="color-text"),
        ], labels=["node", "priority"], width=12, links=(common.node_link(ctx),),
            description="Nodes with Falco matches at priority Critical or above over the range."),
        timeseries("Unexpected outbound connections", f"cluster:falco_events:rate{{{cl}, {outbound_rules}}}",
                   legend="{{rule_name}}", unit="eps",
                   description="Falco matches of the outbound-connection rules (config "
                               "thresholds.security_outbound_rules)."),
        timeseries("Checkpoint reads by foreign processes", f"cluster:falco_events:rate{{{cl}, {checkpoint_rules}}}",
                   legend="{{rule_name}}", unit="eps",
                   description="Falco matches of the rules reporting a checkpoint read by a process outside its job "
                               "(config thresholds.security_checkpoint_rules)."),
    ])

    tetragon = Row("Tetragon", [
        timeseries("Policy events by policy", f"cluster:tetragon_policy_events:rate{{{cl}}}", legend="{{policy}}",
                   unit="eps", description="Tetragon tracing-policy events per second by policy."),
        timeseries("Policy events by node", f"node:tetragon_policy_events:rate{{{nodes}}}", legend="{{node}}",
                   unit="eps", description="Tetragon tracing-policy events per second on each node."),
    ])

    logs_row = Row("Logs", [
        logs("Security events", '$security_log_selector | $log_node_label=~"$node"',
             description="Falco alerts and Tetragon events as logged on the selected nodes; set "
                         "security_log_selector and log_node_label to your log shipper's labels."),
    ])

    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Falco rule matches and Tetragon policy events: by priority, node and rule, critical events, "
                    "unexpected outbound connections, checkpoint access, logs.",
        tags=("hpcobs", "security"),
        variables=(
            common.cluster_variable(ctx),
            Variable("node", "Node", f"label_values(node:falco_events:rate{{{cl}}}, node)", multi=True,
                     include_all=True),
            Variable("security_log_selector", "Security log stream selector", '{job=~"falco|tetragon"}',
                     kind="textbox", description="LogQL stream selector of Falco and Tetragon event logs."),
            common.LOG_NODE_LABEL,
        ),
        rows=(overview, falco, tetragon, logs_row),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Security"),
    )
