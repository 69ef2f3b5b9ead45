"""GPU health beyond the unhealthy count: Xid codes and classes, row remapping, NVLink errors, per node
and cluster (docs/recording-rules.md). dcgm-exporter only (the AMD exporter has no Xid, row-remap or NVLink field).

The fleet block (`hpcobs-gpu-fleet`, read by alerts/gpu_fleet.py) counts what must agree across a cluster's nodes:
GPUs per node whose ECC is off now or after their next reset, and nodes per driver version, so the drift alerts
compare a few series per node or per version instead of scanning every GPU of the fleet.

Xid counts exist only where a GPU reported one (a condition count): GPUs per node by the code of their
last Xid, classed with NVIDIA's Xid catalogue (hpcobs/exporters/catalogue/dcgm.yaml `xid_classes`; a code in two
classes takes the first listed, e.g. 79 is fell_off_bus before drain; unlisted codes are "other").
"""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import dcgm, gpu_si_series, gpu_utilization
from hpcobs.lang.promql import ABOVE_ZERO, aggregate, label_replace

from .gpu import THROTTLE_EVENTS

GPU = ("node", "gpu")
NVLINK_ERRORS = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors")


def groups(ctx: Context) -> list[Group]:
    if not ctx.sources["dcgm"].enabled:
        return []
    return [
        Group(
            "hpcobs-gpu-health",
            domain="gpu",
            interval=ctx.evaluation_interval,
            rules=[_gpus_by_xid(ctx), _gpus_row_remap(ctx), _nvlink_errors(ctx), _gpu_problems(ctx)],
        ),
        Group("hpcobs-gpu-health-cluster", domain="gpu", interval=ctx.evaluation_interval, rules=[_cluster_xids(ctx)]),
        Group(
            "hpcobs-gpu-fleet",
            domain="gpu",
            interval=ctx.evaluation_interval,
            rules=[_gpus_ecc_disabled(ctx), _driver_nodes(ctx)],
        ),
    ]


def _xids(ctx: Context) -> list[Series]:
    """One GPU per Xid case: classed codes, an unlisted code and no Xid (0), shared by the node and cluster tests."""

    def xid(code: int, node: str = "n1", gpu: str = "0") -> Series:
        return dcgm(ctx, "xid", f"{code}x10", node=node, gpu=gpu, err_code=str(code), err_msg="msg")

    return [
        xid(79, gpu="3"),
        xid(48, gpu="1"),
        xid(48, gpu="2"),
        xid(13, node="n2"),
        xid(999, node="n2", gpu="1"),
        xid(0, node="n2", gpu="2"),
    ]


def _classed_xids(ctx: Context) -> str:
    """Each GPU's last Xid code (none for 0) with its class."""
    classes = ctx.sources["dcgm"].exporter.raw["xid_classes"]
    classed = label_replace(ctx.gpu("xid", keep=("err_code",), when=ABOVE_ZERO), "xid_class", "", "", "other")
    # Applied last to first, so the outermost replace is the first class listed and wins for a code in two classes.
    for name in reversed(list(classes)):
        classed = label_replace(classed, "xid_class", "err_code", "|".join(map(str, classes[name])), name)
    return classed


