"""GPU hardware alerts on optional dcgm-exporter fields: the driver's recovery action (Xid 154), the row-remap budget,
memory (HBM) temperature against the GPU's own limit, and NVLink5 (Blackwell) link errors and links declared down.

Every field read here is optional: a site enables it in its collector CSV (docs/exporters.md, "GPU hardware
signals"). A field the CSV does not collect, or that the GPU does not support (DCGM reports it blank and
dcgm-exporter skips blank values), produces no series, and the alert reading it stays silent: none fires on
absence. The per-GPU helpers, test GPU and timings are alerts/gpu.py's. Runbooks: docs/runbooks/gpu.md, one
section per alert.
"""

import math
from dataclasses import dataclass

from hpcobs.authoring.alert_cases import Proof, counter_timing, standard_cases
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, label
from hpcobs.authoring.ruletest import Case, Series
from hpcobs.authoring.synthetic import H100_MEMORY_MAX_OPERATING_CELSIUS
from hpcobs.lang.promql import ABOVE_ZERO, label_replace
from hpcobs.settings import declare
from hpcobs.settings.names import Team

from .gpu import FLAG_FOR, GPU, _hot, _TestGpu
from .gpu_limits import over_own_limit


def on_job_7(gpus: _TestGpu) -> list[Series]:
    """Job 7 holding the test GPU for the whole of a case: the hardware alert names it in its jobs annotation."""
    return gpus.running("7", gpus.ctx.timeline.held(1, "2h"))


# An NVLink declared down is a single event the counter records once: it is counted over this window (as
# GpuUncorrectableEcc counts an uncorrectable ECC error).
LINK_DOWN_WINDOW = "1h"
# How NVML packs an NVLink BER into an integer (NVML_NVLINK_BER_MANTISSA_SHIFT 8, width 0xf; NVML_NVLINK_BER_EXP_SHIFT
# 0, width 0xff): BER = mantissa x 10^-exponent (DCGM decodes it the same way, common/DcgmUtilities.cpp NvmlBerParser).
BER_MANTISSA_SHIFT, BER_MANTISSA_MAX, BER_EXPONENT_SHIFT = 256, 16, 256
# The encoding of a BER of 0 (mantissa 15, exponent 255; DcgmUtilities.cpp IsEffectiveBerThresholdExceeded).
BER_ZERO = 15 * BER_MANTISSA_SHIFT + 255
# The rate is read per 10^12 bits (a terabit), so that its threshold is a plain number: a BER of 1e-12 is 1.
TERABIT_EXPONENT = 12

THRESHOLDS = (
    declare.limit(
        "gpu_temperature_margin_celsius",
        2,
        "How far below the GPU's own maximum operating temperature (DCGM_FI_DEV_GPU_MAX_OP_TEMP) GpuTemperatureHigh "
        "warns, and below its memory's (DCGM_FI_DEV_MEM_MAX_OP_TEMP) GpuMemoryTemperatureHigh, where the site's CSV "
        "collects them: above those limits the driver slows the clocks down (NVML SW thermal slowdown). 2 C keeps "
        "GpuTemperatureHigh where gpu_temperature_celsius (85) puts it on an H100 SXM (max operating temperature "
        "87 C); gpu_temperature_celsius still applies to GPUs whose limit is not collected.",
    ),
    declare.count(
        "gpu_row_remap_uncorrectable_rows",
        256,
        "Rows remapped for uncorrectable errors (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS) above which "
        "GpuRowRemapBudgetLow warns. NVIDIA sets the row-remap failure flag, an RMA, after 512 such remaps (RMA "
        "policy, docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt), where DCGM's health watch only starts to warn "
        "(DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE); half of that budget leaves time to plan the replacement.",
    ),
    declare.limit(
        "gpu_nvlink_effective_errors_per_terabit",
        1,
        "NVLink5 effective (post-FEC) bit errors per 10^12 bits (DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER, Blackwell) "
        "above which GpuNvlink5Errors fires: DCGM's health watch fails a link whose effective bit error rate is above "
        "1e-12, one error per 10^12 bits (DcgmUtilities.cpp IsEffectiveBerThresholdExceeded).",
    ),
)


