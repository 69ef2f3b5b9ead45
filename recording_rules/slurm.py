"""Slurm: nodes by state, queue depth and GPU allocation per partition (DESIGN.md §8).

Names differ by exporter flavour (SckyzO's slurm_nodes_down{partition} vs Slurm 25.11's
slurm_partition_nodes_down{partition}); the catalogue's `canonical:` tags pick the right one.
Counts are per partition: a node in two partitions counts in both, as Slurm reports it.
"""
from hpcobs.context import Context
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, sample
from hpcobs.synthetic import series

STATES = ("alloc", "mixed", "idle", "down", "drain", "fail")


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = {c: ctx.config.get("cluster", "name")}
    slurm = ctx.sources["slurm"]

    def partition_total(canonical: str) -> str:
        return ctx.select("slurm", slurm.exporter.signals_for(canonical), ("partition",), op="sum")

    def state(canonical_state: str) -> str:
        return (f'label_replace({partition_total(f"partition_nodes_{canonical_state}")}, '
                f'"state", "{canonical_state}", "", "")')

    def partition_series(canonical: str, value: int, partition: str):
        (signal, *_) = slurm.exporter.signals_for(canonical)
        return series(ctx, "slurm", signal, f"{value}x20", node="slurmctld", partition=partition,
                      **({"active_feature_set": "h100"} if "active_feature_set" in slurm.metric(signal).labels else {}))

    counts = {"alloc": 10, "mixed": 2, "idle": 3, "down": 1, "drain": 2, "fail": 0}
    cluster_state = [partition_series(f"partition_nodes_{s}", n, "gpu") for s, n in counts.items()]
    queue = [partition_series("partition_jobs_pending", 40, "gpu"), partition_series("partition_jobs_pending", 3, "debug"),
             partition_series("partition_jobs_running", 12, "gpu"), partition_series("partition_gpus_allocated", 96, "gpu")]

    return [Group("hpcobs-slurm", domain="slurm", interval=ctx.scrape_interval, rules=[
        Record("partition:slurm_nodes:count", " or ".join(state(s) for s in STATES),
               tests=[Case("one series per partition and node state", at="5m", series=cluster_state,
                           expect=[sample(n, **cl, partition="gpu", state=s) for s, n in counts.items()])]),
        Record("partition:slurm_jobs_pending:count", partition_total("partition_jobs_pending"),
               tests=[Case("queue depth per partition", at="5m", series=queue,
                           expect=[sample(40, **cl, partition="gpu"), sample(3, **cl, partition="debug")])]),
        Record("partition:slurm_jobs_running:count", partition_total("partition_jobs_running"),
               tests=[Case("running jobs per partition", at="5m", series=queue,
                           expect=[sample(12, **cl, partition="gpu")])]),
        Record("partition:slurm_gpus_allocated:count", partition_total("partition_gpus_allocated"),
               tests=[Case("GPUs Slurm has allocated per partition", at="5m", series=queue,
                           expect=[sample(96, **cl, partition="gpu")])]),
    ])]
