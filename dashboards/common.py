"""What the dashboards share: titles, cross links, common variables and query pieces (uids: hpcobs.settings.names),
and one vocabulary of colours and words: the same value has the same colour and name on every dashboard."""

from typing import Any

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import (
    Column,
    Link,
    Mappings,
    Panel,
    Thresholds,
    Variable,
    dashboard_url,
    scaled,
    table,
)
from hpcobs.authoring.logs import NODE as NODE_LOGS
from hpcobs.authoring.logs import LogStreams
from hpcobs.lang import promql
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

THRESHOLDS = (
    declare.ratio(
        "dashboard_utilization_poor",
        0.15,
        "GPU utilisation below which a GPU, node, job or account is drawn red on every dashboard (Princeton "
        "jobstats flags jobs under 15%). Presentation only: no alert reads it (GpuAllocatedIdle reads zero).",
    ),
    declare.ratio(
        "dashboard_utilization_good",
        0.5,
        "GPU utilisation from which a GPU, node, job or account is drawn green on every dashboard; between the "
        "poor and the good level it is orange. Presentation only.",
    ),
)

TITLES = {
    DashboardUid.GPU_CLUSTER: "GPU cluster",
    DashboardUid.NETWORK_STORAGE: "Network & storage",
    DashboardUid.TRAINING: "Training",
    DashboardUid.SECURITY: "Security",
    DashboardUid.SLURM_JOBS: "Slurm jobs",
    DashboardUid.NODE: "Node",
}


# Loki: hpcobs ships no log collector. The node-log stream selector and the label naming the host are textbox
# variables that default to the streams the Loki rules read (config `loki.node_logs`), so the panels and the rules
# agree, and a viewer can still point a panel at another shipper's labels.
def log_selector(ctx: Context) -> Variable:
    return Variable(
        "log_selector",
        "Log stream selector",
        LogStreams.of(ctx.config).selector(NODE_LOGS),
        kind="textbox",
        description="LogQL stream selector of the nodes' kernel and job logs (journald/syslog shipper).",
    )


def log_node_label(ctx: Context) -> Variable:
    return Variable(
        "log_node_label",
        "Log host label",
        ctx.config.get("loki", "node_logs", "node_label"),
        kind="textbox",
        description="Loki label carrying the node's short hostname.",
    )


# Lines worth seeing next to a job: NVIDIA Xid errors (kernel), NCCL warnings, PyTorch's NCCL watchdog
# timeout, Slurm and kernel out-of-memory kills (docs/dashboards.md, Training).
JOB_LOG_LINES = (
    "NVRM: Xid| NCCL WARN |Watchdog caught collective operation timeout"
    "|oom[-_]kill|invoked oom-killer|[Oo]ut of memory|OOM failure"
)
# NCCL Inspector's n_nodes is the node count of a communicator: 1 is a communicator inside one node (NVLink-only),
# more cross the network (NVIDIA/nccl plugins/profiler/inspector/grafana/README.md splits its panels the same way).
# NCCL panels show one kind or the other, never a mean over both (docs/exporters.md, NCCL like with like).
NCCL_NVLINK_ONLY = 'n_nodes="1"'
NCCL_NETWORK = 'n_nodes!="1"'
OWNERS = {"partition": "Partition", "account": "Account", "user": "User", "hpc_job": "Job"}


def others(uid: DashboardUid) -> tuple[Link, ...]:
    """Dashboard links to every other hpcobs dashboard (time range and variables carried over)."""
    return tuple(Link(title, f"/d/{other}") for other, title in TITLES.items() if other != uid)


def in_cluster(ctx: Context) -> str:
    """The matcher on the dashboard's cluster variable."""
    return f'{ctx.cluster}="${ctx.cluster}"'


def cluster_variable(ctx: Context, series: str = "cluster:gpus:count") -> Variable:
    label = ctx.cluster
    return Variable(label, "Cluster", f"label_values({series}, {label})", description=f"Cluster (label {label}).")


