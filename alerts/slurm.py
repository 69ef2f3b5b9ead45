"""Slurm alerts: nodes out of service, queue backlog, OOM kills, jobs holding idle GPUs, a node Slurm still
schedules while a GPU of it is unhealthy, slurmctld and slurmdbd falling behind.

Node states and queue depth read the partition records of recording_rules/slurm.py, which hide the
exporter flavour (SckyzO/vpenso or Slurm >= 25.11 native); the drained share divides by the partition's nodes,
so one threshold suits a 2,000-node partition and an 8-node one. OOM kills exist only in the native flavour, a
node's own state only in SckyzO's (per-node series). The controller's sdiag values (server threads, the slurmdbd
message queue) exist in both. Runbooks: docs/runbooks/slurm.md, one section per alert.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hpcobs.authoring.alert_cases import standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import (
    JOB_OWNER,
    amd,
    dcgm,
    gpu_si_series,
    gpu_utilization,
    job_info,
    series,
    slurm_controller,
    slurm_partition,
    slurm_partition_nodes,
)
from hpcobs.lang import escape
from hpcobs.lang.promql import aggregate, duration, duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

# sinfo long states (StateLong) of a node Slurm hands new jobs to, matched by prefix as SckyzO's nodes.go classes
# them: allocated, mixed, idle, with their suffixes (idle~ powered down, mixed- powering down, allocated+ ...).
SCHEDULABLE = "(alloc|mix|idle).*"
# States an administrator (or Slurm's power saving) put a node in, with a reason sinfo -R shows: draining or drained,
# in a maintenance reservation, rebooting (scontrol reboot), failing (State=FAIL), or powered down, powering up or
# down (the ~ # % ! suffixes). Its exporters going quiet then is the plan, not a fault. A node Slurm lost contact with
# is down (down*) and stays a fault: a crash and an operator's State=DOWN look alike, so planned work drains first.
OUT_OF_SERVICE = "(drain|maint|reboot|fail).*|.*[~#%!]"

THRESHOLDS = (
    declare.count(
        "slurm_partition_nodes_down",
        0,
        "Nodes of a partition that may be down (or failing) before SlurmNodesDown (SlurmNodesFailing) fires; 0 = any.",
    ),
    declare.fraction(
        "slurm_partition_drained_fraction",
        0.02,
        "Share of a partition's nodes that may be drained or draining before SlurmNodesDrained fires. A large "
        "cluster always has a repair backlog: Llama 3's 16,384 GPUs (2,048 nodes) saw 419 unexpected interruptions "
        "in 54 days, 0.4% of the nodes a day, so with a day or two per repair 0.4-0.8% is drained on a normal day; "
        "2% is well above that. A share scales: 40 nodes of 2,000, but any node of a partition of 49 or fewer.",
    ),
    declare.duration(
        "slurm_nodes_drained_for",
        "15m",
        "How long a partition's drained share may stay above slurm_partition_drained_fraction before "
        "SlurmNodesDrained (a drain-reboot-resume cycle).",
    ),
    declare.duration(
        "slurm_unhealthy_gpu_scheduled_for",
        "10m",
        "How long Slurm may keep a node with an unhealthy GPU schedulable (allocated, mixed or idle) before "
        "SlurmNodeScheduledWithUnhealthyGpu: two runs of a node health check at the HealthCheckInterval=300 of "
        "Slurm's slurm.conf examples, which should have drained it by then.",
    ),
    declare.limit(
        "slurmctld_server_threads",
        192,
        "slurmctld server threads (sdiag Server thread count) above which SlurmControllerThreadsSaturated fires: three "
        "quarters of MAX_SERVER_THREADS, 256 (slurm.conf, SchedulerParameters max_rpc_cnt); sdiag(1): often close "
        "to it points to a bottleneck.",
    ),
    declare.limit(
        "slurmdbd_agent_queue",
        5000,
        "Messages slurmctld holds for slurmdbd (sdiag DBD Agent queue size) above which SlurmDbdQueueFilling "
        "fires: half of MaxDBDMsgs, whose default and floor is 10,000 (slurm.conf); sdiag(1) says to investigate "
        "slurmdbd immediately past half. Set it to half your MaxDBDMsgs.",
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
        "SlurmNodesFailing",
        "fail",
        lambda thresholds: thresholds.slurm_partition_nodes_down,
        lambda _: "5m",
        "Slurm nodes are failing.",
        "an admin or a health check marked them FAIL: their jobs are about to lose them.",
    ),
)


@dataclass(frozen=True)
class _ControllerLoad:
    """A value of slurmctld's sdiag above its declared limit: one table row per alert."""

    alert: str
    canonical: str  # the catalogue signal, both flavours
    severity: str
    limit: Callable[[Thresholds], float]
    for_: str
    summary: str
    meaning: str  # what the description says it means
    fired_by: tuple[str, ...]


