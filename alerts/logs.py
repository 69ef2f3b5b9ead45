"""Log alerts and recording rules for Loki's ruler: what the kernel, NCCL, PyTorch, CUDA and slurmstepd write
before (or instead of) a metric showing it.

Not one of alerts.MODULES: these rules are LogQL, evaluated by Loki, built with hpcobs.authoring.logs and written
to out/loki/rules/ by the Loki target (hpcobs.targets.loki); Prometheus never loads them. Alerts and records share
the line patterns below, so they live together here rather than split between alerts/ and recording_rules/.

Each pattern was checked against the wording of its source (the NVIDIA driver's Xid format in kernel_rc.c,
NCCL's debug.cc, PyTorch's ProcessGroupNCCL.cpp, Slurm's task_cgroup_memory.c, Linux's oom_kill.c) and is tested
against real published lines, both ways, in tests/test_loki_rules.py (lines and their sources:
tests/data/log_lines.yaml). Streams and labels the site's log shipper must provide: docs/loki.md.
Runbooks: docs/runbooks/logs.md, one section per alert.
"""

from functools import partial
from typing import Any

from hpcobs.authoring.context import Context
from hpcobs.authoring.logs import (
    JOB,
    NODE,
    RATE_WINDOW,
    LabelFilter,
    LogCase,
    LogGroup,
    LogMetric,
    LogPattern,
    LogQuery,
    LogRule,
    LogStreams,
)
from hpcobs.authoring.rules import Alert, Record, alerts_of, label
from hpcobs.authoring.ruletest import Sample, alert, sample
from hpcobs.lang.escape import regex_alternation
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

THRESHOLDS = (
    declare.duration(
        "log_event_window",
        "15m",
        "How long one log line (an Xid, an OOM kill, a watchdog timeout, a CUDA error) keeps its Loki alert active: "
        "those alerts count the lines of this window and have no `for:` (docs/loki.md).",
    ),
    declare.number(
        "log_nccl_warn_lines",
        50,
        "NCCL WARN lines one job may log on one node within log_nccl_warn_window before TrainingNcclWarnBurst; above "
        'what start-up warnings give (one per rank and communicator, e.g. "Failed to open libibverbs" on a node '
        "without IB).",
        expected="a whole number of log lines, at least 1",
        whole=True,
        minimum=1,
    ),
    declare.duration(
        "log_nccl_warn_window", "5m", "Window over which NCCL WARN lines are counted (TrainingNcclWarnBurst)."
    ),
    declare.duration(
        "log_nccl_warn_for",
        "2m",
        "How long the count must stay above log_nccl_warn_lines before TrainingNcclWarnBurst; shorter than "
        "log_nccl_warn_window (refused otherwise), or a lone burst never fires.",
    ),
)

