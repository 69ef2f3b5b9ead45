"""Security: Falco rule matches by priority, node, rule and job; Tetragon policy events and enforcements;
critical events, logs (docs/dashboards.md).

Recorded series only. Falco rule names are not typed here: the outbound and checkpoint panels select
the rules listed in config (thresholds.security_outbound_rules / security_checkpoint_rules, and the checkpoint
panel the Tetragon policies of security_checkpoint_policies), the first of each being the rule or policy hpcobs
ships in out/falco/ and out/tetragon/ (hpcobs.security.names, docs/security-content.md).
"""

from dataclasses import dataclass

from hpcobs.security import names as security_content

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import Column, DashboardSpec, Panel, Query, Row, Variable, logs, stat, table, timeseries
from hpcobs.lang import promql
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.SECURITY
FALCO_FAULTS = ("unexpected_outbound", "checkpoint_foreign_read", "crypto_miner")
TETRAGON_FAULTS = ("checkpoint_foreign_read", "crypto_miner")
ANY_IS_BAD = ((None, "green"), (1, "red"))


@dataclass(frozen=True)
class _Series:
    """The selections several rows read, on the dashboard's cluster and nodes."""

    in_cluster: str
    nodes: str  # cluster and selected nodes
    critical: int  # Falco priority: 0 Emergency ... 7 Debug; this one and above are critical
    critical_nodes: str
    critical_rules: str
    outbound: str
    checkpoint: list[Query]  # Falco's matches and Tetragon's events, read like SecurityCheckpointForeignRead
    actions: str

    @classmethod
    def of(cls, ctx: Context) -> "_Series":
        in_cluster = common.in_cluster(ctx)
        nodes = f'{in_cluster}, node=~"$node"'
        critical = int(ctx.thresholds.security_falco_critical_priority)
        critical_match = f"priority{promql.one_of([str(priority) for priority in range(critical + 1)])}"
        outbound_rules = f"rule_name{promql.one_of(ctx.thresholds.security_outbound_rules)}"
        checkpoint = security_content.checkpoint_foreign_reads(ctx.thresholds)
        return cls(
            in_cluster=in_cluster,
            nodes=nodes,
            critical=critical,
            critical_nodes=f"node:falco_events:rate{{{nodes}, {critical_match}}}",
            critical_rules=f"cluster:falco_events:rate{{{in_cluster}, {critical_match}}}",
            outbound=f"cluster:falco_events:rate{{{in_cluster}, {outbound_rules}}}",
            checkpoint=[
                Query(f"cluster:falco_events:rate{{{in_cluster}, {_matchers(checkpoint.falco)}}}", "{{rule_name}}"),
                Query(
                    f"cluster:tetragon_policy_events:rate{{{in_cluster}, {_matchers(checkpoint.tetragon)}}}",
                    "{{policy}} {{binary}}",
                ),
            ],
            actions=f"node:tetragon_policy_actions:rate{{{nodes}}}",
        )


def _matchers(matchers: dict[str, str]) -> str:
    return ", ".join(f"{label}{match}" for label, match in matchers.items())


def _overview(ctx: Context, series: _Series) -> Row:
    def events(rate: str) -> str:
        return f"sum({common.over_range(ctx, rate)}) or vector(0)"

    return Row(
        "Overview",
        [
            stat(
                "Falco events/s",
                f"sum(node:falco_events:rate{{{series.nodes}}}) or vector(0)",
                unit="eps",
                width=5,
                description="Falco rule matches per second on the selected nodes.",
            ),
            stat(
                "Critical Falco events",
                events(series.critical_nodes),
                unit="none",
                width=5,
                thresholds=ANY_IS_BAD,
                shows=("crypto_miner",),
                description=f"Falco rule matches of priority Critical or above (<= {series.critical}) over the range.",
            ),
            stat(
                "Unexpected outbound connections",
                events(series.outbound),
                unit="none",
                width=5,
                thresholds=((None, "green"), (1, "orange")),
                shows=("unexpected_outbound",),
                description="Matches of the Falco rules reporting unexpected outbound connections, over the range.",
            ),
            stat(
                "Tetragon policy events/s",
                f"sum(node:tetragon_policy_events:rate{{{series.nodes}}}) or vector(0)",
                unit="eps",
                width=5,
                description="Tetragon tracing-policy events per second on the selected nodes.",
            ),
            stat(
                "Tetragon enforcements",
                events(series.actions),
                unit="none",
                width=4,
                thresholds=ANY_IS_BAD,
                shows=("crypto_miner",),
                description="Enforcement actions Tetragon policies took (kills, overrides) over the range.",
            ),
        ],
    )


def _critical_tables(ctx: Context, series: _Series) -> list[Panel]:
    """Falco matches at priority Critical or above over the range, by rule and by node."""
    return [
        table(
            "Critical events by rule",
            [
                Column(
                    f"sum by (rule_name, priority) ({common.over_range(ctx, series.critical_rules)})",
                    "Events",
                    ANY_IS_BAD,
                    cell="color-text",
                ),
            ],
            labels=["rule_name", "priority"],
            width=12,
            shows=("crypto_miner",),
            description="Falco rules matched at priority Critical or above over the range.",
        ),
        table(
            "Critical events by node",
            [
                Column(
                    f"sum by (node, priority) ({common.over_range(ctx, series.critical_nodes)})",
                    "Events",
                    ANY_IS_BAD,
                    cell="color-text",
                ),
            ],
            labels=["node", "priority"],
            width=12,
            links=(common.node_link(ctx),),
            shows=("crypto_miner",),
            description="Nodes with Falco matches at priority Critical or above over the range.",
        ),
    ]


