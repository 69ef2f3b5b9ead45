"""GPU health alerts. Xid classes (drain, application, warning) are the catalogue's
(hpcobs/exporters/catalogue/dcgm.yaml `xid_classes`, from NVIDIA's Xid catalog).

Per-GPU health conditions read the raw signal of one GPU through ctx.gpu / ctx.select (one series per GPU),
compared before it is relabelled and aggregated (`when`): on a healthy fleet almost nothing passes, so an
evaluation costs little more than reading the series (docs/benchmarks.md, Fleet scale). Idleness and GPU
counts read the recorded series of recording_rules/gpu.py and jobs.py.
Optional dcgm-exporter fields (ECC, NVLink errors, clock events, health) that a site's CSV does not
collect simply produce no series: those alerts stay silent, they never fire on absence.
Runbooks: docs/runbooks/gpu.md, one section per alert.
"""

from dataclasses import dataclass
from functools import cached_property, partial

from hpcobs.authoring.alert_cases import Timing, counter_timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Sample, Series, alert
from hpcobs.authoring.synthetic import dcgm, dcgm_xid_count, gpu_si_series, gpu_utilization, job_info, series
from hpcobs.lang.promql import ABOVE_ZERO, aggregate, duration, duration_seconds, label_replace, one_of
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

GPU = ("node", "gpu")
JOB = ("hpc_job",)
# An application-class Xid is news for the job on the GPU only if the GPU did not already carry that
# (sticky) code this long ago: otherwise the previous job's error would be blamed on the next one.
XID_NEW_WINDOW = "15m"
# Uncorrectable ECC errors are counted over this window (the node record node:gpus_ecc_uncorrectable:count
# uses the same hour).
ECC_WINDOW = "1h"
# Clock-event reasons that cut a GPU's clocks for thermal or power-delivery reasons (not gpu_idle,
# clocks_setting or the power cap the admin chose).
THROTTLE_EVENTS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
# DCGM health result values (dcgm_structs.h DCGM_HEALTH_RESULT_*: 0 pass, 10 warn, 20 fail).
HEALTH_FAIL = 20
NVLINK_CRC = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors")
NVLINK_REPLAY = ("nvlink_replay_errors", "nvlink_recovery_errors")
# A flag or Xid raised on one scrape and held: a `for` of a minute is enough to skip a one-scrape glitch.
FLAG_FOR = "1m"
# Test series of a flag raised from the third scrape on ("0 0 1x10"), evaluated three minutes after `for`.
FLAG_ONSET, FLAG_SETTLE = 2, 180

THRESHOLDS = (
    declare.duration(
        "gpu_fell_off_bus_for",
        "1m",
        "How long Xid 79 must be seen before GpuFellOffBus pages (the value is sticky, so this only filters glitches).",
    ),
    declare.duration(
        "gpu_idle_window",
        "1h",
        "A GPU held by the same job for this long with every utilisation sample at 0 is allocated-but-idle "
        '(GpuAllocatedIdle; Princeton jobstats\' "0%" means all samples zero; its first warning comes at 60 minutes).',
    ),
    declare.number(
        "gpu_temperature_celsius",
        85,
        "GPU temperature (dcgm-exporter DCGM_FI_DEV_GPU_TEMP) above which GpuTemperatureHigh warns; below the ~87 C "
        "max operating temperature nvidia-smi -q reports for H100 SXM.",
        expected="a temperature in degrees Celsius such as 85",
        minimum=0,
    ),
    declare.ratio(
        "gpu_thermal_violation_ratio",
        0.1,
        "Fraction of time a GPU is clocked down by thermal constraints (DCGM_FI_DEV_THERMAL_VIOLATION rate) above "
        "which GpuThermalViolation warns.",
    ),
    declare.duration(
        "gpu_throttle_for",
        "5m",
        "How long a GPU must stay hot or throttled before GpuTemperatureHigh, GpuThermalSlowdown and "
        "GpuThermalViolation (a burst at a kernel launch is not a cooling fault).",
    ),
    declare.limit(
        "gpu_pcie_replays_per_minute",
        8,
        "PCIe replays per minute per GPU above which the link is degrading and GpuPcieReplayRate fires (DCGM's own "
        'health limit, DCGM_LIMIT_MAX_PCIREPLAY_RATE: "8 replays per minute is the maximum recommended").',
    ),
    declare.limit(
        "gpu_nvlink_crc_errors_per_second",
        100,
        "NVLink CRC (flit + data) errors per second per GPU above which GpuNvlinkErrors fires (DCGM: CRC errors "
        '"only matter at rates of 100+ per second", DCGM_LIMIT_MAX_NVLINK_CRC_ERROR).',
    ),
    declare.limit(
        "gpu_nvlink_replay_errors_per_minute",
        1,
        "NVLink replay + recovery errors per minute per GPU above which GpuNvlinkErrors fires (DCGM's limit for "
        "these is 1, DCGM_LIMIT_MAX_NVLINK_ERROR).",
    ),
    declare.duration(
        "gpu_link_errors_for",
        "5m",
        "How long PCIe replay or NVLink error rates must stay above their limits before GpuPcieReplayRate or "
        "GpuNvlinkErrors fires.",
    ),
    declare.duration(
        "gpu_count_lookback",
        "1d",
        "A node reporting fewer GPUs than its maximum over this window has lost GPUs (GpuSeriesMissing).",
    ),
)