# The driver prints `NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s`; older
# drivers leave out `PCI:` and the process. The code is the number right after the parenthesis: a later
# "caused by previous Xid 149" is not it.
XID = LogPattern(
    "nvidia_xid",
    NODE,
    literal="NVRM: Xid (",
    regex=r"NVRM: Xid \((?:PCI:)?(?P<pci_address>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): "
    r"(?P<err_code>[0-9]+)",
)
# mm/oom_kill.c: "<reason>: Killed process <pid> (<comm>) total-vm:..." (Linux >= 4.x), "<reason>: Kill process
# <pid> (<comm>) score N or sacrifice child" before; the reason is "Out of memory" (the node ran out) or "Memory
# cgroup out of memory" (a cgroup hit its limit). The 3.x follow-up "Killed process" line has no reason and is not
# counted again. A comm can hold spaces and parentheses: it ends at the ") " that follows it.
KERNEL_OOM = LogPattern(
    "kernel_oom_kill",
    NODE,
    literal="of memory: Kill",
    regex=r"(?P<oom_kind>Out of memory|Memory cgroup out of memory)(?: \([a-z_]+\))?: Kill(?:ed)? process "
    r"[0-9]+ \((?P<process>.+?)\)(?: |$)",
)
# NCCL's debug.cc: "[timestamp ]host:pid:tid [cudaDev] file:line[ (func)] NCCL WARN msg" (no file:line in the oldest
# releases, `(func)` only in the newest). The host (NCCL cuts it at the first dot) names the node; a launcher may
# prefix the line.
NCCL_WARN = LogPattern(
    "nccl_warn",
    JOB,
    literal=" NCCL WARN ",
    regex=r"(?P<nccl_host>[^\s:\[\]]+):[0-9]+:[0-9]+ \[[0-9]+\] (?:\S+:[0-9]+ (?:\([^)]*\) )?)?NCCL WARN ",
    renames=(("node", "nccl_host"),),
)
# ProcessGroupNCCL.cpp: "[Rank N] Watchdog caught collective operation timeout: WorkNCCL(...) ran for N
# milliseconds before timing out.", logged by each rank and repeated in the exception it throws ("... watchdog
# thread terminated with exception: [Rank N] Watchdog caught ..."): the alert counts ranks, not lines.
WATCHDOG = LogPattern(
    "pytorch_nccl_watchdog_timeout",
    JOB,
    literal="Watchdog caught collective operation timeout",
    regex=r"Rank (?P<rank>[0-9]+)\] Watchdog caught collective operation timeout",
)
# Slurm's task/cgroup plugin (slurmstepd, to the job's stderr): "Detected N oom-kill event(s) in step J.S cgroup."
# up to 20.02, "in StepId=J.S[ cgroup]. Some of your processes may have been killed ..." from 20.11, and "Detected N
# oom_kill event[s] in StepId=J.S. Some of the step tasks have been OOM Killed." from 23.02.
SLURM_OOM = LogPattern(
    "slurm_oom_kill",
    JOB,
    literal="kill event",
    regex=r"Detected [0-9]+ oom[-_]kill events?(?:\(s\))? in (?:step |StepId=)"
    r"(?P<slurm_step>[0-9]+(?:\+[0-9]+)?(?:\.[A-Za-z0-9]+)?)",
)
# The CUDA runtime's error string as PyTorch (RuntimeError, torch.AcceleratorError, c10::Error what()) and other
# CUDA programs print it; the message ends at the line's end, a period, or the "Search for `cudaError...'" hint
# newer PyTorch appends.
CUDA_ERROR = LogPattern(
    "cuda_error",
    JOB,
    literal="CUDA error: ",
    regex=r"CUDA error: (?P<cuda_error>\S[^\n]*?)\s*(?:\.? Search for |\x60|\.?$)",
)
# PyTorch's caching allocator (torch.OutOfMemoryError, torch.cuda.OutOfMemoryError, RuntimeError before 1.13).
CUDA_OOM = LogPattern(
    "cuda_out_of_memory",
    JOB,
    literal="CUDA out of memory. Tried to allocate",
    regex=r"CUDA out of memory\. Tried to allocate",
)
PATTERNS = (XID, KERNEL_OOM, NCCL_WARN, WATCHDOG, SLURM_OOM, CUDA_ERROR, CUDA_OOM)
# A GPU's CUDA out-of-memory is its job's batch size, recorded, not alerted (the owner sees the traceback):
# the same message through `CUDA error: ` is left to the record too.
CUDA_OUT_OF_MEMORY = "out of memory"
# The node and the job that log the rule cases' lines (tests/data/log_lines.yaml holds the lines).
CASE_NODE, CASE_JOB = "n1", "4242"
# Named here for the Alertmanager inhibition that keeps it from paging twice for what the metric alerts report.
XID_DRAIN_LOGGED = "GpuXidDrainClassLogged"


def loki_groups(ctx: Context) -> list[LogGroup]:
    streams = LogStreams.of(ctx.config)
    rules = _Rules(ctx, streams)
    return [
        LogGroup("hpcobs-log-records", rules.records()),
        LogGroup("hpcobs-log-alerts", [*rules.node_alerts(), *rules.job_alerts()]),
    ]


