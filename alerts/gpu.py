"""GPU health alerts. Xid classes (drain, application, warning) are the catalogue's
(hpcobs/exporters/catalogue/dcgm.yaml `xid_classes`, from NVIDIA's Xid catalog).

Per-GPU health conditions read the raw signal of one GPU through ctx.gpu / ctx.select (one series per GPU),
compared before it is relabelled and aggregated (`when`): on a healthy fleet almost nothing passes, so an
evaluation costs little more than reading the series (docs/benchmarks.md, Fleet scale). Idleness and GPU
counts read the recorded series of recording_rules/gpu.py and jobs.py.
Optional dcgm-exporter fields (ECC, NVLink errors, clock events, health) that a site's CSV does not
collect simply produce no series: those alerts stay silent, they never fire on absence.
Hardware alerts are keyed by the GPU (cluster, node, gpu) and what is wrong with it (err_code, clock_event, ...),
never by the job on it: dcgm-exporter labels a GPU's series with the jobs of the prolog's mapping file, which the
epilog empties, so a sticky state keyed by the job would resolve and fire again with every job. The jobs on the GPU
are their `jobs` annotation instead, read at evaluation (JOBS_ON_GPU_TEMPLATE). GpuXidApplicationClass, the job's
own alert, carries `hpc_job`.
Runbooks: docs/runbooks/gpu.md, one section per alert.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial

from hpcobs.authoring.alert_cases import Timing, counter_timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, Lookup, alerts_of, label
from hpcobs.authoring.ruletest import Case, Sample, Series, alert
from hpcobs.authoring.synthetic import (
    H100_GPU_MAX_OPERATING_CELSIUS,
    JOB_OWNER,
    dcgm,
    dcgm_xid_count,
    gpu_si_series,
    gpu_utilization,
    job_info,
    series,
)
from hpcobs.lang.escape import promql_string
from hpcobs.lang.promql import ABOVE_ZERO, aggregate, duration, duration_seconds, label_replace, one_of
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

from .gpu_limits import over_own_limit

GPU = ("node", "gpu")
JOB = ("hpc_job",)  # the job an alert is about: GpuXidApplicationClass's (GpuTemperatureHigh still keys on it too)
# The jobs on a GPU, for a hardware alert's `jobs` annotation: the GPU-to-job mapping (gpu:job:info, one series per
# job holding the GPU) and each job's owner where its job-info series is there (job:slurm_job_info:max), queried
# when the alert is evaluated. Label values enter the queries quoted by Go's %q, which PromQL reads back.
JOBS_ON_GPU_TEMPLATE = (
    "{{{{ range $i, $job := query (printf `gpu:job:info{{{c}=%q,node=%q,gpu=%q}}` $labels.{c} $labels.node "
    '$labels.gpu) | sortByLabel "hpc_job" }}}}{{{{ if $i }}}}, {{{{ end }}}}{{{{ $job.Labels.hpc_job }}}}'
    "{{{{ range query (printf `job:slurm_job_info:max{{{c}=%q,hpc_job=%q}}` $labels.{c} $job.Labels.hpc_job) }}}}"
    " (user {{{{ .Labels.user }}}}, account {{{{ .Labels.account }}}}){{{{ end }}}}{{{{ else }}}}none{{{{ end }}}}"
)
NO_JOB = "none"
# How long GpuXidApplicationClass remembers the job an application-class Xid was seen under: a job killed by its
# own Xid loses its mapping when the epilog runs, seconds later, long before `for` has elapsed. Longer than `for`
# plus two evaluations at the longest interval a site may set (2m).
XID_JOB_LOOKBACK = "5m"
# An application-class Xid is news for the job on the GPU only if the GPU did not already carry that
# (sticky) code this long ago: otherwise the previous job's error would be blamed on the next one.
XID_NEW_WINDOW = "15m"
# Uncorrectable ECC errors are counted over this window (the node record node:gpus_ecc_uncorrectable:count
# uses the same hour).
ECC_WINDOW = "1h"
# Clock-event reasons that cut a GPU's clocks for thermal or power-delivery reasons (not gpu_idle,
# clocks_setting or the power cap the admin chose).
# hw_slowdown is NVML's umbrella for a clock cut by half or more, asserted by heat or by the power brake
# (nvmlClocksEventReasonHwSlowdown); the brake is also reported as its own reason, a fault whatever the temperature.
POWER_BRAKE_EVENT = "hw_power_brake"
THROTTLE_EVENTS = ("hw_slowdown", "hw_thermal", "sw_thermal", POWER_BRAKE_EVENT)
# DCGM's PCIe replay limit per lane, replays per minute, by link generation (modules/health/DcgmHealthWatch.cpp
# GetExpectedPcieReplayRate, DCGM 3.3.8 and later; the constant 8 of DcgmGPUHardwareLimits.h up to 3.3.7): a GPU's
# limit is ceil(its current generation's rate x its current width), a generation above 6 counted as 6; a replay
# rate above it is a PCIE health WARN.
PCIE_REPLAYS_PER_LANE = {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
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
    declare.ratio(
        "gpu_clock_event_share",
        0.5,
        "Share of the DCGM samples in dcgm-exporter's clock-events window that must carry a slowdown reason, for "
        "gpu_throttle_for, before GpuThermalSlowdown fires: the exporter counts samples, so a count above 0 is one "
        "sample in the window, not a sustained slowdown (docs/exporters.md, Clock events window).",
    ),
    declare.duration(
        "gpu_clock_events_window",
        "5m",
        "dcgm-exporter's --clock-events-count-window-size (default 300000 ms, its window_size_in_ms label): "
        "GpuThermalSlowdown reads the series of this window only.",
    ),
    declare.duration(
        "gpu_clock_events_sample_interval",
        "30s",
        "dcgm-exporter's --collect-interval (-c, default 30000 ms), how often DCGM samples the clock-event "
        "reasons: the window holds gpu_clock_events_window / this many samples.",
    ),
    *(
        declare.limit(
            f"gpu_pcie_gen{gen}_replays_per_minute_per_lane",
            per_lane,
            f"PCIe replays per minute per lane of a Gen{gen} link above which GpuPcieReplayRate warns; a GPU's "
            "limit is this times its current link width, rounded up (DCGM's value, DcgmHealthWatch.cpp "
            "GetExpectedPcieReplayRate: a bit error rate of 1e-12 at the generation's signalling rate).",
        )
        for gen, per_lane in PCIE_REPLAYS_PER_LANE.items()
    ),
    declare.limit(
        "gpu_pcie_replays_per_minute",
        31,
        "PCIe replays per minute per GPU above which GpuPcieReplayRate warns on a GPU whose CSV does not export its "
        "link generation and width: DCGM's limit for a Gen5 x16 link (ceil(1.92 x 16)); 16 for Gen4 x16 GPUs (A100).",
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
        "How long PCIe replay or NVLink error rates must stay above their limits, or a PCIe link below its "
        "maximum, before GpuPcieReplayRate, GpuNvlinkErrors or GpuPcieLinkDegraded fires.",
    ),
    declare.duration(
        "gpu_count_lookback",
        "1d",
        "A node reporting fewer GPUs than its maximum over this window has lost GPUs (GpuSeriesMissing); a GPU that "
        "reported Xid 79 within it and has not reported since keeps GpuFellOffBus firing.",
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
        "hpcobs-gpu-alerts-links": [
            *([_nvlink_errors(gpus), _pcie_link_degraded(gpus)] if nvidia else []),
            _pcie_replay_rate(gpus),
        ],
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
    def outlasting_its_record(self) -> str:
        """keep_firing_for of the pages for a GPU that node:gpus_unhealthy:count also counts (alerts/alertmanager.py
        UNHEALTHY_GPU_PAGES): SlurmNodeScheduledWithUnhealthyGpu reads that record, which lags the raw series by up to
        an evaluation (two rule groups, each on its own offset), and the page inhibits it: once the GPU is repaired
        the page keeps firing two evaluations, so the Slurm alert resolves first instead of notifying for a minute
        (the week benchmark: one message per repair)."""
        t = self.ctx.timeline
        return duration(2 * max(t.evaluation, t.step))

    @cached_property
    def where(self) -> str:
        """The GPU an alert names, in its description."""
        return f"GPU {label('gpu')} on {label('node')} (cluster {label(self.cluster)})"

    def on_gpu(self, jobs: str = NO_JOB, gpu: str = "1", **labels: str) -> Sample:
        """The hardware alert expected on GPU n1/`gpu`, with these further labels; `jobs` is what its jobs annotation
        reads (jobs_text)."""
        return Sample({**self.ctx.cluster_labels, "node": "n1", "gpu": gpu, **labels}, annotations={"jobs": jobs})

    def jobs_text(self, *jobs: str) -> str:
        """The jobs annotation of a GPU these jobs hold (as running() writes them): each with its owner where the
        job-info series is deployed."""
        owned = self.ctx.sources["job_info"].enabled
        owner = f" (user {JOB_OWNER['user']}, account {JOB_OWNER['account']})" if owned else ""
        return ", ".join(f"{job}{owner}" for job in sorted(jobs)) or NO_JOB

    def running(self, job: str, values: str) -> list[Series]:
        """What says that `job` holds GPU n1/1 while `values` (of 1s) has samples: dcgm-exporter's hpc_job on the GPU's
        series (utilisation, which gpu:job:info reads) and the prolog's job-info series."""
        return [
            gpu_utilization(self.ctx, values, node="n1", gpu="1", hpc_job=job),
            job_info(self.ctx, job, values),
        ]

    def across_jobs(
        self, name: str, signal: Callable[[str, dict[str, str]], Series], value: float = 1, **labels: str
    ) -> Case:
        """A sticky state (`signal` at `value`) set under job 7, kept while the epilog empties the GPU's mapping for a
        scrape and job 8 starts on it: one alert all along. It is firing at job 8's first evaluation, when an alert
        that resolved with the mapping would only be pending again; its jobs annotation names job 8."""
        t = self.ctx.timeline
        first = t.samples("5m")  # job 7's scrapes, the state raised from the first one on: firing before the change
        # Each mapping's scrapes: job 7's, then one with no job (the epilog ran), then job 8's; a series ends stale.
        mapping = {"7": (0, first, True), "": (first, 1, True), "8": (first + 1, t.samples("5m"), False)}
        return Case(
            f"{name}: one alert while the GPU's mapping goes from job 7 to none to job 8",
            at=duration(t.tick((first + 1) * t.step)),
            series=[
                *(signal(_span(value, *scrapes), {"hpc_job": job} if job else {}) for job, scrapes in mapping.items()),
                *(part for job in ("7", "8") for part in self.running(job, _span(1, *mapping[job]))),
            ],
            expect=[self.on_gpu(jobs=self.jobs_text("8"), **labels)],
        )

    def dcgm(self, signal: str, values: str, **labels: str) -> Series:
        """A dcgm-exporter series of GPU n1/1."""
        return dcgm(self.ctx, signal, values, node="n1", gpu="1", **labels)

    def labelled(self, signal: str) -> Callable[[str, dict[str, str]], Series]:
        """dcgm(signal, ...) taking its further labels as a dict (across_jobs' `signal`)."""
        return lambda values, labels: self.dcgm(signal, values, **labels)

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
        """A dcgm-exporter signal per GPU, the highest of its copies (one per job holding it; of those meeting
        `when`)."""
        return self.ctx.select("dcgm", [signal], (*GPU, *keep), over=over, where=where, when=when)

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
        return aggregate("sum", (self.cluster, *GPU), " or ".join(tagged))

    @cached_property
    def gpu_alert(self) -> partial[Alert]:
        """An alert about a GPU, a node or a job on it: its link opens the view of the one it is about (Alert.view)."""
        return alerts_of("gpu", DashboardUid.GPU_CLUSTER)

    @cached_property
    def hardware_alert(self) -> partial[Alert]:
        """An alert about a GPU's hardware: keyed by the GPU, the jobs on it read into its `jobs` annotation."""
        lookup = Lookup(JOBS_ON_GPU_TEMPLATE.format(c=self.cluster), ("gpu:job:info", "job:slurm_job_info:max"))
        return partial(self.gpu_alert, lookups={"jobs": lookup})


