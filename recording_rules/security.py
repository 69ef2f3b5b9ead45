"""Security: Falco rule matches and Tetragon policy events and actions per node, job and cluster
(docs/recording-rules.md).

Per node only totals by priority are recorded; per rule and per policy only cluster-wide: a series per
node and rule would be the largest recorded group. Per job, a node's events are counted for every job
running on it (neither Falco nor Tetragon knows Slurm jobs; on a shared node each job sees them all).

Falco's rules_matches_total has no host label (the scrape's instance is the host); `priority` is Falco's
number, 0 Emergency ... 7 Debug. Falco's and Tetragon's event counters appear with their first match,
already at 1 or more, and security events are rare: rate() never sees that first step and extrapolates
a lone match away. So the rate here is the counter's rise over the window, counting the whole value of a
series that appeared within it, divided by the window (a counter reset counts nothing for one window).
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import falco_match, gpu_utilization, tetragon_action, tetragon_event
from hpcobs.lang.promql import aggregate, duration, duration_seconds, rise_within

OUTBOUND, SENSITIVE = "Unexpected outbound connection", "Read sensitive file untrusted"


def groups(ctx: Context) -> list[Group]:
    return [
        Group(
            "hpcobs-security",
            domain="security",
            interval=ctx.evaluation_interval,
            rules=[*_falco_events(ctx), *_tetragon_events(ctx)],
        ),
        Group("hpcobs-security-jobs", domain="security", interval=ctx.evaluation_interval, rules=[_job_events(ctx)]),
    ]


def _events_rate(ctx: Context, exporter: str, signal: str, by: tuple[str, ...]) -> str:
    window = ctx.rate_window
    rise = ctx.select(exporter, [signal], by, op="sum", over=lambda e: rise_within(e, window))
    return f"{rise} / {duration_seconds(window)}"


def _at_rate(ctx: Context, count: float) -> float:
    """The rate a rise of `count` over the window records."""
    return count / duration_seconds(ctx.rate_window)


def _falco(ctx: Context, values: str, node: str, rule: str, priority: str) -> Series:
    return falco_match(ctx, values, node=node, rule=rule, priority=priority)


def _falco_matches(ctx: Context) -> list[Series]:
    t = ctx.timeline
    return [
        _falco(ctx, t.rising(0.1, t.span), "n1", OUTBOUND, "4"),
        _falco(ctx, t.rising(0.2, t.span), "n2", OUTBOUND, "4"),
        _falco(ctx, t.rising(1, t.span), "n2", SENSITIVE, "3"),
    ]


def _falco_events(ctx: Context) -> list[Record]:
    cluster_labels = ctx.cluster_labels
    matches = _falco_matches(ctx)
    t = ctx.timeline
    return [
        Record(
            "node:falco_events:rate",
            _events_rate(ctx, "falco", "rule_matches", ("node", "priority")),
            tests=[
                Case(
                    "Falco rule matches per second by node and priority",
                    at=t.settled,
                    series=matches,
                    expect=[
                        sample(0.1, **cluster_labels, node="n1", priority="4"),
                        sample(0.2, **cluster_labels, node="n2", priority="4"),
                        sample(1, **cluster_labels, node="n2", priority="3"),
                    ],
                ),
                Case(
                    "a rule's first match counts, though its series starts at 1",
                    at=duration(t.settled_seconds + t.step),
                    series=[_falco(ctx, f"{t.absent(t.settled)} {t.held(1, t.settled)}", "n1", OUTBOUND, "4")],
                    expect=[sample(_at_rate(ctx, 1), **cluster_labels, node="n1", priority="4")],
                ),
            ],
        ),
        Record(
            "cluster:falco_events:rate",
            _events_rate(ctx, "falco", "rule_matches", ("rule_name", "priority")),
            tests=[
                Case(
                    "Falco rule matches per second by rule across the cluster",
                    at=t.settled,
                    series=matches,
                    expect=[
                        sample(0.3, **cluster_labels, rule_name=OUTBOUND, priority="4"),
                        sample(1, **cluster_labels, rule_name=SENSITIVE, priority="3"),
                    ],
                )
            ],
        ),
    ]


def _tetragon_events(ctx: Context) -> list[Record]:
    cluster_labels = ctx.cluster_labels
    t = ctx.timeline
    tetragon = [
        tetragon_event(ctx, t.rising(0.5, t.span), node="n1", policy="checkpoint-guard", binary="/usr/bin/curl")
    ]
    # Absent for five scrapes, then 1, 3, 5 ... kills: evaluated at the first rule evaluation from the second
    # sample on, while the window still reaches back before the first.
    first, evaluated = 5 * t.step, t.tick(6 * t.step)
    kills_then = 1 + 2 * (evaluated - first) // t.step
    kills = [
        tetragon_action(
            ctx,
            f"{t.absent(first)} 1+2x15",
            node="n1",
            policy="block-miners",
            action="signal",
            hook="kprobe:tcp_connect",
        )
    ]
    return [
        Record(
            "node:tetragon_policy_events:rate",
            _events_rate(ctx, "tetragon", "policy_events", ("node",)),
            tests=[
                Case(
                    "Tetragon policy events per second by node",
                    at=t.settled,
                    series=tetragon,
                    expect=[sample(0.5, **cluster_labels, node="n1")],
                )
            ],
        ),
        Record(
            "cluster:tetragon_policy_events:rate",
            _events_rate(ctx, "tetragon", "policy_events", ("policy", "binary")),
            tests=[
                Case(
                    "Tetragon policy events per second by policy and binary",
                    at=t.settled,
                    series=tetragon,
                    expect=[sample(0.5, **cluster_labels, policy="checkpoint-guard", binary="/usr/bin/curl")],
                )
            ],
        ),
        Record(
            "node:tetragon_policy_actions:rate",
            _events_rate(ctx, "tetragon", "selector_actions", ("node", "policy", "action")),
            tests=[
                Case(
                    "enforcement actions (kills, overrides) per second by node, policy and action, the "
                    "first one included",
                    at=duration(evaluated),
                    series=kills,
                    expect=[
                        sample(
                            _at_rate(ctx, kills_then),
                            **cluster_labels,
                            node="n1",
                            policy="block-miners",
                            action="signal",
                        )
                    ],
                )
            ],
        ),
    ]


def _job_events(ctx: Context) -> Record:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    t = ctx.timeline
    jobs = [
        gpu_utilization(ctx, t.held(0.9, t.span), node=node, gpu=gpu, hpc_job=job)
        for node, gpu, job in (("n2", "0", "42"), ("n2", "1", "43"), ("n1", "0", "44"), ("n3", "0", "45"))
    ]
    return Record(
        "job:falco_events:rate",
        aggregate(
            "sum",
            (cluster, "hpc_job"),
            f"{aggregate('sum', (cluster, 'node'), 'node:falco_events:rate')} "
            f"* on ({cluster}, node) group_right () "
            f"{aggregate('group', (cluster, 'node', 'hpc_job'), 'gpu:job:info')}",
        ),
        tests=[
            Case(
                "a node's Falco matches count for every job on the node; nodes without a job count for none",
                at=t.settled,
                series=_falco_matches(ctx) + jobs,
                expect=[
                    sample(1.2, **cluster_labels, hpc_job="42"),
                    sample(1.2, **cluster_labels, hpc_job="43"),
                    sample(0.1, **cluster_labels, hpc_job="44"),
                ],
            )
        ],
    )
