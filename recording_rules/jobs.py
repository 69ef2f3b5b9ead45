"""Job attribution: who owns each GPU, and per-job, per-account and per-partition GPU use
(docs/recording-rules.md, Attribution).

dcgm-exporter labels a GPU's series with `hpc_job` from our prolog's mapping files; user, account and
partition come from one job-info series per job. The job-info series is normalised once and joined to
every job-level series; a job whose info is missing keeps its series, without user and account. Account and
partition views sum the job level, weighting averages by GPUs held.
"""

from functools import partial

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Series, sample
from hpcobs.authoring.synthetic import gpu_si_series, gpu_utilization, job_info
from hpcobs.lang.promql import aggregate, duration, duration_seconds

OWNER = ("user", "account", "partition")
OWNED = {"hpc_job": '!=""'}


ALICE = {"user": "alice", "account": "llm", "partition": "gpu"}
BOB = {"user": "bob", "account": "llm", "partition": "gpu"}


def groups(ctx: Context) -> list[Group]:
    return [
        Group("hpcobs-jobs-info", domain="jobs", interval=ctx.evaluation_interval, rules=[_job_info(ctx)]),
        # Three groups of about the same cost, evaluated side by side (docs/benchmarks.md, Fleet scale).
        Group(
            "hpcobs-jobs-gpu", domain="jobs", interval=ctx.evaluation_interval, rules=[*_allocation(ctx), _idle(ctx)]
        ),
        Group("hpcobs-jobs-activity", domain="jobs", interval=ctx.evaluation_interval, rules=_activity(ctx)),
        Group(
            "hpcobs-jobs-memory-power",
            domain="jobs",
            interval=ctx.evaluation_interval,
            rules=[_memory(ctx), _power(ctx)],
        ),
        # Jobs 7 and 8 share an account and a partition; each level sums the job level the same way.
        _owner_group(ctx, "account", "llm"),
        _owner_group(ctx, "partition", "gpu"),
    ]


def _per_job(ctx: Context, op: str, expr: str) -> str:
    cluster = ctx.cluster
    per_job = aggregate(op, (cluster, "hpc_job"), expr)
    # A job without info (prolog broken) keeps its series, without user and account: its owner is the job-info
    # series or, failing that, a blank one for each job holding GPUs (gpu:job:info). Joining a cheap owner list
    # evaluates the per-GPU expression once; `per_job or per_job * owner` would read the fleet twice.
    owners = f"job:slurm_job_info:max or on ({cluster}, hpc_job) group by ({cluster}, hpc_job) (gpu:job:info)"
    return f"{per_job} * on ({cluster}, hpc_job) group_left ({', '.join(OWNER)}) ({owners})"


def _info(ctx: Context, job: str, owner: dict[str, str], node: str = "n1") -> Series:
    return job_info(ctx, job, ctx.timeline.held(1, ctx.timeline.span), node=node, **owner)


def _job_labels(ctx: Context, job: str, owner: dict[str, str]) -> dict[str, str]:
    """The labels a job-level record carries: the cluster's, the job and its owner."""
    return dict(**ctx.cluster_labels, hpc_job=job, **owner)


def _jobs(ctx: Context) -> list[Series]:
    t = ctx.timeline
    util = partial(gpu_utilization, ctx)
    # Job 7 (alice, llm) holds n1 GPUs 0-1 and n2 GPU 0; job 8 (bob, llm) shares n1 GPU 1; job 9 has no info.
    return [
        _info(ctx, "7", ALICE),
        _info(ctx, "7", ALICE, node="n2"),
        _info(ctx, "8", BOB),
        util(t.held(0.5, t.span), node="n1", gpu="0", hpc_job="7"),
        util(t.held(1, t.span), node="n1", gpu="1", hpc_job="7"),
        util(t.held(1, t.span), node="n1", gpu="1", hpc_job="8"),
        util(t.held(0, t.span), node="n2", gpu="0", hpc_job="7"),
        util(t.held(0.3, t.span), node="n2", gpu="1", hpc_job="9"),
        util(t.held(0, t.span), node="n2", gpu="2"),
    ]


def _job_info(ctx: Context) -> Record:
    t = ctx.timeline
    return Record(
        "job:slurm_job_info:max",
        ctx.select("job_info", ["job_info"], ("hpc_job", *OWNER)),
        tests=[
            Case(
                "one info series per job, deduplicated across its nodes",
                at=t.settled,
                series=_jobs(ctx),
                expect=[sample(1, **_job_labels(ctx, "7", ALICE)), sample(1, **_job_labels(ctx, "8", BOB))],
            )
        ],
    )


