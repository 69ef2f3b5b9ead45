"""GPU health alerts (DESIGN.md §10). Xid classes: shared/reference/gpu-exporters.md §2.2.

Per-GPU health conditions read the raw signal of one GPU through ctx.gpu / ctx.select (one series per GPU,
filtered); idleness and GPU counts read the recorded series of recording_rules/gpu.py and jobs.py.
Optional dcgm-exporter fields (ECC, NVLink errors, clock events, health) that a site's CSV does not
collect simply produce no series: those alerts stay silent, they never fire on absence.
Runbooks: docs/runbooks/gpu.md, one section per alert.
"""
from functools import partial

from hpcobs.context import Context
from hpcobs.promql import aggregate, duration, duration_seconds, label_replace, one_of
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, Series, alert
from hpcobs.synthetic import dcgm, gpu_si_series, gpu_utilization, series

GPU = ("node", "gpu")
JOB = ("hpc_job",)
DASHBOARD = "hpcobs-gpu-cluster"
# An application-class Xid is news for the job on the GPU only if the GPU did not already carry that
# (sticky) code this long ago: otherwise the previous job's error would be blamed on the next one.
XID_NEW_WINDOW = "15m"
# Uncorrectable ECC errors are counted over this window (the node record node:gpus_ecc_uncorrectable:count
# uses the same hour).
ECC_WINDOW = "1h"
# Clock-event reasons that cut a GPU's clocks for thermal or power-delivery reasons (not gpu_idle,
# clocks_setting or the power cap the admin chose).
THROTTLE_EVENTS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
# DCGM health result values (dcgm_structs.h DCGM_HEALTH_RESULT_*; gpu-exporters.md §2.10).
HEALTH_FAIL = 20
NVLINK_CRC = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors")
NVLINK_REPLAY = ("nvlink_replay_errors", "nvlink_recovery_errors")


def gpu_series(ctx: Context, canonical: str, values: str, *, node: str = "n1", gpu: str = "1",
               hpc_job: str | None = None) -> Series:
    """A raw series of a canonical quantity from the first enabled GPU exporter (dcgm, else AMD)."""
    vendor = "dcgm" if ctx.sources["dcgm"].enabled else "amd"
    (signal, *_) = ctx.sources[vendor].exporter.signals_for(canonical)
    if vendor == "dcgm":
        return dcgm(ctx, signal, values, node=node, gpu=gpu, hpc_job=hpc_job)
    return series(ctx, "amd", signal, values, node=node, gpu=gpu, **({"hpc_job": hpc_job} if hpc_job else {}))


def groups(ctx: Context) -> list[Group]:
    rules = (_nvidia(ctx) if ctx.sources["dcgm"].enabled else []) + _any_vendor(ctx) \
        + (_amd(ctx) if ctx.sources["amd"].enabled else [])
    return [Group("hpcobs-gpu-alerts", domain="gpu", interval=ctx.scrape_interval, rules=rules)]


