"""Slurm alerts (DESIGN.md §10): nodes out of service, queue backlog, OOM kills, jobs holding idle GPUs.

Node states and queue depth read the partition records of recording_rules/slurm.py, which hide the
exporter flavour (SckyzO/vpenso or Slurm >= 25.11 native). OOM kills exist only in the native flavour.
Runbooks: docs/runbooks/slurm.md, one section per alert.
"""
from hpcobs.context import Context
from hpcobs.exporter_labels import SLURM_CONTROLLER
from hpcobs.promql import duration, duration_seconds
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import gpu_utilization, series

DASHBOARD = "hpcobs-slurm-jobs"



def groups(ctx: Context) -> list[Group]:
    rules = (_partitions(ctx) if ctx.sources["slurm"].enabled else []) + _jobs(ctx)
    return [Group("hpcobs-slurm-alerts", domain="slurm", interval=ctx.scrape_interval, rules=rules)] if rules else []


def _partitions(ctx: Context) -> list[Alert]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    slurm = ctx.sources["slurm"]
    common = dict(runbook="slurm", dashboard=DASHBOARD, dashboard_vars=(c, "partition"))

    def partition_series(canonical: str, values: str, partition: str = "gpu"):
        (signal, *_) = slurm.exporter.signals_for(canonical)
        extra = {"active_feature_set": "h100"} if "active_feature_set" in slurm.metric(signal).labels else {}
        return series(ctx, "slurm", signal, values, node=SLURM_CONTROLLER, partition=partition, **extra)

    def nodes_in_state(state: str, limit: int, for_: str, severity: str, summary: str, meaning: str,
                       fired_by: tuple[str, ...] = ()) -> Alert:
        for_s = duration_seconds(for_)
        samples = (for_s + 900) // 30
        name = {"down": "SlurmNodesDown", "drain": "SlurmNodesDrained", "fail": "SlurmNodesFailing"}[state]
        canonical = f"partition_nodes_{state}"
        return Alert(
            name, severity=severity, team="slurm-admins",
            expr=f'partition:slurm_nodes:count{{state="{state}"}} > {limit}',
            for_=for_,
            summary=summary,
            description=f"Partition {label('partition')} of cluster {label(c)} has had more than {limit} node(s) in state "
                        f"{label('state')} for {for_}: {meaning} List them with sinfo -R -p {label('partition')}.",
            fired_by=fired_by, **common,
            fires_on=[Case(f"{limit + 1} node(s) {state}", at=duration(for_s + 300),
                           series=[partition_series(canonical, f"0 0 {limit + 1}x{samples}")],
                           expect=[alert(**cl, partition="gpu", state=state)])],
            silent_on=[Case(f"no node {state}", at=duration(for_s + 300),
                            series=[partition_series(canonical, f"0x{samples}")]),
                       Case(f"exactly {limit} node(s) {state}, the tolerated number", at=duration(for_s + 300),
                            series=[partition_series(canonical, f"{limit}x{samples}")]),
                       Case(f"{state} for less than the for: duration", at=duration(for_s - 60),
                            series=[partition_series(canonical, f"{limit + 1}x{samples}")])],
        )

    down = th["slurm_partition_nodes_down"]
    backlog_for = th["slurm_queue_backlog_for"]
    backlog_s = duration_seconds(backlog_for)
    pending = th["slurm_partition_pending_jobs"]
    samples = (backlog_s + 900) // 30
    out = [
        nodes_in_state("down", down, "5m", "warning", "Slurm nodes are down.",
                       "Slurm lost contact with them (power, network, slurmd) and killed their jobs (NODE_FAIL).",
                       fired_by=("slurm_nodes_down",)),
        nodes_in_state("drain", th["slurm_partition_nodes_drained"], th["slurm_nodes_drained_for"], "warning",
                       "Slurm nodes are drained or draining.",
                       "they take no new jobs until an admin resumes them; drains set by health checks (GPU "
                       "Xid, DCGM diag) need a repair.",
                       fired_by=("slurm_nodes_down",)),
        nodes_in_state("fail", down, "5m", "warning", "Slurm nodes are failing.",
                       "an admin or a health check marked them FAIL: their jobs are about to lose them."),
        Alert(
            "SlurmQueueBacklog", severity="warning", team="slurm-admins",
            expr=f"partition:slurm_jobs_pending:count > {pending}",
            for_=backlog_for,
            summary="Jobs pile up in a Slurm partition's queue.",
            description=f"Partition {label('partition')} of cluster {label(c)} has had more than {pending} pending jobs "
                        f"for {backlog_for}: check squeue -p {label('partition')} -t PD for the reasons (Resources, "
                        "nodes down or drained, reservations, a stuck scheduler).",
            fired_by=("queue_backlog",), **common,
            fires_on=[Case("the queue stays long", at=duration(backlog_s + 300),
                           series=[partition_series("partition_jobs_pending", f"{pending + 1}x{samples}"),
                                   partition_series("partition_jobs_pending", f"3x{samples}", "debug")],
                           expect=[alert(**cl, partition="gpu")])],
            silent_on=[Case("a short queue", at=duration(backlog_s + 300),
                            series=[partition_series("partition_jobs_pending", f"4x{samples}")]),
                       Case("exactly at the threshold", at=duration(backlog_s + 300),
                            series=[partition_series("partition_jobs_pending", f"{pending}x{samples}")]),
                       Case("a burst of submissions shorter than the for: duration", at=duration(backlog_s - 120),
                            series=[partition_series("partition_jobs_pending", f"{pending + 1}x{samples}")])],
        ),
    ]
    oom = slurm.exporter.signals_for("partition_jobs_oom")
    if oom:
        out.append(Alert(
            "SlurmOomKills", severity="info", team="slurm-admins",
            expr=f'{ctx.select("slurm", oom, ("partition",), op="sum")} > 0',
            for_=None,
            no_for_reason="an OOM kill is an event; slurmctld lists the job in OUT_OF_MEMORY state only for "
                          "MinJobAge (300 s by default), so a for: would only shorten the alert",
            summary="Slurm jobs ended out of memory.",
            description=f"Jobs of partition {label('partition')} (cluster {label(c)}) ended OUT_OF_MEMORY: sacct -r "
                        f"{label('partition')} -s OOM -S now-1hour lists them and their owners; many at once point "
                        "to a node or a memory limit, not to one job.",
            fired_by=("oom_kill",), **common,
            fires_on=[Case("a job OOM-killed", at="3m", series=[partition_series("partition_jobs_oom", "0 0 1x10")],
                           expect=[alert(**cl, partition="gpu")])],
            silent_on=[Case("no OOM job", at="3m", series=[partition_series("partition_jobs_oom", "0x10")]),
                       Case("an OOM job aged out of the controller's list (MinJobAge)", at="8m",
                            series=[partition_series("partition_jobs_oom", "1x10 0x10")])],
        ))
    return out


