"""Slurm: nodes by state, queue depth and GPU allocation per partition (docs/recording-rules.md).

Names differ by exporter flavour (SckyzO's slurm_nodes_down{partition} vs Slurm 25.11's
slurm_partition_nodes_down{partition}); the catalogue's `canonical:` tags pick the right one.
Counts are per partition: a node in two partitions counts in both, as Slurm reports it. Drain and down
reasons, and since when, come only from SckyzO's drain_reason collector (Slurm's own metrics and jontk's
exporter have no reason), jobs ended out of memory only from Slurm's own metrics: those records exist
only where the exporter has them.
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import series, slurm_partition
from hpcobs.lang.promql import label_replace

STATES = ("alloc", "mixed", "idle", "down", "drain", "fail")


def groups(ctx: Context) -> list[Group]:
    return [
        Group(
            "hpcobs-slurm",
            domain="slurm",
            interval=ctx.evaluation_interval,
            rules=[_nodes_by_state(ctx), *_queue(ctx), *_drain_reasons(ctx), *_oom_kills(ctx)],
        )
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
