"""GPU normalisation and fleet aggregates (DESIGN.md §5, §8).

Layer 1 (`hpcobs-gpu-normalise`) turns every deployed GPU exporter and version into canonical per-GPU
series in SI units keyed by (cluster, node, gpu). Only two per GPU are worth their cost, because many
rules and panels read them: utilisation and job ownership (one per job on the GPU). Every other signal
is folded straight into the node and job aggregates of layer 2; models and drivers are counted per
node, and UUIDs stay on the raw series that the one-node drill-down reads. Layer 3 sums layer 2 per
cluster. The budget behind these choices is docs/recording-rules.md.
A group only reads raw series or groups before it, so the same layering replays on any ruler.
"""
from hpcobs.context import Context
from hpcobs.promql import aggregate
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, sample
from hpcobs.synthetic import amd, dcgm, raw_value

GPU = ("node", "gpu")
OWNED = {"hpc_job": '!=""'}
THROTTLE_EVENTS = '=~"hw_slowdown|sw_thermal|hw_thermal|hw_power_brake"'


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = {c: ctx.config.get("cluster", "name")}
    xids = ctx.sources["dcgm"].exporter
    drain_xid = {"err_code": '=~"%s"' % "|".join(map(str, xids.xids("drain")))}
    versions = ctx.sources["dcgm"].versions
    with_amd = ctx.sources["amd"].enabled
    w = ctx.rate_window
    idle_window = ctx.thresholds["gpu_idle_window"]

    def util(values, **kw):
        return dcgm(ctx, "gpu_utilization", values, **kw)

    info_source = util("5x10", node="n1", gpu="0")

    normalise = Group("hpcobs-gpu-normalise", domain="gpu", interval=ctx.scrape_interval, rules=[
        Record(
            "gpu:utilization:ratio", ctx.gpu("utilization"),
            tests=[
                Case("every deployed exporter and version becomes a 0-1 ratio, one series per GPU", at="5m",
                     series=[util(f"{raw_value(ctx, 'gpu_utilization', v, (i + 1) / 10)}x10", node=f"n{i}", gpu="1",
                                  version=v) for i, v in enumerate(versions)]
                     + ([amd(ctx, "gfx_activity", "55x10", node="amd1", gpu="1", hpc_job="7")] if with_amd else []),
                     expect=[sample((i + 1) / 10, **cl, node=f"n{i}", gpu="1") for i, _ in enumerate(versions)]
                     + ([sample(0.55, **cl, node="amd1", gpu="1")] if with_amd else [])),
                Case("a GPU shared by two jobs is counted once", at="5m",
                     series=[util("80x10", node="n1", gpu="2", hpc_job="101"),
                             util("80x10", node="n1", gpu="2", hpc_job="102")],
                     expect=[sample(0.8, **cl, node="n1", gpu="2")]),
            ]),
        Record(
            "gpu:job:info", ctx.gpu("utilization", keep=("hpc_job",), op="group", where=OWNED),
            tests=[Case("one series per job on a GPU; free GPUs have none", at="5m",
                        series=[util("80x10", node="n1", gpu="2", hpc_job="101"),
                                util("80x10", node="n1", gpu="2", hpc_job="102"),
                                util("0x10", node="n1", gpu="3")],
                        expect=[sample(1, **cl, node="n1", gpu="2", hpc_job="101"),
                                sample(1, **cl, node="n1", gpu="2", hpc_job="102")])]),
    ])

    node = Group("hpcobs-gpu-node", domain="gpu", interval=ctx.scrape_interval, rules=[
        Record("node:gpus_by_model:count",
               aggregate("count", (c, "node", "model", "driver"),
                         ctx.gpu("utilization", keep=("model", "driver"), op="group")),
               tests=[Case("GPUs per model and driver: UUIDs, models and drivers stay off every other series", at="5m",
                           series=[info_source, util("5x10", node="n1", gpu="1")],
                           expect=[sample(2, **cl, node="n1", model=info_source.labels["modelName"],
                                          driver=info_source.labels[xids.canonical_labels(versions[0])["driver"]])])]),
        Record("node:gpus:count", aggregate("count", (c, "node"), "gpu:utilization:ratio"),
               tests=[Case("GPUs reporting on the node", at="5m",
                           series=[util("1x10", node="n1", gpu=g) for g in "0123"],
                           expect=[sample(4, **cl, node="n1")])]),
        Record("node:gpu_utilization:avg", aggregate("avg", (c, "node"), "gpu:utilization:ratio"),
               tests=[Case("mean over the node's GPUs", at="5m",
                           series=[util("20x10", node="n1", gpu="0"), util("60x10", node="n1", gpu="1")],
                           expect=[sample(0.4, **cl, node="n1")])]),
        Record("node:gpus_allocated:count", aggregate("count", (c, "node"), aggregate("group", (c, *GPU), "gpu:job:info")),
               tests=[Case("a GPU shared by two jobs is one allocated GPU", at="5m",
                           series=[util("50x10", node="n1", gpu="0", hpc_job="7"),
                                   util("50x10", node="n1", gpu="1", hpc_job="7"),
                                   util("50x10", node="n1", gpu="1", hpc_job="8"),
                                   util("50x10", node="n1", gpu="2")],
                           expect=[sample(2, **cl, node="n1")])]),
        Record("node:gpus_allocated_idle:count",
               aggregate("count", (c, "node"),
                         f"(max_over_time(gpu:utilization:ratio[{idle_window}]) == 0) "
                         f"* on ({c}, node, gpu) group_right () (gpu:job:info offset {idle_window})"),
               tests=[Case(f"a GPU held by the same job for {idle_window} at 0% is idle; a busy one or a new "
                           "allocation is not", at="90m",
                           series=[util("0x180", node="n1", gpu="0", hpc_job="7"),
                                   util("0x100 1 0x79", node="n1", gpu="1", hpc_job="7"),
                                   util("0x180", node="n1", gpu="2"),
                                   util("0x180", node="n2", gpu="0", hpc_job="9"),
                                   util("_x120 0x60", node="n1", gpu="3", hpc_job="8")],
                           expect=[sample(1, **cl, node="n1"), sample(1, **cl, node="n2")])]),
        Record("node:gpu_sm_active:avg", aggregate("avg", (c, "node"), ctx.gpu("sm_active")),
               tests=[Case("SM activity, an optional profiling field, averaged", at="5m",
                           series=[dcgm(ctx, "sm_active", "0.5x10", node="n1", gpu="0"),
                                   dcgm(ctx, "sm_active", "0.75x10", node="n1", gpu="1")],
                           expect=[sample(0.625, **cl, node="n1")]),
                      Case("no series, and no error, where the optional field is not collected", at="5m",
                           series=[util("50x10", node="n1", gpu="0")], expect=[])]),
        Record("node:gpu_tensor_active:avg", aggregate("avg", (c, "node"), ctx.gpu("tensor_active")),
               tests=[Case("tensor pipe activity averaged", at="5m",
                           series=[dcgm(ctx, "tensor_active", "0.25x10", node="n1", gpu="0"),
                                   dcgm(ctx, "tensor_active", "0.75x10", node="n1", gpu="1")],
                           expect=[sample(0.5, **cl, node="n1")])]),
        Record("node:gpu_dram_active:avg", aggregate("avg", (c, "node"), ctx.gpu("dram_active")),
               tests=[Case("memory interface activity averaged", at="5m",
                           series=[dcgm(ctx, "dram_active", "0.125x10", node="n1", gpu="0"),
                                   dcgm(ctx, "dram_active", "0.375x10", node="n1", gpu="1")],
                           expect=[sample(0.25, **cl, node="n1")])]),
        Record("node:gpu_memory_used:bytes", aggregate("sum", (c, "node"), ctx.gpu("memory_used")),
               tests=[Case("framebuffer used, summed in bytes", at="5m",
                           series=[dcgm(ctx, "fb_used", f"{raw_value(ctx, 'fb_used', versions[0], 2 ** 30)}x10",
                                        node="n1", gpu=g) for g in "01"],
                           expect=[sample(2 * 2 ** 30, **cl, node="n1")])]),
        Record("node:gpu_power:watts", aggregate("sum", (c, "node"), ctx.gpu("power")),
               tests=[Case("board power summed once per GPU, even when shared", at="5m",
                           series=[dcgm(ctx, "power", "300x10", node="n1", gpu="0", hpc_job="1"),
                                   dcgm(ctx, "power", "300x10", node="n1", gpu="0", hpc_job="2"),
                                   dcgm(ctx, "power", "100x10", node="n1", gpu="1")],
                           expect=[sample(400, **cl, node="n1")])]),
        Record("node:gpus_throttled:count",
               aggregate("count", (c, "node"),
                         ctx.select("dcgm", ["clock_events"], GPU, where={"clock_event": THROTTLE_EVENTS}) + " > 0"),
               tests=[Case("GPUs with a hardware or thermal slowdown in the exporter's window", at="5m",
                           series=[dcgm(ctx, "clock_events", "3x10", node="n1", gpu="0", clock_event="hw_slowdown",
                                        window_size_in_ms="300000"),
                                   dcgm(ctx, "clock_events", "9x10", node="n1", gpu="1", clock_event="gpu_idle",
                                        window_size_in_ms="300000"),
                                   dcgm(ctx, "clock_events", "0x10", node="n1", gpu="2", clock_event="sw_thermal",
                                        window_size_in_ms="300000")],
                           expect=[sample(1, **cl, node="n1")])]),
        Record("node:gpus_unhealthy:count",
               aggregate("count", (c, "node"),
                         f'({ctx.gpu("xid", where=drain_xid)}) or ({ctx.gpu("row_remap_failure")} > 0)'),
               tests=[Case("a drain-class Xid or a failed row remap makes a GPU unhealthy; Xid 13 does not", at="5m",
                           series=[dcgm(ctx, "xid", "48x10", node="n1", gpu="0", err_code="48",
                                        err_msg="Double Bit ECC Error"),
                                   dcgm(ctx, "xid", "13x10", node="n1", gpu="1", err_code="13",
                                        err_msg="Graphics Engine Exception"),
                                   dcgm(ctx, "row_remap_failure", "1x10", node="n1", gpu="0"),
                                   dcgm(ctx, "row_remap_failure", "1x10", node="n1", gpu="2"),
                                   dcgm(ctx, "row_remap_failure", "0x10", node="n1", gpu="3")],
                           expect=[sample(2, **cl, node="n1")])]),
        Record("node:gpus_ecc_uncorrectable:count",
               aggregate("count", (c, "node"), ctx.gpu("ecc_uncorrectable", over=lambda e: f"increase({e}[1h])") + " > 0"),
               tests=[Case("GPUs with uncorrectable ECC errors in the last hour, across a driver reload", at="60m",
                           series=[dcgm(ctx, "ecc_dbe_volatile", "0x60 2x30 0 1x28", node="n1", gpu="0"),
                                   dcgm(ctx, "ecc_dbe_volatile", "4x120", node="n1", gpu="1")],
                           expect=[sample(1, **cl, node="n1")])]),
    ])

    fleet = [util("10x10", node="n1", gpu="0"), util("30x10", node="n2", gpu="0"),
             util("80x10", node="n2", gpu="1", hpc_job="5"), dcgm(ctx, "row_remap_failure", "1x10", node="n2", gpu="0")]
    cluster = Group("hpcobs-gpu-cluster", domain="gpu", interval=ctx.scrape_interval, rules=[
        Record("cluster:gpus:count", aggregate("sum", (c,), "node:gpus:count"),
               tests=[Case("GPUs of every node", at="5m", series=fleet, expect=[sample(3, **cl)])]),
        Record("cluster:gpus_allocated:count", aggregate("sum", (c,), "node:gpus_allocated:count"),
               tests=[Case("GPUs held by a job", at="5m", series=fleet, expect=[sample(1, **cl)])]),
        Record("cluster:gpus_unhealthy:count", aggregate("sum", (c,), "node:gpus_unhealthy:count"),
               tests=[Case("GPUs needing a drain", at="5m", series=fleet, expect=[sample(1, **cl)])]),
        Record("cluster:gpu_utilization:avg", aggregate("avg", (c,), "gpu:utilization:ratio"),
               tests=[Case("mean over every GPU, not a mean of node means", at="5m", series=fleet,
                           expect=[sample(0.4, **cl)])]),
    ])
    return [normalise, node, cluster]
