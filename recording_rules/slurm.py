"""Slurm: nodes by state, queue depth and GPU allocation per partition; nodes by state over the whole cluster;
GPUs Slurm configures per node (docs/recording-rules.md).

Names differ by exporter flavour (SckyzO's slurm_nodes_down{partition} vs Slurm 25.11's
slurm_partition_nodes_down{partition}); the catalogue's `canonical:` tags pick the right one.
Partition records count as Slurm reports them: a node in two partitions counts in both (SckyzO nodes.go counts
`sinfo %R|%D|%T` lines, one per partition of a node). Cluster records count each node once, from what counts it
once: SckyzO's per-node series (one per node and partition, the same status on each, grouped by node), or Slurm's
own cluster totals (openmetrics.c counts node records). The nodes out of service, each once with its state, also
come from SckyzO's per-node series only. A partition's drained share divides by the partition's nodes, from the
per-node series or Slurm's partition total. Drain and down reasons, and since when, come only from SckyzO's
drain_reason collector (Slurm's own metrics and jontk's exporter have no reason), per-node states and GPU GRES only
from SckyzO's node collector, pending jobs by reason only from SckyzO's queue collector, jobs ended out of memory
only from Slurm's own metrics: those records exist only where the exporter has them.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import (
    SLURM_CONTROLLER,
    series,
    slurm_controller,
    slurm_partition,
    slurm_partition_nodes,
)
from hpcobs.lang import escape
from hpcobs.lang.promql import aggregate, label_replace
from hpcobs.settings import declare

STATES = ("alloc", "mixed", "idle", "down", "drain", "fail")
# sinfo's long state names (StateLong, %T) of each state, as SckyzO's nodes.go classes them: by prefix, so drained,
# draining and drained* are drain, down* (not responding) is down, failing is fail.
SINFO_STATES = {
    "alloc": "alloc.*",
    "mixed": "mix.*",
    "idle": "idle.*",
    "down": "down.*",
    "drain": "drain.*",
    "fail": "fail.*",
}
# GRES names SckyzO's gres_type carries for GPUs: "gpu", or "gpu:<type>" (gpus.go parseGPUCount).
GPU_GRES = "gpu(:.*)?"
# sinfo long states of a node Slurm schedules on (completing: its last job is ending), by prefix like SINFO_STATES.
SCHEDULABLE = "(alloc|mix|idle|comp).*"

THRESHOLDS = (
    declare.regex(
        "slurm_gres_mig_types",
        "gpu:.*[0-9]+g\\.[0-9]+gb.*",
        "GPU GRES types (RE2 regex on SckyzO's `gres_type`, anchored at both ends) that are MIG devices, not GPUs: "
        "Slurm schedules each MIG device as one gpu GRES, typed by its profile (1g.10gb). A node with any is left "
        "out of node:slurm_gpus:count, whose GPUs GpuSeriesMissing compares with the physical GPUs reporting; "
        "such a node is judged against its own recent maximum instead.",
    ),
)


def groups(ctx: Context) -> list[Group]:
    return [
        Group(
            "hpcobs-slurm",
            domain="slurm",
            interval=ctx.evaluation_interval,
            rules=[
                _nodes_by_state(ctx),
                _drained_share(ctx),
                _cluster_nodes(ctx),
                *_node_states(ctx),
                *_node_gpus(ctx),
                *_queue(ctx),
                *_pending_reasons(ctx),
                *_drain_reasons(ctx),
                *_oom_kills(ctx),
            ],
        ),
    ]


def _per_node(ctx: Context) -> bool:
    """Whether the exporter reports each node's state (SckyzO's node collector; Slurm's own metrics do not)."""
    return bool(ctx.sources["slurm"].exporter.signals_for("node_state"))


def _in_state(ctx: Context, state: str) -> str:
    """The nodes in a state, one series per node whatever its partitions: SckyzO's per-node series."""
    where = {"status": "=~" + escape.promql_string(SINFO_STATES[state])}
    return ctx.select(
        "slurm", ctx.sources["slurm"].exporter.signals_for("node_state"), ("node",), op="group", where=where
    )


def _node_status(ctx: Context, node: str, status: str, partitions: tuple[str, ...] = ("gpu",)) -> list[Series]:
    """SckyzO's series of one node: one per partition it belongs to, the same status on each."""
    return [
        series(ctx, "slurm", "node_status", "1x20", node=node, status=status, partition=partition)
        for partition in partitions
    ]


