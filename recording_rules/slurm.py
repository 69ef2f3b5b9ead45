"""Slurm: nodes by state, queue depth and GPU allocation per partition (docs/recording-rules.md).

Names differ by exporter flavour (SckyzO's slurm_nodes_down{partition} vs Slurm 25.11's
slurm_partition_nodes_down{partition}); the catalogue's `canonical:` tags pick the right one.
Counts are per partition: a node in two partitions counts in both, as Slurm reports it. Drain and down
reasons, and since when, come only from SckyzO's drain_reason collector (Slurm's own metrics and jontk's
exporter have no reason), jobs ended out of memory only from Slurm's own metrics: those records exist
only where the exporter has them.
"""

from hpcobs.context import Context
from hpcobs.promql import label_replace
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, Series, sample
from hpcobs.synthetic import series, slurm_partition

STATES = ("alloc", "mixed", "idle", "down", "drain", "fail")


def groups(ctx: Context) -> list[Group]:
    cluster_labels = ctx.cluster_labels
    slurm = ctx.sources["slurm"]

    def partition_total(canonical: str) -> str:
        return ctx.select("slurm", slurm.exporter.signals_for(canonical), ("partition",), op="sum")

    def state(canonical_state: str) -> str:
        return label_replace(partition_total(f"partition_nodes_{canonical_state}"), "state", "", "", canonical_state)

    def partition_series(canonical: str, value: int, partition: str) -> Series:
        return slurm_partition(ctx, canonical, f"{value}x20", partition)

    counts = {"alloc": 10, "mixed": 2, "idle": 3, "down": 1, "drain": 2, "fail": 0}
    cluster_state = [partition_series(f"partition_nodes_{s}", n, "gpu") for s, n in counts.items()]
    queue = [
        partition_series("partition_jobs_pending", 40, "gpu"),
        partition_series("partition_jobs_pending", 3, "debug"),
        partition_series("partition_jobs_running", 12, "gpu"),
        partition_series("partition_gpus_allocated", 96, "gpu"),
    ]

    drained = (
        [
            series(ctx, "slurm", "node_drain_reason", "1x20", node="gpu007", reason="Kill task failed"),
            series(ctx, "slurm", "node_drain_since", "1767225600x20", node="gpu007"),
        ]
        if "node_drain_reason" in slurm.exporter.signals()
        else []
    )
    drain_reasons = (
        [
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
        if drained
        else []
    )
    oom = [partition_series("partition_jobs_oom", 2, "gpu")] if slurm.exporter.signals_for("partition_jobs_oom") else []
    oom_kills = (
        [
            Record(
                "partition:slurm_jobs_oom:count",
                partition_total("partition_jobs_oom"),
                tests=[
                    Case(
                        "jobs that ended out of memory, per partition",
                        at="5m",
                        series=oom,
                        expect=[sample(2, **cluster_labels, partition="gpu")],
                    )
                ],
            ),
        ]
        if oom
        else []
    )

    return [
        Group(
            "hpcobs-slurm",
            domain="slurm",
            interval=ctx.scrape_interval,
            rules=[
                Record(
                    "partition:slurm_nodes:count",
                    " or ".join(state(s) for s in STATES),
                    tests=[
                        Case(
                            "one series per partition and node state",
                            at="5m",
                            series=cluster_state,
                            expect=[sample(n, **cluster_labels, partition="gpu", state=s) for s, n in counts.items()],
                        )
                    ],
                ),
                Record(
                    "partition:slurm_jobs_pending:count",
                    partition_total("partition_jobs_pending"),
                    tests=[
                        Case(
                            "queue depth per partition",
                            at="5m",
                            series=queue,
                            expect=[
                                sample(40, **cluster_labels, partition="gpu"),
                                sample(3, **cluster_labels, partition="debug"),
                            ],
                        )
                    ],
                ),
                Record(
                    "partition:slurm_jobs_running:count",
                    partition_total("partition_jobs_running"),
                    tests=[
                        Case(
                            "running jobs per partition",
                            at="5m",
                            series=queue,
                            expect=[sample(12, **cluster_labels, partition="gpu")],
                        )
                    ],
                ),
                Record(
                    "partition:slurm_gpus_allocated:count",
                    partition_total("partition_gpus_allocated"),
                    tests=[
                        Case(
                            "GPUs Slurm has allocated per partition",
                            at="5m",
                            series=queue,
                            expect=[sample(96, **cluster_labels, partition="gpu")],
                        )
                    ],
                ),
                *drain_reasons,
                *oom_kills,
            ],
        )
    ]