CONTROLLER = (
    _ControllerLoad(
        "SlurmControllerThreadsSaturated",
        "slurmctld_server_threads",
        "warning",
        lambda thresholds: thresholds.slurmctld_server_threads,
        # sdiag(1) speaks of a thread count *often* close to the cap: a burst of RPCs (a job array submitted) passes.
        "10m",
        "slurmctld serves nearly as many RPCs at once as it can.",
        "slurmctld is near MAX_SERVER_THREADS (256): further RPCs (squeue, sbatch, job completions) wait, commands "
        "time out; find the RPC source with sdiag -t (per user and per type).",
        ("slurmctld_overload",),
    ),
    _ControllerLoad(
        "SlurmDbdQueueFilling",
        "slurmdbd_agent_queue",
        "critical",
        lambda thresholds: thresholds.slurmdbd_agent_queue,
        # slurmdbd restarts (upgrades, a database failover) take minutes and the queue then drains.
        "5m",
        "slurmctld piles up accounting messages slurmdbd does not take.",
        "slurmdbd or its database does not answer; at MaxDBDMsgs slurmctld discards job records for good (lost "
        "accounting, fairshare). Check systemctl status slurmdbd, its log and the database.",
        ("slurmdbd_down",),
    ),
)


def groups(ctx: Context) -> list[Group]:
    partitions = (
        [
            *(_nodes_in_state(ctx, row) for row in NODE_STATES),
            _nodes_drained(ctx),
            _queue_backlog(ctx),
            *_oom_kills(ctx),
            *_unhealthy_gpu_scheduled(ctx),
            *_node_out_of_service(ctx),
            *_gpus_below_gres(ctx),
            *(_controller(ctx, row) for row in CONTROLLER),
        ]
        if ctx.sources["slurm"].enabled
        else []
    )
    rules = partitions + _job_holding_idle_gpus(ctx)
    return (
        [Group("hpcobs-slurm-alerts", domain="slurm", interval=ctx.evaluation_interval, rules=rules)] if rules else []
    )


def _partition_alert(ctx: Context) -> partial[Alert]:
    return alerts_of("slurm", DashboardUid.SLURM_JOBS, Team.SLURM_ADMINS)


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


def _nodes_drained(ctx: Context) -> Alert:
    share, for_ = ctx.thresholds.slurm_partition_drained_fraction, ctx.thresholds.slurm_nodes_drained_for
    when = timing(ctx, for_, 0)
    samples = when.samples
    # The smallest partition whose drained nodes can sit within 20% above and at the share: one node is 1/size.
    size = math.ceil(1 / (0.2 * share))
    at_share = math.floor(size * share)

    def partition(nodes: int, drained: int, name: str = "gpu") -> list[Series]:
        return slurm_partition_nodes(ctx, name, nodes, drained, samples)

    return _partition_alert(ctx)(
        "SlurmNodesDrained",
        severity="warning",
        expr=f"partition:slurm_nodes_drained:ratio > {share:g}",
        for_=for_,
        summary="More of a Slurm partition's nodes are drained than its normal repair backlog.",
        description=f"More than {share:g} of partition {label('partition')}'s nodes (cluster {label(ctx.cluster)}) "
        f"have been drained or draining for {for_}: they take no new "
        "jobs until an admin resumes them; drains set by health checks (GPU Xid, DCGM diag) need a repair. List "
        f"them with sinfo -R -p {label('partition')}.",
        fired_by=("slurm_nodes_down",),
        **standard_cases(
            when,
            fault=f"{at_share + 1} of {size} nodes drained, the fewest above the share",
            fault_series=partition(size, at_share + 1),
            expect=[alert(**ctx.cluster_labels, partition="gpu")],
            healthy="no node drained",
            healthy_series=partition(8, 0),
            pending="drained for less than the for: duration",
            also_fires=[
                when.fires(
                    "one drained node of a small partition",
                    partition(4, 1, "debug"),
                    [alert(**ctx.cluster_labels, partition="debug")],
                )
            ],
            also_silent=[when.silent(f"{at_share} of {size} nodes drained, at the share", partition(size, at_share))],
        ),
    )


