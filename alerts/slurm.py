"""Slurm alerts: nodes out of service, queue backlog, OOM kills, jobs holding idle GPUs.

Node states and queue depth read the partition records of recording_rules/slurm.py, which hide the
exporter flavour (SckyzO/vpenso or Slurm >= 25.11 native). OOM kills exist only in the native flavour.
Runbooks: docs/runbooks/slurm.md, one section per alert.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hpcobs.authoring.alert_cases import standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import JOB_OWNER, gpu_utilization, job_info, slurm_partition
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

THRESHOLDS = (
    declare.count(
        "slurm_partition_nodes_down",
        0,
        "Nodes of a partition that may be down (or failing) before SlurmNodesDown (SlurmNodesFailing) fires; 0 = any.",
    ),
    declare.count(
        "slurm_partition_nodes_drained",
        0,
        "Nodes of a partition that may be drained or draining before SlurmNodesDrained fires; 0 = any. Large "
        "clusters always have a few: raise it to the number your team handles in its normal cycle.",
    ),
    declare.duration(
        "slurm_nodes_drained_for",
        "15m",
        "How long nodes may stay drained above slurm_partition_nodes_drained before SlurmNodesDrained (a "
        "drain-reboot-resume cycle).",
    ),
    declare.count(
        "slurm_partition_pending_jobs",
        100,
        "Pending jobs in one partition above which the queue is backlogged, SlurmQueueBacklog (scale it with the "
        "partition).",
    ),
    declare.duration(
        "slurm_queue_backlog_for",
        "30m",
        "How long the backlog must last before SlurmQueueBacklog (a burst of submissions drains in minutes).",
    ),
)


@dataclass(frozen=True)
class _NodesInState:
    """More nodes of a partition in a Slurm state than tolerated, for a while: one table row per alert."""

    alert: str
    state: str
    limit: Callable[[Thresholds], int]  # how many nodes are tolerated
    for_: Callable[[Thresholds], str]
    summary: str
    meaning: str  # what the description says the state means
    fired_by: tuple[str, ...] = ()


NODE_STATES = (
    _NodesInState(
        "SlurmNodesDown",
        "down",
        lambda thresholds: thresholds.slurm_partition_nodes_down,
        lambda _: "5m",
        "Slurm nodes are down.",
        "Slurm lost contact with them (power, network, slurmd) and killed their jobs (NODE_FAIL).",
        ("slurm_nodes_down",),
    ),
    _NodesInState(
        "SlurmNodesDrained",
        "drain",
        lambda thresholds: thresholds.slurm_partition_nodes_drained,
        lambda thresholds: thresholds.slurm_nodes_drained_for,
        "Slurm nodes are drained or draining.",
        "they take no new jobs until an admin resumes them; drains set by health checks (GPU "
        "Xid, DCGM diag) need a repair.",
        ("slurm_nodes_down",),
    ),
    _NodesInState(
        "SlurmNodesFailing",
        "fail",
        lambda thresholds: thresholds.slurm_partition_nodes_down,
        lambda _: "5m",
        "Slurm nodes are failing.",
        "an admin or a health check marked them FAIL: their jobs are about to lose them.",
    ),
)


def groups(ctx: Context) -> list[Group]:
    partitions = (
        [*(_nodes_in_state(ctx, row) for row in NODE_STATES), _queue_backlog(ctx), *_oom_kills(ctx)]
        if ctx.sources["slurm"].enabled
        else []
    )
    rules = partitions + _job_holding_idle_gpus(ctx)
    return (
        [Group("hpcobs-slurm-alerts", domain="slurm", interval=ctx.evaluation_interval, rules=rules)] if rules else []
    )


def _partition_alert(ctx: Context) -> partial[Alert]:
    return alerts_of("slurm", DashboardUid.SLURM_JOBS, ctx.cluster, "partition", team=Team.SLURM_ADMINS)


def _nodes_in_state(ctx: Context, row: _NodesInState) -> Alert:
    limit, for_ = row.limit(ctx.thresholds), row.for_(ctx.thresholds)
    when = timing(ctx, for_, 2)
    samples = when.samples

    def nodes(count: int | str) -> list[Series]:
        return [slurm_partition(ctx, f"partition_nodes_{row.state}", f"{count}x{samples}")]

    return _partition_alert(ctx)(
        row.alert,
        severity="warning",
        expr=f'partition:slurm_nodes:count{{state="{row.state}"}} > {limit}',
        for_=for_,
        summary=row.summary,
        description=f"Partition {label('partition')} of cluster {label(ctx.cluster)} has had more than {limit} "
        f"node(s) in state {label('state')} for {for_}: {row.meaning} List them with sinfo -R -p "
        f"{label('partition')}.",
        fired_by=row.fired_by,
        **standard_cases(
            when,
            fault=f"{limit + 1} node(s) {row.state}",
            fault_series=nodes(f"0 0 {limit + 1}"),
            expect=[alert(**ctx.cluster_labels, partition="gpu", state=row.state)],
            healthy=f"no node {row.state}",
            healthy_series=nodes(0),
            pending=f"{row.state} for less than the for: duration",
            also_silent=[when.silent(f"exactly {limit} node(s) {row.state}, the tolerated number", nodes(limit))],
        ),
    )


def _queue_backlog(ctx: Context) -> Alert:
    pending, for_ = ctx.thresholds.slurm_partition_pending_jobs, ctx.thresholds.slurm_queue_backlog_for
    when = timing(ctx, for_, 0)
    samples = when.samples

    def queue(length: int, partition: str = "gpu") -> Series:
        return slurm_partition(ctx, "partition_jobs_pending", f"{length}x{samples}", partition)

    return _partition_alert(ctx)(
        "SlurmQueueBacklog",
        severity="warning",
        expr=f"partition:slurm_jobs_pending:count > {pending}",
        for_=for_,
        summary="Jobs pile up in a Slurm partition's queue.",
        description=f"Partition {label('partition')} of cluster {label(ctx.cluster)} has had more than {pending} "
        f"pending jobs for {for_}: check squeue -p {label('partition')} -t PD for the reasons "
        "(Resources, nodes down or drained, reservations, a stuck scheduler).",
        fired_by=("queue_backlog",),
        **standard_cases(
            when,
            fault="the queue stays long",
            fault_series=[queue(pending + 1), queue(3, "debug")],
            expect=[alert(**ctx.cluster_labels, partition="gpu")],
            healthy="a short queue",
            healthy_series=[queue(4)],
            pending="a burst of submissions shorter than the for: duration",
            pending_series=[queue(pending + 1)],
            also_silent=[when.silent("exactly at the threshold", [queue(pending)])],
        ),
    )


def _oom_kills(ctx: Context) -> list[Alert]:
    oom = ctx.sources["slurm"].exporter.signals_for("partition_jobs_oom")
    if not oom:
        return []

    def ooms(values: str) -> list[Series]:
        return [slurm_partition(ctx, "partition_jobs_oom", values)]

    return [
        _partition_alert(ctx)(
            "SlurmOomKills",
            severity="info",
            expr=f"{ctx.select('slurm', oom, ('partition',), op='sum')} > 0",
            for_=None,
            no_for_reason="an OOM kill is an event; slurmctld lists the job in OUT_OF_MEMORY state only for "
            "MinJobAge (300 s by default), so a for: would only shorten the alert",
            summary="Slurm jobs ended out of memory.",
            description=f"Jobs of partition {label('partition')} (cluster {label(ctx.cluster)}) ended OUT_OF_MEMORY: "
            f"sacct -r {label('partition')} -s OOM -S now-1hour lists them and their owners; many at once "
            "point to a node or a memory limit, not to one job.",
            fired_by=("oom_kill",),
            fires_on=[
                Case(
                    "a job OOM-killed",
                    at="3m",
                    series=ooms("0 0 1x10"),
                    expect=[alert(**ctx.cluster_labels, partition="gpu")],
                )
            ],
            silent_on=[
                Case("no OOM job", at="3m", series=ooms("0x10")),
                Case("an OOM job aged out of the controller's list (MinJobAge)", at="8m", series=ooms("1x10 0x10")),
            ],
        )
    ]


def _job_holding_idle_gpus(ctx: Context) -> list[Alert]:
    if not ctx.sources["dcgm"].enabled:
        return []
    idle = ctx.thresholds.gpu_idle_window
    step = duration_seconds(ctx.scrape_interval)
    # Idle from the first sample: the job's idle count holds once a whole window of zeros is in.
    when = timing(ctx, "5m", duration_seconds(idle) // step, settle=300)
    samples = when.samples
    info = job_info(ctx, "7", f"1x{samples}")

    def util(ratios: str, gpu: str = "0") -> Series:
        return gpu_utilization(ctx, ratios, node="n1", gpu=gpu, hpc_job="7")

    return [
        Alert(
            "SlurmJobHoldingIdleGpus",
            severity="warning",
            team=Team.JOB_OWNER,
            expr="job:gpus_allocated_idle:count > 0",
            for_="5m",
            summary="A Slurm job holds GPUs it has not used at all for the idle window.",
            description=f"Job {label('hpc_job')} of {label('user')} (account {label('account')}, partition "
            f"{label('partition')}, cluster {label(ctx.cluster)}) holds GPUs whose utilisation has been 0 at "
            f"every sample for {idle}: cancel it or resubmit it with the GPUs it really uses.",
            runbook="slurm",
            dashboard=DashboardUid.SLURM_JOBS,
            dashboard_vars=(ctx.cluster, "partition", "account", "user"),
            fired_by=("idle_gpus",),
            **standard_cases(
                when,
                fault=f"two of the job's three GPUs at 0% for {idle}",
                fault_series=[info, util(f"0x{samples}"), util(f"0x{samples}", "1"), util(f"0.6x{samples}", "2")],
                expect=[alert(**ctx.cluster_labels, hpc_job="7", **JOB_OWNER)],
                healthy="every GPU of the job busy",
                healthy_series=[info, util(f"0.6x{samples}")],
                pending="idle for the window, but for less than the for: duration",
                pending_series=[info, util(f"0x{samples}")],
                also_silent=[
                    when.silent(
                        f"busy for one rule evaluation inside the last {idle}",
                        [info, util(f"0x{900 // step} {ctx.timeline.pulse(0.6)} 0x{samples}")],
                    )
                ],
            ),
        )
    ]