def groups(ctx: Context) -> list[Group]:
    if not ctx.sources["dcgm"].enabled:
        return []
    gpus = _TestGpu(ctx)
    rules = [
        *_recovery_actions(gpus),
        _recovery_action_changed(gpus),
        _row_remap_budget(gpus),
        _memory_temperature_high(gpus),
        _nvlink5_errors(gpus),
        _nvlink_link_down(gpus),
    ]
    return [Group("hpcobs-gpu-hardware-alerts", domain="gpu", interval=ctx.evaluation_interval, rules=rules)]


# --- Recovery action ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Recovery:
    """One value of the GPU recovery action (nvmlDeviceGpuRecoveryAction_t, sdk/nvidia/nvml/dcgm_nvml.h)."""

    alert: str
    action: int
    severity: str  # as DCGM's health watch rates it: FAIL critical, WARN warning (DcgmHealthWatch.cpp)
    summary: str
    act: str  # the description after "<the GPU> ": NVIDIA's instruction for the action
    fired_by: tuple[str, ...] = ()


# What each action asks for: NVIDIA, "Error Recovery and Response Flags"
# (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html). Values above 4 are not
# defined by DCGM 4.6 (DcgmHealthWatch::MonitorGpuRecoveryAction ignores them as invalid).
RECOVERY_ACTIONS = (
    _Recovery(
        "GpuRecoveryResetRequired",
        1,
        "critical",
        "The driver asks for a GPU reset to recover the GPU.",
        "has hit a fault that needs a GPU reset to recover (recovery action GPU reset, Xid 154): drain the node, "
        "end the GPU's processes, reset it (nvidia-smi -r -i <gpu>) and resume.",
        ("recovery_action",),
    ),
    _Recovery(
        "GpuRecoveryRebootRequired",
        2,
        "critical",
        "The driver asks for a node reboot to recover a GPU.",
        "has hit a fault that may have left the operating system inconsistent (recovery action node reboot, "
        "Xid 154): drain the node and reboot it.",
    ),
    _Recovery(
        "GpuRecoveryDrainP2p",
        3,
        "warning",
        "The driver asks for a GPU's peer-to-peer traffic to be drained.",
        "needs all peer-to-peer traffic quiesced (recovery action drain P2P, Xid 154): drain the node, end the "
        "processes doing peer-to-peer transfers and disable UVM persistence mode; the driver then names the next "
        "action.",
    ),
    _Recovery(
        "GpuRecoveryDrainAndReset",
        4,
        "critical",
        "The driver asks for a GPU's peer-to-peer traffic to be drained and the GPU reset.",
        "needs its peer-to-peer traffic drained and then a reset (recovery action drain and reset, Xid 154): drain "
        "the node, end its GPU processes, disable UVM persistence mode, reset the GPU and resume.",
    ),
)


def _recovery_actions(gpus: _TestGpu) -> list[Alert]:
    def action(values: str, **labels: str) -> Series:
        return gpus.dcgm("gpu_recovery_action", values, **labels)

    return [
        gpus.hardware_alert(
            recovery.alert,
            severity=recovery.severity,
            team=Team.GPU_OPS,
            expr=gpus.per_gpu("gpu_recovery_action", when=("==", recovery.action)),
            for_=FLAG_FOR,
            summary=recovery.summary,
            description=f"{gpus.where} {recovery.act}",
            fired_by=recovery.fired_by,
            **_flag_cases(
                gpus,
                fault=f"recovery action {recovery.action} on a GPU running a job",
                fault_series=[action(f"0 0 {recovery.action}x10", hpc_job="7")],
                expect_labels={},
                healthy="no recovery action needed (0)",
                healthy_series=[action("0x10", hpc_job="7")],
                pending_series=[action(f"0 0 {recovery.action}x10")],
                also_silent=[
                    gpus.flag().silent(
                        f"another action ({other.action}) is {other.alert}'s", [action(f"{other.action}x12")]
                    )
                    for other in RECOVERY_ACTIONS
                    if other.action == recovery.action % len(RECOVERY_ACTIONS) + 1
                ],
            ),
        )
        for recovery in RECOVERY_ACTIONS
    ]


