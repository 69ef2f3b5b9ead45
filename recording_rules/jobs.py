"""Job attribution: who owns each GPU, and per-job, per-account and per-partition GPU use
(docs/recording-rules.md, Attribution).

dcgm-exporter labels a GPU's series with `hpc_job` from our prolog's mapping files; user, account and
partition come from one job-info series per job. The job-info series is normalised once and joined to
every job-level series; a job whose info is missing keeps its series, without user and account. Account and
partition views sum the job level, weighting averages by GPUs held.
"""

from functools import partial

from hpcobs.context import Context
from hpcobs.promql import aggregate
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, Series, sample
from hpcobs.synthetic import gpu_si_series, gpu_utilization, job_info

OWNER = ("user", "account", "partition")
OWNED = {"hpc_job": '!=""'}


def groups(ctx: Context) -> list[Group]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    window = ctx.rate_window
    idle_window = ctx.thresholds.gpu_idle_window

    def attributed(expr: str) -> str:
        # A job without info (prolog broken) keeps its series, without user and account.
        return (
            f"({expr} * on ({cluster}, hpc_job) group_left ({', '.join(OWNER)}) job:slurm_job_info:max) "
            f"or on ({cluster}, hpc_job) {expr}"
        )

    def per_job(op: str, expr: str) -> str:
        return attributed(aggregate(op, (cluster, "hpc_job"), expr))

    def info(job: str, user: str, account: str, partition: str, node: str = "n1") -> Series:
        return job_info(ctx, job, "1x20", node=node, user=user, account=account, partition=partition)

    util = partial(gpu_utilization, ctx)

    def gpu_si(canonical, values, **kw):
        return gpu_si_series(ctx, canonical, values, **kw)

    alice = dict(user="alice", account="llm", partition="gpu")
    with_amd = ctx.sources["amd"].enabled
    # Job 7 (alice, llm) holds n1 GPUs 0-1 and n2 GPU 0; job 8 (bob, llm) shares n1 GPU 1; job 9 has no info.
    jobs = [
        info("7", **alice),
        info("7", node="n2", **alice),
        info("8", "bob", "llm", "gpu"),
        util("0.5x20", node="n1", gpu="0", hpc_job="7"),
        util("1x20", node="n1", gpu="1", hpc_job="7"),
        util("1x20", node="n1", gpu="1", hpc_job="8"),
        util("0x20", node="n2", gpu="0", hpc_job="7"),
        util("0.3x20", node="n2", gpu="1", hpc_job="9"),
        util("0x20", node="n2", gpu="2"),
    ]
    job7 = dict(**cluster_labels, hpc_job="7", **alice)

    info_group = Group(
        "hpcobs-jobs-info",
        domain="jobs",
        interval=ctx.scrape_interval,
        rules=[
            Record(
                "job:slurm_job_info:max",
                ctx.select("job_info", ["job_info"], ("hpc_job", *OWNER)),
                tests=[
                    Case(
                        "one info series per job, deduplicated across its nodes",
                        at="5m",
                        series=jobs,
                        expect=[
                            sample(1, **job7),
                            sample(1, **cluster_labels, hpc_job="8", user="bob", account="llm", partition="gpu"),
                        ],
                    )
                ],
            ),
        ],
    )

    gpu_group = Group(
        "hpcobs-jobs-gpu",
        domain="jobs",
        interval=ctx.scrape_interval,
        rules=[
            Record(
                "job:gpus_allocated:count",
                per_job("count", "gpu:job:info"),
                tests=[
                    Case(
                        "GPUs held by each job, with its owner",
                        at="5m",
                        series=jobs,
                        expect=[
                            sample(3, **job7),
                            sample(1, **cluster_labels, hpc_job="8", user="bob", account="llm", partition="gpu"),
                            sample(1, **cluster_labels, hpc_job="9"),
                        ],
                    )
                ],
            ),
            Record(
                "job:gpu_utilization:avg",
                per_job("avg", f"gpu:utilization:ratio * on ({cluster}, node, gpu) group_right () gpu:job:info"),
                tests=[
                    Case(
                        "mean over the job's GPUs; a shared GPU counts for both jobs; AMD GPUs join by job_id",
                        at="5m",
                        series=jobs
                        + ([util("1x20", node="amd1", gpu="0", hpc_job="7", vendor="amd")] if with_amd else []),
                        expect=[
                            sample(0.625 if with_amd else 0.5, **job7),
                            sample(1, **cluster_labels, hpc_job="8", user="bob", account="llm", partition="gpu"),
                            sample(0.3, **cluster_labels, hpc_job="9"),
                        ],
                    )
                ],
            ),
            Record(
                "job:gpu_sm_active:avg",
                per_job("avg", ctx.gpu("sm_active", keep=("hpc_job",), where=OWNED)),
                tests=[
                    Case(
                        "SM activity of the job's GPUs",
                        at="5m",
                        series=[
                            info("7", **alice),
                            gpu_si("sm_active", "0.25x20", node="n1", gpu="0", hpc_job="7"),
                            gpu_si("sm_active", "0.75x20", node="n1", gpu="1", hpc_job="7"),
                            gpu_si("sm_active", "0.9x20", node="n1", gpu="2"),
                        ],
                        expect=[sample(0.5, **job7)],
                    )
                ],
            ),
            Record(
                "job:gpu_tensor_active:avg",
                per_job("avg", ctx.gpu("tensor_active", keep=("hpc_job",), where=OWNED)),
                tests=[
                    Case(
                        "tensor activity of the job's GPUs",
                        at="5m",
                        series=[info("7", **alice), gpu_si("tensor_active", "0.5x20", node="n1", gpu="0", hpc_job="7")],
                        expect=[sample(0.5, **job7)],
                    )
                ],
            ),
            Record(
                "job:gpu_dram_active:avg",
                per_job("avg", ctx.gpu("dram_active", keep=("hpc_job",), where=OWNED)),
                tests=[
                    Case(
                        "memory-interface activity of the job's GPUs",
                        at="5m",
                        series=[info("7", **alice), gpu_si("dram_active", "0.125x20", node="n1", gpu="0", hpc_job="7")],
                        expect=[sample(0.125, **job7)],
                    )
                ],
            ),
            Record(
                "job:gpu_memory_used:max",
                per_job("max", ctx.gpu("memory_used", keep=("hpc_job",), where=OWNED)),
                tests=[
                    Case(
                        "the largest framebuffer use among the job's GPUs (jobstats)",
                        at="5m",
                        series=[
                            info("7", **alice),
                            gpu_si("memory_used", f"{2**30}x20", node="n1", gpu="0", hpc_job="7"),
                            gpu_si("memory_used", f"{2**33}x20", node="n1", gpu="1", hpc_job="7"),
                        ],
                        expect=[sample(2**33, **job7)],
                    )
                ],
            ),
            Record(
                "job:gpu_power:watts",
                per_job(
                    "sum",
                    f"{ctx.gpu('energy', keep=('hpc_job',), where=OWNED, over=lambda e: f'rate({e}[{window}])')}"
                    f" / on ({cluster}, node, gpu) group_left () count by ({cluster}, node, gpu) (gpu:job:info)",
                ),
                tests=[
                    Case(
                        "energy-counter power; a GPU shared by two jobs is split between them",
                        at="10m",
                        series=[
                            info("7", **alice),
                            info("8", "bob", "llm", "gpu"),
                            util("0.9x20", node="n1", gpu="0", hpc_job="7"),
                            util("0.9x20", node="n1", gpu="0", hpc_job="8"),
                            util("0.9x20", node="n1", gpu="1", hpc_job="7"),
                            *[
                                gpu_si("energy", f"0+{400 * 30}x40", node="n1", gpu="0", hpc_job=job)
                                for job in ("7", "8")
                            ],
                            gpu_si("energy", f"0+{300 * 30}x40", node="n1", gpu="1", hpc_job="7"),
                        ],
                        expect=[
                            sample(500, **job7),
                            sample(200, **cluster_labels, hpc_job="8", user="bob", account="llm", partition="gpu"),
                        ],
                    )
                ],
            ),
            Record(
                "job:gpus_allocated_idle:count",
                per_job(
                    "count",
                    f"(max_over_time(gpu:utilization:ratio[{idle_window}]) == 0) "
                    f"* on ({cluster}, node, gpu) group_right () (gpu:job:info offset {idle_window})",
                ),
                tests=[
                    Case(
                        f"GPUs the job has held at 0% for {idle_window}",
                        at="90m",
                        series=[
                            job_info(ctx, "7", "1x180", **alice),
                            util("0x180", node="n1", gpu="0", hpc_job="7"),
                            util("0x180", node="n1", gpu="1", hpc_job="7"),
                            util("0.5x180", node="n1", gpu="2", hpc_job="7"),
                        ],
                        expect=[sample(2, **job7)],
                    )
                ],
            ),
        ],
    )

    power = [
        info("7", **alice),
        info("8", "bob", "llm", "gpu"),
        info("9", "carol", "vision", "gpu"),
        *[util("0.9x40", node="n1", gpu=gpu, hpc_job=job) for gpu, job in (("0", "7"), ("1", "8"), ("2", "9"))],
        *[
            gpu_si("energy", f"0+{watts * 30}x40", node="n1", gpu=gpu, hpc_job=job)
            for gpu, job, watts in (("0", "7", 300), ("1", "8", 200), ("2", "9", 100))
        ],
    ]
    owner_groups = []
    for level, llm in (("account", "llm"), ("partition", "gpu")):
        by = f"{cluster}, {level}"
        per = {level: llm}
        owner_groups.append(
            Group(
                f"hpcobs-jobs-{level}",
                domain="jobs",
                interval=ctx.scrape_interval,
                rules=[
                    Record(
                        f"{level}:gpus_allocated:count",
                        f"sum by ({by}) (job:gpus_allocated:count)",
                        tests=[
                            Case(
                                f"GPUs held per {level}; jobs without info stay visible without {level}",
                                at="5m",
                                series=jobs,
                                expect=[sample(4, **cluster_labels, **per), sample(1, **cluster_labels)],
                            )
                        ],
                    ),
                    Record(
                        f"{level}:gpu_utilization:avg",
                        f"avg by ({by}) (gpu:utilization:ratio * on ({cluster}, node, gpu) group_right () gpu:job:info "
                        f"* on ({cluster}, hpc_job) group_left ({level}) job:slurm_job_info:max)",
                        tests=[
                            Case(
                                f"mean over the GPUs the {level}'s jobs hold (a GPU shared by two of its jobs "
                                "counts twice)",
                                at="5m",
                                series=jobs,
                                expect=[sample((0.5 * 3 + 1) / 4, **cluster_labels, **per)],
                            )
                        ],
                    ),
                    Record(
                        f"{level}:gpu_power:watts",
                        f"sum by ({by}) (job:gpu_power:watts)",
                        tests=[
                            Case(
                                f"power of the {level}'s jobs",
                                at="10m",
                                series=power,
                                expect=[sample(500 if level == "account" else 600, **cluster_labels, **per)]
                                + ([sample(100, **cluster_labels, account="vision")] if level == "account" else []),
                            )
                        ],
                    ),
                ],
            )
        )
    return [info_group, gpu_group, *owner_groups]
