"""What the dashboards share: titles, cross links, common variables and query pieces (uids: hpcobs.settings.names)."""

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import Link, Variable, dashboard_url
from hpcobs.authoring.logs import NODE as NODE_LOGS
from hpcobs.authoring.logs import LogStreams
from hpcobs.lang import promql
from hpcobs.settings.names import DashboardUid

TITLES = {
    DashboardUid.GPU_CLUSTER: "GPU cluster",
    DashboardUid.NETWORK_STORAGE: "Network & storage",
    DashboardUid.TRAINING: "Training",
    DashboardUid.SECURITY: "Security",
    DashboardUid.SLURM_JOBS: "Slurm jobs",
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
    """ALERTS matchers for the alerts of some domains (alert names start with the domain, e.g. Gpu)."""
    label = ctx.cluster
    return f'alertname=~"({"|".join(prefixes)}).*", {label}=~"${label}|"'


def training_link(ctx: Context, job_field: str = "hpc_job") -> Link:
    """A table cell link to the training dashboard for the job in the row."""
    label = ctx.cluster
    job = f"${{__data.fields.{job_field}}}"
    url = dashboard_url(DashboardUid.TRAINING, **{label: f"${label}", "hpc_job": job})
    return Link(f"Training dashboard for job {job}", url)


def node_link(ctx: Context, uid: DashboardUid = DashboardUid.GPU_CLUSTER, what: str = "GPUs") -> Link:
    """A table cell link to a dashboard's node drill-down (GPUs by default) for the node in the row."""
    label = ctx.cluster
    url = dashboard_url(uid, **{label: f"${label}", "node": "${__data.fields.node}"})
    return Link(f"{what} of node ${{__data.fields.node}}", url)
