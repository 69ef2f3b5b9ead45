"""GPU normalisation and fleet aggregates (docs/recording-rules.md).

Layer 1 (`hpcobs-gpu-normalise`) turns every deployed GPU exporter and version into canonical per-GPU
series in SI units keyed by (cluster, node, gpu). Only two per GPU are worth their cost, because many
rules and panels read them: utilisation and job ownership (one per job on the GPU). Every other signal
is folded straight into the node and job aggregates of layer 2 (`hpcobs-gpu-node`, `hpcobs-gpu-node-activity`,
`hpcobs-gpu-node-throttled`; idle GPUs per node and job in `hpcobs-gpu-idle`, read by both levels); models
and drivers are counted per node, and UUIDs stay on the raw series that the one-node drill-down reads.
Layer 3 sums layer 2 per cluster. The budget behind these choices is docs/recording-rules.md.
Records of dcgm-exporter-only fields (clock events) exist only when dcgm-exporter is enabled; GPU health
combines what each enabled vendor reports (drain-class Xid or failed row remap; AMD gpu_health 0). Test series
are written in SI units and converted to what each exporter version exposes (hpcobs.authoring.synthetic.gpu_si_series).
A group only reads raw series or groups before it, so the same layering replays on any ruler.
"""

from functools import partial
from typing import NamedTuple

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import amd, dcgm, dcgm_xid_count, first_gpu_exporter, gpu_si_series, gpu_utilization
from hpcobs.lang.promql import ABOVE_ZERO, aggregate, duration, duration_seconds, label_replace

GPU = ("node", "gpu")
OWNED = {"hpc_job": '!=""'}
THROTTLE_EVENTS = '=~"hw_slowdown|sw_thermal|hw_thermal|hw_power_brake"'
UTILIZATION_BANDS = 10
# Means of the optional profiling fields over a node's GPUs: record, field, test description, two GPUs' values
# and their mean.
NODE_ACTIVITY = (
    ("node:gpu_sm_active:avg", "sm_active", "SM activity, an optional profiling field, averaged", (0.5, 0.75), 0.625),
    ("node:gpu_tensor_active:avg", "tensor_active", "tensor pipe activity averaged", (0.25, 0.75), 0.5),
    ("node:gpu_dram_active:avg", "dram_active", "memory interface activity averaged", (0.125, 0.375), 0.25),
)


class _Unhealthy(NamedTuple):
    """What makes a GPU unhealthy for one vendor, and the test that shows it."""

    expression: str
    series: list[Series]
    unhealthy_on_n1: int  # GPUs of n1 the series make unhealthy
    shows: str  # the test case description


def groups(ctx: Context) -> list[Group]:
    unhealthy = _unhealthy_causes(ctx)
    throttled = _node_throttled(ctx)
    # Clock events are nine series per GPU (dcgm-exporter only): their count is a group of its own.
    throttling = [Group("hpcobs-gpu-node-throttled", domain="gpu", interval=ctx.evaluation_interval, rules=throttled)]
    return [
        Group(
            "hpcobs-gpu-normalise",
            domain="gpu",
            interval=ctx.evaluation_interval,
            rules=[_utilization(ctx), _job_info(ctx)],
        ),
        Group("hpcobs-gpu-idle", domain="gpu", interval=ctx.evaluation_interval, rules=[_idle_by_job(ctx)]),
        # A group's rules run one after the other, groups side by side: the node level is split in groups of
        # about the same cost, each well inside its interval on a large fleet (docs/benchmarks.md, Fleet scale).
        Group(
            "hpcobs-gpu-node",
            domain="gpu",
            interval=ctx.evaluation_interval,
            rules=[
                *_node_inventory(ctx),
                *_node_allocation(ctx),
                *_node_unhealthy(ctx, unhealthy),
                _node_ecc(ctx),
            ],
        ),
        Group(
            "hpcobs-gpu-node-activity",
            domain="gpu",
            interval=ctx.evaluation_interval,
            rules=[*_node_activity(ctx), *_node_memory_and_power(ctx)],
        ),
        *(throttling if throttled else []),
        Group(
            "hpcobs-gpu-cluster", domain="gpu", interval=ctx.evaluation_interval, rules=_cluster(ctx, bool(unhealthy))
        ),
    ]