def _partition_total(ctx: Context, canonical: str) -> str:
    return ctx.select("slurm", ctx.sources["slurm"].exporter.signals_for(canonical), ("partition",), op="sum")


def _partition_series(ctx: Context, canonical: str, value: int, partition: str) -> Series:
    return slurm_partition(ctx, canonical, f"{value}x20", partition)


def _nodes_by_state(ctx: Context) -> Record:
    def state(canonical_state: str) -> str:
        return label_replace(
            _partition_total(ctx, f"partition_nodes_{canonical_state}"), "state", "", "", canonical_state
        )

    counts = {"alloc": 10, "mixed": 2, "idle": 3, "down": 1, "drain": 2, "fail": 0}
    return Record(
        "partition:slurm_nodes:count",
        " or ".join(state(s) for s in STATES),
        tests=[
            Case(
                "one series per partition and node state",
                at="5m",
                series=[_partition_series(ctx, f"partition_nodes_{s}", n, "gpu") for s, n in counts.items()],
                expect=[sample(n, **ctx.cluster_labels, partition="gpu", state=s) for s, n in counts.items()],
            )
        ],
    )


def _drained_share(ctx: Context) -> Record:
    """Drained nodes over all nodes of each partition: the share SlurmNodesDrained judges, so that a few drained
    nodes of a large partition (a normal repair backlog) stay below it and a small partition's do not."""
    cluster = ctx.cluster
    slurm = ctx.sources["slurm"].exporter
    total = (
        aggregate(
            "count",
            (cluster, "partition"),
            ctx.select("slurm", slurm.signals_for("node_state"), ("node", "partition"), op="group"),
        )
        if _per_node(ctx)
        else _partition_total(ctx, "partition_nodes_total")
    )
    return Record(
        "partition:slurm_nodes_drained:ratio",
        f"{_partition_total(ctx, 'partition_nodes_drain')} / on ({cluster}, partition) {total}",
        tests=[
            Case(
                "drained or draining nodes over the partition's nodes",
                at="5m",
                series=slurm_partition_nodes(ctx, "gpu", 8, 2, 20) + slurm_partition_nodes(ctx, "debug", 2, 0, 20),
                expect=[
                    sample(0.25, **ctx.cluster_labels, partition="gpu"),
                    sample(0, **ctx.cluster_labels, partition="debug"),
                ],
            )
        ],
    )


def _overlapping_nodes(ctx: Context) -> list[Series]:
    """Four nodes, one in two partitions (gpu and debug), as SckyzO's node collector reports them."""
    return [
        *_node_status(ctx, "n1", "allocated"),
        *_node_status(ctx, "n2", "mixed", ("gpu", "debug")),
        *_node_status(ctx, "n3", "drained*"),
        *_node_status(ctx, "n4", "idle", ("debug",)),
    ]


def _cluster_nodes(ctx: Context) -> Record:
    """Nodes per state over the cluster, each node once: counted from the per-node states where the exporter has
    them, else Slurm's own cluster totals (whose states are flags: a drained idle node is idle and drain)."""
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    if _per_node(ctx):
        return Record(
            "cluster:slurm_nodes:count",
            " or ".join(
                label_replace(aggregate("count", (cluster,), _in_state(ctx, state)), "state", "", "", state)
                for state in STATES
            ),
            tests=[
                Case(
                    "a node in two partitions counts once",
                    at="5m",
                    series=_overlapping_nodes(ctx),
                    expect=[sample(1, **cluster_labels, state=state) for state in ("alloc", "mixed", "drain", "idle")],
                )
            ],
        )
    slurm = ctx.sources["slurm"].exporter

    def state(canonical_state: str) -> str:
        total = ctx.select("slurm", slurm.signals_for(f"cluster_nodes_{canonical_state}"), (), op="sum")
        return label_replace(total, "state", "", "", canonical_state)

    counts = {"alloc": 10, "mixed": 2, "idle": 3, "down": 1, "drain": 2, "fail": 0}
    return Record(
        "cluster:slurm_nodes:count",
        " or ".join(state(s) for s in STATES),
        tests=[
            Case(
                "Slurm's cluster totals, one series per state",
                at="5m",
                series=[
                    slurm_controller(ctx, slurm.signals_for(f"cluster_nodes_{s}")[0], f"{n}x20")
                    for s, n in counts.items()
                ],
                expect=[sample(n, **cluster_labels, state=s) for s, n in counts.items()],
            )
        ],
    )


