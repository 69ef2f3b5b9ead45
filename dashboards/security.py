"""Security: who and where first (the Security alerts firing, the nodes with security events and the jobs and users
on them), then Falco rule matches by priority and rule, critical events, unexpected outbound connections,
checkpoint access; Tetragon policy events and enforcements; logs (docs/dashboards.md).

Recorded series only. Falco rule names are not typed here: the outbound and checkpoint panels select
the rules listed in config (thresholds.security_outbound_rules / security_checkpoint_rules, and the checkpoint
panel the Tetragon policies of security_checkpoint_policies), the first of each being the rule or policy hpcobs
ships in out/falco/ and out/tetragon/ (hpcobs.security.names, docs/security-content.md).

Per rule and per policy the records are cluster-wide only (recording_rules/security.py: a series per node and rule
would be the largest recorded group), so the panels reading them cannot honour $node: they are listed in FLEET_WIDE
and say so. Every other panel reads the selected nodes. Over time, only fixed sets are drawn (priorities, rules,
policies, actions); nodes and jobs are instant tables of the most affected over the range.
"""

from dataclasses import dataclass

from hpcobs.security import names as security_content

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    DashboardSpec,
    Panel,
    Query,
    Row,
    Variable,
    logs,
    stat,
    table,
    timeseries,
)
from hpcobs.lang import promql
from hpcobs.settings.names import DashboardUid

from . import common

UID = DashboardUid.SECURITY
FALCO_FAULTS = ("unexpected_outbound", "checkpoint_foreign_read", "crypto_miner")
TETRAGON_FAULTS = ("checkpoint_foreign_read", "crypto_miner")
# Nodes listed in the first row's table, the most events first: enough for an incident, bounded on a noisy fleet.
NODES_SHOWN = 20
TOP_SHOWN = 10  # rows of the other top-N tables
FLEET_WIDE_NOTE = "Fleet-wide: not filtered by node (Falco rules and Tetragon policies are recorded per cluster)."
# Panels reading cluster-wide records (or every firing alert): they do not follow $node.
FLEET_WIDE = (
    "Firing alerts",
    "Unexpected outbound connections, fleet-wide",
    "Falco events per second by rule, fleet-wide",
    "Critical Falco events by rule, fleet-wide",
    "Unexpected outbound connections per second by rule, fleet-wide",
    "Checkpoint reads by foreign processes",
    "Tetragon policy events per second by policy and binary, fleet-wide",
)


@dataclass(frozen=True)
class _Series:
    """The selections several rows read, on the dashboard's cluster and nodes."""

    cluster: str  # the cluster label
    in_cluster: str
    nodes: str  # cluster and selected nodes
    critical: int  # Falco priority: 0 Emergency ... 7 Debug; this one and above are critical
    falco_nodes: str
    critical_nodes: str
    critical_rules: str
    outbound: str
    checkpoint: list[Query]  # Falco's matches and Tetragon's events, read like SecurityCheckpointForeignRead
    tetragon_nodes: str
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
            cluster=ctx.cluster,
            in_cluster=in_cluster,
            nodes=nodes,
            critical=critical,
            falco_nodes=f"node:falco_events:rate{{{nodes}}}",
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
            tetragon_nodes=f"node:tetragon_policy_events:rate{{{nodes}}}",
            actions=f"node:tetragon_policy_actions:rate{{{nodes}}}",
        )


def _matchers(matchers: dict[str, str]) -> str:
    return ", ".join(f"{label}{match}" for label, match in matchers.items())


def _events(ctx: Context, rate: str, *by: str) -> str:
    """Events of a recorded rate over the dashboard's range, summed by the cluster and `by`."""
    return promql.aggregate("sum", (ctx.cluster, *by), common.over_range(ctx, rate))