class _Rules:
    """The rules of one build: the context, the streams, and the case labels written once."""

    def __init__(self, ctx: Context, streams: LogStreams):
        self.ctx, self.streams = ctx, streams
        self.event_window = ctx.thresholds.log_event_window

    def on_node(self, **labels: str) -> Sample:
        return alert(**self.ctx.cluster_labels, node=CASE_NODE, **labels)

    def on_job(self, **labels: str) -> Sample:
        return alert(**self.ctx.cluster_labels, hpc_job=CASE_JOB, **labels)

    def event(self, query: LogQuery) -> LogMetric:
        """Lines counted over the event window: one line keeps the alert active for the window."""
        return LogMetric(query, self.event_window, above=0)

    def rule(self, make: partial[Alert], name: str, metric: LogMetric, **fields: Any) -> LogRule:
        return LogRule(make(name, expr=metric.expr(self.streams), **fields), metric)

    def records(self) -> list[LogRule]:
        """Lines per second of each kind, by node or by job, for dashboards (remote-written by Loki's ruler)."""
        per_second = 1 / duration_seconds(RATE_WINDOW)  # one line within the rate window
        cases = {
            "node:log_xid_lines:rate5m": (
                LogQuery(XID, ("node", "pci_address", "err_code")),
                ["xid-79-unknown-pid", "xid-13-unknown-pid", "nvrm-gpu-fell-off-bus"],
                [
                    sample(per_second, **self.ctx.cluster_labels, node=CASE_NODE, pci_address=pci, err_code=code)
                    for pci, code in (("0000:91:00", "79"), ("0000:cb:00", "13"))
                ],
            ),
            "node:log_oom_kill_lines:rate5m": (
                LogQuery(KERNEL_OOM, ("node", "oom_kind")),
                ["oom-global-killed", "oom-memcg-killed", "oom-reaper"],
                [
                    sample(per_second, **self.ctx.cluster_labels, node=CASE_NODE, oom_kind=kind)
                    for kind in ("Out of memory", "Memory cgroup out of memory")
                ],
            ),
            "job:log_nccl_warn_lines:rate5m": (
                LogQuery(NCCL_WARN, ("hpc_job", "node")),
                ["nccl-warn-ib-plugin", "nccl-info-trace"],
                [sample(per_second, **self.ctx.cluster_labels, hpc_job=CASE_JOB, node="kp-ddp-worker-0")],
            ),
            "job:log_nccl_watchdog_lines:rate5m": (
                LogQuery(WATCHDOG, ("hpc_job",)),
                ["watchdog-2x-rank1", "watchdog-exception-neighbour"],
                [sample(per_second, **self.ctx.cluster_labels, hpc_job=CASE_JOB)],
            ),
            "job:log_cuda_error_lines:rate5m": (
                LogQuery(CUDA_ERROR, ("hpc_job", "cuda_error")),
                ["cuda-illegal-address", "cuda-kernel-errors-hint"],
                [
                    sample(
                        per_second,
                        **self.ctx.cluster_labels,
                        hpc_job=CASE_JOB,
                        cuda_error="an illegal memory access was encountered",
                    )
                ],
            ),
            "job:log_cuda_oom_lines:rate5m": (
                LogQuery(CUDA_OOM, ("hpc_job",)),
                ["cuda-oom-torch2", "cuda-error-out-of-memory"],
                [sample(per_second, **self.ctx.cluster_labels, hpc_job=CASE_JOB)],
            ),
            "job:log_slurm_oom_lines:rate5m": (
                LogQuery(SLURM_OOM, ("hpc_job",)),
                ["slurm-oom-23-02", "srun-out-of-memory"],
                [sample(per_second, **self.ctx.cluster_labels, hpc_job=CASE_JOB)],
            ),
        }
        out = []
        for name, (query, lines, expect) in cases.items():
            metric = LogMetric(query, RATE_WINDOW, function="rate")
            case = LogCase("one line of the kind among others", expect=expect, lines=tuple(lines))
            out.append(LogRule(Record(name, metric.expr(self.streams), tests=[case]), metric))
        return out

    def node_alerts(self) -> list[LogRule]:
        return [self.xid_drain_logged(), self.xid_warning_logged(), self.node_kernel_oom_kill()]

    def job_alerts(self) -> list[LogRule]:
        return [
            self.training_nccl_warn_burst(),
            self.training_nccl_watchdog_timeout(),
            self.slurm_job_oom_killed(),
            self.training_cuda_error(),
        ]

    def node_event(self, name: str, metric: LogMetric, **fields: Any) -> LogRule:
        """A node alert that one kernel line fires."""
        node_alert = alerts_of("logs", DashboardUid.GPU_CLUSTER)
        no_for = "a kernel line is an event; the count over the event window keeps the alert active that long"
        return self.rule(node_alert, name, metric, for_=None, no_for_reason=no_for, **fields)

    def job_rule(self, name: str, metric: LogMetric, **fields: Any) -> LogRule:
        """A job alert."""
        return self.rule(alerts_of("logs", DashboardUid.TRAINING), name, metric, **fields)

    def job_event(self, name: str, query: LogQuery, **fields: Any) -> LogRule:
        """A job alert that one line of the job's log fires."""
        no_for = "a job's log line is an event; the count over the event window keeps the alert active that long"
        return self.job_rule(name, self.event(query), for_=None, no_for_reason=no_for, **fields)

    def xid_query(self, xid_class: str) -> LogQuery:
        """Xid lines whose code the deployed dcgm-exporter's catalogue puts in `xid_class`."""
        xids = self.ctx.sources["dcgm"].exporter.xids(xid_class)
        return LogQuery(
            XID, ("node", "pci_address", "err_code"), (LabelFilter("err_code", "=~", regex_alternation(xids)),)
        )

    @property
    def gpu_where(self) -> str:
        return f"GPU {label('pci_address')} of {label('node')} (cluster {label(self.ctx.cluster)})"

    @property
    def job_where(self) -> str:
        return f"Job {label('hpc_job')} (cluster {label(self.ctx.cluster)})"

    def xid_drain_logged(self) -> LogRule:
        return self.node_event(
            XID_DRAIN_LOGGED,
            self.event(self.xid_query("drain")),
            severity="critical",
            team=Team.GPU_OPS,
            summary="The kernel logged an Xid error that needs a GPU reset or a node drain.",
            description=f"{self.gpu_where} logged Xid {label('err_code')}, a drain-class error: drain the node, "
            "reset the GPU or reboot, and run dcgmi diag before resuming it.",
            fires_on=[
                LogCase(
                    "Xid 79, GPU fallen off the bus",
                    expect=[self.on_node(pci_address="0000:91:00", err_code="79")],
                    lines=("xid-79-unknown-pid", "nvrm-gpu-fell-off-bus"),
                ),
                LogCase(
                    "Xid 48, double-bit ECC, on a syslog line",
                    expect=[self.on_node(pci_address="0000:07:00", err_code="48")],
                    lines=("xid-48-syslog",),
                ),
            ],
            silent_on=[
                LogCase(
                    "application-class Xids 13, 31, 43, 45 are the job's",
                    lines=("xid-13-unknown-pid", "xid-31-pid", "xid-43-pid", "xid-45-caused-by-149"),
                ),
                LogCase("NVSwitch SXid lines", lines=("sxid-20034",)),
                LogCase(
                    "Xid 79 older than the event window",
                    at=self.event_window,
                    lines=("xid-79-unknown-pid",),
                ),
            ],
        )

    def xid_warning_logged(self) -> LogRule:
        return self.node_event(
            "GpuXidWarningClassLogged",
            self.event(self.xid_query("warning")),
            severity="info",
            team=Team.GPU_OPS,
            summary="The kernel logged an Xid error that asks for a GPU reset when the GPU is free.",
            description=f"{self.gpu_where} logged Xid {label('err_code')} (row remap pending, high single-bit ECC "
            "rate or contained memory error): reset the GPU when its job ends.",
            fires_on=[
                LogCase(
                    "Xid 94, contained ECC error, on a MIG instance",
                    expect=[self.on_node(pci_address="0000:01:00", err_code="94")],
                    lines=("xid-94-mig",),
                ),
                LogCase(
                    "Xid 63, row remap pending",
                    expect=[self.on_node(pci_address="0000:10:1c", err_code="63")],
                    lines=("xid-63-pid",),
                ),
            ],
            silent_on=[LogCase("drain-class Xid 95", lines=("xid-95-uncontained",))],
        )

    def node_kernel_oom_kill(self) -> LogRule:
        global_oom = LogQuery(KERNEL_OOM, ("node", "process"), (LabelFilter("oom_kind", "=", "Out of memory"),))
        return self.node_event(
            "NodeKernelOomKill",
            self.event(global_oom),
            severity="warning",
            team=Team.SLURM_ADMINS,
            summary="The kernel's OOM killer killed a process because the node ran out of memory.",
            description=f"Node {label('node')} (cluster {label(self.ctx.cluster)}) ran out of memory and the "
            f"kernel killed {label('process')}: the jobs' memory cgroups did not hold it; check the node "
            "before it takes more jobs.",
            fires_on=[
                LogCase(
                    "a python process killed by the global OOM killer",
                    expect=[self.on_node(process="python3")],
                    lines=("oom-global-killed", "oom-reaper"),
                ),
                LogCase(
                    "older kernels' wording",
                    expect=[self.on_node(process="R")],
                    lines=("oom-global-kill-old", "oom-killed-line-old"),
                ),
            ],
            silent_on=[
                LogCase(
                    "a memory cgroup at its limit (the job's own, SlurmJobOomKilled's case)",
                    lines=("oom-memcg-killed", "oom-memcg-kill-old", "oom-invoked", "oom-task-table-header"),
                )
            ],
        )

    def training_nccl_warn_burst(self) -> LogRule:
        thresholds = self.ctx.thresholds
        burst = LogMetric(
            LogQuery(NCCL_WARN, ("hpc_job", "node")),
            thresholds.log_nccl_warn_window,
            above=thresholds.log_nccl_warn_lines,
        )
        many = thresholds.log_nccl_warn_lines + 1
        return self.job_rule(
            "TrainingNcclWarnBurst",
            burst,
            severity="warning",
            team=Team.ML_PLATFORM,
            for_=thresholds.log_nccl_warn_for,
            summary="NCCL keeps logging warnings for a job on one node.",
            description=f"{self.job_where} logged more than {thresholds.log_nccl_warn_lines} NCCL WARN lines "
            f"within {thresholds.log_nccl_warn_window} on {label('node')}: NCCL is failing or retrying there "
            "(network, peer, CUDA); its collectives are slow or about to time out.",
            fires_on=[
                LogCase(
                    "InfiniBand completion errors, over the threshold",
                    expect=[self.on_job(node="kp-ddp-worker-0")],
                    lines=("nccl-warn-ib-plugin",),
                    times=many,
                )
            ],
            silent_on=[
                LogCase(
                    "as many NCCL INFO lines",
                    lines=("nccl-info-trace", "nccl-info-channel"),
                    times=many,
                ),
                LogCase(
                    "a few warnings at start-up, one per rank",
                    lines=("nccl-warn-libibverbs",),
                    times=thresholds.log_nccl_warn_lines,
                ),
            ],
        )

    def training_nccl_watchdog_timeout(self) -> LogRule:
        return self.job_event(
            "TrainingNcclWatchdogTimeout",
            LogQuery(WATCHDOG, ("hpc_job",), distinct="rank"),
            severity="warning",
            team=Team.JOB_OWNER,
            summary="PyTorch's NCCL watchdog timed out a collective and took the job's ranks down.",
            description=f"{self.job_where}: PyTorch's NCCL watchdog caught a collective that did not finish "
            "within its timeout and stopped the job's processes; a rank hung (a straggler, a dead peer, a network "
            "or GPU fault) before the others timed out.",
            fires_on=[
                LogCase(
                    "two ranks time out, each logged twice",
                    expect=[self.on_job()],
                    lines=(
                        "watchdog-2x-rank1",
                        "watchdog-old-rank1",
                        "watchdog-terminated-rank2",
                        "watchdog-what-rank2",
                    ),
                ),
                LogCase(
                    "PyTorch 1.x behind a progress bar",
                    expect=[self.on_job()],
                    lines=("watchdog-progress-bar",),
                ),
            ],
            silent_on=[
                LogCase(
                    "the watchdog's follow-up lines",
                    lines=(
                        "watchdog-exception-neighbour",
                        "watchdog-failed-or-timed-out",
                        "watchdog-failure-detected",
                        "watchdog-blocking-wait",
                    ),
                )
            ],
        )

    def slurm_job_oom_killed(self) -> LogRule:
        return self.job_event(
            "SlurmJobOomKilled",
            LogQuery(SLURM_OOM, ("hpc_job", "slurm_step")),
            severity="warning",
            team=Team.JOB_OWNER,
            summary="Slurm's memory cgroup killed processes of a job step.",
            description=f"{self.job_where}: step {label('slurm_step')} reached its memory limit and the kernel "
            "killed some of its processes (slurmstepd's OOM report); request more memory (--mem, --mem-per-gpu) "
            "or use less.",
            fires_on=[
                LogCase(
                    "Slurm 23.02+ wording",
                    expect=[self.on_job(slurm_step="440575.0")],
                    lines=("slurm-oom-23-02", "srun-out-of-memory", "slurmstepd-step-cancelled"),
                ),
                LogCase(
                    "Slurm 20.02 wording, host in the program name",
                    expect=[self.on_job(slurm_step="3361579.batch")],
                    lines=("slurm-oom-host-prefix",),
                ),
            ],
            silent_on=[
                LogCase(
                    "a shell reporting a killed command",
                    lines=("slurm-script-killed", "srun-out-of-memory"),
                )
            ],
        )

    def training_cuda_error(self) -> LogRule:
        return self.job_event(
            "TrainingCudaError",
            LogQuery(CUDA_ERROR, ("hpc_job", "cuda_error"), (LabelFilter("cuda_error", "!=", CUDA_OUT_OF_MEMORY),)),
            severity="warning",
            team=Team.JOB_OWNER,
            summary="A job logged a CUDA error.",
            description=f"{self.job_where} logged `CUDA error: {label('cuda_error')}`; its process has most likely "
            "crashed. Memory-fault and assert errors are the program's; ECC and launch failures point to the "
            "GPU (see the node's Xid alerts).",
            fires_on=[
                LogCase(
                    "an illegal memory access",
                    expect=[self.on_job(cuda_error="an illegal memory access was encountered")],
                    lines=("cuda-illegal-address", "cuda-kernel-errors-hint", "cuda-launch-blocking-hint"),
                ),
                LogCase(
                    "an uncorrectable ECC error with PyTorch's search hint",
                    expect=[self.on_job(cuda_error="uncorrectable ECC error encountered")],
                    lines=("cuda-ecc-search-hint", "cuda-ecc-runtime"),
                ),
            ],
            silent_on=[
                LogCase(
                    "a GPU out of memory, in both wordings (recorded, not alerted)",
                    lines=("cuda-error-out-of-memory", "cuda-oom-torch2"),
                ),
                LogCase("PyTorch's debugging hints", lines=("cuda-dsa-hint",)),
            ],
        )