def _unhealthy_gpu_scheduled(ctx: Context) -> list[Alert]:
    """A node Slurm still hands jobs to (allocated, mixed, idle) although a GPU of it is unhealthy: the health check
    that should drain it did not. Needs each node's Slurm state (SckyzO's node collector) and a GPU exporter's
    health (node:gpus_unhealthy:count)."""
    slurm = ctx.sources["slurm"].exporter
    if not slurm.signals_for("node_state") or not (ctx.sources["dcgm"].enabled or ctx.sources["amd"].enabled):
        return []
    for_ = ctx.thresholds.slurm_unhealthy_gpu_scheduled_for
    where = {"status": "=~" + escape.promql_string(SCHEDULABLE)}
    schedulable = ctx.select("slurm", slurm.signals_for("node_state"), ("node",), op="group", where=where)
    when = timing(ctx, for_, 0)
    samples = f"x{when.samples}"

    def unhealthy(node: str) -> Series:
        if ctx.sources["dcgm"].enabled:
            return dcgm(ctx, "row_remap_failure", f"1{samples}", node=node, gpu="3")
        return amd(ctx, "health", f"0{samples}", node=node, gpu="3")

    def slurm_state(node: str, status: str) -> Series:
        return series(
            ctx, "slurm", slurm.signals_for("node_state")[0], f"1{samples}", node=node, status=status, partition="gpu"
        )

    return [
        Alert(
            "SlurmNodeScheduledWithUnhealthyGpu",
            severity="critical",
            team=Team.GPU_OPS,
            expr=f"node:gpus_unhealthy:count > 0 and on ({ctx.cluster}, node) {schedulable}",
            for_=for_,
            summary="Slurm still schedules jobs on a node with an unhealthy GPU.",
            description=f"{label('node')} (cluster {label(ctx.cluster)}) has had an unhealthy GPU "
            f"for {for_} while Slurm still allocates it: new jobs land on the broken GPU. Drain it: scontrol update "
            f"NodeName={label('node')} State=DRAIN Reason=gpu-unhealthy; then check why the health check did not.",
            runbook="slurm",
            dashboard=DashboardUid.SLURM_JOBS,
            fired_by=("dbe", "row_remap_failure"),
            **standard_cases(
                when,
                fault="a GPU fails its row remap, the node stays mixed in Slurm",
                fault_series=[unhealthy("n1"), slurm_state("n1", "mixed")],
                expect=[alert(**ctx.cluster_labels, node="n1")],
                healthy="every GPU healthy",
                healthy_series=[slurm_state("n1", "mixed")],
                pending="unhealthy for less than the for: duration",
                also_silent=[
                    when.silent("the node drained", [unhealthy("n1"), slurm_state("n1", "drained")]),
                    when.silent("the node down (not responding)", [unhealthy("n1"), slurm_state("n1", "down*")]),
                ],
            ),
        )
    ]


def _node_out_of_service(ctx: Context) -> list[Alert]:
    """A node Slurm holds out of service on purpose: exists only to inhibit its exporters' down alerts
    (alerts/alertmanager.py), since sinfo already shows the node and why. Needs each node's state (SckyzO's node
    collector)."""
    slurm = ctx.sources["slurm"].exporter
    if not slurm.signals_for("node_state"):
        return []
    where = {"status": "=~" + escape.promql_string(OUT_OF_SERVICE)}

    def state(status: str) -> Series:
        return series(
            ctx, "slurm", slurm.signals_for("node_state")[0], "1x20", node="n1", status=status, partition="gpu"
        )

    def held_out(status: str) -> Case:
        return Case(
            f"the node {status}", at="5m", series=[state(status)], expect=[alert(**ctx.cluster_labels, node="n1")]
        )

    return [
        Alert(
            "SlurmNodeOutOfService",
            severity="info",
            team=Team.NONE,
            expr=ctx.select("slurm", slurm.signals_for("node_state"), ("node",), op="group", where=where),
            for_=None,
            no_for_reason="it only inhibits the exporter alerts of a node Slurm holds out of service, from the start",
            summary="Slurm holds a node out of service.",
            description=f"{label('node')} (cluster {label(ctx.cluster)}) is drained, in maintenance, rebooting, "
            "failing or powered down in Slurm: its exporters' down alerts are inhibited.",
            runbook="slurm",
            dashboard=DashboardUid.SLURM_JOBS,
            fired_by=("slurm_nodes_down",),  # it drains a second node
            fires_on=[held_out(status) for status in ("drained", "draining", "maint", "reboot^", "idle~", "drained*")],
            silent_on=[
                Case(f"the node {status}", at="5m", series=[state(status)])
                for status in ("mixed", "allocated", "idle", "down*", "down")
            ],
        )
    ]