def _with_user(ctx: Context, per_job: str) -> str:
    """A per-job expression with each job's user; a job without a job-info series (prolog broken) keeps its row,
    without a user, as the job records do."""
    cluster, in_cluster = ctx.cluster, common.in_cluster(ctx)
    owners = (
        f"{common.owners(ctx)} or on ({cluster}, hpc_job) group by ({cluster}, hpc_job) (gpu:job:info{{{in_cluster}}})"
    )
    return f"{per_job} * on ({cluster}, hpc_job) group_left (user) ({owners})"


def _who(ctx: Context, series: _Series) -> Row:
    """The on-call's first screen: what fired, on which nodes, whose jobs."""
    cluster = series.cluster
    # Nodes with any Falco match or Tetragon policy event over the range, the most first.
    flagged = (
        f"(topk({NODES_SHOWN}, sum by ({cluster}, node) ("
        f"({common.over_range(ctx, series.falco_nodes)}) or ({common.over_range(ctx, series.tetragon_nodes)})"
        ") > 0))"
    )
    jobs_now = f"group by ({cluster}, node, hpc_job) (gpu:job:info{{{series.in_cluster}}})"

    def per_node_and_job(rate: str) -> str:
        """A rate's events over the range on each flagged node (0 where it has none), once per job on the node
        with the job's user; a node without a job keeps one row."""
        events = f"({_events(ctx, rate, 'node')} and on ({cluster}, node) {flagged} or {flagged} * 0)"
        with_jobs = f"{events} * on ({cluster}, node) group_right () {jobs_now}"
        return f"{_with_user(ctx, with_jobs)} or on ({cluster}, node) {events}"

    return Row(
        "Who and where",
        [
            common.firing_alerts(ctx, "Security", labels=("node", "rule_name", "policy", "action"), shows=FALCO_FAULTS),
            table(
                "Nodes with security events: jobs and users on them",
                [
                    Column(per_node_and_job(series.falco_nodes), "Falco events", common.ANY, cell="color-text"),
                    Column(per_node_and_job(series.critical_nodes), "Critical Falco events", common.BAD, "color-text"),
                    Column(per_node_and_job(series.tetragon_nodes), "Tetragon policy events", common.ANY, "color-text"),
                    Column(per_node_and_job(series.actions), "Tetragon enforcements", common.BAD, "color-text"),
                ],
                labels=["node", "hpc_job", "user"],
                height=8,
                label_links={"node": common.node_link(ctx), "hpc_job": common.training_link(ctx)},
                shows=FALCO_FAULTS,
                description=f"The {NODES_SHOWN} selected nodes with the most Falco matches and Tetragon policy events "
                "over the range, one row per job holding the node's GPUs now, with the job's user (a node without a "
                f"job has one row). Critical: Falco priority Critical or above (<= {series.critical}); enforcements: "
                "processes Tetragon killed or calls it denied. Click a node for its dashboard, a job for its view.",
            ),
        ],
    )


def _overview(ctx: Context, series: _Series) -> Row:
    def total(rate: str) -> str:
        return f"sum({common.over_range(ctx, rate)}) or vector(0)"

    return Row(
        "Overview",
        [
            stat(
                "Falco events per second, selected nodes",
                f"sum({series.falco_nodes}) or vector(0)",
                unit="eps",
                width=5,
                description="Falco rule matches per second on the selected nodes, now.",
            ),
            stat(
                "Critical Falco events, selected nodes",
                total(series.critical_nodes),
                unit="none",
                width=5,
                thresholds=common.BAD,
                shows=("crypto_miner",),
                description=f"Falco rule matches of priority Critical or above (<= {series.critical}) on the selected "
                "nodes over the range.",
            ),
            stat(
                "Unexpected outbound connections, fleet-wide",
                total(series.outbound),
                unit="none",
                width=5,
                thresholds=common.ANY,
                shows=("unexpected_outbound",),
                description="Matches of the Falco rules reporting unexpected outbound connections over the range. "
                + FLEET_WIDE_NOTE,
            ),
            stat(
                "Tetragon policy events per second, selected nodes",
                f"sum({series.tetragon_nodes}) or vector(0)",
                unit="eps",
                width=5,
                description="Tetragon tracing-policy events per second on the selected nodes, now.",
            ),
            stat(
                "Tetragon enforcements, selected nodes",
                total(series.actions),
                unit="none",
                width=4,
                thresholds=common.BAD,
                shows=("crypto_miner",),
                description="Enforcement actions Tetragon policies took (kills, overrides) on the selected nodes over "
                "the range.",
            ),
        ],
    )