def _flag_cases(
    gpus: _TestGpu,
    *,
    fault: str,
    fault_series: list[Series],
    expect_labels: dict[str, str],
    healthy: str,
    healthy_series: list[Series],
    pending_series: list[Series],
    also_fires: list[Case] | None = None,
    also_silent: list[Case] | None = None,
) -> Proof:
    """The standard cases of a flag raised from the third scrape on (alerts/gpu.py's flag timing)."""
    return standard_cases(
        gpus.flag(),
        fault=fault,
        fault_series=[*fault_series, *on_job_7(gpus)],
        expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"), **expect_labels)],
        healthy=healthy,
        healthy_series=healthy_series,
        pending="raised for less than the for: duration",
        pending_series=pending_series,
        also_fires=also_fires or [],
        also_silent=also_silent or [],
    )


def _recovery_action_changed(gpus: _TestGpu) -> Alert:
    ctx = gpus.ctx
    (code,) = ctx.sources["dcgm"].exporter.xids("recovery_action_changed")
    reported = ctx.xids_reported([code], keep=("err_code",))
    collected = gpus.per_gpu("gpu_recovery_action")

    def xid154(values: str, **labels: str) -> Series:
        return gpus.dcgm("xid", values, err_code=str(code), err_msg="GPU Recovery Action Changed", **labels)

    return gpus.hardware_alert(
        "GpuRecoveryActionChanged",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"{reported} unless on ({gpus.cluster}, {', '.join(GPU)}) {collected}",
        for_=FLAG_FOR,
        summary="A GPU reported Xid 154: the driver changed what it needs to recover the GPU.",
        description=f"{gpus.where} reported Xid {code} (GPU recovery action changed) and the site's CSV does not "
        "collect the recovery action: read it with nvidia-smi -q -i <gpu> (or the kernel log line of the Xid) and "
        "act as the GpuRecovery* runbook sections say.",
        fired_by=(),
        **_flag_cases(
            gpus,
            fault="Xid 154 on a GPU whose recovery action is not collected",
            fault_series=[xid154("_ _ 154x10", hpc_job="7")],
            expect_labels={"err_code": str(code)},
            healthy="no Xid since the driver loaded",
            healthy_series=[gpus.xid(0, "0x10", hpc_job="7")],
            pending_series=[xid154("_ _ 154x10")],
            also_silent=[
                gpus.flag().silent(
                    "Xid 154 where the recovery action is collected: the GpuRecovery* alerts say what to do",
                    [xid154("_ _ 154x10"), gpus.dcgm("gpu_recovery_action", "0 0 1x10")],
                )
            ],
        ),
    )


# --- Row-remap budget ---------------------------------------------------------------------------------------------


def _row_remap_budget(gpus: _TestGpu) -> Alert:
    limit = gpus.ctx.thresholds.gpu_row_remap_uncorrectable_rows
    exhausted = gpus.per_gpu("row_remap_banks_exhausted", when=ABOVE_ZERO)
    remapped = gpus.per_gpu("row_remap_uncorrectable", when=(">", limit))
    # The first rows past the limit; NVIDIA's RMA threshold is twice the default limit.
    past = limit + max(1, math.ceil(0.1 * limit))

    def banks(values: str, **labels: str) -> Series:
        return gpus.dcgm("row_remap_banks_exhausted", values, **labels)

    def rows(values: str, **labels: str) -> Series:
        return gpus.dcgm("row_remap_uncorrectable", values, **labels)

    return gpus.hardware_alert(
        "GpuRowRemapBudgetLow",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"{label_replace(exhausted, 'budget', '', '', 'bank_exhausted')} or "
        f"{label_replace(remapped, 'budget', '', '', 'uncorrectable_rows')}",
        for_=FLAG_FOR,
        summary="A GPU is running out of spare memory rows: plan its replacement before row remapping fails.",
        description=f"{gpus.where} has used up its row-remap budget ({label('budget')}): a memory bank with no "
        f"spare row left, or more than {limit} rows remapped for uncorrectable errors. The next uncorrectable "
        "error there can set the row-remap failure flag (an RMA): plan the GPU's replacement.",
        fired_by=("row_remap_budget",),
        **_flag_cases(
            gpus,
            fault="a memory bank with no spare row left",
            fault_series=[banks("0 0 1x10", hpc_job="7"), rows("3x12", hpc_job="7")],
            expect_labels={"budget": "bank_exhausted"},
            healthy="every bank has spare rows, a few rows remapped",
            healthy_series=[banks("0x12", hpc_job="7"), rows("3x12", hpc_job="7")],
            pending_series=[banks("0 0 1x10")],
            also_fires=[
                gpus.flag().fires(
                    f"{past} rows remapped for uncorrectable errors, every bank still has spare rows",
                    [banks("0x12"), rows(f"{limit} {limit} {past}x10")],
                    [gpus.on_gpu(budget="uncorrectable_rows")],
                )
            ],
            also_silent=[gpus.flag().silent(f"exactly {limit} rows remapped", [banks("0x12"), rows(f"{limit}x12")])],
        ),
    )