def _span(value: float, start: int, count: int, stale: bool) -> str:
    """promtool values: `count` samples of `value` from scrape `start`, then a staleness marker if `stale`."""
    return " ".join([*([f"_x{start}"] if start else []), f"{value:g}x{count - 1}", *(["stale"] if stale else [])])


def _fell_off_bus(gpus: _TestGpu) -> Alert:
    ctx = gpus.ctx
    fell_off_bus, lookback = ctx.sources["dcgm"].exporter.xids("fell_off_bus"), ctx.thresholds.gpu_count_lookback

    def xid_79_within(window: str) -> str:
        return ctx.xids_reported(fell_off_bus, keep=("err_code",), over=lambda raw: f"last_over_time({raw}[{window}])")

    # The Xid value is sticky, and dcgm-exporter drops the series of a GPU that fell off the bus a scrape after the
    # Xid (docs/exporters.md): Xid 79 seen within 5 minutes fires, and a GPU that reported it within
    # gpu_count_lookback and has not reported since stays firing, so GpuSeriesMissing (which counts the same GPUs over
    # the same lookback, and which this alert inhibits) never pages for the same fault. The selector names err_code
    # (xid for the count collector): the day's lookback reads only the series that carried 79, not every GPU's; the
    # GPUs reporting cost one instant sample each (1,030 samples, 18 ms, for the whole expression at 1,024 GPUs).
    still_gone = (
        f"{xid_79_within(lookback)} unless on ({ctx.cluster}, {', '.join(GPU)}) {gpus.per_gpu('gpu_temperature')}"
    )

    def xid79(gpu: str, values: str, **labels: str) -> Series:
        return dcgm(
            ctx, "xid", values, node="n1", gpu=gpu, err_code="79", err_msg="GPU has fallen off the bus", **labels
        )

    def temperature(gpu: str, values: str) -> Series:
        return gpu_si_series(ctx, "temperature", values, node="n1", gpu=gpu)

    still_firing, back_after_reboot = _gone_half_an_hour(gpus, xid79, temperature)
    return gpus.hardware_alert(
        "GpuFellOffBus",
        severity="critical",
        team=Team.GPU_OPS,
        expr=f"{xid_79_within('5m')} or ({still_gone})",
        for_=ctx.thresholds.gpu_fell_off_bus_for,
        keep_firing_for=gpus.outlasting_its_record,
        summary="A GPU has fallen off the bus.",
        description=f"{gpus.where} reported Xid 79 and stopped answering; drain the node and reboot it.",
        fired_by=("xid79",),
        **standard_cases(
            gpus.flag(ctx.thresholds.gpu_fell_off_bus_for),
            fault="Xid 79 on a GPU",
            fault_series=[xid79("3", "_ _ 79x10"), temperature("3", "60x12")],
            expect=[gpus.on_gpu(gpu="3", err_code="79")],
            healthy="healthy GPU",
            healthy_series=[dcgm(ctx, "xid", "0x20", node="n1", gpu="3"), temperature("3", "60x20")],
            pending="Xid 79 seen for less than the for: duration",
            pending_series=[xid79("3", "_ _ 79x10"), temperature("3", "60x12")],
            also_fires=[
                Case(
                    "Xid 79 then the GPU's series vanish",
                    at="4m",
                    series=[xid79("5", "79x3")],
                    expect=[gpus.on_gpu(gpu="5", err_code="79")],
                ),
                still_firing,
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
                back_after_reboot,
                Case(
                    "application-class Xid 13 is the job owner's problem",
                    at="10m",
                    series=[
                        dcgm(
                            ctx, "xid", "13x20", node="n1", gpu="3", err_code="13", err_msg="Graphics Engine Exception"
                        )
                    ],
                ),
            ],
        ),
    )