def _paged_rules(ctx: Context, series: _Series) -> list[Panel]:
    """The Falco rules and Tetragon policies the security alerts page on: outbound connections, checkpoint reads."""
    return [
        timeseries(
            "Unexpected outbound connections per second by rule, fleet-wide",
            series.outbound,
            legend="{{rule_name}}",
            unit="eps",
            width=8,
            height=8,
            shows=("unexpected_outbound",),
            description="Falco matches of the outbound-connection rules (config "
            "thresholds.security_outbound_rules), per second. " + FLEET_WIDE_NOTE,
        ),
        timeseries(
            "Checkpoint reads by foreign processes",
            series.checkpoint,
            unit="eps",
            width=8,
            height=8,
            shows=("checkpoint_foreign_read",),
            description="Falco matches of the rules and Tetragon events of the policies reporting a checkpoint "
            "read by a process outside its job (config thresholds.security_checkpoint_rules and "
            "security_checkpoint_policies), per second by rule, or by policy and binary; what "
            "SecurityCheckpointForeignRead pages on. " + FLEET_WIDE_NOTE,
        ),
    ]


def _falco(ctx: Context, series: _Series) -> Row:
    cluster, in_cluster = series.cluster, series.in_cluster
    on_selected_nodes = f"group by ({cluster}, hpc_job) (gpu:job:info{{{series.nodes}}})"
    return Row(
        "Falco",
        [
            timeseries(
                "Falco events per second by priority, selected nodes",
                f"sum by (priority) ({series.falco_nodes})",
                legend="{{priority}}",
                unit="eps",
                width=8,
                stack=True,
                series_words=common.FALCO_PRIORITY,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second on the selected nodes, by priority (Emergency ... Debug).",
            ),
            timeseries(
                "Falco events per second by rule, fleet-wide",
                f"cluster:falco_events:rate{{{in_cluster}}}",
                legend="{{rule_name}}",
                unit="eps",
                width=8,
                shows=FALCO_FAULTS,
                description="Falco rule matches per second by rule (the rules deployed: a fixed set). "
                + FLEET_WIDE_NOTE,
            ),
            table(
                f"Falco events per node and priority, top {TOP_SHOWN}",
                [
                    Column(
                        f"topk({TOP_SHOWN}, {_events(ctx, series.falco_nodes, 'node', 'priority')} > 0)",
                        "Events",
                        common.ANY,
                        cell="color-text",
                    )
                ],
                labels=["node", "priority"],
                width=8,
                height=8,
                label_links={"node": common.node_link(ctx)},
                label_words={"priority": common.FALCO_PRIORITY},
                shows=FALCO_FAULTS,
                description=f"The {TOP_SHOWN} node and priority pairs of the selected nodes with the most Falco rule "
                "matches over the range. Click a node for its dashboard.",
            ),
            table(
                f"Jobs with the most Falco events, top {TOP_SHOWN}",
                [
                    Column(
                        _with_user(
                            ctx,
                            f"topk({TOP_SHOWN}, ({_events(ctx, f'job:falco_events:rate{{{in_cluster}}}', 'hpc_job')} "
                            f"> 0) and on ({cluster}, hpc_job) {on_selected_nodes})",
                        ),
                        "Events",
                        common.ANY,
                        cell="color-text",
                    )
                ],
                labels=["hpc_job", "user"],
                width=8,
                height=8,
                label_links={"hpc_job": common.training_link(ctx)},
                shows=FALCO_FAULTS,
                description=f"The {TOP_SHOWN} jobs now on the selected nodes whose nodes had the most Falco rule "
                "matches over the range, with their users; a shared node's matches count for each of its jobs. "
                "Click a job for its view.",
            ),
            table(
                "Critical Falco events by rule, fleet-wide",
                [
                    Column(
                        _events(ctx, series.critical_rules, "rule_name", "priority"),
                        "Events",
                        common.BAD,
                        cell="color-text",
                    ),
                ],
                labels=["rule_name", "priority"],
                width=8,
                height=8,
                label_words={"priority": common.FALCO_PRIORITY},
                shows=("crypto_miner",),
                description=f"Falco rules matched at priority Critical or above (<= {series.critical}) over the range. "
                + FLEET_WIDE_NOTE,
            ),
            *_paged_rules(ctx, series),
        ],
    )