# --- Memory temperature ------------------------------------------------------------------------------------------


def _memory_temperature_high(gpus: _TestGpu) -> Alert:
    throttle_for, margin = gpus.ctx.thresholds.gpu_throttle_for, gpus.ctx.thresholds.gpu_temperature_margin_celsius
    memory = gpus.ctx.sources["dcgm"].exporter.signals_for("memory_temperature")
    hot = _hot(gpus)
    memory_max = H100_MEMORY_MAX_OPERATING_CELSIUS
    limit = memory_max - margin

    def reading(celsius: float, with_limit: bool = True, **labels: str) -> list[Series]:
        temperature = [gpus.dcgm("memory_temperature", f"{celsius}x40", **labels)]
        return temperature + ([gpus.dcgm("memory_max_op_temperature", f"{memory_max}x40")] if with_limit else [])

    return gpus.hardware_alert(
        "GpuMemoryTemperatureHigh",
        severity="warning",
        team=Team.GPU_OPS,
        expr=over_own_limit(gpus.ctx, memory, "memory_max_op_temperature", margin, gpu=GPU, keep=()),
        for_=throttle_for,
        summary="A GPU's memory (HBM) runs close to its maximum operating temperature.",
        description=f"The memory of {gpus.where} has been within {margin} C of its maximum operating temperature "
        f"for {throttle_for}: above it the driver slows the GPU down; memory-bound work slows first. Check the "
        "GPU's cooling (fans, airflow, inlet temperature).",
        fired_by=("hbm_thermal",),
        **standard_cases(
            hot,
            fault=f"HBM at {limit + 0.1 * margin:g} C, its limit {memory_max} C",
            fault_series=[*reading(limit + 0.1 * margin, hpc_job="7"), *on_job_7(gpus)],
            expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"))],
            healthy="busy GPU, HBM at 66 C",
            healthy_series=reading(66, hpc_job="7"),
            pending="hot for less than the for: duration",
            also_silent=[
                hot.silent(f"HBM exactly {margin} C under its limit", reading(limit)),
                hot.silent(
                    "the memory's limit is not collected (or N/A on this model): no limit to judge by",
                    reading(memory_max + 4, with_limit=False),
                ),
            ],
        ),
    )


# --- NVLink5 (Blackwell) -----------------------------------------------------------------------------------------


def packed_ber(ber: float) -> int:
    """A BER as NVML packs it, to the precision of its 4-bit mantissa (at most 15 x 10^-exponent)."""
    exponent = math.floor(-math.log10(ber)) + 1
    if ber * 10 ** (exponent + 1) <= BER_MANTISSA_MAX - 1:
        exponent += 1
    return round(ber * 10**exponent) * BER_MANTISSA_SHIFT + exponent


def _errors_per_terabit(raw: str) -> str:
    """A packed BER decoded as bit errors per 10^12 bits: mantissa x 10^(12 - exponent)."""
    mantissa = f"(floor({raw} / {BER_MANTISSA_SHIFT}) % {BER_MANTISSA_MAX})"
    return f"{mantissa} * 10 ^ ({TERABIT_EXPONENT} - {raw} % {BER_EXPONENT_SHIFT})"


