"""GPU fleet alerts: what leaves a node's GPUs unusable, or unlike the rest of its cluster, while each GPU's own
health looks fine, and the exporter fault the health alerts cannot see (issue 26, missing signals).

- GpuFabricNotReady: on an NVSwitch system (HGX, DGX) a GPU joins the NVLink fabric that Fabric Manager trains
  before CUDA runs on it; until then CUDA fails with "system not yet initialized" (cudaErrorSystemNotReady). The
  states are classed as DCGM's own NVLink health watch classes them (NVIDIA/DCGM v4.5.3
  modules/health/DcgmHealthWatch.cpp): success and "not supported" (no fabric to join) pass, in progress warns,
  every other state fails.
- GpuEccDisabled, GpuDriverDrift: drift across nodes, read from the per-node and per-version records of
  recording_rules/gpu_health.py (`hpcobs-gpu-fleet`), never by scanning every GPU of the fleet in an alert.
- ExporterDcgmValuesFrozen: GPU energy counters that hold still while their exporter answers. What an nv-hostengine
  restart does to each dcgm-exporter release, and why this alert exists, is in docs/exporters.md (GPU fleet signals).

dcgm-exporter only. The fabric and ECC fields are optional (not in default-counters.csv): a CSV without them has no
series and those alerts stay silent. The per-GPU helpers and the timings of flags are alerts/gpu.py's.
Runbooks: docs/runbooks/gpu.md, and docs/runbooks/exporters.md for ExporterDcgmValuesFrozen.
"""

from hpcobs.authoring.alert_cases import standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import dcgm, gpu_si_series, gpu_utilization
from hpcobs.lang.promql import aggregate, duration, duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

from .gpu import FLAG_FOR, GPU, _TestGpu

# dcgmFabricManagerStatus_t (NVIDIA/DCGM dcgm_structs.h): the two states DCGM's health watch passes, a GPU without
# a fabric to join and a GPU registered with it. 1 not started and 4 failure (and 5, 6) fail it, 2 in progress warns.
FM_NOT_SUPPORTED, FM_NOT_STARTED, FM_IN_PROGRESS, FM_SUCCESS, FM_FAILURE = 0, 1, 2, 3, 4
# The driver versions the cases run on: the simulator's (hpcobs.exporters.labels.DRIVER) and an older branch.
DRIVER, OLD_DRIVER = "550.127.05", "535.183.01"
# A powered GPU's draw in the frozen-values cases: its energy counter grows by this many joules a second.
IDLE_WATTS = 70

THRESHOLDS = (
    declare.duration(
        "gpu_fabric_not_ready_for",
        "5m",
        "How long a GPU on an NVSwitch system may stay outside the NVLink fabric (Fabric Manager state not started, "
        "in progress or failed; DCGM_FI_DEV_FABRIC_MANAGER_STATUS) before GpuFabricNotReady pages: room for Fabric "
        "Manager to train the fabric after a boot, which DCGM's health watch meanwhile reports as a warning.",
    ),
    declare.duration(
        "gpu_driver_drift_for",
        "1h",
        "How long a node may run another GPU driver than most nodes of its cluster before GpuDriverDrift: a node "
        "back from repair on an old image shows within the hour; a rolling upgrade slower than that warns once for "
        "the cluster (silence it for the rollout).",
    ),
    declare.duration(
        "gpu_values_frozen_window",
        "10m",
        "A dcgm-exporter GPU whose energy counter reads the same now as this long ago while its exporter answers "
        "has frozen values (ExporterDcgmValuesFrozen): a powered GPU's energy grows at every DCGM update (30 s by "
        "default, dcgm-exporter -c), so twenty updates without a change are no accident.",
    ),
)


def groups(ctx: Context) -> list[Group]:
    if not ctx.sources["dcgm"].enabled:
        return []
    gpus = _TestGpu(ctx)
    rules = [_fabric_not_ready(gpus), _ecc_disabled(gpus), _driver_drift(gpus), _values_frozen(gpus)]
    return [Group("hpcobs-gpu-fleet-alerts", domain="gpu", interval=ctx.evaluation_interval, rules=rules)]