def _jobs(ctx: Context) -> list[Alert]:
    if not ctx.sources["dcgm"].enabled:
        return []
    c = ctx.cluster
    cl = ctx.cluster_labels
    idle = ctx.thresholds["gpu_idle_window"]
    idle_s = duration_seconds(idle)
    samples = (idle_s + 1200) // 30
    owner = dict(user="alice", account="llm", partition="gpu")

    def util(ratios, gpu):
        return gpu_utilization(ctx, ratios, node="n1", gpu=gpu, hpc_job="7")

    info = series(ctx, "job_info", "job_info", f"1x{samples}", node="n1", hpc_job="7", job_name="train", qos="normal",
                  **owner)
    return [Alert(
        "SlurmJobHoldingIdleGpus", severity="warning", team="job-owner",
        expr="job:gpus_allocated_idle:count > 0",
        for_="5m",
        summary="A Slurm job holds GPUs it has not used at all for the idle window.",
        description=f"Job {label('hpc_job')} of {label('user')} (account {label('account')}, partition {label('partition')}, "
                    f"cluster {label(c)}) holds GPUs whose utilisation has been 0 at every sample for {idle}: cancel "
                    "it or resubmit it with the GPUs it really uses.",
        runbook="slurm", dashboard=DASHBOARD, dashboard_vars=(c, "partition", "account", "user"),
        fired_by=("idle_gpus",),
        fires_on=[Case(f"two of the job's three GPUs at 0% for {idle}", at=duration(idle_s + 600),
                       series=[info, util(f"0x{samples}", "0"), util(f"0x{samples}", "1"), util(f"0.6x{samples}", "2")],
                       expect=[alert(**cl, hpc_job="7", **owner)])],
        silent_on=[Case("every GPU of the job busy", at=duration(idle_s + 600),
                        series=[info, util(f"0.6x{samples}", "0")]),
                   Case(f"a single busy sample inside the last {idle}", at=duration(idle_s + 600),
                        series=[info, util(f"0x{(600 + 300) // 30} 0.6 0x{samples}", "0")]),
                   Case("idle for the window, but for less than the for: duration", at=duration(idle_s + 150),
                        series=[info, util(f"0x{samples}", "0")])],
    )]
