"""GPU normalisation and fleet aggregates (DESIGN.md §5, §8).

Layer 1 turns every deployed dcgm-exporter version into one canonical per-GPU series in SI units,
keyed by (cluster, node, gpu); layer 2 aggregates it. Dashboards and alerts read these names only.
"""
from hpcobs.context import Context
from hpcobs.promql import aggregate
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, sample
from hpcobs.synthetic import dcgm, raw_value


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cluster = ctx.config.get("cluster", "name")
    versions = ctx.sources["dcgm"].versions

    return [
        Group("hpcobs-gpu-normalise", domain="gpu", interval=ctx.scrape_interval, rules=[
            Record(
                "gpu:utilization:ratio",
                ctx.gpu("gpu_utilization"),
                tests=[
                    Case("every deployed version becomes a 0-1 ratio, one series per GPU", at="5m",
                         series=[dcgm(ctx, "gpu_utilization", f"{raw_value(ctx, 'gpu_utilization', v, 0.1 * (i + 1))}x10",
                                      node=f"n{i}", gpu="1", version=v) for i, v in enumerate(versions)],
                         expect=[sample(0.1 * (i + 1), **{c: cluster, "node": f"n{i}", "gpu": "1"})
                                 for i, _ in enumerate(versions)]),
                    Case("a GPU shared by two jobs is counted once", at="5m",
                         series=[dcgm(ctx, "gpu_utilization", "80x10", node="n1", gpu="2", hpc_job="101"),
                                 dcgm(ctx, "gpu_utilization", "80x10", node="n1", gpu="2", hpc_job="102")],
                         expect=[sample(0.8, **{c: cluster, "node": "n1", "gpu": "2"})]),
                ],
            ),
        ]),
        Group("hpcobs-gpu-aggregate", domain="gpu", interval=ctx.scrape_interval, rules=[
            Record(
                "node:gpu_utilization:avg",
                aggregate("avg", (c, "node"), "gpu:utilization:ratio"),
                tests=[Case("mean over the node's GPUs", at="5m",
                            series=[dcgm(ctx, "gpu_utilization", "20x10", node="n1", gpu="0"),
                                    dcgm(ctx, "gpu_utilization", "60x10", node="n1", gpu="1")],
                            expect=[sample(0.4, **{c: cluster, "node": "n1"})])],
            ),
            Record(
                "cluster:gpu_utilization:avg",
                aggregate("avg", (c,), "gpu:utilization:ratio"),
                tests=[Case("mean over every GPU of the cluster", at="5m",
                            series=[dcgm(ctx, "gpu_utilization", "10x10", node="n1", gpu="0"),
                                    dcgm(ctx, "gpu_utilization", "30x10", node="n2", gpu="0"),
                                    dcgm(ctx, "gpu_utilization", "80x10", node="n2", gpu="1")],
                            expect=[sample(0.4, **{c: cluster})])],
            ),
        ]),
    ]