def _fabric_not_ready(gpus: _TestGpu) -> Alert:
    ctx, cluster = gpus.ctx, gpus.cluster
    not_ready_for = ctx.thresholds.gpu_fabric_not_ready_for
    outside = ctx.select(
        "dcgm",
        ["fabric_manager_status"],
        GPU,
        over=lambda raw: f"({raw} != {FM_NOT_SUPPORTED})",
        when=("!=", FM_SUCCESS),
    )
    # The GPUs leave the fabric from the third scrape on; the firing case is evaluated two evaluations past `for`.
    when = timing(ctx, not_ready_for, 2, settle=0)
    n = when.samples

    def status(values: str, gpu: str = "1", **labels: str) -> Series:
        return dcgm(ctx, "fabric_manager_status", values, node="n1", gpu=gpu, **labels)

    return gpus.gpu_alert(
        "GpuFabricNotReady",
        severity="critical",
        team=Team.GPU_OPS,
        expr=aggregate("count", (cluster, "node"), outside),
        for_=not_ready_for,
        summary="GPUs of an NVSwitch node are not part of the NVLink fabric: CUDA jobs fail there.",
        description=f"GPUs of {label('node')} (cluster {label(cluster)}) have not completed their NVLink fabric "
        f"registration for {not_ready_for} (DCGM_FI_DEV_FABRIC_MANAGER_STATUS not success: Fabric Manager not "
        'started, still training or failed): every CUDA job placed there fails with "system not yet '
        'initialized". Drain the node, check systemctl status nvidia-fabricmanager and its log.',
        fired_by=("fabric_not_ready",),
        **standard_cases(
            when,
            fault="Fabric Manager did not start after a reboot: two GPUs stay NOT_STARTED",
            fault_series=[
                status(f"{FM_SUCCESS} {FM_SUCCESS} {FM_NOT_STARTED}x{n}", hpc_job="7"),
                status(f"{FM_SUCCESS} {FM_SUCCESS} {FM_NOT_STARTED}x{n}", gpu="2"),
            ],
            expect=[alert(**ctx.cluster_labels, node="n1")],
            healthy="every GPU registered with the fabric",
            healthy_series=[status(f"{FM_SUCCESS}x{n}"), status(f"{FM_SUCCESS}x{n}", gpu="2")],
            pending="out of the fabric for less than the for: duration (training after a boot)",
            pending_series=[status(f"{FM_SUCCESS} {FM_SUCCESS} {FM_IN_PROGRESS}x{n}")],
            also_fires=[
                when.fires(
                    "fabric training finished and failed on one GPU",
                    [status(f"{FM_SUCCESS} {FM_SUCCESS} {FM_FAILURE}x{n}")],
                    [alert(**ctx.cluster_labels, node="n1")],
                ),
                when.fires(
                    "training still in progress past the for: duration",
                    [status(f"{FM_SUCCESS} {FM_SUCCESS} {FM_IN_PROGRESS}x{n}")],
                    [alert(**ctx.cluster_labels, node="n1")],
                ),
            ],
            also_silent=[
                when.silent(
                    "a GPU without an NVSwitch fabric (PCIe card): state not supported",
                    [status(f"{FM_NOT_SUPPORTED}x{n}")],
                )
            ],
        ),
    )