def _nvlink5_errors(gpus: _TestGpu) -> Alert:
    ctx, thresholds = gpus.ctx, gpus.ctx.thresholds
    link_for, per_terabit, recoveries = (
        thresholds.gpu_link_errors_for,
        thresholds.gpu_nvlink_effective_errors_per_terabit,
        thresholds.gpu_nvlink_replay_errors_per_minute,
    )
    counting = counter_timing(ctx, link_for)
    t, lasting = ctx.timeline, counting.lasting

    def recovering(per_minute: float, **labels: str) -> Series:
        return gpus.dcgm("nvlink_recovery_events", t.rising(per_minute / 60, lasting), **labels)

    def effective_ber(per_terabit: float | None, **labels: str) -> Series:
        packed = BER_ZERO if per_terabit is None else packed_ber(per_terabit * 10**-TERABIT_EXPONENT)
        return gpus.dcgm("nvlink_effective_ber_raw", t.held(packed, lasting), **labels)

    high_ber = gpus.per_gpu("nvlink_effective_ber_raw", over=_errors_per_terabit, when=(">", per_terabit))
    recovering_often = gpus.per_gpu(
        "nvlink_recovery_events", over=lambda e: f"{gpus.rate(e)} * 60", when=(">", recoveries)
    )
    return gpus.hardware_alert(
        "GpuNvlink5Errors",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"{high_ber} or {recovering_often}",
        for_=link_for,
        summary="A Blackwell GPU's NVLink5 links exceed DCGM's error limits.",
        description=f"{gpus.where} has had more than {per_terabit} effective bit errors per 10^12 bits or more than "
        f"{recoveries} link recoveries a minute for {link_for}: collectives over this GPU slow down or fail; drain "
        "the node and run dcgmi diag -r 3.",
        fired_by=(),
        **standard_cases(
            counting,
            fault=f"link recoveries at {1.1 * recoveries:g}/min",
            fault_series=[recovering(1.1 * recoveries, hpc_job="7"), effective_ber(None, hpc_job="7"), *on_job_7(gpus)],
            expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"))],
            healthy="healthy links: no recovery, effective BER 0",
            healthy_series=[recovering(0), effective_ber(None)],
            pending="recoveries for less than the for: duration",
            also_fires=[
                counting.fires(
                    f"{1.1 * per_terabit:g} effective bit errors per 10^12 bits, no recovery",
                    [recovering(0), effective_ber(1.1 * per_terabit)],
                    [gpus.on_gpu()],
                )
            ],
            also_silent=[
                counting.silent(
                    f"{0.9 * per_terabit:g} effective errors per 10^12 bits, {0.9 * recoveries:g} recoveries/min: "
                    "under DCGM's limits",
                    [recovering(0.9 * recoveries), effective_ber(0.9 * per_terabit)],
                )
            ],
        ),
    )


def _nvlink_link_down(gpus: _TestGpu) -> Alert:
    t = gpus.ctx.timeline

    def failed(values: str, **labels: str) -> Series:
        return gpus.dcgm("nvlink_recovery_failed", values, **labels)

    return gpus.hardware_alert(
        "GpuNvlinkLinkDown",
        severity="critical",
        team=Team.GPU_OPS,
        expr=gpus.per_gpu(
            "nvlink_recovery_failed", over=lambda e: f"increase({e}[{LINK_DOWN_WINDOW}])", when=ABOVE_ZERO
        ),
        for_=None,
        no_for_reason="a link declared down is a single event the counter records once; increase() over "
        f"{LINK_DOWN_WINDOW} already holds it, a for: would only delay the page",
        summary="An NVLink5 link of a GPU failed to recover and was declared down.",
        description=f"An NVLink of {gpus.where} went into recovery, failed it and was declared down in the last "
        f"{LINK_DOWN_WINDOW}: the GPU's NVLink bandwidth is reduced or gone and collectives over it fail. Drain the "
        "node, check nvidia-smi nvlink -s and the fabric (NVSwitch, Fabric Manager), reset or reboot.",
        fired_by=(),
        fires_on=[
            Case(
                "a link declared down on a GPU running a job",
                at="10m",
                series=[failed(f"{t.held(0, '5m')} {t.held(1, '10m')}", hpc_job="7"), *on_job_7(gpus)],
                expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"))],
            )
        ],
        silent_on=[
            Case(
                "a link declared down before the window",
                at="80m",
                series=[failed(f"{t.held(0, '5m')} {t.held(1, '80m')}")],
            ),
            Case(
                "a driver reload resets the counter", at="10m", series=[failed(f"{t.held(2, '5m')} {t.held(0, '10m')}")]
            ),
        ],
    )