def owner_variables(ctx: Context, names: tuple[str, ...], given: tuple[str, ...] = ()) -> tuple[Variable, ...]:
    """Multi-value partition > account > user > job variables on the job-info record, each listing the
    values the variables before it (and the `given` ones, defined elsewhere) leave."""
    matchers = [in_cluster(ctx)] + [f'{name}=~"${name}"' for name in given]
    out = []
    for name in names:
        series = f"job:slurm_job_info:max{{{', '.join(matchers)}}}"
        description = "Slurm job id (filters the job tables)." if name == "hpc_job" else ""
        out.append(
            Variable(
                name,
                OWNERS[name],
                f"label_values({series}, {name})",
                multi=True,
                include_all=True,
                description=description,
            )
        )
        matchers.append(f'{name}=~"${name}"')
    return tuple(out)


def over_range(ctx: Context, rate: str) -> str:
    """A recorded per-second series integrated over the dashboard's range (energy from watts, GPU-hours
    from GPUs, events from events/s): one sample per rule evaluation, each standing for one interval."""
    return f"sum_over_time({rate}[$__range]) * {promql.duration_seconds(ctx.evaluation_interval)}"


def or_zero(condition_count: str, everyone: str) -> str:
    """A count that only has series where its condition holds (idle GPUs, unhealthy GPUs), as 0 for every
    other node or job of `everyone`, so a table shows 0 rather than an empty cell."""
    return f"({condition_count} or {everyone} * 0)"


def alerts(ctx: Context, *prefixes: str) -> str:
    """ALERTS matchers for the alerts of some domains (alert names start with the domain, e.g. Gpu), without the
    alerts that only exist to inhibit others (team none: SlurmJobEnded, one per finished job), nobody's to act on."""
    label = ctx.cluster
    return f'alertname=~"({"|".join(prefixes)}).*", team!="{Team.NONE.value}", {label}=~"${label}|"'


SEVERITY: Mappings = (("critical", "critical", "red"), ("warning", "warning", "orange"), ("info", "info", "blue"))


def firing_alerts(
    ctx: Context,
    *prefixes: str,
    labels: tuple[str, ...] = ("node", "gpu", "hpc_job", "user"),
    where: str = "",
    **options: Any,
) -> Panel:
    """The first panel of a dashboard: its domain's alerts firing now, with where (node, GPU...) and who (job and
    the job's user, joined from the job-info record), each node and job a link to its own view. `where` adds
    matchers narrowing them to the dashboard's entity (e.g. `hpc_job="$hpc_job"` on a job's view)."""
    matchers = ", ".join(filter(None, (alerts(ctx, *prefixes), where)))
    expr = with_owner(ctx, f'ALERTS{{alertstate="firing", {matchers}}}')
    return table(
        "Firing alerts",
        [Column(expr, "State", mappings=((1, "firing", "red"),), cell="color-text")],
        labels=["alertname", "severity", *labels],
        label_links={"node": node_link(ctx), "hpc_job": training_link(ctx)},
        label_words={"severity": SEVERITY},
        **{
            "width": 24,
            "height": 6,
            "description": "Alerts of this dashboard's domain firing now (Prometheus' ALERTS series): what, how "
            "bad, where and whose job; click a node or a job for its own view.",
            **options,
        },
    )


def owners(ctx: Context, *labels: str) -> str:
    """Each job's owner labels (user by default), one series per job, to join on hpc_job."""
    owned = ", ".join(labels or ("user",))
    return f"group by ({ctx.cluster}, hpc_job, {owned}) (job:slurm_job_info:max{{{in_cluster(ctx)}}})"


def with_owner(ctx: Context, expr: str, *labels: str) -> str:
    """`expr` (series carrying hpc_job) with its job's owner labels (user by default) from the job-info record; a
    series whose job has none keeps its row without them (`or ignoring`: a metric name never takes part)."""
    owned = ", ".join(labels or ("user",))
    return (
        f"{expr} * on ({ctx.cluster}, hpc_job) group_left ({owned}) {owners(ctx, *labels)} or ignoring ({owned}) {expr}"
    )