def groups(ctx: Context) -> list[Group]:
    gpus = _TestGpu(ctx)
    nvidia = ctx.sources["dcgm"].enabled
    # A group's rules run one after the other, groups side by side: the alerts on raw per-GPU series are split
    # by what they watch into groups of about the same cost, each well inside its interval on a large fleet
    # (docs/benchmarks.md, Fleet scale).
    by_topic = {
        "hpcobs-gpu-alerts-errors": [
            *([_fell_off_bus(gpus), *_xid_classes(gpus), *_memory_repair(gpus)] if nvidia else []),
            _uncorrectable_ecc(gpus),
        ],
        "hpcobs-gpu-alerts-thermal": _thermal(gpus) if nvidia else [],
        "hpcobs-gpu-alerts-links": [*([_nvlink_errors(gpus)] if nvidia else []), _pcie_replay_rate(gpus)],
        "hpcobs-gpu-alerts": [
            *([_health_fail(gpus)] if nvidia else []),
            *([_amd_unhealthy(gpus)] if ctx.sources["amd"].enabled else []),
            _allocated_idle(gpus),
            _series_missing(gpus),
        ],
    }
    return [
        Group(name, domain="gpu", interval=ctx.evaluation_interval, rules=rules)
        for name, rules in by_topic.items()
        if rules
    ]


@dataclass(frozen=True)
class _TestGpu:
    """The build context, plus GPU 1 of node n1 that most cases put their series on."""

    ctx: Context

    @property
    def cluster(self) -> str:
        return self.ctx.cluster

    @cached_property
    def where(self) -> str:
        """The GPU an alert names, in its description."""
        return f"GPU {label('gpu')} on {label('node')} (cluster {label(self.cluster)}, job {label('hpc_job')})"

    def on_gpu(self, **labels: str) -> Sample:
        """The alert expected on GPU n1/1, with these further labels."""
        return alert(**self.ctx.cluster_labels, node="n1", gpu="1", **labels)

    def dcgm(self, signal: str, values: str, **labels: str) -> Series:
        """A dcgm-exporter series of GPU n1/1."""
        return dcgm(self.ctx, signal, values, node="n1", gpu="1", **labels)

    def xid(self, code: int, values: str, **labels: str) -> Series:
        return self.dcgm("xid", values, err_code=str(code), err_msg="msg", **labels)

    def xid_count(self, code: int | None, values: str, **labels: str) -> Series:
        """The Xid count collector's series of GPU n1/1 (`code` None: no Xid in its window)."""
        return dcgm_xid_count(self.ctx, code, values, node="n1", gpu="1", **labels)

    def flag(self, for_: str = FLAG_FOR) -> Timing:
        return timing(self.ctx, for_, FLAG_ONSET, settle=FLAG_SETTLE)

    def per_gpu(
        self,
        signal: str,
        *keep: str,
        over=None,
        where: dict[str, str] | None = None,
        when: tuple[str, float] | None = None,
    ) -> str:
        """A dcgm-exporter signal per GPU (and job), the highest of its copies (of those meeting `when`)."""
        return self.ctx.select("dcgm", [signal], (*GPU, *JOB, *keep), over=over, where=where, when=when)

    def rate(self, expr: str) -> str:
        return f"rate({expr}[{self.ctx.rate_window}])"

    def summed_rates(self, signals: tuple[str, ...]) -> str:
        """The sum of the rates of several optional counters of a GPU: each branch tagged so `or` keeps them all.
        Only rising counters are kept before the per-GPU aggregation (a sum of rates loses nothing by it): on a
        healthy fleet that is almost none, which keeps the group's evaluation small as the fleet grows."""
        tagged = [
            label_replace(self.per_gpu(signal, over=self.rate, when=ABOVE_ZERO), "counter", "", "", signal)
            for signal in signals
        ]
        return aggregate("sum", (self.cluster, *GPU, *JOB), " or ".join(tagged))

    @cached_property
    def gpu_alert(self) -> partial[Alert]:
        """An alert about one GPU: its dashboard link selects the node and the GPU."""
        return alerts_of("gpu", DashboardUid.GPU_CLUSTER, self.cluster, *GPU)

    @cached_property
    def node_alert(self) -> partial[Alert]:
        """An alert about a node (or a job on it): its dashboard link selects the node."""
        return alerts_of("gpu", DashboardUid.GPU_CLUSTER, self.cluster, "node")