def _utilization(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels
    util = partial(gpu_utilization, ctx)
    versions = ctx.sources["dcgm"].versions
    nvidia = ctx.sources["dcgm"].enabled
    with_amd = ctx.sources["amd"].enabled
    return Record(
        "gpu:utilization:ratio",
        ctx.gpu("utilization"),
        tests=[
            Case(
                "every deployed exporter and version becomes a 0-1 ratio, one series per GPU",
                at="5m",
                series=[
                    util(f"{(i + 1) / 10}x10", node=f"n{i}", gpu="1", vendor="dcgm", version=version)
                    for i, version in enumerate(versions)
                    if nvidia
                ]
                + ([util("0.55x10", node="amd1", gpu="1", hpc_job="7", vendor="amd")] if with_amd else []),
                expect=[
                    sample((i + 1) / 10, **cluster_labels, node=f"n{i}", gpu="1")
                    for i, _ in enumerate(versions)
                    if nvidia
                ]
                + ([sample(0.55, **cluster_labels, node="amd1", gpu="1")] if with_amd else []),
            ),
            Case(
                "a GPU shared by two jobs is counted once",
                at="5m",
                series=[
                    util("0.8x10", node="n1", gpu="2", hpc_job="101"),
                    util("0.8x10", node="n1", gpu="2", hpc_job="102"),
                ],
                expect=[sample(0.8, **cluster_labels, node="n1", gpu="2")],
            ),
        ],
    )


def _job_info(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels
    util = partial(gpu_utilization, ctx)
    return Record(
        "gpu:job:info",
        ctx.gpu("utilization", keep=("hpc_job",), op="group", where=OWNED),
        tests=[
            Case(
                "one series per job on a GPU; free GPUs have none",
                at="5m",
                series=[
                    util("0.8x10", node="n1", gpu="2", hpc_job="101"),
                    util("0.8x10", node="n1", gpu="2", hpc_job="102"),
                    util("0x10", node="n1", gpu="3"),
                ],
                expect=[
                    sample(1, **cluster_labels, node="n1", gpu="2", hpc_job="101"),
                    sample(1, **cluster_labels, node="n1", gpu="2", hpc_job="102"),
                ],
            )
        ],
    )


def _node_inventory(ctx: Context) -> list[Record]:
    """GPUs per node by model and driver, how many report, and their mean utilisation."""
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    util = partial(gpu_utilization, ctx)
    info_source = util("0.05x10", node="n1", gpu="0")
    # The GPU info labels of the record, read back from the raw series (AMD has no driver label).
    info_vendor = ctx.sources[first_gpu_exporter(ctx)].exporter
    dcgm_version = ctx.sources["dcgm"].versions[0] if ctx.sources["dcgm"].enabled else None
    info_labels = {
        label: info_source.labels[raw]
        for label, raw in info_vendor.canonical_labels(dcgm_version).items()
        if label in ("model", "driver") and isinstance(raw, str)
    }
    return [
        Record(
            "node:gpus_by_model:count",
            aggregate(
                "count",
                (cluster, "node", "model", "driver"),
                ctx.gpu("utilization", keep=("model", "driver"), op="group"),
            ),
            tests=[
                Case(
                    "GPUs per model and driver: UUIDs, models and drivers stay off every other series",
                    at="5m",
                    series=[info_source, util("0.05x10", node="n1", gpu="1")],
                    expect=[sample(2, **cluster_labels, node="n1", **info_labels)],
                )
            ],
        ),
        Record(
            "node:gpus:count",
            aggregate("count", (cluster, "node"), "gpu:utilization:ratio"),
            tests=[
                Case(
                    "GPUs reporting on the node",
                    at="5m",
                    series=[util("0.01x10", node="n1", gpu=gpu) for gpu in "0123"],
                    expect=[sample(4, **cluster_labels, node="n1")],
                )
            ],
        ),
        Record(
            "node:gpu_utilization:avg",
            aggregate("avg", (cluster, "node"), "gpu:utilization:ratio"),
            tests=[
                Case(
                    "mean over the node's GPUs",
                    at="5m",
                    series=[util("0.2x10", node="n1", gpu="0"), util("0.6x10", node="n1", gpu="1")],
                    expect=[sample(0.4, **cluster_labels, node="n1")],
                )
            ],
        ),
    ]


def _node_allocation(ctx: Context) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    idle_window = ctx.thresholds.gpu_idle_window
    util = partial(gpu_utilization, ctx)
    return [
        Record(
            "node:gpus_allocated:count",
            aggregate("count", (cluster, "node"), aggregate("group", (cluster, *GPU), "gpu:job:info")),
            tests=[
                Case(
                    "a GPU shared by two jobs is one allocated GPU",
                    at="5m",
                    series=[
                        util("0.5x10", node="n1", gpu="0", hpc_job="7"),
                        util("0.5x10", node="n1", gpu="1", hpc_job="7"),
                        util("0.5x10", node="n1", gpu="1", hpc_job="8"),
                        util("0.5x10", node="n1", gpu="2"),
                    ],
                    expect=[sample(2, **cluster_labels, node="n1")],
                )
            ],
        ),
        Record(
            "node:gpus_allocated_idle:count",
            aggregate("sum", (cluster, "node"), "node:gpus_allocated_idle_by_job:count"),
            tests=[
                Case(
                    f"GPUs held by the same job for {idle_window} at 0%, over the node's jobs",
                    at=_idle_at(ctx),
                    series=_idle_gpus(ctx),
                    expect=[sample(2, **cluster_labels, node="n1"), sample(1, **cluster_labels, node="n2")],
                )
            ],
        ),
    ]


def _idle_gpus(ctx: Context) -> list[Series]:
    """Over one and a half idle windows (evaluated at `_idle_at`), n1: GPU 0 idle under job 7 and GPU 4 under job 8;
    GPU 1 busy once, inside the last window; GPU 2 free, GPU 3 held by job 8 only for the last half window; n2:
    GPU 0 idle under job 9."""
    util = partial(gpu_utilization, ctx)
    t, window = ctx.timeline, duration_seconds(ctx.thresholds.gpu_idle_window)
    total, busy_at = window * 3 // 2, window * 5 // 6
    return [
        util(t.held(0, total), node="n1", gpu="0", hpc_job="7"),
        util(f"{t.held(0, busy_at)} {t.pulse(0.01)} {t.held(0, total - busy_at)}", node="n1", gpu="1", hpc_job="7"),
        util(t.held(0, total), node="n1", gpu="2"),
        util(f"{t.absent(window)} {t.held(0, total - window)}", node="n1", gpu="3", hpc_job="8"),
        util(t.held(0, total), node="n1", gpu="4", hpc_job="8"),
        util(t.held(0, total), node="n2", gpu="0", hpc_job="9"),
    ]


def _idle_at(ctx: Context) -> str:
    return duration(duration_seconds(ctx.thresholds.gpu_idle_window) * 3 // 2)


def _idle_by_job(ctx: Context) -> Record:
    """Idle GPUs per node and job, the one read of the idle window (an hour of every GPU): the node and job
    counts, the idle-GPU alert and the panels sum this instead of reading the hour again."""
    cluster = ctx.cluster
    idle_window = ctx.thresholds.gpu_idle_window
    return Record(
        "node:gpus_allocated_idle_by_job:count",
        aggregate(
            "count",
            (cluster, "node", "hpc_job"),
            f"(max_over_time(gpu:utilization:ratio[{idle_window}]) == 0) "
            f"* on ({cluster}, node, gpu) group_right () (gpu:job:info offset {idle_window})",
        ),
        tests=[
            Case(
                f"a GPU held by the same job for {idle_window} at 0% is idle; a busy one or a new allocation is not",
                at=_idle_at(ctx),
                series=_idle_gpus(ctx),
                expect=[
                    sample(1, **ctx.cluster_labels, node="n1", hpc_job="7"),
                    sample(1, **ctx.cluster_labels, node="n1", hpc_job="8"),
                    sample(1, **ctx.cluster_labels, node="n2", hpc_job="9"),
                ],
            )
        ],
    )


def _node_activity(ctx: Context) -> list[Record]:
    """Means of the optional profiling fields over the node's GPUs; none, and no error, where one is not collected."""
    not_collected = Case(
        "no series, and no error, where the optional field is not collected",
        at="5m",
        series=[gpu_utilization(ctx, "0.5x10", node="n1", gpu="0")],
        expect=[],
    )
    return [
        Record(
            record,
            aggregate("avg", (ctx.cluster, "node"), ctx.gpu(field)),
            tests=[
                Case(
                    description,
                    at="5m",
                    series=[
                        gpu_si_series(ctx, field, f"{value:g}x10", node="n1", gpu=str(gpu))
                        for gpu, value in enumerate(values)
                    ],
                    expect=[sample(mean, **ctx.cluster_labels, node="n1")],
                ),
                not_collected,
            ],
        )
        for record, field, description, values, mean in NODE_ACTIVITY
    ]


def _node_memory_and_power(ctx: Context) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    gpu_si = partial(gpu_si_series, ctx)
    return [
        Record(
            "node:gpu_memory_used:bytes",
            aggregate("sum", (cluster, "node"), ctx.gpu("memory_used")),
            tests=[
                Case(
                    "framebuffer used, summed in bytes",
                    at="5m",
                    series=[gpu_si("memory_used", f"{2**30}x10", node="n1", gpu=gpu) for gpu in "01"],
                    expect=[sample(2 * 2**30, **cluster_labels, node="n1")],
                )
            ],
        ),
        Record(
            "node:gpu_power:watts",
            aggregate("sum", (cluster, "node"), ctx.gpu("power")),
            tests=[
                Case(
                    "board power summed once per GPU, even when shared",
                    at="5m",
                    series=[
                        gpu_si("power", "300x10", node="n1", gpu="0", hpc_job="1"),
                        gpu_si("power", "300x10", node="n1", gpu="0", hpc_job="2"),
                        gpu_si("power", "100x10", node="n1", gpu="1"),
                    ],
                    expect=[sample(400, **cluster_labels, node="n1")],
                )
            ],
        ),
    ]


def _node_throttled(ctx: Context) -> list[Record]:
    # Clock events are a dcgm-exporter field; AMD has no equivalent.
    if not ctx.sources["dcgm"].enabled:
        return []

    def clock_event(values: str, gpu: str, event: str) -> Series:
        return dcgm(ctx, "clock_events", values, node="n1", gpu=gpu, clock_event=event, window_size_in_ms="300000")

    return [
        Record(
            "node:gpus_throttled:count",
            aggregate(
                "count",
                (ctx.cluster, "node"),
                ctx.select("dcgm", ["clock_events"], GPU, where={"clock_event": THROTTLE_EVENTS}, when=ABOVE_ZERO),
            ),
            tests=[
                Case(
                    "GPUs with a hardware or thermal slowdown in the exporter's window",
                    at="5m",
                    series=[
                        clock_event("3x10", "0", "hw_slowdown"),
                        clock_event("9x10", "1", "gpu_idle"),
                        clock_event("0x10", "2", "sw_thermal"),
                    ],
                    expect=[sample(1, **ctx.cluster_labels, node="n1")],
                )
            ],
        )
    ]


def _unhealthy_causes(ctx: Context) -> list[_Unhealthy]:
    """One row per enabled GPU vendor; the unhealthy records exist only when some vendor reports health."""
    causes = []
    if ctx.sources["dcgm"].enabled:
        drain_xid = ctx.xids_reported(ctx.sources["dcgm"].exporter.xids("drain"))
        causes.append(
            _Unhealthy(
                f"({drain_xid}) or ({ctx.gpu('row_remap_failure', when=ABOVE_ZERO)})",
                [
                    dcgm(ctx, "xid", "48x10", node="n1", gpu="0", err_code="48", err_msg="Double Bit ECC Error"),
                    dcgm(ctx, "xid", "13x10", node="n1", gpu="1", err_code="13", err_msg="Graphics Engine Exception"),
                    dcgm(ctx, "row_remap_failure", "1x10", node="n1", gpu="0"),
                    dcgm(ctx, "row_remap_failure", "1x10", node="n1", gpu="2"),
                    dcgm(ctx, "row_remap_failure", "0x10", node="n1", gpu="3"),
                    dcgm(ctx, "xid", "45x10", node="n1", gpu="6", err_code="45", err_msg="Preemptive Cleanup"),
                    dcgm_xid_count(ctx, 48, "1x10", node="n1", gpu="6"),
                    dcgm_xid_count(ctx, 45, "1x10", node="n1", gpu="6"),
                ],
                3,
                "a drain-class Xid (the last one, or one the Xid count collector counted under a follow-on 45) or a "
                "failed row remap makes a GPU unhealthy; Xid 13 does not",
            )
        )
    if ctx.sources["amd"].enabled:
        causes.append(
            _Unhealthy(
                f"({ctx.select('amd', ['health'], GPU)} == 0)",
                [amd(ctx, "health", "0x10", node="n1", gpu="4"), amd(ctx, "health", "1x10", node="n1", gpu="5")],
                1,
                "an AMD GPU the exporter reports unhealthy (gpu_health 0)",
            )
        )
    return causes


def _node_unhealthy(ctx: Context, causes: list[_Unhealthy]) -> list[Record]:
    if not causes:
        return []
    return [
        Record(
            "node:gpus_unhealthy:count",
            aggregate("count", (ctx.cluster, "node"), " or ".join(cause.expression for cause in causes)),
            tests=[
                Case(
                    "; ".join(cause.shows for cause in causes),
                    at="5m",
                    series=[one for cause in causes for one in cause.series],
                    expect=[sample(sum(cause.unhealthy_on_n1 for cause in causes), **ctx.cluster_labels, node="n1")],
                )
            ],
        )
    ]


def _node_ecc(ctx: Context) -> Record:
    gpu_si = partial(gpu_si_series, ctx)
    t = ctx.timeline
    return Record(
        "node:gpus_ecc_uncorrectable:count",
        aggregate(
            "count",
            (ctx.cluster, "node"),
            ctx.gpu("ecc_uncorrectable", over=lambda e: f"increase({e}[1h])", when=ABOVE_ZERO),
        ),
        tests=[
            Case(
                "GPUs with uncorrectable ECC errors in the last hour, across a driver reload",
                at="60m",
                series=[
                    gpu_si(
                        "ecc_uncorrectable",
                        f"{t.held(0, '30m')} {t.held(2, '15m')} 0 {t.held(1, '15m')}",
                        node="n1",
                        gpu="0",
                    ),
                    gpu_si("ecc_uncorrectable", t.held(4, "60m"), node="n1", gpu="1"),
                ],
                expect=[sample(1, **ctx.cluster_labels, node="n1")],
            )
        ],
    )


def _cluster(ctx: Context, with_health: bool) -> list[Record]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    util = partial(gpu_utilization, ctx)
    fleet = [
        util("0.1x10", node="n1", gpu="0"),
        util("0.3x10", node="n2", gpu="0"),
        util("0.8x10", node="n2", gpu="1", hpc_job="5"),
        dcgm(ctx, "row_remap_failure", "1x10", node="n2", gpu="0")
        if ctx.sources["dcgm"].enabled
        else amd(ctx, "health", "0x10", node="n2", gpu="0"),
    ]
    unhealthy = Record(
        "cluster:gpus_unhealthy:count",
        aggregate("sum", (cluster,), "node:gpus_unhealthy:count"),
        tests=[Case("GPUs needing a drain", at="5m", series=fleet, expect=[sample(1, **cluster_labels)])],
    )
    return [
        Record(
            "cluster:gpus:count",
            aggregate("sum", (cluster,), "node:gpus:count"),
            tests=[Case("GPUs of every node", at="5m", series=fleet, expect=[sample(3, **cluster_labels)])],
        ),
        Record(
            "cluster:gpus_allocated:count",
            aggregate("sum", (cluster,), "node:gpus_allocated:count"),
            tests=[Case("GPUs held by a job", at="5m", series=fleet, expect=[sample(1, **cluster_labels)])],
        ),
        *([unhealthy] if with_health else []),
        Record(
            "cluster:gpu_utilization:avg",
            aggregate("avg", (cluster,), "gpu:utilization:ratio"),
            tests=[
                Case(
                    "mean over every GPU, not a mean of node means",
                    at="5m",
                    series=fleet,
                    expect=[sample(0.4, **cluster_labels)],
                )
            ],
        ),
        _utilization_bands(ctx),
        Record(
            "cluster:gpu_power:watts",
            aggregate("sum", (cluster,), "node:gpu_power:watts"),
            tests=[
                Case(
                    "board power of every GPU (the fleet's power and, integrated, its energy)",
                    at="5m",
                    series=[
                        gpu_si_series(ctx, "power", "300x10", node="n1", gpu="0"),
                        gpu_si_series(ctx, "power", "100x10", node="n2", gpu="0"),
                    ],
                    expect=[sample(400, **cluster_labels)],
                )
            ],
        ),
    ]


def _utilization_bands(ctx: Context) -> Record:
    """GPUs per utilisation band of 10%: the fleet's utilisation as a distribution over time, a handful of
    series whatever the size, where one row per node stops being readable (and costs a series per node at
    every point drawn)."""
    cluster = ctx.cluster
    bands = []
    for band in range(UTILIZATION_BANDS):
        low, high = band / UTILIZATION_BANDS, (band + 1) / UTILIZATION_BANDS
        # The last band includes 100%.
        within = f"gpu:utilization:ratio >= {low:g}" + (f" < {high:g}" if band < UTILIZATION_BANDS - 1 else "")
        name = f"{round(low * 100)}-{round(high * 100)}%"
        bands.append(label_replace(aggregate("count", (cluster,), within), "utilization", "", "", name))
    util = partial(gpu_utilization, ctx)
    return Record(
        "cluster:gpus_by_utilization:count",
        " or ".join(bands),
        tests=[
            Case(
                "GPUs counted in the band of their utilisation, from [0%, 10%) to [90%, 100%]; empty bands have "
                "no series",
                at="5m",
                series=[
                    util(f"{value}x10", node="n1", gpu=str(gpu))
                    for gpu, value in enumerate((0, 0.05, 0.1, 0.3, 0.8, 1))
                ],
                expect=[
                    sample(2, **ctx.cluster_labels, utilization="0-10%"),
                    sample(1, **ctx.cluster_labels, utilization="10-20%"),
                    sample(1, **ctx.cluster_labels, utilization="30-40%"),
                    sample(1, **ctx.cluster_labels, utilization="80-90%"),
                    sample(1, **ctx.cluster_labels, utilization="90-100%"),
                ],
            )
        ],
    )