def _ecc_disabled(gpus: _TestGpu) -> Alert:
    ctx, cluster = gpus.ctx, gpus.cluster
    flag = gpus.flag()
    n = flag.samples

    def ecc(signal: str, values: str, gpu: str = "1") -> Series:
        return dcgm(ctx, signal, values, node="n1", gpu=gpu)

    enabled = [ecc("ecc_mode", f"1x{n}"), ecc("ecc_pending", f"1x{n}")]
    return gpus.gpu_alert(
        "GpuEccDisabled",
        severity="warning",
        team=Team.GPU_OPS,
        expr="node:gpus_ecc_disabled:count > 0",
        for_=FLAG_FOR,
        summary="GPUs of a node run, or will run after their next reset, with ECC memory protection off.",
        description=f"{label('node')} (cluster {label(cluster)}) has GPUs with ECC off ({label('state')}: "
        "current = off now, pending = turned off with nvidia-smi -e 0, effective at the next reset): memory errors "
        "there corrupt results silently and row remapping cannot repair them. Turn ECC back on "
        "(nvidia-smi -e 1) and reset the GPUs when their jobs end.",
        fired_by=("ecc_disabled",),
        **standard_cases(
            flag,
            fault="ECC off on GPU 1",
            fault_series=[ecc("ecc_mode", f"1 1 0x{n}"), ecc("ecc_pending", f"1 1 0x{n}")],
            expect=[alert(**ctx.cluster_labels, node="n1", state="current")],
            healthy="ECC on, no change pending",
            healthy_series=enabled,
            pending="ECC off for less than the for: duration",
            also_fires=[
                flag.fires(
                    "nvidia-smi -e 0 on GPU 1: ECC on until its next reset, off after",
                    [ecc("ecc_mode", f"1x{n}"), ecc("ecc_pending", f"1 1 0x{n}")],
                    [alert(**ctx.cluster_labels, node="n1", state="pending")],
                )
            ],
            also_silent=[
                flag.silent(
                    "nvidia-smi -e 1 on a GPU with ECC on: nothing changes",
                    [*enabled, ecc("ecc_mode", f"1x{n}", gpu="2"), ecc("ecc_pending", f"1x{n}", gpu="2")],
                )
            ],
        ),
    )


def _driver_drift(gpus: _TestGpu) -> Alert:
    ctx, cluster = gpus.ctx, gpus.cluster
    drift_for = ctx.thresholds.gpu_driver_drift_for
    driver = str(ctx.sources["dcgm"].canonical_labels(ctx.sources["dcgm"].versions[0])["driver"])
    # Every node on its driver from the first scrape; the firing case two evaluations past `for`.
    when = timing(ctx, drift_for, 0, settle=0)
    n = when.samples

    def node_on(node: str, release: str) -> list[Series]:
        return [
            gpu_utilization(ctx, f"0.5x{n}", node=node, gpu=gpu, vendor="dcgm", **{driver: release}) for gpu in "01"
        ]

    most = aggregate("max", (cluster,), "cluster:gpu_driver_nodes:count")
    majority = f"cluster:gpu_driver_nodes:count == on ({cluster}) group_left () {most}"
    # One alert per driver the minority runs, valued by its nodes, not one per node: a rolling upgrade moves node
    # after node for days, one message for the cluster (the week benchmark: one a node, every day, before).
    minority = aggregate("group", (cluster, "node", "driver"), 'node:gpus_by_model:count{driver!=""}') + (
        f" unless on ({cluster}, driver) ({majority})"
    )
    return alerts_of("gpu", DashboardUid.GPU_CLUSTER)(
        "GpuDriverDrift",
        severity="warning",
        team=Team.GPU_OPS,
        expr=aggregate("count", (cluster, "driver"), minority),
        for_=drift_for,
        summary="Nodes run another GPU driver than most nodes of their cluster.",
        description=f"Nodes of cluster {label(cluster)} (the alert's value: how many) have run GPU driver "
        f"{label('driver')} for {drift_for} while most nodes run another: nodes reimaged with an old image, left "
        "behind by an upgrade, or an upgrade under way. Fabric Manager and the CUDA user-mode driver must match the "
        "kernel driver, and jobs spanning nodes behave differently; the GPU cluster dashboard lists each node's "
        "driver. Reinstall the fleet's driver and reboot them, or silence this alert for the upgrade.",
        fired_by=("driver_drift",),
        **standard_cases(
            when,
            fault=f"n3 on {OLD_DRIVER}, n1 and n2 on {DRIVER}",
            fault_series=[*node_on("n1", DRIVER), *node_on("n2", DRIVER), *node_on("n3", OLD_DRIVER)],
            expect=[alert(**ctx.cluster_labels, driver=OLD_DRIVER)],
            healthy="every node on the same driver",
            healthy_series=[*node_on("n1", DRIVER), *node_on("n2", DRIVER), *node_on("n3", DRIVER)],
            pending="on another driver for less than the for: duration",
            also_fires=[
                when.fires(
                    "an upgrade under way, two of five nodes on the new driver: one alert for both",
                    [
                        *(series for node in ("n1", "n2", "n3") for series in node_on(node, OLD_DRIVER)),
                        *node_on("n4", DRIVER),
                        *node_on("n5", DRIVER),
                    ],
                    [alert(**ctx.cluster_labels, driver=DRIVER)],
                )
            ],
            also_silent=[
                when.silent(
                    "an upgrade half done: one node on each driver, no majority to drift from",
                    [*node_on("n1", DRIVER), *node_on("n2", OLD_DRIVER)],
                )
            ],
        ),
    )