def _fell_off_bus(gpus: _TestGpu) -> Alert:
    ctx = gpus.ctx
    # The Xid value is sticky and the GPU's series may vanish right after Xid 79: look back over a
    # window so the alert survives the series going stale.
    last_xid_79 = ctx.xids_reported(
        ctx.sources["dcgm"].exporter.xids("fell_off_bus"),
        keep=(*JOB, "err_code"),
        over=lambda raw: f"last_over_time({raw}[5m])",
    )

    def xid79(gpu: str, values: str, **labels: str) -> Series:
        return dcgm(
            ctx, "xid", values, node="n1", gpu=gpu, err_code="79", err_msg="GPU has fallen off the bus", **labels
        )

    return gpus.gpu_alert(
        "GpuFellOffBus",
        severity="critical",
        team=Team.GPU_OPS,
        expr=last_xid_79,
        for_=ctx.thresholds.gpu_fell_off_bus_for,
        summary="A GPU has fallen off the bus.",
        description=f"{gpus.where} reported Xid 79 and stopped answering; drain the node and reboot it.",
        fired_by=("xid79",),
        **standard_cases(
            gpus.flag(ctx.thresholds.gpu_fell_off_bus_for),
            fault="Xid 79 on a GPU running a job",
            fault_series=[xid79("3", "_ _ 79x10", hpc_job="4242")],
            expect=[alert(**ctx.cluster_labels, node="n1", gpu="3", hpc_job="4242", err_code="79")],
            healthy="healthy GPU",
            healthy_series=[dcgm(ctx, "xid", "0x20", node="n1", gpu="3")],
            pending="Xid 79 seen for less than the for: duration",
            pending_series=[xid79("3", "_ _ 79x10")],
            also_fires=[
                Case(
                    "Xid 79 then the GPU's series vanish",
                    at="4m",
                    series=[xid79("5", "79x3")],
                    expect=[alert(**ctx.cluster_labels, node="n1", gpu="5", err_code="79")],
                ),
                Case(
                    "Xid 79 then Xid 45 (preemptive cleanup) within one scrape: only the Xid count collector saw 79",
                    at="5m",
                    series=[
                        gpus.xid(45, "45x10"),
                        gpus.xid_count(79, "1x10"),
                        gpus.xid_count(45, "1x10"),
                    ],
                    expect=[gpus.on_gpu(err_code="79")],
                ),
            ],
            also_silent=[
                Case(
                    "application-class Xid 13 is the job owner's problem",
                    at="10m",
                    series=[
                        dcgm(
                            ctx, "xid", "13x20", node="n1", gpu="3", err_code="13", err_msg="Graphics Engine Exception"
                        )
                    ],
                )
            ],
        ),
    )


def _xid_classes(gpus: _TestGpu) -> list[Alert]:
    """Xids by what to do about them: drain the node (gpu-ops), tell the job's owner, or reset when free."""
    return [_xid_drain_class(gpus), _xid_application_class(gpus), _xid_warning_class(gpus)]