def _gpus_by_xid(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels
    return Record(
        "node:gpus_by_xid:count",
        aggregate("count", (ctx.cluster, "node", "err_code", "xid_class"), _classed_xids(ctx)),
        tests=[
            Case(
                "GPUs per node by the code and class of their last Xid; no Xid (0) is not counted",
                at="4m",
                series=_xids(ctx),
                expect=[
                    sample(1, **cluster_labels, node="n1", err_code="79", xid_class="fell_off_bus"),
                    sample(2, **cluster_labels, node="n1", err_code="48", xid_class="drain"),
                    sample(1, **cluster_labels, node="n2", err_code="13", xid_class="application"),
                    sample(1, **cluster_labels, node="n2", err_code="999", xid_class="other"),
                ],
            )
        ],
    )


def _gpus_row_remap(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels

    def state(name: str, signal: str) -> str:
        return label_replace(
            aggregate("count", (ctx.cluster, "node"), ctx.select("dcgm", [signal], GPU, when=ABOVE_ZERO)),
            "state",
            "",
            "",
            name,
        )

    remaps = [
        dcgm(ctx, "row_remap_failure", "1x10", node="n1", gpu="5"),
        dcgm(ctx, "row_remap_failure", "0x10", node="n1", gpu="6"),
        dcgm(ctx, "row_remap_pending", "1x10", node="n1", gpu="6"),
        dcgm(ctx, "row_remap_pending", "1x10", node="n2", gpu="0"),
    ]
    return Record(
        "node:gpus_row_remap:count",
        f"{state('failed', 'row_remap_failure')} or {state('pending', 'row_remap_pending')}",
        tests=[
            Case(
                "GPUs per node whose row remapping failed (RMA) or waits for a GPU reset",
                at="4m",
                series=remaps,
                expect=[
                    sample(1, **cluster_labels, node="n1", state="failed"),
                    sample(1, **cluster_labels, node="n1", state="pending"),
                    sample(1, **cluster_labels, node="n2", state="pending"),
                ],
            )
        ],
    )


def _nvlink_errors(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels
    window = ctx.rate_window
    t = ctx.timeline
    nvlink = [
        dcgm(ctx, "nvlink_crc_flit_errors", t.rising(2, t.span), node="n1", gpu="5"),
        dcgm(ctx, "nvlink_replay_errors", t.rising(1, t.span), node="n1", gpu="5"),
        dcgm(ctx, "nvlink_recovery_errors", t.held(0, t.span), node="n1", gpu="4"),
        dcgm(ctx, "nvlink_crc_data_errors", t.held(7, t.span), node="n2", gpu="0"),
    ]
    return Record(
        "node:gpu_nvlink_errors:rate",
        aggregate(
            "sum",
            (ctx.cluster, "node"),
            " or ".join(
                label_replace(
                    ctx.select("dcgm", [signal], GPU, op="sum", over=lambda e: f"rate({e}[{window}])", when=ABOVE_ZERO),
                    "error",
                    "",
                    "",
                    signal,
                )
                for signal in NVLINK_ERRORS
            ),
        ),
        tests=[
            Case(
                "NVLink CRC, replay and recovery errors per second over the node's GPUs; optional "
                "fields, absent where the CSV leaves them out; only rising counters are read, so a node "
                "without errors (n2) has no series",
                at=t.settled,
                series=nvlink,
                expect=[sample(3, **cluster_labels, node="n1")],
            )
        ],
    )


def _gpu_problems(ctx: Context) -> Record:
    """What is wrong with each GPU now, one series per GPU and problem: the on-call table of the GPU cluster
    dashboard lists them with the GPU's job and user. A condition count: a healthy GPU has no series, so the
    record costs a series per GPU in trouble, not per GPU."""
    t = ctx.timeline
    hot = ctx.thresholds.gpu_temperature_celsius

    def problem(name: str, gpus: str, keep: tuple[str, ...] = ()) -> str:
        return label_replace(aggregate("count", (ctx.cluster, *GPU, *keep), gpus), "problem", "", "", name)

    def dcgm_flag(signal: str, where: dict[str, str] | None = None) -> str:
        return ctx.select("dcgm", [signal], GPU, where=where, when=ABOVE_ZERO)

    def n1(signal: str, value: float, gpu: str, **labels: str) -> Series:
        return dcgm(ctx, signal, t.held(value, "60m"), node="n1", gpu=gpu, **labels)

    problems = [
        problem("xid", _classed_xids(ctx), ("err_code", "xid_class")),
        problem(
            "ecc_uncorrectable", ctx.gpu("ecc_uncorrectable", over=lambda e: f"increase({e}[1h])", when=ABOVE_ZERO)
        ),
        problem("row_remap_failed", dcgm_flag("row_remap_failure")),
        problem("row_remap_pending", dcgm_flag("row_remap_pending")),
        problem("throttled", dcgm_flag("clock_events", {"clock_event": THROTTLE_EVENTS})),
        problem("hot", ctx.gpu("temperature", when=(">", hot))),  # as GpuTemperatureHigh: above, not at
    ]
    gpu = dict(**ctx.cluster_labels, node="n1")
    return Record(
        "gpu:problems:count",
        " or ".join(problems),
        tests=[
            Case(
                f"GPU 0: Xid 79 and {hot + 1:g} C; GPU 1: row remap failed and uncorrectable ECC errors in the last "
                "hour; GPU 2: remap pending, thermal slowdown; GPU 3 healthy: Xid 0, idle clock event, at the "
                "temperature limit but not above it (GpuTemperatureHigh stays silent there too), no ECC error",
                at="60m",
                series=[
                    dcgm(ctx, "xid", t.held(79, "60m"), node="n1", gpu="0", err_code="79", err_msg="msg"),
                    gpu_si_series(ctx, "temperature", t.held(hot + 1, "60m"), node="n1", gpu="0"),
                    n1("row_remap_failure", 1, "1"),
                    gpu_si_series(
                        ctx, "ecc_uncorrectable", f"{t.held(0, '30m')} {t.held(2, '30m')}", node="n1", gpu="1"
                    ),
                    n1("row_remap_pending", 1, "2"),
                    n1("clock_events", 3, "2", clock_event="hw_thermal", window_size_in_ms="300000"),
                    dcgm(ctx, "xid", t.held(0, "60m"), node="n1", gpu="3", err_code="0", err_msg="msg"),
                    n1("clock_events", 9, "3", clock_event="gpu_idle", window_size_in_ms="300000"),
                    gpu_si_series(ctx, "temperature", t.held(hot, "60m"), node="n1", gpu="3"),
                    gpu_si_series(ctx, "ecc_uncorrectable", t.held(4, "60m"), node="n1", gpu="3"),
                ],
                expect=[
                    sample(1, **gpu, gpu="0", problem="xid", err_code="79", xid_class="fell_off_bus"),
                    sample(1, **gpu, gpu="0", problem="hot"),
                    sample(1, **gpu, gpu="1", problem="row_remap_failed"),
                    sample(1, **gpu, gpu="1", problem="ecc_uncorrectable"),
                    sample(1, **gpu, gpu="2", problem="row_remap_pending"),
                    sample(1, **gpu, gpu="2", problem="throttled"),
                ],
            )
        ],
    )


def _cluster_xids(ctx: Context) -> Record:
    cluster_labels = ctx.cluster_labels
    return Record(
        "cluster:gpus_by_xid:count",
        aggregate("sum", (ctx.cluster, "err_code", "xid_class"), "node:gpus_by_xid:count"),
        tests=[
            Case(
                "GPUs in the cluster by last Xid code and class",
                at="4m",
                series=_xids(ctx),
                expect=[
                    sample(1, **cluster_labels, err_code="79", xid_class="fell_off_bus"),
                    sample(2, **cluster_labels, err_code="48", xid_class="drain"),
                    sample(1, **cluster_labels, err_code="13", xid_class="application"),
                    sample(1, **cluster_labels, err_code="999", xid_class="other"),
                ],
            )
        ],
    )


# -- GPU fleet: what must agree across nodes (alerts/gpu_fleet.py) ------------------------------------------------

# NVML's nvmlEnableState_t, the value of DCGM_FI_DEV_ECC_CURRENT and DCGM_FI_DEV_ECC_PENDING: 0 disabled, 1 enabled.
ECC_DISABLED = 0


def _gpus_ecc_disabled(ctx: Context) -> Record:
    """GPUs per node with ECC off now (`current`), and GPUs with ECC on now that turn it off at their next reset
    (`pending`: someone ran nvidia-smi -e 0). A GPU off now that turns it back on is still `current`."""
    cluster_labels = ctx.cluster_labels

    def disabled(signal: str) -> str:
        return ctx.select("dcgm", [signal], GPU, when=("==", ECC_DISABLED))

    def state(name: str, gpus: str) -> str:
        return label_replace(aggregate("count", (ctx.cluster, "node"), gpus), "state", "", "", name)

    def ecc(signal: str, mode: int, node: str, gpu: str) -> Series:
        return dcgm(ctx, signal, f"{mode}x10", node=node, gpu=gpu)

    pending_off = f"{disabled('ecc_pending')} unless on ({ctx.cluster}, node, gpu) {disabled('ecc_mode')}"
    return Record(
        "node:gpus_ecc_disabled:count",
        f"{state('current', disabled('ecc_mode'))} or {state('pending', pending_off)}",
        tests=[
            Case(
                "n1: GPU 0 off (being turned back on), GPU 1 on but off after its reset, GPU 2 on; n2 all on",
                at="4m",
                series=[
                    ecc("ecc_mode", 0, "n1", "0"),
                    ecc("ecc_pending", 1, "n1", "0"),
                    ecc("ecc_mode", 1, "n1", "1"),
                    ecc("ecc_pending", 0, "n1", "1"),
                    ecc("ecc_mode", 1, "n1", "2"),
                    ecc("ecc_pending", 1, "n1", "2"),
                    ecc("ecc_mode", 1, "n2", "0"),
                    ecc("ecc_pending", 1, "n2", "0"),
                ],
                expect=[
                    sample(1, **cluster_labels, node="n1", state="current"),
                    sample(1, **cluster_labels, node="n1", state="pending"),
                ],
            ),
            Case(
                "a GPU off now and after its reset is counted once, as current",
                at="4m",
                series=[ecc("ecc_mode", 0, "n1", "0"), ecc("ecc_pending", 0, "n1", "0")],
                expect=[sample(1, **cluster_labels, node="n1", state="current")],
            ),
        ],
    )


def _driver_nodes(ctx: Context) -> Record:
    """Nodes per driver version in each cluster, from the driver label dcgm-exporter writes on every GPU series
    (the CSV's `label` row DCGM_FI_DRIVER_VERSION, DCGM_FI_SYSTEM_DRIVER_VERSION from 4.9; read through
    node:gpus_by_model:count). One series per version: the majority GpuDriverDrift compares a node with."""
    cluster = ctx.cluster
    version = ctx.sources["dcgm"].versions[0]
    driver = str(ctx.sources["dcgm"].canonical_labels(version)["driver"])

    def node_on(node: str, release: str, gpus: str = "01") -> list[Series]:
        return [gpu_utilization(ctx, "0.5x10", node=node, gpu=gpu, vendor="dcgm", **{driver: release}) for gpu in gpus]

    return Record(
        "cluster:gpu_driver_nodes:count",
        aggregate(
            "count",
            (cluster, "driver"),
            aggregate("group", (cluster, "node", "driver"), 'node:gpus_by_model:count{driver!=""}'),
        ),
        tests=[
            Case(
                "two nodes on 550.127.05, one on 535.183.01: nodes, not GPUs, per driver",
                at="4m",
                series=[
                    *node_on("n1", "550.127.05"),
                    *node_on("n2", "550.127.05", "0123"),
                    *node_on("n3", "535.183.01"),
                ],
                expect=[
                    sample(2, **ctx.cluster_labels, driver="550.127.05"),
                    sample(1, **ctx.cluster_labels, driver="535.183.01"),
                ],
            )
        ],
    )