def _tetragon(ctx: Context, series: _Series) -> Row:
    return Row(
        "Tetragon",
        [
            timeseries(
                "Tetragon policy events per second by policy and binary, fleet-wide",
                f"cluster:tetragon_policy_events:rate{{{series.in_cluster}}}",
                legend="{{policy}} {{binary}}",
                unit="eps",
                width=8,
                shows=TETRAGON_FAULTS,
                description="Tetragon tracing-policy events per second by policy and the binary that triggered "
                "them (empty binary: --metrics-label-filter drops it). " + FLEET_WIDE_NOTE,
            ),
            table(
                f"Nodes with the most Tetragon policy events, top {TOP_SHOWN}",
                [
                    Column(
                        f"topk({TOP_SHOWN}, {_events(ctx, series.tetragon_nodes, 'node')} > 0)",
                        "Events",
                        common.ANY,
                        cell="color-text",
                    )
                ],
                labels=["node"],
                width=8,
                height=8,
                label_links={"node": common.node_link(ctx)},
                shows=TETRAGON_FAULTS,
                description=f"The {TOP_SHOWN} selected nodes with the most Tetragon tracing-policy events over the "
                "range. Click a node for its dashboard.",
            ),
            timeseries(
                "Tetragon enforcements per second by policy and action, selected nodes",
                f"sum by (policy, action) ({series.actions})",
                legend="{{policy}} {{action}}",
                unit="eps",
                width=8,
                shows=("crypto_miner",),
                description="Enforcement actions per second on the selected nodes by policy and action (signal: a "
                "process killed; override: a call denied).",
            ),
            table(
                "Tetragon enforcements by node, policy and action",
                [
                    Column(
                        _events(ctx, series.actions, "node", "policy", "action"),
                        "Actions",
                        ((None, "orange"),),
                        cell="color-text",
                    ),
                ],
                labels=["node", "policy", "action"],
                width=24,
                height=6,
                label_links={"node": common.node_link(ctx)},
                shows=("crypto_miner",),
                description="Enforcement actions over the range on the selected nodes, per node, policy and action. "
                "Click a node for its dashboard.",
            ),
        ],
        collapsed=True,
    )


def dashboard(ctx: Context) -> DashboardSpec:
    series = _Series.of(ctx)
    logs_row = Row(
        "Logs",
        [
            logs(
                "Falco and Tetragon event log lines, selected nodes",
                '$security_log_selector | $log_node_label=~"$node"',
                description="Falco alerts and Tetragon events as logged on the selected nodes; set "
                "security_log_selector and log_node_label to your log shipper's labels.",
            ),
        ],
        collapsed=True,
    )
    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Security alerts firing and the nodes with security events, with the jobs and users on them; "
        "Falco rule matches by priority, rule, node and job, critical events, unexpected outbound connections, "
        "checkpoint access; Tetragon policy events and enforcements; logs.",
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
        rows=(_who(ctx, series), _overview(ctx, series), _falco(ctx, series), _tetragon(ctx, series), logs_row),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Security"),
    )
