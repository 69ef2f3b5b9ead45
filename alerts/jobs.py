"""Job lifecycle: an alert that only exists to inhibit others when a job ends (alerts/alertmanager.py)."""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import JOB_OWNER, gpu_utilization, job_info
from hpcobs.settings.names import DashboardUid, Team

# Long enough to cover the lookback (5m) after which an ended series disappears without staleness markers.
ENDED_WITHIN = "15m"


def groups(ctx: Context) -> list[Group]:
    cluster = ctx.cluster

    def job(minutes_running: int) -> list[Series]:
        running = ctx.timeline.held(1, minutes_running * 60)
        return [
            job_info(ctx, "42", running),
            gpu_utilization(ctx, ctx.timeline.held(0.9, minutes_running * 60), node="n1", gpu="0", hpc_job="42"),
        ]

    return [
        Group(
            "hpcobs-jobs-alerts",
            domain="jobs",
            interval=ctx.evaluation_interval,
            rules=[
                Alert(
                    "SlurmJobEnded",
                    severity="info",
                    team=Team.NONE,
                    expr=f"(job:slurm_job_info:max offset {ENDED_WITHIN}) "
                    f"unless on ({cluster}, hpc_job) job:slurm_job_info:max",
                    for_=None,
                    no_for_reason="it only lives for the minutes after a job ends, to inhibit that job's alerts",
                    summary="A Slurm job ended.",
                    description=f"Job {label('hpc_job')} of {label('user')} ({label('account')}) in cluster "
                    f"{label(cluster)} ended; its training and idle-GPU alerts are inhibited.",
                    runbook="jobs",
                    dashboard=DashboardUid.SLURM_JOBS,
                    fires_on=[
                        Case(
                            "in the minutes after the job's info series disappears",
                            at="33m",
                            series=job(20),
                            expect=[alert(**ctx.cluster_labels, hpc_job="42", **JOB_OWNER)],
                        )
                    ],
                    silent_on=[
                        Case("while the job runs", at="25m", series=job(30)),
                        Case("long after the job ended", at="50m", series=job(20)),
                    ],
                ),
            ],
        )
    ]