def _allocation(ctx: Context) -> list[Record]:
    t = ctx.timeline
    cluster = ctx.cluster
    job7, job8 = _job_labels(ctx, "7", ALICE), _job_labels(ctx, "8", BOB)
    with_amd = ctx.sources["amd"].enabled
    amd_gpu = (
        [gpu_utilization(ctx, t.held(1, t.span), node="amd1", gpu="0", hpc_job="7", vendor="amd")] if with_amd else []
    )
    return [
        Record(
            "job:gpus_allocated:count",
            _per_job(ctx, "count", "gpu:job:info"),
            tests=[
                Case(
                    "GPUs held by each job, with its owner",
                    at=t.settled,
                    series=_jobs(ctx),
                    expect=[sample(3, **job7), sample(1, **job8), sample(1, **ctx.cluster_labels, hpc_job="9")],
                )
            ],
        ),
        Record(
            "job:gpu_utilization:avg",
            _per_job(ctx, "avg", f"gpu:utilization:ratio * on ({cluster}, node, gpu) group_right () gpu:job:info"),
            tests=[
                Case(
                    "mean over the job's GPUs; a shared GPU counts for both jobs; AMD GPUs join by job_id",
                    at=t.settled,
                    series=_jobs(ctx) + amd_gpu,
                    expect=[
                        sample(0.625 if with_amd else 0.5, **job7),
                        sample(1, **job8),
                        sample(0.3, **ctx.cluster_labels, hpc_job="9"),
                    ],
                )
            ],
        ),
        Record(
            "job:gpu_utilization_by_node:avg",
            aggregate(
                "avg",
                (cluster, "hpc_job", "node"),
                f"gpu:utilization:ratio * on ({cluster}, node, gpu) group_right () gpu:job:info",
            ),
            tests=[
                Case(
                    "mean over the job's GPUs on each of its nodes (what the training dashboard draws per node, "
                    "instead of reading every GPU of a large job)",
                    at=t.settled,
                    series=_jobs(ctx),
                    expect=[
                        sample(0.75, **ctx.cluster_labels, hpc_job="7", node="n1"),
                        sample(0, **ctx.cluster_labels, hpc_job="7", node="n2"),
                        sample(1, **ctx.cluster_labels, hpc_job="8", node="n1"),
                        sample(0.3, **ctx.cluster_labels, hpc_job="9", node="n2"),
                    ],
                )
            ],
        ),
    ]


def _owned(ctx: Context, canonical: str) -> str:
    """A per-GPU quantity of the GPUs held by a job, keeping the job."""
    return ctx.gpu(canonical, keep=("hpc_job",), where=OWNED)


def _activity(ctx: Context) -> list[Record]:
    """Per-job means of the profiling fields."""
    t = ctx.timeline
    job7 = _job_labels(ctx, "7", ALICE)
    gpu_si = partial(gpu_si_series, ctx)
    owned = partial(_owned, ctx)
    return [
        Record(
            "job:gpu_sm_active:avg",
            _per_job(ctx, "avg", owned("sm_active")),
            tests=[
                Case(
                    "SM activity of the job's GPUs",
                    at=t.settled,
                    series=[
                        _info(ctx, "7", ALICE),
                        gpu_si("sm_active", t.held(0.25, t.span), node="n1", gpu="0", hpc_job="7"),
                        gpu_si("sm_active", t.held(0.75, t.span), node="n1", gpu="1", hpc_job="7"),
                        gpu_si("sm_active", t.held(0.9, t.span), node="n1", gpu="2"),
                    ],
                    expect=[sample(0.5, **job7)],
                )
            ],
        ),
        Record(
            "job:gpu_tensor_active:avg",
            _per_job(ctx, "avg", owned("tensor_active")),
            tests=[
                Case(
                    "tensor activity of the job's GPUs",
                    at=t.settled,
                    series=[
                        _info(ctx, "7", ALICE),
                        gpu_si("tensor_active", t.held(0.5, t.span), node="n1", gpu="0", hpc_job="7"),
                    ],
                    expect=[sample(0.5, **job7)],
                )
            ],
        ),
        Record(
            "job:gpu_dram_active:avg",
            _per_job(ctx, "avg", owned("dram_active")),
            tests=[
                Case(
                    "memory-interface activity of the job's GPUs",
                    at=t.settled,
                    series=[
                        _info(ctx, "7", ALICE),
                        gpu_si("dram_active", t.held(0.125, t.span), node="n1", gpu="0", hpc_job="7"),
                    ],
                    expect=[sample(0.125, **job7)],
                )
            ],
        ),
    ]


def _memory(ctx: Context) -> Record:
    t = ctx.timeline
    gpu_si = partial(gpu_si_series, ctx)
    return Record(
        "job:gpu_memory_used:max",
        _per_job(ctx, "max", _owned(ctx, "memory_used")),
        tests=[
            Case(
                "the largest framebuffer use among the job's GPUs (jobstats)",
                at=t.settled,
                series=[
                    _info(ctx, "7", ALICE),
                    gpu_si("memory_used", t.held(2**30, t.span), node="n1", gpu="0", hpc_job="7"),
                    gpu_si("memory_used", t.held(2**33, t.span), node="n1", gpu="1", hpc_job="7"),
                ],
                expect=[sample(2**33, **_job_labels(ctx, "7", ALICE))],
            )
        ],
    )