def training_link(ctx: Context, job_field: str = "hpc_job") -> Link:
    """A table cell link to the training dashboard for the job in the row."""
    label = ctx.cluster
    job = f"${{__data.fields.{job_field}}}"
    url = dashboard_url(DashboardUid.TRAINING, **{label: f"${label}", "hpc_job": job})
    return Link(f"Training dashboard for job {job}", url)


def node_link(ctx: Context) -> Link:
    """A table cell link to the node dashboard for the node in the row."""
    label = ctx.cluster
    url = dashboard_url(DashboardUid.NODE, **{label: f"${label}", "node": "${__data.fields.node}"})
    return Link("Node dashboard of node ${__data.fields.node}", url)


# --------------------------------------------------------------------------------------------- vocabulary
# Green is fine, orange needs a look, red needs action; blue is information. Counts of problems are orange from one
# (ANY) or red from one (BAD) depending on whether one alone needs action.
ANY: Thresholds = ((None, "green"), (1, "orange"))
BAD: Thresholds = ((None, "green"), (1, "red"))
# Fill levels turn red where a full alert fires (StorageFilesystemFull, the Lustre full alerts), orange this far below:
# an early warning that stays ahead of the alert whatever ratio a site sets (a presentation choice, no alert reads it).
FILL_WARNING_MARGIN = 0.15


def utilization(ctx: Context, unit: str = "percentunit") -> Thresholds:
    """Red below the poor level, orange below the good one, green above, drawn in `unit`."""
    poor, good = ctx.thresholds.dashboard_utilization_poor, ctx.thresholds.dashboard_utilization_good
    return scaled(((None, "red"), (poor, "orange"), (good, "green")), unit)


def fill(full: float) -> Thresholds:
    """A used fraction (space or inodes): red from the ratio its full alert fires at, orange FILL_WARNING_MARGIN
    before it."""
    return ((None, "green"), (round(full - FILL_WARNING_MARGIN, 6), "orange"), (full, "red"))


def temperature(ctx: Context) -> Thresholds:
    """Red from the temperature GpuTemperatureHigh warns at."""
    return ((None, "green"), (ctx.thresholds.gpu_temperature_celsius, "red"))


# InfiniBand port state and physical state as node_exporter's infiniband collector reports them (the kernel's
# /sys/class/infiniband/*/ports/*/state and phys_state numbers; docs/exporters.md).
IB_PORT_STATE: Mappings = (
    (1, "DOWN", "red"),
    (2, "INIT", "orange"),
    (3, "ARMED", "orange"),
    (4, "ACTIVE", "green"),
    (5, "ACTIVE_DEFER", "orange"),
)
IB_PHYSICAL_STATE: Mappings = (
    (1, "Sleep", "red"),
    (2, "Polling", "red"),
    (3, "Disabled", "red"),
    (4, "Training", "orange"),
    (5, "LinkUp", "green"),
    (6, "LinkErrorRecovery", "orange"),
    (7, "PhyTest", "orange"),
)
# Falco's priority numbers (falcosecurity/falco: 0 Emergency .. 7 Debug), as its metrics and our records carry them.
FALCO_PRIORITY: Mappings = (
    (0, "Emergency", "red"),
    (1, "Alert", "red"),
    (2, "Critical", "red"),
    (3, "Error", "orange"),
    (4, "Warning", "orange"),
    (5, "Notice", "blue"),
    (6, "Informational", "blue"),
    (7, "Debug", "blue"),
)
# Xid classes of the node:gpus_by_xid:count record (recording_rules/gpu_health.py) and Slurm node states.
XID_CLASS: Mappings = (
    ("fell_off_bus", "fell off the bus", "red"),
    ("drain", "drain", "red"),
    ("warning", "warning", "orange"),
    ("application", "application", "blue"),
    ("other", "other", "blue"),
)
SLURM_NODE_STATE: Mappings = (
    ("down", "down", "red"),
    ("drain", "drain", "orange"),
    ("draining", "draining", "orange"),
    ("fail", "fail", "red"),
    ("maint", "maint", "blue"),
    ("alloc", "alloc", "green"),
    ("mixed", "mixed", "green"),
    ("idle", "idle", "green"),
)