def _nvidia(ctx: Context) -> list[Alert]:
    """Alerts on dcgm-exporter fields (Xid, row remapping, clock events, NVLink, DCGM health)."""
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    w = ctx.rate_window
    xids = ctx.sources["dcgm"].exporter
    (fell_off_bus,) = xids.xids("fell_off_bus")
    drain = [x for x in xids.xids("drain") if x != fell_off_bus]        # Xid 79 is GpuFellOffBus's
    application = xids.xids("application")
    warning = xids.xids("warning")
    where_gpu = f"GPU {label('gpu')} on {label('node')} (cluster {label(c)}, job {label('hpc_job')})"
    common = dict(runbook="gpu", dashboard=DASHBOARD, dashboard_vars=(c, "node", "gpu"))
    throttle_for = th["gpu_throttle_for"]
    link_for = th["gpu_link_errors_for"]

    def on_gpu(**labels):
        return {**cl, "node": "n1", "gpu": "1", **labels}

    def xid(code, values, **kw):
        return dcgm(ctx, "xid", values, node="n1", gpu="1", err_code=str(code), err_msg="msg", **kw)

    def per_gpu(signal, *keep, over=None, where=None, op="max"):
        return ctx.select("dcgm", [signal], (*GPU, *JOB, *keep), over=over, where=where, op=op)

    def rate(expr):
        return f"rate({expr}[{w}])"

    def summed(signals, over):
        """Sum of several optional counters of a GPU: each branch tagged so `or` keeps them all."""
        tagged = [label_replace(per_gpu(s, over=over), "counter", "", "", s) for s in signals]
        return aggregate("sum", (c, *GPU, *JOB), " or ".join(tagged))

    # The Xid value is sticky and the GPU's series may vanish right after Xid 79: look back over a
    # window so the alert survives the series going stale.
    last_xid = ctx.gpu("xid", keep=JOB, over=lambda raw: f"last_over_time({raw}[5m])")
    app_now = ctx.gpu("xid", keep=(*JOB, "err_code"), where={"err_code": one_of(application), "hpc_job": '!=""'})
    app_before = ctx.gpu("xid", keep=("err_code",), where={"err_code": one_of(application)},
                         over=lambda raw: f"{raw} offset {XID_NEW_WINDOW}")

    throttle_s = duration_seconds(throttle_for)
    link_s = duration_seconds(link_for)

    return [
        Alert(
            "GpuFellOffBus", severity="critical", team="gpu-ops",
            expr=f"({last_xid}) == {fell_off_bus}",
            for_=th["gpu_fell_off_bus_for"],
            summary="A GPU has fallen off the bus.",
            description="GPU {{ $labels.gpu }} on {{ $labels.node }} (cluster {{ $labels.%s }}, job {{ $labels.hpc_job }}) "
                        "reported Xid 79 and stopped answering; drain the node and reboot it." % c,
            fired_by=("xid79",), **common,
            fires_on=[
                Case("Xid 79 on a GPU running a job", at="5m",
                     series=[dcgm(ctx, "xid", "0 0 79x10", node="n1", gpu="3", hpc_job="4242", err_code="79",
                                  err_msg="GPU has fallen off the bus")],
                     expect=[alert(**cl, node="n1", gpu="3", hpc_job="4242")]),
                Case("Xid 79 then the GPU's series vanish", at="4m",
                     series=[dcgm(ctx, "xid", "79x3", node="n1", gpu="5", err_code="79",
                                  err_msg="GPU has fallen off the bus")],
                     expect=[alert(**cl, node="n1", gpu="5")]),
            ],
            silent_on=[
                Case("healthy GPU", at="10m", series=[dcgm(ctx, "xid", "0x20", node="n1", gpu="3")]),
                Case("application-class Xid 13 is the job owner's problem", at="10m",
                     series=[dcgm(ctx, "xid", "13x20", node="n1", gpu="3", err_code="13",
                                  err_msg="Graphics Engine Exception")]),
                Case("Xid 79 seen for less than the for: duration", at="1m30s",
                     series=[dcgm(ctx, "xid", "0 0 79x10", node="n1", gpu="3", err_code="79",
                                  err_msg="GPU has fallen off the bus")]),
            ],
        ),
        Alert(
            "GpuXidDrainClass", severity="critical", team="gpu-ops",
            expr=ctx.gpu("xid", keep=(*JOB, "err_code"), where={"err_code": one_of(drain)}),
            for_="1m",
            summary="A GPU reported an Xid error that needs a GPU reset or a node drain.",
            description=f"{where_gpu} reported Xid {label('err_code')}, a drain-class error: drain the node, "
                        "reset the GPU or reboot, and run dcgmi diag before resuming it.",
            fired_by=("xid48", "dbe", "row_remap_failure"), **common,
            fires_on=[Case("Xid 48 (double-bit ECC) on a GPU running a job", at="5m",
                           series=[xid(48, "_ _ 48x10", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7", err_code="48"))]),
                      Case("Xid 119 (GSP timeout) on a free GPU", at="5m", series=[xid(119, "119x10")],
                           expect=[alert(**on_gpu(err_code="119"))])],
            silent_on=[Case("healthy GPU: no Xid since the driver loaded", at="5m", series=[xid(0, "0x10", hpc_job="7")]),
                       Case("Xid 79 is GpuFellOffBus's alert", at="5m", series=[xid(79, "79x10")]),
                       Case("application-class Xid 13", at="5m", series=[xid(13, "13x10", hpc_job="7")]),
                       Case("Xid 48 seen for less than the for: duration", at="1m30s",
                            series=[xid(48, "_ _ 48x10", hpc_job="7")])],
        ),
        Alert(
            "GpuXidApplicationClass", severity="warning", team="job-owner",
            expr=f"{app_now} unless on ({c}, node, gpu, err_code) {app_before}",
            for_="1m",
            summary="A job hit an application-class Xid error on its GPU.",
            description=f"Job {label('hpc_job')} hit Xid {label('err_code')} on GPU {label('gpu')} of {label('node')} "
                        f"(cluster {label(c)}): an error raised by the job's own code (illegal memory access, "
                        "page fault, aborted kernel), not a GPU fault; check the job's output and fix or "
                        "resubmit it.",
            fired_by=("xid13",), **common,
            fires_on=[Case("Xid 13 in a running job", at="5m", series=[xid(13, "_x4 13x10", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7", err_code="13"))]),
                      Case("Xid 31 (page fault) in a job that just started", at="3m",
                           series=[xid(31, "_ 31x10", hpc_job="8")],
                           expect=[alert(**on_gpu(hpc_job="8", err_code="31"))])],
            silent_on=[Case("healthy GPU", at="5m", series=[xid(0, "0x10", hpc_job="7")]),
                       Case("a drain-class Xid goes to gpu-ops", at="5m", series=[xid(48, "48x10", hpc_job="7")]),
                       Case("no job on the GPU: nobody to tell", at="5m", series=[xid(13, "13x10")]),
                       Case("the previous job's sticky Xid 13 is not blamed on the next job", at="35m",
                            series=[xid(13, "13x40", hpc_job="7"), xid(13, "_x40 13x20"),
                                    xid(13, "_x60 13x20", hpc_job="8")]),
                       Case("Xid 13 seen for less than the for: duration", at="2m30s",
                            series=[xid(13, "_x4 13x10", hpc_job="7")])],
        ),
        Alert(
            "GpuXidWarningClass", severity="info", team="gpu-ops",
            expr=ctx.gpu("xid", keep=(*JOB, "err_code"), where={"err_code": one_of(warning)}),
            for_="1m",
            summary="A GPU reported an Xid error that asks for a GPU reset at the next opportunity.",
            description=f"{where_gpu} reported Xid {label('err_code')} (memory remapping event, high single-bit "
                        "ECC rate or contained memory error): reset the GPU when its job ends.",
            fired_by=("row_remap_pending",), **common,
            fires_on=[Case("Xid 94 (contained ECC error)", at="5m", series=[xid(94, "_ _ 94x10", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7", err_code="94"))])],
            silent_on=[Case("healthy GPU", at="5m", series=[xid(0, "0x10", hpc_job="7")]),
                       Case("application-class Xid 13", at="5m", series=[xid(13, "13x10", hpc_job="7")]),
                       Case("Xid 63 seen for less than the for: duration", at="1m30s",
                            series=[xid(63, "_ _ 63x10", hpc_job="7")])],
        ),
        Alert(
            "GpuRowRemapFailure", severity="critical", team="gpu-ops",
            expr=f'{ctx.gpu("row_remap_failure", keep=JOB)} > 0',
            for_="1m",
            summary="Row remapping failed on a GPU: it has no spare memory rows left.",
            description=f"{where_gpu} failed to remap a memory row (DCGM_FI_DEV_ROW_REMAP_FAILURE): the GPU "
                        "cannot repair its memory any more; drain the node and open an RMA case.",
            fired_by=("row_remap_failure",), **common,
            fires_on=[Case("remap failure flag set", at="5m",
                           series=[dcgm(ctx, "row_remap_failure", "0 0 1x10", node="n1", gpu="1", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))])],
            silent_on=[Case("healthy GPU", at="5m",
                            series=[dcgm(ctx, "row_remap_failure", "0x10", node="n1", gpu="1", hpc_job="7")]),
                       Case("flag seen for less than the for: duration", at="1m30s",
                            series=[dcgm(ctx, "row_remap_failure", "0 0 1x10", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuRowRemapPending", severity="warning", team="gpu-ops",
            expr=f'{per_gpu("row_remap_pending")} > 0',
            for_="1m",
            summary="A GPU has a memory row remap pending: it needs a reset.",
            description=f"{where_gpu} has a row remap pending (DCGM_FI_DEV_ROW_REMAP_PENDING): the faulty row "
                        "is only replaced at the next GPU reset; drain the node and reset the GPU when its "
                        "job ends.",
            fired_by=("row_remap_pending", "dbe"), **common,
            fires_on=[Case("remap pending after an uncorrectable error", at="5m",
                           series=[dcgm(ctx, "row_remap_pending", "0 0 1x10", node="n1", gpu="1", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))])],
            silent_on=[Case("healthy GPU", at="5m",
                            series=[dcgm(ctx, "row_remap_pending", "0x10", node="n1", gpu="1")]),
                       Case("pending for less than the for: duration", at="1m30s",
                            series=[dcgm(ctx, "row_remap_pending", "0 0 1x10", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuRetiredPagesPending", severity="warning", team="gpu-ops",
            expr=f'{per_gpu("retired_pages_pending")} > 0',
            for_="1m",
            summary="A GPU has memory pages pending retirement: it needs a reset.",
            description=f"{where_gpu} has pages pending retirement (DCGM_FI_DEV_RETIRED_PENDING, pre-Ampere "
                        "page retirement): they are retired at the next GPU reset; reset it when its job ends.",
            **common,
            fires_on=[Case("pages pending retirement", at="5m",
                           series=[dcgm(ctx, "retired_pages_pending", "0 0 1x10", node="n1", gpu="1", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))])],
            silent_on=[Case("healthy GPU", at="5m",
                            series=[dcgm(ctx, "retired_pages_pending", "0x10", node="n1", gpu="1")]),
                       Case("pending for less than the for: duration", at="1m30s",
                            series=[dcgm(ctx, "retired_pages_pending", "0 0 1x10", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuThermalSlowdown", severity="warning", team="gpu-ops",
            expr=f'{per_gpu("clock_events", "clock_event", where={"clock_event": one_of(THROTTLE_EVENTS)})} > 0',
            for_=throttle_for,
            summary="A GPU is clocked down by a hardware, thermal or power-brake slowdown.",
            description=f"{where_gpu} has been slowed down by {label('clock_event')} for {throttle_for}: check its "
                        "cooling (fans, airflow, inlet temperature) or the node's power supply; the whole job "
                        "runs at this GPU's pace.",
            fired_by=("thermal",), **common,
            fires_on=[Case("HW slowdown reported in every exporter window", at=duration(throttle_s + 180),
                           series=[dcgm(ctx, "clock_events", "3x40", node="n1", gpu="1", hpc_job="7",
                                        clock_event="hw_slowdown", window_size_in_ms="300000")],
                           expect=[alert(**on_gpu(hpc_job="7", clock_event="hw_slowdown"))])],
            silent_on=[Case("an idle GPU reports the gpu_idle reason, which is no slowdown", at=duration(throttle_s + 180),
                            series=[dcgm(ctx, "clock_events", "9x40", node="n1", gpu="1", clock_event="gpu_idle",
                                         window_size_in_ms="300000"),
                                    dcgm(ctx, "clock_events", "0x40", node="n1", gpu="1", clock_event="hw_slowdown",
                                         window_size_in_ms="300000")]),
                       Case("slowdown for less than the for: duration", at=duration(throttle_s),
                            series=[dcgm(ctx, "clock_events", "0x4 3x40", node="n1", gpu="1",
                                         clock_event="hw_thermal", window_size_in_ms="300000")])],
        ),
        Alert(
            "GpuThermalViolation", severity="warning", team="gpu-ops",
            expr=f'{per_gpu("thermal_violation", over=rate)} > {th["gpu_thermal_violation_ratio"]}',
            for_=throttle_for,
            summary="A GPU spends a large share of its time throttled by thermal limits.",
            description=f"{where_gpu} has been clocked down by thermal constraints for more than "
                        f"{th['gpu_thermal_violation_ratio']:.0%} of the time for {throttle_for} "
                        "(DCGM_FI_DEV_THERMAL_VIOLATION): check its cooling.",
            fired_by=("thermal",), **common,
            fires_on=[Case("throttled 70% of the time", at=duration(throttle_s + 300),
                           series=[dcgm(ctx, "thermal_violation", "0+21000000000x40", node="n1", gpu="1",
                                        hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))])],
            silent_on=[Case("healthy GPU: the counter does not move", at=duration(throttle_s + 300),
                            series=[dcgm(ctx, "thermal_violation", "5x40", node="n1", gpu="1")]),
                       Case("throttled just under the threshold", at=duration(throttle_s + 300),
                            series=[dcgm(ctx, "thermal_violation",
                                         f"0+{round(th['gpu_thermal_violation_ratio'] * 0.8 * 30e9)}x40",
                                         node="n1", gpu="1")]),
                       Case("throttled for less than the for: duration", at=duration(throttle_s + 60),
                            series=[dcgm(ctx, "thermal_violation", "0x6 0+21000000000x40", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuTemperatureHigh", severity="warning", team="gpu-ops",
            expr=f'{ctx.select("dcgm", xids.signals_for("temperature"), (*GPU, *JOB))} > {th["gpu_temperature_celsius"]}',
            for_=throttle_for,
            summary="A GPU runs hotter than its configured limit.",
            description=f"{where_gpu} has been above {th['gpu_temperature_celsius']} C for {throttle_for}: it "
                        "is close to its slowdown temperature; check fans, airflow and the rack's inlet "
                        "temperature.",
            fired_by=("thermal",), **common,
            fires_on=[Case("GPU at 92 C", at=duration(throttle_s + 180),
                           series=[dcgm(ctx, "gpu_temperature", "92x40", node="n1", gpu="1", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))])],
            silent_on=[Case("busy GPU at 72 C", at=duration(throttle_s + 180),
                            series=[dcgm(ctx, "gpu_temperature", "72x40", node="n1", gpu="1", hpc_job="7")]),
                       Case("exactly at the limit", at=duration(throttle_s + 180),
                            series=[dcgm(ctx, "gpu_temperature", f"{th['gpu_temperature_celsius']}x40",
                                         node="n1", gpu="1")]),
                       Case("hot for less than the for: duration", at=duration(throttle_s),
                            series=[dcgm(ctx, "gpu_temperature", "72x4 92x40", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuNvlinkErrors", severity="warning", team="gpu-ops",
            expr=f"({summed(NVLINK_CRC, rate)} > {th['gpu_nvlink_crc_errors_per_second']}) or "
                 f"({summed(NVLINK_REPLAY, rate)} * 60 > {th['gpu_nvlink_replay_errors_per_minute']})",
            for_=link_for,
            summary="A GPU's NVLink links report errors above DCGM's limits.",
            description=f"{where_gpu} counts NVLink CRC errors above {th['gpu_nvlink_crc_errors_per_second']}/s "
                        f"or replay and recovery errors above {th['gpu_nvlink_replay_errors_per_minute']}/min "
                        f"for {link_for}: collectives over this GPU slow down or fail; drain the node and "
                        "run dcgmi diag -r 3.",
            fired_by=("nvlink_errors",), **common,
            fires_on=[Case("NVLink replays at 15/s", at=duration(link_s + 300),
                           series=[dcgm(ctx, "nvlink_replay_errors", "0+450x40", node="n1", gpu="1", hpc_job="7"),
                                   dcgm(ctx, "nvlink_crc_flit_errors", "0x40", node="n1", gpu="1", hpc_job="7")],
                           expect=[alert(**on_gpu(hpc_job="7"))]),
                      Case("CRC errors at 120/s, flit and data together", at=duration(link_s + 300),
                           series=[dcgm(ctx, "nvlink_crc_flit_errors", "0+2700x40", node="n1", gpu="1"),
                                   dcgm(ctx, "nvlink_crc_data_errors", "0+900x40", node="n1", gpu="1")],
                           expect=[alert(**on_gpu())])],
            silent_on=[Case("healthy links", at=duration(link_s + 300),
                            series=[dcgm(ctx, s, "0x40", node="n1", gpu="1") for s in NVLINK_CRC + NVLINK_REPLAY]),
                       Case("CRC errors at 90/s and replays at 0.8/min: under DCGM's limits", at=duration(link_s + 300),
                            series=[dcgm(ctx, "nvlink_crc_flit_errors", "0+2700x40", node="n1", gpu="1"),
                                    dcgm(ctx, "nvlink_replay_errors", "0+0.4x40", node="n1", gpu="1")]),
                       Case("replay errors for less than the for: duration", at=duration(link_s),
                            series=[dcgm(ctx, "nvlink_replay_errors", "0x6 0+450x40", node="n1", gpu="1")])],
        ),
        Alert(
            "GpuHealthFail", severity="critical", team="gpu-ops",
            expr=f'{per_gpu("health_status", "health_watch", "health_error_code")} == {HEALTH_FAIL}',
            for_="1m",
            summary="DCGM health checks report a GPU as failed.",
            description=f"DCGM's {label('health_watch')} health watch failed on {where_gpu} with "
                        f"{label('health_error_code')}: drain the node and run dcgmi health -c and dcgmi diag -r 3.",
            fired_by=("dbe",), **common,
            fires_on=[Case("MEM watch FAIL after a double-bit error", at="5m",
                           series=[dcgm(ctx, "health_status", "0 0 20x10", node="n1", gpu="1", hpc_job="7",
                                        health_watch="MEM", health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED")],
                           expect=[alert(**on_gpu(hpc_job="7", health_watch="MEM",
                                                  health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED"))])],
            silent_on=[Case("every watch passes", at="5m",
                            series=[dcgm(ctx, "health_status", "0x10", node="n1", gpu="1", health_watch=watch,
                                         health_error_code="DCGM_FR_OK") for watch in ("MEM", "PCIE", "NVLINK")]),
                       Case("a WARN (PCIe replay rate) is not a FAIL", at="5m",
                            series=[dcgm(ctx, "health_status", "10x10", node="n1", gpu="1", health_watch="PCIE",
                                         health_error_code="DCGM_FR_PCI_REPLAY_RATE")]),
                       Case("FAIL for less than the for: duration", at="1m30s",
                            series=[dcgm(ctx, "health_status", "0 0 20x10", node="n1", gpu="1", health_watch="MEM",
                                         health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED")])],
        ),
    ]


def _any_vendor(ctx: Context) -> list[Alert]:
    """Alerts on canonical quantities every GPU exporter has, and on recorded series."""
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    w = ctx.rate_window
    where_gpu = f"GPU {label('gpu')} on {label('node')} (cluster {label(c)}, job {label('hpc_job')})"
    common = dict(runbook="gpu", dashboard=DASHBOARD, dashboard_vars=(c, "node"))
    per_gpu = dict(common, dashboard_vars=(c, "node", "gpu"))
    idle = th["gpu_idle_window"]
    idle_s = duration_seconds(idle)
    link_for = th["gpu_link_errors_for"]
    link_s = duration_seconds(link_for)
    replays = th["gpu_pcie_replays_per_minute"]
    lookback = th["gpu_count_lookback"]
    nvidia = ctx.sources["dcgm"].enabled
    out = []

    def on_gpu(**labels):
        return {**cl, "node": "n1", "gpu": "1", **labels}

    util = partial(gpu_utilization, ctx)

    def ecc(values, **kw):
        return gpu_si_series(ctx, "ecc_uncorrectable", values, **kw)

    def replay(values, **kw):
        return gpu_si_series(ctx, "pcie_replay", values, **kw)

    def info(job, node="n1", samples=300):
        return series(ctx, "job_info", "job_info", f"1x{samples}", node=node, hpc_job=job, user="alice",
                      account="llm", partition="gpu", job_name="train", qos="normal")

    out.append(Alert(
        "GpuUncorrectableEcc", severity="critical", team="gpu-ops",
        expr=f'{ctx.gpu("ecc_uncorrectable", keep=JOB, over=lambda e: f"increase({e}[{ECC_WINDOW}])")} > 0',
        for_=None,
        no_for_reason="an uncorrectable ECC error is a single event the counter records once; increase() over "
                      f"{ECC_WINDOW} already holds it, a for: would only delay the page",
        summary="A GPU had an uncorrectable (double-bit) ECC memory error.",
        description=f"{where_gpu} counted an uncorrectable ECC error in the last {ECC_WINDOW}: the job on it "
                    "has most likely crashed; drain the node, reset the GPU and run dcgmi diag -r 3.",
        fired_by=("dbe",) if nvidia else (), **per_gpu,
        fires_on=[Case("a double-bit error on a GPU running a job", at="10m",
                       series=[ecc("0x10 1x20", node="n1", gpu="1", hpc_job="7")],
                       expect=[alert(**on_gpu(hpc_job="7"))])],
        silent_on=[Case("old errors from before the window do not count", at="80m",
                        series=[ecc("0x10 2x160", node="n1", gpu="1")]),
                   Case("a driver reload resets the counter: no new error", at="10m",
                        series=[ecc("3x10 0x20", node="n1", gpu="1")])],
    ))
    out.append(Alert(
        "GpuPcieReplayRate", severity="warning", team="gpu-ops",
        expr=f'{ctx.gpu("pcie_replay", keep=JOB, over=lambda e: f"rate({e}[{w}])")} * 60 > {replays}',
        for_=link_for,
        summary="A GPU's PCIe link retries transfers more often than DCGM recommends.",
        description=f"{where_gpu} has replayed more than {replays} PCIe transfers a minute for {link_for}: the "
                    "link is degrading (riser, slot, cable or retimer); host-device transfers slow down. Drain "
                    "the node, reseat the GPU and check nvidia-smi -q -d PCIE.",
        fired_by=("pcie_replay_storm",) if nvidia else (), **per_gpu,
        fires_on=[Case("a replay storm at 200/s", at=duration(link_s + 300),
                       series=[replay("0+6000x40", node="n1", gpu="1", hpc_job="7")],
                       expect=[alert(**on_gpu(hpc_job="7"))])],
        silent_on=[Case("healthy link: a few replays since boot, none now", at=duration(link_s + 300),
                        series=[replay("3x40", node="n1", gpu="1")]),
                   Case("just under the limit", at=duration(link_s + 300),
                        series=[replay(f"0+{replays * 0.4}x40", node="n1", gpu="1")]),
                   Case("a storm shorter than the for: duration", at=duration(link_s),
                        series=[replay("0x6 0+6000x40", node="n1", gpu="1")])],
    ))
    samples = (idle_s + 1200) // 30
    out.append(Alert(
        "GpuAllocatedIdle", severity="info", team="job-owner",
        expr=f"group by ({c}, node, hpc_job) (gpu:job:info) and on ({c}, hpc_job) (job:gpus_allocated_idle:count > 0) "
             f"and on ({c}, node) (node:gpus_allocated_idle:count > 0)",
        for_="5m",
        summary="A job holds GPUs on a node that have done no work at all for the idle window.",
        description=f"Job {label('hpc_job')} holds GPUs on {label('node')} (cluster {label(c)}) whose utilisation has been "
                    f"0 at every sample for {idle}: release them (fix the job's device selection or ask for "
                    "fewer GPUs).",
        fired_by=("idle_gpus",) if nvidia else (), **common,
        fires_on=[Case(f"one of the job's GPUs at 0% for {idle}; its other node is busy", at=duration(idle_s + 600),
                       series=[info("7"), info("7", node="n2"), util(f"0x{samples}", node="n1", gpu="0", hpc_job="7"),
                               util(f"0.5x{samples}", node="n1", gpu="1", hpc_job="7"),
                               util(f"0.5x{samples}", node="n2", gpu="0", hpc_job="7")],
                       expect=[alert(**cl, node="n1", hpc_job="7")])],
        silent_on=[Case("every GPU busy", at=duration(idle_s + 600),
                        series=[info("7"), util(f"0.5x{samples}", node="n1", gpu="0", hpc_job="7")]),
                   Case(f"idle for 5 minutes less than {idle}", at=duration(idle_s + 600),
                        series=[info("7"), util(f"0.5x{(600 + 300) // 30} 0x{samples}", node="n1", gpu="0",
                                                hpc_job="7")]),
                   Case("idle for the window, but for less than the for: duration", at=duration(idle_s + 150),
                        series=[info("7"), util(f"0x{samples}", node="n1", gpu="0", hpc_job="7")])],
    ))
    out.append(Alert(
        "GpuSeriesMissing", severity="warning", team="gpu-ops",
        expr=f"node:gpus:count < max_over_time(node:gpus:count[{lookback}])",
        for_="5m",
        summary="A node reports fewer GPUs than it did recently.",
        description=f"{label('node')} (cluster {label(c)}) reports fewer GPUs than its maximum over the last {lookback} "
                    "while its GPU exporter still answers: a GPU fell off the bus or its driver lost it; "
                    "check nvidia-smi -L (rocm-smi on AMD) and the kernel log.",
        fired_by=("xid79",) if nvidia else (), **common,
        fires_on=[Case("GPU 3's series stop, the other three still report", at="15m",
                       series=[util("0.9x40", node="n1", gpu=g) for g in "012"] + [util("0.9x10 stale", node="n1", gpu="3")],
                       expect=[alert(**cl, node="n1")])],
        silent_on=[Case("every GPU reports", at="15m", series=[util("0.9x40", node="n1", gpu=g) for g in "0123"]),
                   Case("the whole exporter is gone (ExporterDcgmDown's case)", at="15m",
                        series=[util("0.9x10 stale", node="n1", gpu=g) for g in "0123"]),
                   Case("GPU missing for less than the for: duration", at="8m",
                        series=[util("0.9x40", node="n1", gpu=g) for g in "012"] + [util("0.9x10 stale", node="n1", gpu="3")])],
    ))
    return out


def _amd(ctx: Context) -> list[Alert]:
    """AMD Device Metrics Exporter only (exporters.amd.enabled)."""
    c = ctx.cluster
    cl = ctx.cluster_labels

    def health(values, **kw):
        return series(ctx, "amd", "health", values, node="n1", gpu="1", **kw)

    return [Alert(
        "GpuAmdUnhealthy", severity="critical", team="gpu-ops",
        expr=f'{ctx.select("amd", ["health"], (*GPU, *JOB))} == 0',
        for_="1m",
        summary="The AMD Device Metrics Exporter reports a GPU as unhealthy.",
        description=f"GPU {label('gpu')} on {label('node')} (cluster {label(c)}, job {label('hpc_job')}) is reported unhealthy "
                    "(gpu_health 0): drain the node, check amd-smi and the kernel log (amdgpu RAS events), run "
                    "AGFHC or rvs before resuming it.",
        runbook="gpu", dashboard=DASHBOARD, dashboard_vars=(c, "node", "gpu"),
        fires_on=[Case("GPU unhealthy while a job runs on it", at="5m", series=[health("1 1 0x10", hpc_job="7")],
                       expect=[alert(**cl, node="n1", gpu="1", hpc_job="7")])],
        silent_on=[Case("healthy GPU", at="5m", series=[health("1x10")]),
                   Case("unhealthy for less than the for: duration", at="1m30s", series=[health("1 1 0x10")])],
    )]