def _power(ctx: Context) -> Record:
    t = ctx.timeline
    cluster = ctx.cluster
    window = ctx.rate_window
    util = partial(gpu_utilization, ctx)
    gpu_si = partial(gpu_si_series, ctx)
    return Record(
        "job:gpu_power:watts",
        _per_job(
            ctx,
            "sum",
            f"{ctx.gpu('energy', keep=('hpc_job',), where=OWNED, over=lambda e: f'rate({e}[{window}])')}"
            f" / on ({cluster}, node, gpu) group_left () count by ({cluster}, node, gpu) (gpu:job:info)",
        ),
        tests=[
            Case(
                "energy-counter power; a GPU shared by two jobs is split between them",
                at=t.settled,
                series=[
                    _info(ctx, "7", ALICE),
                    _info(ctx, "8", BOB),
                    util(t.held(0.9, t.span), node="n1", gpu="0", hpc_job="7"),
                    util(t.held(0.9, t.span), node="n1", gpu="0", hpc_job="8"),
                    util(t.held(0.9, t.span), node="n1", gpu="1", hpc_job="7"),
                    *[gpu_si("energy", t.rising(400, t.span), node="n1", gpu="0", hpc_job=job) for job in ("7", "8")],
                    gpu_si("energy", t.rising(300, t.span), node="n1", gpu="1", hpc_job="7"),
                ],
                expect=[sample(500, **_job_labels(ctx, "7", ALICE)), sample(200, **_job_labels(ctx, "8", BOB))],
            )
        ],
    )


def _idle(ctx: Context) -> Record:
    t = ctx.timeline
    idle_window = ctx.thresholds.gpu_idle_window
    util = partial(gpu_utilization, ctx)
    # Idle for the whole window and half as long again before it.
    total = duration_seconds(idle_window) * 3 // 2
    return Record(
        "job:gpus_allocated_idle:count",
        _per_job(ctx, "sum", "node:gpus_allocated_idle_by_job:count"),
        tests=[
            Case(
                f"GPUs the job has held at 0% for {idle_window}, over its nodes",
                at=duration(total),
                series=[
                    job_info(ctx, "7", t.held(1, total), **ALICE),
                    util(t.held(0, total), node="n1", gpu="0", hpc_job="7"),
                    util(t.held(0, total), node="n1", gpu="1", hpc_job="7"),
                    util(t.held(0.5, total), node="n1", gpu="2", hpc_job="7"),
                    util(t.held(0, total), node="n2", gpu="0", hpc_job="7"),
                ],
                expect=[sample(3, **_job_labels(ctx, "7", ALICE))],
            )
        ],
    )


def _owner_group(ctx: Context, level: str, shared: str) -> Group:
    """Account or partition totals from the job level; `shared` is the value jobs 7 and 8 have at that level."""
    t = ctx.timeline
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    by = f"{cluster}, {level}"
    per = {level: shared}
    util = partial(gpu_utilization, ctx)
    power = [
        _info(ctx, "7", ALICE),
        _info(ctx, "8", BOB),
        _info(ctx, "9", {"user": "carol", "account": "vision", "partition": "gpu"}),
        *[
            util(t.held(0.9, t.span), node="n1", gpu=gpu, hpc_job=job)
            for gpu, job in (("0", "7"), ("1", "8"), ("2", "9"))
        ],
        *[
            gpu_si_series(ctx, "energy", t.rising(watts, t.span), node="n1", gpu=gpu, hpc_job=job)
            for gpu, job, watts in (("0", "7", 300), ("1", "8", 200), ("2", "9", 100))
        ],
    ]
    return Group(
        f"hpcobs-jobs-{level}",
        domain="jobs",
        interval=ctx.evaluation_interval,
        rules=[
            Record(
                f"{level}:gpus_allocated:count",
                f"sum by ({by}) (job:gpus_allocated:count)",
                tests=[
                    Case(
                        f"GPUs held per {level}; jobs without info stay visible without {level}",
                        at=t.settled,
                        series=_jobs(ctx),
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
                        f"mean over the GPUs the {level}'s jobs hold (a GPU shared by two of its jobs counts twice)",
                        at=t.settled,
                        series=_jobs(ctx),
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
                        at=t.settled,
                        series=power,
                        # Job 9 (carol) is in account vision but partition gpu.
                        expect=[sample(500 if level == "account" else 600, **cluster_labels, **per)]
                        + ([sample(100, **cluster_labels, account="vision")] if level == "account" else []),
                    )
                ],
            ),
        ],
    )