def _gone_half_an_hour(
    gpus: _TestGpu, xid79: Callable[[str, str], Series], temperature: Callable[[str, str], Series]
) -> tuple[Case, Case]:
    """GPU 5 reports Xid 79 for four scrapes, then nothing for half an hour; GPU 4 reports all along. Timed in scrapes
    (its last silent one) and from its return (keep_firing_for and two evaluations after), so they hold at any scrape
    and evaluation interval."""
    ctx, t = gpus.ctx, gpus.ctx.timeline
    scrape = t.step
    gone = duration_seconds("30m") // scrape
    back = (4 + gone) * scrape  # its first scrape after the reboot
    resolved = t.tick(back + duration_seconds(gpus.outlasting_its_record) + 2 * max(t.evaluation, scrape))
    after = (resolved - back) // scrape + 4
    fell, neighbour = xid79("5", "79x3"), temperature("4", f"60x{gone + 4 + after}")
    return (
        Case(
            "Xid 79, then the GPU's series vanish for 30 minutes: still one firing alert",
            at=duration((3 + gone) * scrape),
            series=[fell, temperature("5", "60x3"), neighbour],
            expect=[gpus.on_gpu(gpu="5", err_code="79")],
        ),
        Case(
            "the GPU returns after a reboot (its Xid cleared) after half an hour gone, keep_firing_for ago",
            at=duration(resolved),
            series=[
                fell,
                temperature("5", f"60x3 _x{gone} 60x{after}"),
                dcgm(ctx, "xid", f"_x{gone + 4} 0x{after}", node="n1", gpu="5"),
                neighbour,
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
    return gpus.hardware_alert(
        "GpuXidDrainClass",
        severity="critical",
        team=Team.GPU_OPS,
        expr=ctx.xids_reported(drain, keep=("err_code",)),
        for_=FLAG_FOR,
        keep_firing_for=gpus.outlasting_its_record,
        summary="A GPU reported an Xid error that needs a GPU reset or a node drain.",
        description=f"{gpus.where} reported Xid {label('err_code')}, a drain-class error: drain the node, "
        "reset the GPU or reboot, and run dcgmi diag before resuming it.",
        fired_by=("xid48", "dbe", "row_remap_failure", "xid_overwritten"),
        **standard_cases(
            gpus.flag(),
            fault="Xid 48 (double-bit ECC) on a GPU running a job",
            fault_series=[xid(48, "_ _ 48x10", hpc_job="7"), *gpus.running("7", "1x12")],
            expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"), err_code="48")],
            healthy="healthy GPU: no Xid since the driver loaded",
            healthy_series=[xid(0, "0x10")],
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
                    series=[xid(45, "45x10"), gpus.xid_count(48, "1x10"), gpus.xid_count(45, "1x10")],
                    expect=[gpus.on_gpu(err_code="48")],
                ),
                Case(
                    "Xid 48 as the last value and counted twice in the window: one alert, by the last value",
                    at="5m",
                    series=[xid(48, "48x10"), gpus.xid_count(48, "2x10")],
                    expect=[gpus.on_gpu(err_code="48")],
                ),
                gpus.across_jobs("Xid 48", lambda values, job: xid(48, values, **job), 48, err_code="48"),
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
    # The job is remembered over XID_JOB_LOOKBACK: the epilog of a job its Xid killed empties the mapping seconds later.
    app_now = ctx.gpu(
        "xid",
        keep=(*JOB, "err_code"),
        where={"err_code": one_of(application), "hpc_job": '!=""'},
        over=lambda raw: f"last_over_time({raw}[{XID_JOB_LOOKBACK}])",
    )
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
            expect=[alert(**ctx.cluster_labels, node="n1", gpu="1", hpc_job="7", err_code="13")],
            healthy="healthy GPU",
            healthy_series=[xid(0, "0x10", hpc_job="7")],
            pending="Xid 13 seen for less than the for: duration",
            also_fires=[
                timing(ctx, FLAG_FOR, 1, settle=90).fires(
                    "Xid 31 (page fault) in a job that just started",
                    [xid(31, "_ 31x10", hpc_job="8")],
                    [alert(**ctx.cluster_labels, node="n1", gpu="1", hpc_job="8", err_code="31")],
                ),
                _killed_by_its_xid(gpus),
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


def _killed_by_its_xid(gpus: _TestGpu) -> Case:
    """Job 7 hits Xid 13 and dies of it: the epilog empties the GPU's mapping 30 s later, the sticky code stays on the
    GPU without a job. The alert still names job 7, once `for` has elapsed after the Xid."""
    ctx, t = gpus.ctx, gpus.ctx.timeline
    onset, under_job = 1, t.samples("30s")
    return Case(
        "job killed by its own Xid 13, mapping cleared 30 s later",
        at=duration(t.tick(t.tick(onset * t.step) + duration_seconds(FLAG_FOR))),
        series=[
            gpus.xid(13, _span(13, onset, under_job, True), hpc_job="7"),
            gpus.xid(13, _span(13, onset + under_job, t.samples("10m"), False)),
        ],
        expect=[alert(**ctx.cluster_labels, node="n1", gpu="1", hpc_job="7", err_code="13")],
    )


def _xid_warning_class(gpus: _TestGpu) -> Alert:
    ctx, xid = gpus.ctx, gpus.xid
    return gpus.hardware_alert(
        "GpuXidWarningClass",
        severity="info",
        team=Team.GPU_OPS,
        expr=ctx.gpu(
            "xid", keep=("err_code",), where={"err_code": one_of(ctx.sources["dcgm"].exporter.xids("warning"))}
        ),
        for_=FLAG_FOR,
        summary="A GPU reported an Xid error that asks for a GPU reset at the next opportunity.",
        description=f"{gpus.where} reported Xid {label('err_code')} (memory remapping event, high single-bit "
        "ECC rate or contained memory error): reset the GPU when its job ends.",
        fired_by=("row_remap_pending",),
        **standard_cases(
            gpus.flag(),
            fault="Xid 94 (contained ECC error)",
            fault_series=[xid(94, "_ _ 94x10")],
            expect=[gpus.on_gpu(err_code="94")],
            healthy="healthy GPU",
            healthy_series=[xid(0, "0x10")],
            pending="Xid 63 seen for less than the for: duration",
            pending_series=[xid(63, "_ _ 63x10")],
            also_fires=[gpus.across_jobs("Xid 63", lambda values, job: xid(63, values, **job), 63, err_code="63")],
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
    unhealthy: bool = False  # node:gpus_unhealthy:count counts the GPU (_TestGpu.outlasting_its_record)


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
        unhealthy=True,
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
        gpus.hardware_alert(
            flag.alert,
            severity=flag.severity,
            team=Team.GPU_OPS,
            expr=gpus.per_gpu(flag.signal, when=ABOVE_ZERO),
            for_=FLAG_FOR,
            keep_firing_for=gpus.outlasting_its_record if flag.unhealthy else None,
            summary=flag.summary,
            description=f"{gpus.where} {flag.problem}",
            fired_by=flag.fired_by,
            **standard_cases(
                gpus.flag(),
                fault=flag.fault,
                fault_series=[gpus.dcgm(flag.signal, "0 0 1x10")],
                expect=[gpus.on_gpu()],
                healthy="healthy GPU",
                healthy_series=[gpus.dcgm(flag.signal, "0x10")],
                pending=flag.pending,
                also_fires=[gpus.across_jobs(flag.fault, gpus.labelled(flag.signal))],
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
    thresholds = gpus.ctx.thresholds
    throttle_for, share, window = (
        thresholds.gpu_throttle_for,
        thresholds.gpu_clock_event_share,
        thresholds.gpu_clock_events_window,
    )
    # dcgm-exporter counts the DCGM samples of the window that carry each reason (docs/exporters.md, Clock events
    # window): a sustained slowdown is one in at least `share` of them, for `throttle_for`.
    samples = duration_seconds(window) // duration_seconds(thresholds.gpu_clock_events_sample_interval)
    least = share * samples
    window_ms = str(duration_seconds(window) * 1000)
    hot = _hot(gpus)
    t = gpus.ctx.timeline

    def clock_events(values: str, event: str) -> Series:
        return gpus.dcgm("clock_events", values, clock_event=event, window_size_in_ms=window_ms)

    def counted(count: int) -> str:
        return f"{count}x{hot.samples}"

    # A burst of slowdown as long as it can be while staying under the share: the exporter's count of it rises while
    # its samples enter the window, and the reason has no series once they have left it (none is written for a reason
    # not counted). `> 0 for` the window's length would fire on it.
    every = duration_seconds(thresholds.gpu_clock_events_sample_interval)
    burst = (math.ceil(least) - 1) * every

    def in_window(at: int) -> int:
        """The burst's DCGM samples (every `every` seconds from 0) in the exporter's window at `at`."""
        return sum(1 for sample in range(0, burst, every) if at - duration_seconds(window) < sample <= at)

    counts = [in_window(i * t.step) for i in range(hot.samples)]
    burst_values = " ".join(str(c) if c else ("stale" if i and counts[i - 1] else "_") for i, c in enumerate(counts))
    return gpus.hardware_alert(
        "GpuThermalSlowdown",
        severity="warning",
        team=Team.GPU_OPS,
        expr=gpus.per_gpu(
            "clock_events",
            "clock_event",
            where={"clock_event": one_of(THROTTLE_EVENTS), "window_size_in_ms": "=" + promql_string(window_ms)},
            when=(">=", least),
        ),
        for_=throttle_for,
        summary="A GPU is clocked down by a hardware, thermal or power-brake slowdown.",
        description=f"{gpus.where} has been slowed down by {label('clock_event')} in at least {share:.0%} of "
        f"DCGM's samples over {window}, for {throttle_for}: check its cooling (fans, airflow, inlet temperature) "
        "or the node's power supply; the whole job runs at this GPU's pace.",
        fired_by=("thermal",),
        **standard_cases(
            hot,
            fault=f"HW slowdown in {math.ceil(least)} of the window's {samples} samples",
            fault_series=[clock_events(counted(math.ceil(least)), "hw_slowdown")],
            expect=[gpus.on_gpu(clock_event="hw_slowdown")],
            healthy="an idle GPU reports the gpu_idle reason, which is no slowdown",
            healthy_series=[clock_events(counted(samples), "gpu_idle")],
            pending="slowdown for less than the for: duration",
            also_silent=[
                hot.silent(
                    f"HW slowdown in {math.ceil(least) - 1} of the window's {samples} samples, all along",
                    [clock_events(counted(math.ceil(least) - 1), "hw_slowdown")],
                ),
                Case(
                    f"a {duration(burst)} burst of HW thermal slowdown, counted for as long as the exporter's window",
                    at=duration(t.tick(duration_seconds(throttle_for))),
                    series=[clock_events(burst_values, "hw_thermal")],
                ),
            ],
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

    return gpus.hardware_alert(
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
            fault="throttled just over the threshold's share of the time",
            fault_series=[violation_counter(1.1 * violation)],
            expect=[gpus.on_gpu()],
            healthy="healthy GPU: the counter does not move",
            healthy_series=[gpus.dcgm("thermal_violation", t.held(5, lasting))],
            pending="throttled for less than the for: duration",
            also_fires=[
                throttled.fires(
                    "throttled 10% more than the threshold", [violation_counter(1.1 * violation)], [gpus.on_gpu()]
                )
            ],
            also_silent=[throttled.silent("throttled just under the threshold", [violation_counter(0.8 * violation)])],
        ),
    )


def _temperature_high(gpus: _TestGpu) -> Alert:
    thresholds = gpus.ctx.thresholds
    throttle_for, fixed, margin = (
        thresholds.gpu_throttle_for,
        thresholds.gpu_temperature_celsius,
        thresholds.gpu_temperature_margin_celsius,
    )
    temperature = gpus.ctx.sources["dcgm"].exporter.signals_for("temperature")
    hot = _hot(gpus)
    gpu_max = H100_GPU_MAX_OPERATING_CELSIUS
    limit = gpu_max - margin

    def reading(celsius: float, own_limit: float | None = gpu_max, **labels: str) -> list[Series]:
        """The GPU's temperature and, unless None, the maximum operating temperature it reports."""
        limits = [] if own_limit is None else [gpus.dcgm("gpu_max_op_temperature", f"{own_limit}x40")]
        return [gpus.dcgm("gpu_temperature", f"{celsius}x40", **labels), *limits]

    # It inhibits the throttling it causes (alerts/alertmanager.py), whose alerts read windows of the past (the
    # clock events' count, the violation time's rate): it keeps firing for the longer of them once the GPU has
    # cooled, or their tail would notify for a fault already explained (the week benchmark: 2 to 3 minutes).
    keep = duration(max(duration_seconds(thresholds.gpu_clock_events_window), duration_seconds(gpus.ctx.rate_window)))
    cooled = _cooled(gpus, limit + 0.1 * margin, hot, duration_seconds(keep))

    return gpus.hardware_alert(
        "GpuTemperatureHigh",
        severity="warning",
        team=Team.GPU_OPS,
        expr=over_own_limit(gpus.ctx, temperature, "gpu_max_op_temperature", margin, gpu=GPU, keep=(), fallback=fixed),
        for_=throttle_for,
        keep_firing_for=keep,
        summary="A GPU runs close to its maximum operating temperature.",
        description=f"{gpus.where} has been within {margin} C of its maximum operating temperature (above {fixed} C "
        f"where that limit is not collected) for {throttle_for}: the driver slows it down above that limit; check "
        "fans, airflow and the rack's inlet temperature.",
        fired_by=("thermal",),
        **standard_cases(
            hot,
            fault=f"GPU at {limit + 0.1 * margin:g} C, its limit {gpu_max} C",
            fault_series=reading(limit + 0.1 * margin),
            expect=[gpus.on_gpu()],
            healthy="busy GPU at 72 C",
            healthy_series=reading(72),
            pending="hot for less than the for: duration",
            also_fires=[
                hot.fires(
                    f"a model whose limit ({fixed - margin} C) is under the fixed value: {fixed - 1} C is too hot",
                    reading(fixed - 1, own_limit=fixed - margin),
                    [gpus.on_gpu()],
                ),
                hot.fires(
                    f"the GPU's limit is not collected: {fixed + 1} C is above the fixed {fixed} C",
                    reading(fixed + 1, own_limit=None),
                    [gpus.on_gpu()],
                ),
                cooled.still_firing,
            ],
            also_silent=[
                hot.silent(f"exactly {margin} C under the GPU's limit", reading(limit)),
                hot.silent(f"the GPU's limit is not collected: exactly {fixed} C", reading(fixed, own_limit=None)),
                cooled.resolved,
            ],
        ),
    )


@dataclass(frozen=True)
class _Cooled:
    still_firing: Case
    resolved: Case


def _cooled(gpus: _TestGpu, celsius: float, hot: Timing, keep: int) -> _Cooled:
    """A GPU hot until its alert has fired, then back at 72 C: still firing half `keep` after it cooled, resolved
    once `keep` and two evaluations have passed."""
    t = gpus.ctx.timeline
    hot_samples = t.samples(hot.firing_seconds)
    cool_at = (hot_samples + 1) * t.step  # the first sample at 72 C
    after = keep + 2 * max(t.evaluation, t.step)
    series = [
        gpus.dcgm("gpu_temperature", f"{celsius:g}x{hot_samples} {t.held(72, 2 * after)}"),
        gpus.dcgm("gpu_max_op_temperature", t.held(H100_GPU_MAX_OPERATING_CELSIUS, cool_at + 2 * after)),
    ]
    return _Cooled(
        Case(
            "cooled down less than keep_firing_for ago: still firing (it outlasts the throttling it inhibits)",
            at=duration(t.tick(cool_at + keep // 2)),
            series=series,
            expect=[gpus.on_gpu()],
        ),
        Case("cooled down longer than keep_firing_for ago", at=duration(t.tick(cool_at + after)), series=series),
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

    return gpus.hardware_alert(
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
            fault=f"NVLink replays at {1.1 * replays:g}/min, just over the limit",
            fault_series=[errors("nvlink_replay_errors", 1.1 * replays / 60), errors("nvlink_crc_flit_errors", 0)],
            expect=[gpus.on_gpu()],
            healthy="healthy links",
            healthy_series=[errors(signal, 0) for signal in NVLINK_CRC + NVLINK_REPLAY],
            pending="replay errors for less than the for: duration",
            also_fires=[
                counting.fires(
                    f"CRC errors at {1.1 * crc:g}/s, flit and data together",
                    [errors("nvlink_crc_flit_errors", 0.9 * crc), errors("nvlink_crc_data_errors", 0.2 * crc)],
                    [gpus.on_gpu()],
                ),
            ],
            also_silent=[
                counting.silent(
                    f"CRC errors at {0.9 * crc:g}/s and replays at {0.8 * replays:g}/min: under DCGM's limits",
                    [errors("nvlink_crc_flit_errors", 0.9 * crc), errors("nvlink_replay_errors", 0.8 * replays / 60)],
                )
            ],
        ),
    )


def _health_fail(gpus: _TestGpu) -> Alert:
    def health(values: str, watch: str, code: str, **labels: str) -> Series:
        return gpus.dcgm("health_status", values, health_watch=watch, health_error_code=code, **labels)

    dbe = "DCGM_FR_VOLATILE_DBE_DETECTED"
    return gpus.hardware_alert(
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
            fault_series=[health("0 0 20x10", "MEM", dbe)],
            expect=[gpus.on_gpu(health_watch="MEM", health_error_code=dbe)],
            healthy="every watch passes",
            healthy_series=[health("0x10", watch, "DCGM_FR_OK") for watch in ("MEM", "PCIE", "NVLINK")],
            pending="FAIL for less than the for: duration",
            also_fires=[
                gpus.across_jobs(
                    "MEM watch FAIL",
                    lambda values, job: health(values, "MEM", dbe, **job),
                    HEALTH_FAIL,
                    health_watch="MEM",
                    health_error_code=dbe,
                )
            ],
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

    return gpus.hardware_alert(
        "GpuUncorrectableEcc",
        severity="critical",
        team=Team.GPU_OPS,
        expr=ctx.gpu("ecc_uncorrectable", over=lambda e: f"increase({e}[{ECC_WINDOW}])", when=ABOVE_ZERO),
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
                series=[
                    ecc(f"{t.held(0, '5m')} {t.held(1, '10m')}", hpc_job="7"),
                    *gpus.running("7", t.held(1, "15m")),
                ],
                expect=[gpus.on_gpu(jobs=gpus.jobs_text("7"))],
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


def _pcie_link(gpus: _TestGpu, signal: str, when: tuple[str, float] | None = None) -> str:
    """A PCIe link field of each GPU (dcgm-exporter; optional, not in the shipped CSV)."""
    return gpus.ctx.select("dcgm", [signal], GPU, when=when)


def _pcie_replay_limit(gpus: _TestGpu) -> str:
    """Each GPU's PCIe replay limit per minute as DCGM computes it (PCIE_REPLAYS_PER_LANE): the per-lane rate of its
    current link generation times its current width, rounded up; only GPUs whose CSV exports both fields have one."""
    last = max(PCIE_REPLAYS_PER_LANE)

    def at_gen(gen: int) -> str:
        """The GPUs whose link runs at this generation (or above the last DCGM knows), valued its per-lane rate."""
        running = _pcie_link(gpus, "pcie_link_gen", (">=" if gen == last else "==", gen))
        return f"{running} * 0 + {_replays_per_lane(gpus, gen)}"

    per_lane = " or ".join(at_gen(gen) for gen in PCIE_REPLAYS_PER_LANE)
    return f"ceil(({per_lane}) * on ({gpus.cluster}, node, gpu) {_pcie_link(gpus, 'pcie_link_width')})"


def _replays_per_lane(gpus: _TestGpu, gen: int) -> float:
    return getattr(gpus.ctx.thresholds, f"gpu_pcie_gen{gen}_replays_per_minute_per_lane")


def _pcie_replay_rate(gpus: _TestGpu) -> Alert:
    ctx, thresholds = gpus.ctx, gpus.ctx.thresholds
    link_for, fallback = thresholds.gpu_link_errors_for, thresholds.gpu_pcie_replays_per_minute
    counting = counter_timing(ctx, link_for)
    t, lasting = ctx.timeline, counting.lasting
    nvidia = ctx.sources["dcgm"].enabled
    # Only GPUs that replay at all are compared, which keeps the evaluation small on a healthy fleet.
    replays = ctx.gpu("pcie_replay", over=lambda e: f"{gpus.rate(e)} * 60", when=ABOVE_ZERO)
    on_gpu = f"on ({gpus.cluster}, node, gpu)"
    if nvidia:
        limit = _pcie_replay_limit(gpus)
        expr = f"({replays} > {on_gpu} {limit}) or (({replays} unless {on_gpu} {limit}) > {fallback})"
    else:
        expr = f"{replays} > {fallback}"

    def replay(per_minute: float) -> Series:
        return gpu_si_series(ctx, "pcie_replay", t.rising(per_minute / 60, lasting), node="n1", gpu="1")

    def link(gen: int, width: int) -> list[Series]:
        return [gpus.dcgm("pcie_link_gen", t.held(gen, lasting)), gpus.dcgm("pcie_link_width", t.held(width, lasting))]

    def on_link(gen: int) -> list[Case]:
        """At 10% above and under DCGM's limit of a Gen `gen` link: x16, or x32 where rounding the limit up would
        hide a quarter more of the per-lane rate."""
        per_lane = _replays_per_lane(gpus, gen)
        width = next(w for w in (16, 32) if math.ceil(1.25 * per_lane * w) > math.ceil(per_lane * w))
        limit = math.ceil(per_lane * width)
        return [
            counting.fires(
                f"a Gen{gen} x{width} link replaying 10% above its limit of {limit}/min",
                [replay(1.1 * limit), *link(gen, width)],
                [gpus.on_gpu()],
            ),
            counting.silent(
                f"a Gen{gen} x{width} link replaying 10% under its limit of {limit}/min",
                [replay(0.9 * limit), *link(gen, width)],
            ),
        ]

    by_link = [case for gen in PCIE_REPLAYS_PER_LANE for case in on_link(gen)] if nvidia else []
    return gpus.hardware_alert(
        "GpuPcieReplayRate",
        severity="warning",
        team=Team.GPU_OPS,
        expr=expr,
        for_=link_for,
        summary="A GPU's PCIe link retries transfers more often than DCGM's health check allows.",
        description=f"{gpus.where} has replayed more PCIe transfers a minute than DCGM's limit for its link "
        f"generation and width ({fallback}/min where the link fields are not collected) for {link_for}: the link "
        "is degrading (riser, slot, cable or retimer); host-device transfers slow down. Drain the node, reseat the "
        "GPU and check nvidia-smi -q -d PCIE.",
        fired_by=_simulated(gpus, "pcie_replay_storm"),
        **standard_cases(
            counting,
            fault=f"no link fields collected: replays 10% above the fallback limit of {fallback}/min",
            fault_series=[replay(1.1 * fallback)],
            expect=[gpus.on_gpu()],
            healthy="healthy link: a few replays since boot, none now",
            healthy_series=[gpu_si_series(ctx, "pcie_replay", t.held(3, lasting), node="n1", gpu="1")],
            pending="a storm shorter than the for: duration",
            also_fires=by_link[::2],
            also_silent=[
                counting.silent(f"no link fields: replays 10% under {fallback}/min", [replay(0.9 * fallback)]),
                *by_link[1::2],
            ],
        ),
    )


def _pcie_link_degraded(gpus: _TestGpu) -> Alert:
    """A link below the GPU's maximum generation or width while the GPU works: an idle GPU may lower both to save
    power (nvidia-smi --help-query-gpu, pcie.link.gen.gpucurrent and pcie.link.width.current: "These may be reduced
    when the GPU is not in use")."""
    ctx = gpus.ctx
    link_for = ctx.thresholds.gpu_link_errors_for
    on_gpu = f"on ({gpus.cluster}, node, gpu)"

    def below(current: str, maximum: str, name: str) -> str:
        return label_replace(
            f"{_pcie_link(gpus, current)} < {on_gpu} {_pcie_link(gpus, maximum)}", "link", "", "", name
        )

    when = timing(ctx, link_for, 0, settle=180)
    samples = when.samples

    def link(gen: int, width: int, utilization: float = 0.9) -> list[Series]:
        return [
            gpus.dcgm("pcie_link_gen", f"{gen}x{samples}"),
            gpus.dcgm("pcie_max_link_gen", f"5x{samples}"),
            gpus.dcgm("pcie_link_width", f"{width}x{samples}"),
            gpus.dcgm("pcie_max_link_width", f"16x{samples}"),
            gpu_utilization(ctx, f"{utilization}x{samples}", node="n1", gpu="1"),
        ]

    return gpus.hardware_alert(
        "GpuPcieLinkDegraded",
        severity="warning",
        team=Team.GPU_OPS,
        expr=f"({below('pcie_link_width', 'pcie_max_link_width', 'width')} or "
        f"{below('pcie_link_gen', 'pcie_max_link_gen', 'generation')}) and {on_gpu} gpu:utilization:ratio > 0",
        for_=link_for,
        summary="A GPU's PCIe link runs below its maximum generation or width.",
        description=f"The PCIe link of {gpus.where} runs at a lower {label('link')} than the GPU supports for "
        f"{link_for}: host-device transfers (data loading, checkpoints, GPUDirect RDMA) run slower; reseat the GPU "
        "or its riser at the next drain and compare nvidia-smi -q -d PCIE with the slot's specification.",
        fired_by=_simulated(gpus, "pcie_link_degraded"),
        **standard_cases(
            when,
            fault="an x16 link trained at x8",
            fault_series=link(5, 8),
            expect=[gpus.on_gpu(link="width")],
            healthy="a busy GPU on a Gen5 x16 link",
            healthy_series=link(5, 16),
            pending="at x8 for less than the for: duration",
            also_fires=[when.fires("a busy GPU at Gen4 of Gen5", link(4, 16), [gpus.on_gpu(link="generation")])],
            also_silent=[when.silent("an idle GPU whose link dropped to Gen1 x8 to save power", link(1, 8, 0))],
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

    return gpus.gpu_alert(
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
    return gpus.gpu_alert(
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

    return gpus.hardware_alert(
        "GpuAmdUnhealthy",
        severity="critical",
        team=Team.GPU_OPS,
        expr=gpus.ctx.select("amd", ["health"], GPU, when=("==", 0)),
        for_=FLAG_FOR,
        keep_firing_for=gpus.outlasting_its_record,
        summary="The AMD Device Metrics Exporter reports a GPU as unhealthy.",
        description=f"{gpus.where} is reported unhealthy (gpu_health 0): drain the node, check amd-smi and the "
        "kernel log (amdgpu RAS events), run AGFHC or rvs before resuming it.",
        **standard_cases(
            gpus.flag(),
            fault="GPU unhealthy",
            fault_series=[health("1 1 0x10")],
            expect=[gpus.on_gpu()],
            healthy="healthy GPU",
            healthy_series=[health("1x10")],
            pending="unhealthy for less than the for: duration",
            pending_series=[health("1 1 0x10")],
        ),
    )