def _node_states(ctx: Context) -> list[Record]:
    """The nodes Slurm does not schedule on, each once whatever its partitions, labelled with its state: which nodes
    are down, drained or failing, not only how many (the on-call's list, beside the drain reasons). Down, drain and
    fail are classed as the cluster's counts class them (down*, drained, draining); the rarer states (maint,
    reboot...) keep sinfo's word. Only where the exporter reports each node's state (SckyzO)."""
    if not _per_node(ctx):
        return []
    unschedulable = ctx.select(
        "slurm",
        ctx.sources["slurm"].exporter.signals_for("node_state"),
        ("node", "status"),
        op="group",
        where={"status": "!~" + escape.promql_string(SCHEDULABLE)},
    )
    as_printed = label_replace(unschedulable, "state", "status", "(.*)")
    classed = label_replace(as_printed, "state", "status", "(down|drain|fail).*")
    return [
        Record(
            "node:slurm_unschedulable:count",
            aggregate("count", (ctx.cluster, "node", "state"), classed),
            tests=[
                Case(
                    "one series per node out of service, whatever its partitions; its state classed like the "
                    "cluster's counts, or as sinfo prints it",
                    at="5m",
                    series=[
                        *_overlapping_nodes(ctx),
                        *_node_status(ctx, "n5", "down*", ("gpu", "debug")),
                        *_node_status(ctx, "n6", "maint"),
                        *_node_status(ctx, "n7", "completing"),
                    ],
                    expect=[
                        sample(1, **ctx.cluster_labels, node=node, state=state)
                        for node, state in (("n3", "drain"), ("n5", "down"), ("n6", "maint"))
                    ],
                )
            ],
        )
    ]


def _node_gpus(ctx: Context) -> list[Record]:
    """GPUs Slurm configures on each node (GRES), once whatever its partitions: what GpuSeriesMissing expects to
    report. Only from SckyzO's per-node GRES, whose type tells a MIG device from a GPU; Slurm's own slurm_node_gpus
    counts MIG devices as GPUs with nothing to tell them apart (docs/exporters.md)."""
    if not ctx.sources["slurm"].exporter.signals_for("node_gres"):
        return []
    cluster = ctx.cluster
    gres = ctx.sources["slurm"].exporter.signals_for("node_gres")
    gpus = ctx.select(
        "slurm", gres, ("node", "partition"), op="sum", where={"gres_type": "=~" + escape.promql_string(GPU_GRES)}
    )
    mig = ctx.select(
        "slurm",
        gres,
        ("node",),
        op="group",
        where={"gres_type": "=~" + escape.promql_string(ctx.thresholds.slurm_gres_mig_types)},
    )

    def node_gres(node: str, gres_type: str, count: int, partitions: tuple[str, ...] = ("gpu",)) -> list[Series]:
        return [
            series(ctx, "slurm", gres[0], f"{count}x20", node=node, status="mixed", partition=p, gres_type=gres_type)
            for p in partitions
        ]

    return [
        Record(
            "node:slurm_gpus:count",
            f"{aggregate('max', (cluster, 'node'), gpus)} unless on ({cluster}, node) {mig}",
            tests=[
                Case(
                    "GPUs of every GPU type once per node, whatever its partitions; shards are not GPUs; a node "
                    "whose GPUs Slurm schedules as MIG devices is left out",
                    at="5m",
                    series=[
                        *node_gres("n1", "gpu:h100", 8, ("gpu", "debug")),
                        *node_gres("n1", "shard", 32),
                        *node_gres("n2", "gpu:a100", 2),
                        *node_gres("n2", "gpu:h100", 2),
                        *node_gres("n3", "gpu", 4),
                        *node_gres("n4", "gpu:1g.10gb", 7),
                    ],
                    expect=[
                        sample(8, **ctx.cluster_labels, node="n1"),
                        sample(4, **ctx.cluster_labels, node="n2"),
                        sample(4, **ctx.cluster_labels, node="n3"),
                    ],
                )
            ],
        )
    ]