def _gpus_below_gres(ctx: Context) -> list[Alert]:
    """Fewer GPUs report than Slurm configures on the node (GRES, node:slurm_gpus:count), for longer than
    GpuSeriesMissing remembers: a GPU lost before its lookback began, or never seen since a rebuild. The GPUs are
    counted as GpuSeriesMissing counts them (temperature by `gpu`: each GPU once, MIG instances too), and a loss
    it still sees is left to it, so one fault is one alert."""
    gres = ctx.sources["slurm"].exporter.signals_for("node_gres")
    if not gres or not (ctx.sources["dcgm"].enabled or ctx.sources["amd"].enabled):
        return []
    cluster = ctx.cluster
    lookback = ctx.thresholds.gpu_count_lookback
    reporting = aggregate("count", (cluster, "node"), ctx.gpu("temperature", op="group"))
    recent = f"max_over_time({reporting}[{lookback}:{duration(duration_seconds(lookback) // 24)}])"
    when = timing(ctx, "15m", 0)
    held = f"x{when.samples}"

    def temperature(values: str, gpu: str) -> Series:
        return gpu_si_series(ctx, "temperature", values, node="n1", gpu=gpu)

    def slurm_gres(count: int, gres_type: str = "gpu:h100") -> Series:
        labels = {"status": "mixed", "partition": "gpu", "gres_type": gres_type}
        return series(ctx, "slurm", gres[0], f"{count}{held}", node="n1", **labels)

    three = [temperature(f"60{held}", gpu) for gpu in "012"]
    return [
        Alert(
            "SlurmNodeGpusBelowGres",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"{reporting} < on ({cluster}, node) node:slurm_gpus:count "
            f"unless on ({cluster}, node) ({reporting} < on ({cluster}, node) {recent})",
            # The GRES count is configuration: a node configured and the GPU seen differing for 15 minutes is
            # not a node booting or an exporter restarting.
            for_="15m",
            summary="A node reports fewer GPUs than Slurm configures on it.",
            description=f"{label('node')} (cluster {label(ctx.cluster)}) reports fewer GPUs than its GRES in Slurm, "
            f"and has for longer than {lookback}: a GPU missing since then, or Slurm's configuration names GPUs the "
            "node does not have. Check nvidia-smi -L and scontrol show node.",
            runbook="slurm",
            dashboard=DashboardUid.SLURM_JOBS,
            **standard_cases(
                when,
                fault="three GPUs report all along, Slurm configures four",
                fault_series=[*three, slurm_gres(4)],
                expect=[alert(**ctx.cluster_labels, node="n1")],
                healthy="four GPUs report, Slurm configures four",
                healthy_series=[*three, temperature(f"60{held}", "3"), slurm_gres(4)],
                pending="fewer for less than the for: duration",
                also_silent=[
                    when.silent(
                        "a GPU lost within the lookback (GpuSeriesMissing's case)",
                        [*three, temperature("60x10 stale", "3"), slurm_gres(4)],
                    ),
                    when.silent(
                        "Slurm schedules MIG devices (more GRES than GPUs)", [*three, slurm_gres(7, "gpu:1g.10gb")]
                    ),
                ],
            ),
        )
    ]


def _controller(ctx: Context, row: _ControllerLoad) -> Alert:
    signals = ctx.sources["slurm"].exporter.signals_for(row.canonical)
    limit = row.limit(ctx.thresholds)
    when = timing(ctx, row.for_, 0)

    def sdiag(value: float) -> list[Series]:
        return [slurm_controller(ctx, signals[0], f"{value:g}x{when.samples}")]

    return Alert(
        row.alert,
        severity=row.severity,
        team=Team.SLURM_ADMINS,
        expr=f"{ctx.select('slurm', signals, (), op='max')} > {limit:g}",
        for_=row.for_,
        summary=row.summary,
        description=f"sdiag on cluster {label(ctx.cluster)} has read above {limit:g} for {row.for_}: {row.meaning}",
        runbook="slurm",
        dashboard=DashboardUid.SLURM_JOBS,
        fired_by=row.fired_by,
        **standard_cases(
            when,
            fault="just above the limit",
            fault_series=sdiag(math.floor(limit) + 1),
            expect=[alert(**ctx.cluster_labels)],
            healthy="a quiet controller",
            healthy_series=sdiag(0),
            pending="above the limit for less than the for: duration",
            also_silent=[when.silent("at the limit", sdiag(limit))],
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
