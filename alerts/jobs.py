"""Job lifecycle: an alert that only exists to inhibit others when a job ends (DESIGN.md §10)."""
from hpcobs.context import Context
from hpcobs.rules import Alert, Group
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import gpu_utilization, series

# Long enough to cover the lookback (5m) after which an ended series disappears without staleness markers.
ENDED_WITHIN = "15m"


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = ctx.cluster_labels

    def job(minutes_running):
        samples = 2 * minutes_running
        return [series(ctx, "job_info", "job_info", f"1x{samples}", node="n1", hpc_job="42", user="alice",
                       account="llm", partition="gpu", job_name="train", qos="normal"),
                gpu_utilization(ctx, f"0.9x{samples}", node="n1", gpu="0", hpc_job="42")]

    return [Group("hpcobs-jobs-alerts", domain="jobs", interval=ctx.scrape_interval, rules=[
        Alert(
            "SlurmJobEnded", severity="info", team="none",
            expr=f"(job:slurm_job_info:max offset {ENDED_WITHIN}) unless on ({c}, hpc_job) job:slurm_job_info:max",
            for_=None, no_for_reason="it only lives for the minutes after a job ends, to inhibit that job's alerts",
            summary="A Slurm job ended.",
            description="Job {{ $labels.hpc_job }} of {{ $labels.user }} ({{ $labels.account }}) in cluster "
                        "{{ $labels.%s }} ended; its training and idle-GPU alerts are inhibited." % c,
            runbook="jobs", dashboard="hpcobs-slurm-jobs", dashboard_vars=(c,),
            fires_on=[Case("in the minutes after the job's info series disappears", at="33m",
                           series=job(20),
                           expect=[alert(**cl, hpc_job="42", user="alice", account="llm", partition="gpu")])],
            silent_on=[Case("while the job runs", at="25m", series=job(30)),
                       Case("long after the job ended", at="50m", series=job(20))],
        ),
    ])]
