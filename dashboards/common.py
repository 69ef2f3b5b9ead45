"""What the dashboards share: their uids (alerts link to them), cross links, common variables."""
from hpcobs import promql
from hpcobs.context import Context
from hpcobs.dashboard import Link, Variable, dashboard_url

GPU_CLUSTER = "hpcobs-gpu-cluster"
NETWORK_STORAGE = "hpcobs-network-storage"
TRAINING = "hpcobs-training"
SECURITY = "hpcobs-security"
SLURM_JOBS = "hpcobs-slurm-jobs"
TITLES = {GPU_CLUSTER: "GPU cluster", NETWORK_STORAGE: "Network & storage", TRAINING: "Training",
          SECURITY: "Security", SLURM_JOBS: "Slurm jobs"}

# Loki: hpcobs ships no log collector, so the stream selector and the label naming the host are
# dashboard variables (textboxes) a site sets to its shipper's labels (Promtail/Alloy journal scrape).
LOG_SELECTOR = Variable("log_selector", "Log stream selector", '{job="node-journal"}', kind="textbox",
                        description="LogQL stream selector of the nodes' kernel and job logs (journald/syslog shipper).")
LOG_NODE_LABEL = Variable("log_node_label", "Log host label", "host", kind="textbox",
                          description="Loki label carrying the node's short hostname.")
# Lines worth seeing next to a job (docs: shared/reference/other-exporters.md §6): NVIDIA Xid
# (kernel), NCCL WARN, PyTorch's NCCL watchdog timeout, Slurm / kernel out-of-memory kills.
JOB_LOG_LINES = ("NVRM: Xid| NCCL WARN |Watchdog caught collective operation timeout"
                 "|oom[-_]kill|invoked oom-killer|[Oo]ut of memory|OOM failure")


def others(uid: str) -> tuple[Link, ...]:
    """Dashboard links to every other hpcobs dashboard (time range and variables carried over)."""
    return tuple(Link(title, f"/d/{other}") for other, title in TITLES.items() if other != uid)


def cluster_variable(ctx: Context, series: str = "cluster:gpus:count") -> Variable:
    c = ctx.cluster
    return Variable(c, "Cluster", f"label_values({series}, {c})", description="Cluster (label %s)." % c)


OWNERS = {"partition": "Partition", "account": "Account", "user": "User", "hpc_job": "Job"}


def owner_variables(ctx: Context, names: tuple[str, ...], given: tuple[str, ...] = ()) -> tuple[Variable, ...]:
    """Multi-value partition > account > user > job variables on the job-info record, each listing the
    values the variables before it (and the `given` ones, defined elsewhere) leave."""
    matchers, out = [in_cluster(ctx)] + [f'{name}=~"${name}"' for name in given], []
    for name in names:
        out.append(Variable(name, OWNERS[name], f"label_values(job:slurm_job_info:max{{{', '.join(matchers)}}}, {name})",
                            multi=True, include_all=True,
                            description="Slurm job id (filters the job tables)." if name == "hpc_job" else ""))
        matchers.append(f'{name}=~"${name}"')
    return tuple(out)


def over_range(ctx: Context, rate: str) -> str:
    """A recorded per-second series integrated over the dashboard's range (energy from watts, GPU-hours
    from GPUs, events from events/s): one sample per rule evaluation, each standing for one interval."""
    return f"sum_over_time({rate}[$__range]) * {promql.duration_seconds(ctx.scrape_interval)}"


def or_zero(condition_count: str, everyone: str) -> str:
    """A count that only has series where its condition holds (idle GPUs, unhealthy GPUs), as 0 for every
    other node or job of `everyone`, so a table shows 0 rather than an empty cell."""
    return f"({condition_count} or {everyone} * 0)"


def in_cluster(ctx: Context) -> str:
    return f'{ctx.cluster}="${ctx.cluster}"'


def alerts(ctx: Context, *prefixes: str) -> str:
    """ALERTS matchers for the alerts of some domains (alert names start with the domain, e.g. Gpu)."""
    c = ctx.cluster
    return f'alertname=~"({"|".join(prefixes)}).*", {c}=~"${c}|"'


def training_link(ctx: Context, job_field: str = "hpc_job") -> Link:
    """A table cell link to the training dashboard for the job in the row."""
    c = ctx.cluster
    return Link("Training dashboard for job ${__data.fields.%s}" % job_field,
                dashboard_url(TRAINING, **{c: f"${c}", "hpc_job": "${__data.fields.%s}" % job_field}), field=job_field)


def node_link(ctx: Context, uid: str = GPU_CLUSTER, what: str = "GPUs") -> Link:
    """A table cell link to a dashboard's node drill-down (GPUs by default) for the node in the row."""
    c = ctx.cluster
    return Link(f"{what} of node ${{__data.fields.node}}",
                dashboard_url(uid, **{c: f"${c}", "node": "${__data.fields.node}"}), field="node")