def _queue(ctx: Context) -> list[Record]:
    """Jobs and GPUs per partition: one shared set of series, one record per partition total."""
    cluster_labels = ctx.cluster_labels
    queue = [
        _partition_series(ctx, "partition_jobs_pending", 40, "gpu"),
        _partition_series(ctx, "partition_jobs_pending", 3, "debug"),
        _partition_series(ctx, "partition_jobs_running", 12, "gpu"),
        _partition_series(ctx, "partition_gpus_allocated", 96, "gpu"),
    ]
    totals = (
        (
            "partition:slurm_jobs_pending:count",
            "partition_jobs_pending",
            "queue depth per partition",
            [sample(40, **cluster_labels, partition="gpu"), sample(3, **cluster_labels, partition="debug")],
        ),
        (
            "partition:slurm_jobs_running:count",
            "partition_jobs_running",
            "running jobs per partition",
            [sample(12, **cluster_labels, partition="gpu")],
        ),
        (
            "partition:slurm_gpus_allocated:count",
            "partition_gpus_allocated",
            "GPUs Slurm has allocated per partition",
            [sample(96, **cluster_labels, partition="gpu")],
        ),
    )
    return [
        Record(
            record,
            _partition_total(ctx, canonical),
            tests=[Case(description, at="5m", series=queue, expect=expect)],
        )
        for record, canonical, description, expect in totals
    ]


def _pending_reasons(ctx: Context) -> list[Record]:
    """Pending jobs by the reason squeue gives (Resources, Priority, QOSMaxGpuPerUser...), per partition and user:
    why the queue does not move. Slurm's reasons are a fixed list, and SckyzO only emits the combinations that have
    pending jobs, so this stays about as large as the queue's users."""
    if "queue_pending" not in ctx.sources["slurm"].exporter.signals():
        return []
    pending = [
        series(
            ctx,
            "slurm",
            "queue_pending",
            node=SLURM_CONTROLLER,
            values="3x20",
            user="alice",
            partition="gpu",
            reason="Resources",
        ),
        series(
            ctx,
            "slurm",
            "queue_pending",
            node=SLURM_CONTROLLER,
            values="2x20",
            user="alice",
            partition="gpu",
            reason="Priority",
        ),
        series(
            ctx,
            "slurm",
            "queue_pending",
            node=SLURM_CONTROLLER,
            values="1x20",
            user="bob",
            partition="debug",
            reason="QOSMaxGRESPerUser",
        ),
    ]
    return [
        Record(
            "user:slurm_jobs_pending_by_reason:count",
            ctx.select("slurm", ["queue_pending"], ("partition", "user", "reason"), op="sum"),
            tests=[
                Case(
                    "pending jobs per partition, user and pending reason",
                    at="5m",
                    series=pending,
                    expect=[
                        sample(3, **ctx.cluster_labels, partition="gpu", user="alice", reason="Resources"),
                        sample(2, **ctx.cluster_labels, partition="gpu", user="alice", reason="Priority"),
                        sample(1, **ctx.cluster_labels, partition="debug", user="bob", reason="QOSMaxGRESPerUser"),
                    ],
                )
            ],
        )
    ]


def _drain_reasons(ctx: Context) -> list[Record]:
    if "node_drain_reason" not in ctx.sources["slurm"].exporter.signals():
        return []
    cluster_labels = ctx.cluster_labels
    drained = [
        series(ctx, "slurm", "node_drain_reason", "1x20", node="gpu007", reason="Kill task failed"),
        series(ctx, "slurm", "node_drain_since", "1767225600x20", node="gpu007"),
    ]
    return [
        Record(
            "node:slurm_drain_reason:info",
            ctx.select("slurm", ["node_drain_reason"], ("node", "reason")),
            tests=[
                Case(
                    "the reason an admin or Slurm gave for draining or downing a node",
                    at="5m",
                    series=drained,
                    expect=[sample(1, **cluster_labels, node="gpu007", reason="Kill task failed")],
                )
            ],
        ),
        Record(
            "node:slurm_drained_since:timestamp",
            ctx.select("slurm", ["node_drain_since"], ("node",)),
            tests=[
                Case(
                    "when the reason was set (Unix seconds)",
                    at="5m",
                    series=drained,
                    expect=[sample(1767225600, **cluster_labels, node="gpu007")],
                )
            ],
        ),
    ]


def _oom_kills(ctx: Context) -> list[Record]:
    if not ctx.sources["slurm"].exporter.signals_for("partition_jobs_oom"):
        return []
    return [
        Record(
            "partition:slurm_jobs_oom:count",
            _partition_total(ctx, "partition_jobs_oom"),
            tests=[
                Case(
                    "jobs that ended out of memory, per partition",
                    at="5m",
                    series=[_partition_series(ctx, "partition_jobs_oom", 2, "gpu")],
                    expect=[sample(2, **ctx.cluster_labels, partition="gpu")],
                )
            ],
        )
    ]