def _values_frozen(gpus: _TestGpu) -> Alert:
    ctx, cluster, t = gpus.ctx, gpus.cluster, gpus.ctx.timeline
    window = ctx.thresholds.gpu_values_frozen_window
    seconds = duration_seconds(window)
    frozen = ctx.select(
        "dcgm",
        ctx.sources["dcgm"].exporter.signals_for("energy"),
        GPU,
        over=lambda raw: f"({raw} - {raw} offset {window})",
        when=("==", 0),
    )
    # Energy grows for five minutes, then holds its last value (the exporter serves the same output again).
    growing = t.samples("5m")
    freeze = growing * t.step
    last = IDLE_WATTS * t.step * growing
    lasting = t.samples(2 * seconds + 10 * t.evaluation)

    def energy(values: str, gpu: str = "1") -> Series:
        return gpu_si_series(ctx, "energy", values, node="n1", gpu=gpu, vendor="dcgm")

    held = f"{t.rising(IDLE_WATTS, freeze)} {last}x{lasting}"
    return alerts_of("exporters", DashboardUid.GPU_CLUSTER)(
        "ExporterDcgmValuesFrozen",
        severity="warning",
        team=Team.GPU_OPS,
        expr=aggregate("count", (cluster, "node"), frozen),
        for_=None,
        no_for_reason=f"the window is the duration: a counter that reads the same now as {window} ago has been "
        "frozen that long; a for: would only add to it",
        summary="dcgm-exporter serves GPU values that stopped changing.",
        description=f"The energy counters of GPUs on {label('node')} (cluster {label(cluster)}) read the same now as "
        f"{window} ago while dcgm-exporter answers: it serves stale values (an nv-hostengine restart under a "
        "dcgm-exporter older than 3.1.3, or a hung collector), so every GPU alert of the node is blind. Restart "
        "dcgm-exporter after checking systemctl status nvidia-dcgm.",
        fired_by=("dcgm_values_frozen",),
        fires_on=[
            Case(
                "two GPUs' values frozen for the window and two evaluations",
                at=duration(freeze + seconds + 2 * t.evaluation),
                series=[energy(held), energy(held, gpu="2")],
                expect=[alert(**ctx.cluster_labels, node="n1")],
            )
        ],
        silent_on=[
            Case(
                "frozen for 80% of the window",
                at=duration(freeze + seconds * 4 // 5),
                series=[energy(held)],
            ),
            Case(
                "a powered GPU: its energy grows at every update",
                at=duration(freeze + seconds + 2 * t.evaluation),
                series=[energy(t.rising(IDLE_WATTS, freeze + lasting * t.step))],
            ),
            Case(
                "frozen for the window, then the exporter stopped answering (ExporterDcgmDown's case)",
                at=duration(freeze + seconds + 2 * t.step + 2 * t.evaluation),
                series=[energy(f"{t.rising(IDLE_WATTS, freeze)} {last}x{t.samples(seconds)} stale")],
            ),
        ],
    )