def _falco(ctx: Context, series: _Series) -> Row:
    nodes, in_cluster = series.nodes, series.in_cluster
    return Row(
        "Falco",
        [
            timeseries(
                "Events by priority",
                f"sum by (priority) (node:falco_events:rate{{{nodes}}})",
                legend="priority {{priority}}",
                unit="eps",
                width=8,
                stack=True,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second by priority (0 Emergency, 2 Critical, 4 Warning, 7 Debug).",
            ),
            timeseries(
                "Events by node",
                f"sum by (node) (node:falco_events:rate{{{nodes}}})",
                legend="{{node}}",
                unit="eps",
                width=8,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second on each node.",
            ),
            timeseries(
                "Events by rule",
                f"cluster:falco_events:rate{{{in_cluster}}}",
                legend="{{rule_name}}",
                unit="eps",
                width=8,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second by rule, across the cluster.",
            ),
            timeseries(
                "Events by job",
                f"topk(10, job:falco_events:rate{{{in_cluster}}})",
                legend="{{hpc_job}}",
                unit="eps",
                width=12,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second on the nodes of each job (the ten jobs with the most); "
                "a shared node's matches count for each of its jobs.",
            ),
            *_critical_tables(ctx, series),
            timeseries(
                "Unexpected outbound connections over time",
                series.outbound,
                legend="{{rule_name}}",
                unit="eps",
                shows=("unexpected_outbound",),
                description="Falco matches of the outbound-connection rules (config "
                "thresholds.security_outbound_rules).",
            ),
            timeseries(
                "Checkpoint reads by foreign processes",
                series.checkpoint,
                unit="eps",
                shows=("checkpoint_foreign_read",),
                description="Falco matches of the rules and Tetragon events of the policies reporting a checkpoint "
                "read by a process outside its job (config thresholds.security_checkpoint_rules and "
                "security_checkpoint_policies), by rule, or by policy and binary; what SecurityCheckpointForeignRead "
                "pages on.",
            ),
        ],
    )


def _tetragon(ctx: Context, series: _Series) -> Row:
    return Row(
        "Tetragon",
        [
            timeseries(
                "Policy events by policy and binary",
                f"cluster:tetragon_policy_events:rate{{{series.in_cluster}}}",
                legend="{{policy}} {{binary}}",
                unit="eps",
                width=8,
                shows=TETRAGON_FAULTS,
                description="Tetragon tracing-policy events per second by policy and the binary that triggered "
                "them (empty binary: --metrics-label-filter drops it).",
            ),
            timeseries(
                "Policy events by node",
                f"node:tetragon_policy_events:rate{{{series.nodes}}}",
                legend="{{node}}",
                unit="eps",
                width=8,
                shows=TETRAGON_FAULTS,
                description="Tetragon tracing-policy events per second on each node.",
            ),
            timeseries(
                "Enforcements (kills, overrides)",
                series.actions,
                legend="{{node}} {{policy}} {{action}}",
                unit="eps",
                width=8,
                shows=("crypto_miner",),
                description="Enforcement actions per second by node, policy and action (signal: a process "
                "killed; override: a call denied).",
            ),
            table(
                "Enforcements by node and policy",
                [
                    Column(
                        f"sum by (node, policy, action) ({common.over_range(ctx, series.actions)})",
                        "Actions",
                        ((None, "orange"),),
                        cell="color-text",
                    ),
                ],
                labels=["node", "policy", "action"],
                width=24,
                height=6,
                links=(common.node_link(ctx),),
                shows=("crypto_miner",),
                description="Enforcement actions over the range, per node, policy and action.",
            ),
        ],
    )


def dashboard(ctx: Context) -> DashboardSpec:
    series = _Series.of(ctx)
    logs_row = Row(
        "Logs",
        [
            logs(
                "Security events",
                '$security_log_selector | $log_node_label=~"$node"',
                description="Falco alerts and Tetragon events as logged on the selected nodes; set "
                "security_log_selector and log_node_label to your log shipper's labels.",
            ),
        ],
    )
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Falco rule matches by priority, node, rule and job, critical events, unexpected outbound "
        "connections, checkpoint access; Tetragon policy events and enforcements; logs.",
        tags=("hpcobs", "security"),
        variables=(
            common.cluster_variable(ctx),
            Variable(
                "node",
                "Node",
                f"label_values(node:falco_events:rate{{{series.in_cluster}}}, node)",
                multi=True,
                include_all=True,
            ),
            Variable(
                "security_log_selector",
                "Security log stream selector",
                '{job=~"falco|tetragon"}',
                kind="textbox",
                description="LogQL stream selector of Falco and Tetragon event logs.",
            ),
            common.log_node_label(ctx),
        ),
        rows=(_overview(ctx, series), _falco(ctx, series), _tetragon(ctx, series), logs_row),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Security"),
    )
