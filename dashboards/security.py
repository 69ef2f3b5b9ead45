"""Security: Falco rule matches by priority, node, rule and job; Tetragon policy events and enforcements;
critical events, logs (DESIGN.md §11).

Recorded series only. Falco rule names are not typed here: the outbound and checkpoint panels select
the rules listed in config (thresholds.security_outbound_rules / security_checkpoint_rules).
"""
from functools import partial

from hpcobs import promql
from hpcobs.context import Context
from hpcobs.dashboard import Column, DashboardSpec, Row, Variable, logs, stat, table, timeseries

from . import common

UID = common.SECURITY
FALCO_FAULTS = ("unexpected_outbound", "checkpoint_foreign_read", "crypto_miner")
TETRAGON_FAULTS = ("checkpoint_foreign_read", "crypto_miner")


def dashboard(ctx: Context) -> DashboardSpec:
    cl = common.in_cluster(ctx)
    nodes = f'{cl}, node=~"$node"'
    critical = int(ctx.thresholds.get("security_falco_critical_priority", 2))
    crit = promql.one_of([str(p) for p in range(critical + 1)])      # Falco priority: 0 Emergency ... 7 Debug
    outbound_rules = f"rule_name{promql.one_of(ctx.thresholds['security_outbound_rules'])}"
    checkpoint_rules = f"rule_name{promql.one_of(ctx.thresholds['security_checkpoint_rules'])}"

    critical_nodes = f"node:falco_events:rate{{{nodes}, priority{crit}}}"
    critical_rules = f"cluster:falco_events:rate{{{cl}, priority{crit}}}"
    outbound_series = f"cluster:falco_events:rate{{{cl}, {outbound_rules}}}"
    actions = f"node:tetragon_policy_actions:rate{{{nodes}}}"
    events = partial(common.over_range, ctx)         # events over the range, from a recorded rate

    overview = Row("Overview", [
        stat("Falco events/s", f"sum(node:falco_events:rate{{{nodes}}}) or vector(0)", unit="eps", width=5,
             description="Falco rule matches per second on the selected nodes."),
        stat("Critical Falco events", f"sum({events(critical_nodes)}) or vector(0)", unit="none", width=5,
             thresholds=((None, "green"), (1, "red")), shows=("crypto_miner",),
             description=f"Falco rule matches of priority Critical or above (<= {critical}) over the range."),
        stat("Unexpected outbound connections", f"sum({events(outbound_series)}) or vector(0)", unit="none", width=5,
             thresholds=((None, "green"), (1, "orange")), shows=("unexpected_outbound",),
             description="Matches of the Falco rules reporting unexpected outbound connections, over the range."),
        stat("Tetragon policy events/s", f"sum(node:tetragon_policy_events:rate{{{nodes}}}) or vector(0)", unit="eps",
             width=5, description="Tetragon tracing-policy events per second on the selected nodes."),
        stat("Tetragon enforcements", f"sum({events(actions)}) or vector(0)", unit="none", width=4,
             thresholds=((None, "green"), (1, "red")), shows=("crypto_miner",),
             description="Enforcement actions Tetragon policies took (kills, overrides) over the range."),
    ])

    falco = Row("Falco", [
        timeseries("Events by priority", f"sum by (priority) (node:falco_events:rate{{{nodes}}})",
                   legend="priority {{priority}}", unit="eps", width=8, stack=True, shows=FALCO_FAULTS,
                   description="Falco rule matches per second by priority (0 Emergency, 2 Critical, 4 Warning, "
                               "7 Debug)."),
        timeseries("Events by node", f"sum by (node) (node:falco_events:rate{{{nodes}}})", legend="{{node}}",
                   unit="eps", width=8, shows=FALCO_FAULTS, description="Falco rule matches per second on each node."),
        timeseries("Events by rule", f"cluster:falco_events:rate{{{cl}}}", legend="{{rule_name}}", unit="eps",
                   width=8, shows=FALCO_FAULTS, description="Falco rule matches per second by rule, across the cluster."),
        timeseries("Events by job", f"topk(10, job:falco_events:rate{{{cl}}})", legend="{{hpc_job}}", unit="eps",
                   width=12, shows=FALCO_FAULTS,
                   description="Falco rule matches per second on the nodes of each job (the ten jobs with the most); "
                               "a shared node's matches count for each of its jobs."),
        table("Critical events by rule", [
            Column(f"sum by (rule_name, priority) ({events(critical_rules)})",
                   "Events", ((None, "green"), (1, "red")), cell="color-text"),
        ], labels=["rule_name", "priority"], width=12, shows=("crypto_miner",),
            description="Falco rules matched at priority Critical or above over the range."),
        table("Critical events by node", [
            Column(f"sum by (node, priority) ({events(critical_nodes)})",
                   "Events", ((None, "green"), (1, "red")), cell="color-text"),
        ], labels=["node", "priority"], width=12, links=(common.node_link(ctx),), shows=("crypto_miner",),
            description="Nodes with Falco matches at priority Critical or above over the range."),
        timeseries("Unexpected outbound connections over time", outbound_series, legend="{{rule_name}}", unit="eps",
                   shows=("unexpected_outbound",),
                   description="Falco matches of the outbound-connection rules (config "
                               "thresholds.security_outbound_rules)."),
        timeseries("Checkpoint reads by foreign processes", f"cluster:falco_events:rate{{{cl}, {checkpoint_rules}}}",
                   legend="{{rule_name}}", unit="eps", shows=("checkpoint_foreign_read",),
                   description="Falco matches of the rules reporting a checkpoint read by a process outside its job "
                               "(config thresholds.security_checkpoint_rules)."),
    ])

    tetragon = Row("Tetragon", [
        timeseries("Policy events by policy and binary", f"cluster:tetragon_policy_events:rate{{{cl}}}",
                   legend="{{policy}} {{binary}}", unit="eps", width=8, shows=TETRAGON_FAULTS,
                   description="Tetragon tracing-policy events per second by policy and the binary that triggered "
                               "them (empty binary: --metrics-label-filter drops it)."),
        timeseries("Policy events by node", f"node:tetragon_policy_events:rate{{{nodes}}}", legend="{{node}}",
                   unit="eps", width=8, shows=TETRAGON_FAULTS,
                   description="Tetragon tracing-policy events per second on each node."),
        timeseries("Enforcements (kills, overrides)", actions, legend="{{node}} {{policy}} {{action}}", unit="eps",
                   width=8, shows=("crypto_miner",),
                   description="Enforcement actions per second by node, policy and action (signal: a process "
                               "killed; override: a call denied)."),
        table("Enforcements by node and policy", [
            Column(f"sum by (node, policy, action) ({events(actions)})", "Actions", ((None, "orange"),),
                   cell="color-text"),
        ], labels=["node", "policy", "action"], width=24, height=6, links=(common.node_link(ctx),),
            shows=("crypto_miner",), description="Enforcement actions over the range, per node, policy and action."),
    ])

    logs_row = Row("Logs", [
        logs("Security events", '$security_log_selector | $log_node_label=~"$node"',
             description="Falco alerts and Tetragon events as logged on the selected nodes; set "
                         "security_log_selector and log_node_label to your log shipper's labels."),
    ])

    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Falco rule matches by priority, node, rule and job, critical events, unexpected outbound "
                    "connections, checkpoint access; Tetragon policy events and enforcements; logs.",
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