def _xid_drain_class(gpus: _TestGpu) -> Alert:
    ctx, xid = gpus.ctx, gpus.xid
    xids = ctx.sources["dcgm"].exporter
    (fell_off_bus,) = xids.xids("fell_off_bus")
    drain = [code for code in xids.xids("drain") if code != fell_off_bus]  # Xid 79 is GpuFellOffBus's
    return gpus.gpu_alert(
        "GpuXidDrainClass",
        severity="critical",
        team=Team.GPU_OPS,
        expr=ctx.xids_reported(drain, keep=(*JOB, "err_code")),
        for_=FLAG_FOR,
        summary="A GPU reported an Xid error that needs a GPU reset or a node drain.",
        description=f"{gpus.where} reported Xid {label('err_code')}, a drain-class error: drain the node, "
        "reset the GPU or reboot, and run dcgmi diag before resuming it.",
        fired_by=("xid48", "dbe", "row_remap_failure", "xid_overwritten"),
        **standard_cases(
            gpus.flag(),
            fault="Xid 48 (double-bit ECC) on a GPU running a job",
            fault_series=[xid(48, "_ _ 48x10", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7", err_code="48")],
            healthy="healthy GPU: no Xid since the driver loaded",
            healthy_series=[xid(0, "0x10", hpc_job="7")],
            pending="Xid 48 seen for less than the for: duration",
            also_fires=[
                Case(
                    "Xid 119 (GSP timeout) on a free GPU",
                    at="5m",
                    series=[xid(119, "119x10")],
                    expect=[gpus.on_gpu(err_code="119")],
                ),
                Case(
                    "Xid 48 then Xid 45 within one scrape: the last value shows 45, the Xid count collector counted 48",
                    at="5m",
                    series=[
                        xid(45, "45x10", hpc_job="7"),
                        gpus.xid_count(48, "1x10", hpc_job="7"),
                        gpus.xid_count(45, "1x10", hpc_job="7"),
                    ],
                    expect=[gpus.on_gpu(hpc_job="7", err_code="48")],
                ),
                Case(
                    "Xid 48 as the last value and counted twice in the window: one alert, by the last value",
                    at="5m",
                    series=[xid(48, "48x10", hpc_job="7"), gpus.xid_count(48, "2x10", hpc_job="7")],
                    expect=[gpus.on_gpu(hpc_job="7", err_code="48")],
                ),
            ],
            also_silent=[
                Case("Xid 79 is GpuFellOffBus's alert", at="5m", series=[xid(79, "79x10")]),
                Case("application-class Xid 13", at="5m", series=[xid(13, "13x10", hpc_job="7")]),
                Case(
                    "Xid 109 (context switch timeout): an application error, NVIDIA's device plugin keeps the GPU",
                    at="5m",
                    series=[xid(109, "109x10", hpc_job="7")],
                ),
                Case(
                    "the Xid count collector with no Xid in its window (one series without xid, 0)",
                    at="5m",
                    series=[xid(0, "0x10"), gpus.xid_count(None, "0x10")],
                ),
                Case(
                    "the Xid count collector counted only a follow-on Xid 45",
                    at="5m",
                    series=[xid(45, "45x10"), gpus.xid_count(45, "1x10")],
                ),
            ],
        ),
    )


def _xid_application_class(gpus: _TestGpu) -> Alert:
    ctx, xid = gpus.ctx, gpus.xid
    application = ctx.sources["dcgm"].exporter.xids("application")
    app_now = ctx.gpu("xid", keep=(*JOB, "err_code"), where={"err_code": one_of(application), "hpc_job": '!=""'})
    app_before = ctx.gpu(
        "xid",
        keep=("err_code",),
        where={"err_code": one_of(application)},
        over=lambda raw: f"{raw} offset {XID_NEW_WINDOW}",
    )
    # An application-class code (45 "preemptive cleanup, due to previous errors" above all) that follows a
    # drain-class one on the same GPU is the hardware's doing: GpuXidDrainClass pages gpu-ops instead.
    drain_reported = ctx.xids_reported(ctx.sources["dcgm"].exporter.xids("drain"))
    return gpus.gpu_alert(
        "GpuXidApplicationClass",
        severity="warning",
        team=Team.JOB_OWNER,
        expr=f"({app_now} unless on ({gpus.cluster}, node, gpu, err_code) {app_before}) "
        f"unless on ({gpus.cluster}, node, gpu) {drain_reported}",
        for_=FLAG_FOR,
        summary="A job hit an application-class Xid error on its GPU.",
        description=f"Job {label('hpc_job')} hit Xid {label('err_code')} on GPU {label('gpu')} of {label('node')} "
        f"(cluster {label(gpus.cluster)}): an error raised by the job's own code (illegal memory "
        "access, page fault, aborted kernel), not a GPU fault; check the job's output and fix or "
        "resubmit it.",
        fired_by=("xid13",),
        **standard_cases(
            timing(ctx, FLAG_FOR, 4, settle=120),
            fault="Xid 13 in a running job",
            fault_series=[xid(13, "_x4 13x10", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7", err_code="13")],
            healthy="healthy GPU",
            healthy_series=[xid(0, "0x10", hpc_job="7")],
            pending="Xid 13 seen for less than the for: duration",
            also_fires=[
                timing(ctx, FLAG_FOR, 1, settle=90).fires(
                    "Xid 31 (page fault) in a job that just started",
                    [xid(31, "_ 31x10", hpc_job="8")],
                    [gpus.on_gpu(hpc_job="8", err_code="31")],
                )
            ],
            also_silent=[
                Case("a drain-class Xid goes to gpu-ops", at="5m", series=[xid(48, "48x10", hpc_job="7")]),
                Case("no job on the GPU: nobody to tell", at="5m", series=[xid(13, "13x10")]),
                Case(
                    "Xid 45 after a drain-class Xid 48 the Xid count collector counted: the GPU's fault, not the job's",
                    at="5m",
                    series=[
                        xid(45, "_x4 45x10", hpc_job="7"),
                        gpus.xid_count(48, "_x4 1x10", hpc_job="7"),
                        gpus.xid_count(45, "_x4 1x10", hpc_job="7"),
                    ],
                ),
                Case(
                    "the previous job's sticky Xid 13 is not blamed on the next job",
                    at="35m",
                    series=[
                        xid(13, "13x40", hpc_job="7"),
                        xid(13, "_x40 13x20"),
                        xid(13, "_x60 13x20", hpc_job="8"),
                    ],
                ),
            ],
        ),
    )


def _xid_warning_class(gpus: _TestGpu) -> Alert:
    ctx, xid = gpus.ctx, gpus.xid
    return gpus.gpu_alert(
        "GpuXidWarningClass",
        severity="info",
        team=Team.GPU_OPS,
        expr=ctx.gpu(
            "xid", keep=(*JOB, "err_code"), where={"err_code": one_of(ctx.sources["dcgm"].exporter.xids("warning"))}
        ),
        for_=FLAG_FOR,
        summary="A GPU reported an Xid error that asks for a GPU reset at the next opportunity.",
        description=f"{gpus.where} reported Xid {label('err_code')} (memory remapping event, high single-bit "
        "ECC rate or contained memory error): reset the GPU when its job ends.",
        fired_by=("row_remap_pending",),
        **standard_cases(
            gpus.flag(),
            fault="Xid 94 (contained ECC error)",
            fault_series=[xid(94, "_ _ 94x10", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7", err_code="94")],
            healthy="healthy GPU",
            healthy_series=[xid(0, "0x10", hpc_job="7")],
            pending="Xid 63 seen for less than the for: duration",
            pending_series=[xid(63, "_ _ 63x10", hpc_job="7")],
            also_silent=[Case("application-class Xid 13", at="5m", series=[xid(13, "13x10", hpc_job="7")])],
        ),
    )


@dataclass(frozen=True)
class _Flag:
    """A dcgm-exporter field that is 0 on a healthy GPU and above 0 while the GPU needs attention."""

    alert: str
    signal: str
    severity: str
    summary: str
    problem: str  # the description after "<the GPU> "
    fault: str  # the firing case's name
    pending: str  # the name of the case before `for` has elapsed
    fired_by: tuple[str, ...] = ()


MEMORY_REPAIR = (
    _Flag(
        "GpuRowRemapFailure",
        "row_remap_failure",
        "critical",
        "Row remapping failed on a GPU: it has no spare memory rows left.",
        "failed to remap a memory row (DCGM_FI_DEV_ROW_REMAP_FAILURE): the GPU cannot repair its memory any "
        "more; drain the node and open an RMA case.",
        "remap failure flag set",
        "flag seen for less than the for: duration",
        ("row_remap_failure",),
    ),
    _Flag(
        "GpuRowRemapPending",
        "row_remap_pending",
        "warning",
        "A GPU has a memory row remap pending: it needs a reset.",
        "has a row remap pending (DCGM_FI_DEV_ROW_REMAP_PENDING): the faulty row is only replaced at the next "
        "GPU reset; drain the node and reset the GPU when its job ends.",
        "remap pending after an uncorrectable error",
        "pending for less than the for: duration",
        ("row_remap_pending", "dbe"),
    ),
    _Flag(
        "GpuRetiredPagesPending",
        "retired_pages_pending",
        "warning",
        "A GPU has memory pages pending retirement: it needs a reset.",
        "has pages pending retirement (DCGM_FI_DEV_RETIRED_PENDING, pre-Ampere page retirement): they are "
        "retired at the next GPU reset; reset it when its job ends.",
        "pages pending retirement",
        "pending for less than the for: duration",
    ),
)


def _memory_repair(gpus: _TestGpu) -> list[Alert]:
    return [
        gpus.gpu_alert(
            flag.alert,
            severity=flag.severity,
            team=Team.GPU_OPS,
            expr=gpus.per_gpu(flag.signal, when=ABOVE_ZERO),
            for_=FLAG_FOR,
            summary=flag.summary,
            description=f"{gpus.where} {flag.problem}",
            fired_by=flag.fired_by,
            **standard_cases(
                gpus.flag(),
                fault=flag.fault,
                fault_series=[gpus.dcgm(flag.signal, "0 0 1x10", hpc_job="7")],
                expect=[gpus.on_gpu(hpc_job="7")],
                healthy="healthy GPU",
                healthy_series=[gpus.dcgm(flag.signal, "0x10")],
                pending=flag.pending,
                pending_series=[gpus.dcgm(flag.signal, "0 0 1x10")],
            ),
        )
        for flag in MEMORY_REPAIR
    ]


def _thermal(gpus: _TestGpu) -> list[Alert]:
    """A GPU held back by heat: clock events, time spent throttled, temperature (thresholds.gpu_throttle_for)."""
    return [_thermal_slowdown(gpus), _thermal_violation(gpus), _temperature_high(gpus)]


def _hot(gpus: _TestGpu) -> Timing:
    """A GPU hot or slowed down from the first sample on."""
    return timing(gpus.ctx, gpus.ctx.thresholds.gpu_throttle_for, 0, settle=180)


def _thermal_slowdown(gpus: _TestGpu) -> Alert:
    throttle_for = gpus.ctx.thresholds.gpu_throttle_for

    def clock_events(values: str, event: str, **labels: str) -> Series:
        return gpus.dcgm("clock_events", values, clock_event=event, window_size_in_ms="300000", **labels)

    return gpus.gpu_alert(
        "GpuThermalSlowdown",
        severity="warning",
        team=Team.GPU_OPS,
        expr=gpus.per_gpu(
            "clock_events", "clock_event", where={"clock_event": one_of(THROTTLE_EVENTS)}, when=ABOVE_ZERO
        ),
        for_=throttle_for,
        summary="A GPU is clocked down by a hardware, thermal or power-brake slowdown.",
        description=f"{gpus.where} has been slowed down by {label('clock_event')} for {throttle_for}: check its "
        "cooling (fans, airflow, inlet temperature) or the node's power supply; the whole job "
        "runs at this GPU's pace.",
        fired_by=("thermal",),
        **standard_cases(
            _hot(gpus),
            fault="HW slowdown reported in every exporter window",
            fault_series=[clock_events("3x40", "hw_slowdown", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7", clock_event="hw_slowdown")],
            healthy="an idle GPU reports the gpu_idle reason, which is no slowdown",
            healthy_series=[clock_events("9x40", "gpu_idle"), clock_events("0x40", "hw_slowdown")],
            pending="slowdown for less than the for: duration",
        ),
    )


def _thermal_violation(gpus: _TestGpu) -> Alert:
    throttle_for = gpus.ctx.thresholds.gpu_throttle_for
    violation = gpus.ctx.thresholds.gpu_thermal_violation_ratio
    # A counter read through rate(): the condition holds from its second sample on.
    throttled = counter_timing(gpus.ctx, throttle_for)
    t, lasting = gpus.ctx.timeline, throttled.lasting

    def violation_counter(ratio: float, **labels: str) -> Series:
        """Nanoseconds spent throttled, growing at `ratio` of the time."""
        return gpus.dcgm("thermal_violation", t.rising(round(ratio * 1e9), lasting), **labels)

    return gpus.gpu_alert(
        "GpuThermalViolation",
        severity="warning",
        team=Team.GPU_OPS,
        expr=gpus.per_gpu("thermal_violation", over=gpus.rate, when=(">", violation)),
        for_=throttle_for,
        summary="A GPU spends a large share of its time throttled by thermal limits.",
        description=f"{gpus.where} has been clocked down by thermal constraints for more than "
        f"{violation:.0%} of the time for {throttle_for} (DCGM_FI_DEV_THERMAL_VIOLATION): check its "
        "cooling.",
        fired_by=("thermal",),
        **standard_cases(
            throttled,
            fault="throttled 70% of the time",
            fault_series=[violation_counter(0.7, hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7")],
            healthy="healthy GPU: the counter does not move",
            healthy_series=[gpus.dcgm("thermal_violation", t.held(5, lasting))],
            pending="throttled for less than the for: duration",
            also_silent=[throttled.silent("throttled just under the threshold", [violation_counter(0.8 * violation)])],
        ),
    )


def _temperature_high(gpus: _TestGpu) -> Alert:
    throttle_for = gpus.ctx.thresholds.gpu_throttle_for
    limit = gpus.ctx.thresholds.gpu_temperature_celsius
    temperature = gpus.ctx.sources["dcgm"].exporter.signals_for("temperature")
    hot = _hot(gpus)
    return gpus.gpu_alert(
        "GpuTemperatureHigh",
        severity="warning",
        team=Team.GPU_OPS,
        expr=gpus.ctx.select("dcgm", temperature, (*GPU, *JOB), when=(">", limit)),
        for_=throttle_for,
        summary="A GPU runs hotter than its configured limit.",
        description=f"{gpus.where} has been above {limit} C for {throttle_for}: it is close to its slowdown "
        "temperature; check fans, airflow and the rack's inlet temperature.",
        fired_by=("thermal",),
        **standard_cases(
            hot,
            fault="GPU at 92 C",
            fault_series=[gpus.dcgm("gpu_temperature", "92x40", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7")],
            healthy="busy GPU at 72 C",
            healthy_series=[gpus.dcgm("gpu_temperature", "72x40", hpc_job="7")],
            pending="hot for less than the for: duration",
            also_silent=[hot.silent("exactly at the limit", [gpus.dcgm("gpu_temperature", f"{limit}x40")])],
        ),
    )


def _nvlink_errors(gpus: _TestGpu) -> Alert:
    ctx, thresholds = gpus.ctx, gpus.ctx.thresholds
    link_for, crc, replays = (
        thresholds.gpu_link_errors_for,
        thresholds.gpu_nvlink_crc_errors_per_second,
        thresholds.gpu_nvlink_replay_errors_per_minute,
    )
    counting = counter_timing(ctx, link_for)
    t, lasting = ctx.timeline, counting.lasting

    def errors(signal: str, per_second: float, **labels: str) -> Series:
        return gpus.dcgm(signal, t.rising(per_second, lasting), **labels)

    return gpus.gpu_alert(
        "GpuNvlinkErrors",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"({gpus.summed_rates(NVLINK_CRC)} > {crc}) or ({gpus.summed_rates(NVLINK_REPLAY)} * 60 > {replays})",
        for_=link_for,
        summary="A GPU's NVLink links report errors above DCGM's limits.",
        description=f"{gpus.where} counts NVLink CRC errors above {crc}/s or replay and recovery errors above "
        f"{replays}/min for {link_for}: collectives over this GPU slow down or fail; drain the node and "
        "run dcgmi diag -r 3.",
        fired_by=("nvlink_errors",),
        **standard_cases(
            counting,
            fault="NVLink replays at 15/s",
            fault_series=[
                errors("nvlink_replay_errors", 15, hpc_job="7"),
                errors("nvlink_crc_flit_errors", 0, hpc_job="7"),
            ],
            expect=[gpus.on_gpu(hpc_job="7")],
            healthy="healthy links",
            healthy_series=[errors(signal, 0) for signal in NVLINK_CRC + NVLINK_REPLAY],
            pending="replay errors for less than the for: duration",
            also_fires=[
                counting.fires(
                    "CRC errors at 120/s, flit and data together",
                    [errors("nvlink_crc_flit_errors", 90), errors("nvlink_crc_data_errors", 30)],
                    [gpus.on_gpu()],
                )
            ],
            also_silent=[
                counting.silent(
                    "CRC errors at 90/s and replays at 0.8/min: under DCGM's limits",
                    [errors("nvlink_crc_flit_errors", 90), errors("nvlink_replay_errors", 0.8 / 60)],
                )
            ],
        ),
    )


def _health_fail(gpus: _TestGpu) -> Alert:
    def health(values: str, watch: str, code: str, **labels: str) -> Series:
        return gpus.dcgm("health_status", values, health_watch=watch, health_error_code=code, **labels)

    dbe = "DCGM_FR_VOLATILE_DBE_DETECTED"
    return gpus.gpu_alert(
        "GpuHealthFail",
        severity="critical",
        team=Team.GPU_OPS,
        expr=gpus.per_gpu("health_status", "health_watch", "health_error_code", when=("==", HEALTH_FAIL)),
        for_=FLAG_FOR,
        summary="DCGM health checks report a GPU as failed.",
        description=f"DCGM's {label('health_watch')} health watch failed on {gpus.where} with "
        f"{label('health_error_code')}: drain the node and run dcgmi health -c and dcgmi diag -r 3.",
        fired_by=("dbe",),
        **standard_cases(
            gpus.flag(),
            fault="MEM watch FAIL after a double-bit error",
            fault_series=[health("0 0 20x10", "MEM", dbe, hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7", health_watch="MEM", health_error_code=dbe)],
            healthy="every watch passes",
            healthy_series=[health("0x10", watch, "DCGM_FR_OK") for watch in ("MEM", "PCIE", "NVLINK")],
            pending="FAIL for less than the for: duration",
            pending_series=[health("0 0 20x10", "MEM", dbe)],
            also_silent=[
                Case(
                    "a WARN (PCIe replay rate) is not a FAIL",
                    at="5m",
                    series=[health("10x10", "PCIE", "DCGM_FR_PCI_REPLAY_RATE")],
                )
            ],
        ),
    )


def _simulated(gpus: _TestGpu, *scenarios: str) -> tuple[str, ...]:
    """The simulator's scenarios fault NVIDIA GPUs only."""
    return scenarios if gpus.ctx.sources["dcgm"].enabled else ()


def _uncorrectable_ecc(gpus: _TestGpu) -> Alert:
    ctx = gpus.ctx
    t = ctx.timeline

    def ecc(values: str, **labels: str) -> Series:
        return gpu_si_series(ctx, "ecc_uncorrectable", values, node="n1", gpu="1", **labels)

    return gpus.gpu_alert(
        "GpuUncorrectableEcc",
        severity="critical",
        team=Team.GPU_OPS,
        expr=ctx.gpu("ecc_uncorrectable", keep=JOB, over=lambda e: f"increase({e}[{ECC_WINDOW}])", when=ABOVE_ZERO),
        for_=None,
        no_for_reason="an uncorrectable ECC error is a single event the counter records once; increase() over "
        f"{ECC_WINDOW} already holds it, a for: would only delay the page",
        summary="A GPU had an uncorrectable (double-bit) ECC memory error.",
        description=f"{gpus.where} counted an uncorrectable ECC error in the last {ECC_WINDOW}: the job on it "
        "has most likely crashed; drain the node, reset the GPU and run dcgmi diag -r 3.",
        fired_by=_simulated(gpus, "dbe"),
        fires_on=[
            Case(
                "a double-bit error on a GPU running a job",
                at="10m",
                series=[ecc(f"{t.held(0, '5m')} {t.held(1, '10m')}", hpc_job="7")],
                expect=[gpus.on_gpu(hpc_job="7")],
            )
        ],
        silent_on=[
            Case(
                "old errors from before the window do not count",
                at="80m",
                series=[ecc(f"{t.held(0, '5m')} {t.held(2, '80m')}")],
            ),
            Case(
                "a driver reload resets the counter: no new error",
                at="10m",
                series=[ecc(f"{t.held(3, '5m')} {t.held(0, '10m')}")],
            ),
        ],
    )


def _pcie_replay_rate(gpus: _TestGpu) -> Alert:
    ctx, thresholds = gpus.ctx, gpus.ctx.thresholds
    link_for, replays = thresholds.gpu_link_errors_for, thresholds.gpu_pcie_replays_per_minute
    counting = counter_timing(ctx, link_for)
    t, lasting = ctx.timeline, counting.lasting

    def replay(values: str, **labels: str) -> Series:
        return gpu_si_series(ctx, "pcie_replay", values, node="n1", gpu="1", **labels)

    return gpus.gpu_alert(
        "GpuPcieReplayRate",
        severity="warning",
        team=Team.GPU_OPS,
        expr=ctx.gpu("pcie_replay", keep=JOB, over=lambda e: f"{gpus.rate(e)} * 60", when=(">", replays)),
        for_=link_for,
        summary="A GPU's PCIe link retries transfers more often than DCGM recommends.",
        description=f"{gpus.where} has replayed more than {replays} PCIe transfers a minute for {link_for}: the "
        "link is degrading (riser, slot, cable or retimer); host-device transfers slow down. Drain "
        "the node, reseat the GPU and check nvidia-smi -q -d PCIE.",
        fired_by=_simulated(gpus, "pcie_replay_storm"),
        **standard_cases(
            counting,
            fault="a replay storm at 200/s",
            fault_series=[replay(t.rising(200, lasting), hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7")],
            healthy="healthy link: a few replays since boot, none now",
            healthy_series=[replay(t.held(3, lasting))],
            pending="a storm shorter than the for: duration",
            also_silent=[counting.silent("just under the limit", [replay(t.rising(0.8 * replays / 60, lasting))])],
        ),
    )


def _allocated_idle(gpus: _TestGpu) -> Alert:
    ctx, cluster = gpus.ctx, gpus.cluster
    idle = ctx.thresholds.gpu_idle_window
    # Idle from the first sample: the idle record holds once a whole window of zeros is in.
    when = timing(ctx, "5m", duration_seconds(idle) // duration_seconds(ctx.scrape_interval), settle=300)
    samples = when.samples

    def util(ratios: str, gpu: str = "0", node: str = "n1") -> Series:
        return gpu_utilization(ctx, ratios, node=node, gpu=gpu, hpc_job="7")

    return gpus.node_alert(
        "GpuAllocatedIdle",
        severity="info",
        team=Team.JOB_OWNER,
        expr=f"group by ({cluster}, node, hpc_job) (gpu:job:info) and on ({cluster}, hpc_job) "
        f"(job:gpus_allocated_idle:count > 0) and on ({cluster}, node) (node:gpus_allocated_idle:count > 0)",
        for_="5m",
        summary="A job holds GPUs on a node that have done no work at all for the idle window.",
        description=f"Job {label('hpc_job')} holds GPUs on {label('node')} (cluster {label(cluster)}) whose "
        f"utilisation has been 0 at every sample for {idle}: release them (fix the job's device "
        "selection or ask for fewer GPUs).",
        fired_by=_simulated(gpus, "idle_gpus"),
        **standard_cases(
            when,
            fault=f"one of the job's GPUs at 0% for {idle}; its other node is busy",
            fault_series=[
                job_info(ctx, "7", f"1x{samples}"),
                job_info(ctx, "7", f"1x{samples}", node="n2"),
                util(f"0x{samples}"),
                util(f"0.5x{samples}", gpu="1"),
                util(f"0.5x{samples}", node="n2"),
            ],
            expect=[alert(**ctx.cluster_labels, node="n1", hpc_job="7")],
            healthy="every GPU busy",
            healthy_series=[job_info(ctx, "7", f"1x{samples}"), util(f"0.5x{samples}")],
            pending="idle for the window, but for less than the for: duration",
            pending_series=[job_info(ctx, "7", f"1x{samples}"), util(f"0x{samples}")],
            also_silent=[
                when.silent(
                    f"idle for 5 minutes less than {idle}",
                    [job_info(ctx, "7", f"1x{samples}"), util(f"0.5x{900 // when.step} 0x{samples}")],
                )
            ],
        ),
    )


def _series_missing(gpus: _TestGpu) -> Alert:
    """GPUs counted from their temperature, a field every GPU reports whole or split into MIG instances: dcgm-exporter
    writes one series per MIG instance, with its GPU's own `gpu` label plus GPU_I_ID and GPU_I_PROFILE, and has no
    utilisation on MIG (DCGM_FI_DEV_GPU_UTIL is not supported there), so grouping by `gpu` counts each GPU once in
    both modes (docs/exporters.md, "Slurm GPUs per node and MIG"). Compared with the node's own maximum over
    gpu_count_lookback, a subquery sampled 24 times (cheap at that resolution, and MIG-proof unlike a count of
    utilisation series). A GPU missing for longer than that is SlurmNodeGpusBelowGres's, from Slurm's GRES."""
    ctx = gpus.ctx
    cluster = ctx.cluster
    lookback = ctx.thresholds.gpu_count_lookback
    reporting = aggregate("count", (cluster, "node"), ctx.gpu("temperature", op="group"))
    recent = f"max_over_time({reporting}[{lookback}:{duration(duration_seconds(lookback) // 24)}])"
    # GPU 3's series stop after the 11th scrape: the node counts one GPU less from then on.
    when = timing(ctx, "5m", 11, settle=270)
    held = f"x{when.samples}"

    def temperature(values: str, gpu: str, node: str = "n1", **mig: str) -> Series:
        return gpu_si_series(ctx, "temperature", values, node=node, gpu=gpu, **mig)

    def mig(gpu: str, instance: str, values: str) -> Series:
        """A MIG instance's series: its GPU's `gpu`, and the instance (render_metrics.go)."""
        return temperature(values, gpu, "n2", vendor="dcgm", GPU_I_ID=instance, GPU_I_PROFILE="3g.40gb")

    # A node whose two GPUs are each split in two MIG instances: GPU 0's keep reporting.
    gpu0 = [mig("0", "1", f"60{held}"), mig("0", "2", f"60{held}")]
    mig_fires = [
        when.fires(
            "MIG: both instances of GPU 1 stop",
            [*gpu0, mig("1", "1", "60x10 stale"), mig("1", "2", "60x10 stale")],
            [alert(**ctx.cluster_labels, node="n2")],
        )
    ]
    mig_silent = [
        when.silent(
            "MIG: one instance of GPU 1 goes away (MIG reconfigured), its other instance still reports",
            [*gpu0, mig("1", "1", f"60{held}"), mig("1", "2", "60x10 stale")],
        )
    ]
    nvidia = ctx.sources["dcgm"].enabled
    three_left = [temperature(f"60{held}", gpu) for gpu in "012"] + [temperature("60x10 stale", "3")]
    return gpus.node_alert(
        "GpuSeriesMissing",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"{reporting} < on ({cluster}, node) {recent}",
        for_="5m",
        summary="A node reports fewer GPUs than it did recently.",
        description=f"{label('node')} (cluster {label(gpus.cluster)}) reports fewer GPUs than its maximum over the "
        f"last {lookback} while its GPU exporter still answers: a GPU fell off the bus or its driver lost it; "
        "check nvidia-smi -L (rocm-smi on AMD) and the kernel log.",
        fired_by=_simulated(gpus, "xid79"),
        **standard_cases(
            when,
            fault="GPU 3's series stop, the other three still report",
            fault_series=three_left,
            expect=[alert(**ctx.cluster_labels, node="n1")],
            healthy="every GPU reports",
            healthy_series=[temperature(f"60{held}", gpu) for gpu in "0123"],
            pending="GPU missing for less than the for: duration",
            also_fires=mig_fires if nvidia else [],
            also_silent=[
                when.silent(
                    "the whole exporter is gone (ExporterDcgmDown's case)",
                    [temperature("60x10 stale", gpu) for gpu in "0123"],
                ),
                *(mig_silent if nvidia else []),
            ],
        ),
    )


def _amd_unhealthy(gpus: _TestGpu) -> Alert:
    """AMD Device Metrics Exporter only (exporters.amd.enabled)."""

    def health(values: str, **labels: str) -> Series:
        return series(gpus.ctx, "amd", "health", values, node="n1", gpu="1", **labels)

    return gpus.gpu_alert(
        "GpuAmdUnhealthy",
        severity="critical",
        team=Team.GPU_OPS,
        expr=gpus.ctx.select("amd", ["health"], (*GPU, *JOB), when=("==", 0)),
        for_=FLAG_FOR,
        summary="The AMD Device Metrics Exporter reports a GPU as unhealthy.",
        description=f"{gpus.where} is reported unhealthy (gpu_health 0): drain the node, check amd-smi and the "
        "kernel log (amdgpu RAS events), run AGFHC or rvs before resuming it.",
        **standard_cases(
            gpus.flag(),
            fault="GPU unhealthy while a job runs on it",
            fault_series=[health("1 1 0x10", hpc_job="7")],
            expect=[gpus.on_gpu(hpc_job="7")],
            healthy="healthy GPU",
            healthy_series=[health("1x10")],
            pending="unhealthy for less than the for: duration",
            pending_series=[health("1 1 0x10")],
        ),
    )
