"""Per-rank training metrics (the hpcobs training contract, catalogue `training`) and NCCL Inspector.

Ranks of a synchronous job step in lockstep: every rank leaves a step's last collective together, so the training
helper, which times a step from the previous step's end, gives every rank the same step_seconds: the job's pace,
the slowest rank's own time. Each rank also times the phases of its steps, as `tracker.phase` does: PHASE_SHARES of
its own work, the rest untimed; a slowdown that names a phase (a straggler's input pipeline, a slow fabric's
collectives) adds its extra time to that phase of the ranks it slows, one that names none stretches their every
part. A rank faster than the pace waits for the others in `backward`: with DDP the gradient all-reduce overlaps
the backward pass, so the straggler's extra data time shows as the other ranks' extra backward time, never comm.

NCCL Inspector (NVIDIA/nccl 12df1a11 plugins/profiler/inspector/inspector_prom.cc) writes, per GPU and dump, one
series per bucket of its key (communicator shape, collective, message-size range, communicator name, algorithm):
the arithmetic mean of the collective times and the geometric mean of the bus bandwidths completed in that dump.
What a job runs changes its buckets: an evaluation pass drops the gradient buckets and adds its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hpcobs.proof.simulate.core import (
    Family,
    Runs,
    accumulate,
    between,
    complement,
    placed,
    seeded,
    to_unit,
    where,
    window_mask,
)
from hpcobs.proof.simulate.model import Job

TRAINING_SIGNALS = ("steps", "step_seconds", "tokens", "model_flops", "loss", "last_step_time")
# Where a healthy rank's step goes, by phase (the helper's PHASES): 95% timed, the rest code outside any phase.
PHASE_SHARES = {"data": 0.05, "forward": 0.3, "backward": 0.45, "optimizer": 0.05, "comm": 0.1}
MODEL_PARAMS = 8e9  # model size behind the FLOPs counter (6 * params * tokens)
NCCL_VERSION = "v5.1"


def _all_reduce(n: int) -> float:
    """Bus bandwidth over algorithm bandwidth of an AllReduce on n ranks (nccl-tests doc/PERFORMANCE.md)."""
    return 2 * (n - 1) / n


def _gather(n: int) -> float:
    """The same for AllGather and ReduceScatter."""
    return (n - 1) / n


@dataclass(frozen=True)
class Bucket:
    """One bucket of NCCL Inspector's key: a collective and its message-size range. The label is the size's floor
    in its largest unit, then that plus one (`128-129MB`; inspector_prom.cc, inspectorPromFormatMessageSizeRange)."""

    collective: str
    message_size: str
    size: int  # bytes of each message
    factor: Callable[[int], float]


KIB, MIB = 1024, 1024**2
GRADIENTS = Bucket("AllReduce", "128-129MB", 128 * MIB, _all_reduce)
SHARDS = Bucket("AllGather", "64-65MB", 64 * MIB, _gather)
REDUCED_SHARDS = Bucket("ReduceScatter", "64-65MB", 64 * MIB, _gather)
ACTIVATIONS = Bucket("AllReduce", "32-33MB", 32 * MIB, _all_reduce)
EVAL_LOSS = Bucket("AllReduce", "8-9KB", 8 * KIB, _all_reduce)
EVAL_OUTPUTS = Bucket("AllGather", "512-513MB", 512 * MIB, _gather)


@dataclass(frozen=True)
class Communicator:
    """A communicator a rank is in and the buckets it runs while the job trains and while it evaluates."""

    name: str
    n_nodes: int
    nranks: int
    train: tuple[Bucket, ...]
    evaluate: tuple[Bucket, ...]

    @property
    def network(self) -> bool:
        return self.n_nodes > 1

    def buckets(self) -> tuple[Bucket, ...]:
        return tuple(dict.fromkeys(self.train + self.evaluate))


def communicators(job: Job, node_index: int) -> list[Communicator]:
    """A rank's communicators: one over every GPU of the job (data parallel, sharded: gradients all-reduced,
    parameter shards all-gathered and reduce-scattered) and, on a multi-node job, one over the GPUs of its node
    (tensor parallel: activations all-reduced over NVLink). An evaluation pass has no backward pass: no gradient
    reduction; it reduces its loss in one small message and gathers its outputs in large ones."""
    job_wide = Communicator(
        "DP Group 0",
        len(job.nodes),
        len(job.gpus),
        train=(GRADIENTS, SHARDS, REDUCED_SHARDS),
        evaluate=(EVAL_LOSS, SHARDS, EVAL_OUTPUTS),
    )
    if len(job.nodes) == 1:
        return [job_wide]
    node_wide = Communicator(
        "TP Group 0", 1, len(job.gpus_on(node_index)), train=(ACTIVATIONS,), evaluate=(ACTIVATIONS,)
    )
    return [job_wide, node_wide]


# Peak bus bandwidth (GB/s) and latency (us) of a communicator: NVLink inside a node, the IB fabric (400 Gb/s per
# GPU) across nodes. A collective takes latency + bytes * factor / peak: small messages are latency-bound.
PEAK = {False: (360.0, 8.0), True: (42.0, 30.0)}


def exec_us(comm: Communicator, bucket: Bucket) -> float:
    peak, latency = PEAK[comm.network]
    return latency + bucket.size * bucket.factor(max(2, comm.nranks)) / (peak * 1e9) * 1e6


def busbw_gbs(comm: Communicator, bucket: Bucket, microseconds: float) -> float:
    return bucket.size * bucket.factor(max(2, comm.nranks)) / (microseconds * 1e-6) / 1e9


def allreduce_time_us(job: Job) -> float:
    """The gradient AllReduce's time on the job-wide communicator."""
    return exec_us(communicators(job, job.gpus[0][0])[0], GRADIENTS)


def _rank_values(sim, job: Job, rank: int, signal: str, metric) -> list:
    """A rank's series over the window: computed over the job's span only (a week's training jobs are each a small
    part of it), absent outside it and while the rank is lost."""
    first, last = sim.activity.span(job)
    on_span = to_unit(_training_values(sim, job, rank, signal, first, last), metric)
    return placed(sim.window.steps, first, on_span, _rank_runs(sim, job, rank, first, last))


def _rank_runs(sim, job: Job, rank: int, first: int, last: int, exporter: str | None = None) -> Runs:
    """The scrapes of [first, last) at which the rank reports (not lost) and, given, its node's `exporter` is
    scraped."""
    absent = sim.faults.windows("rank_lost", job.id, rank)
    if exporter is not None:
        absent += sim.unscraped(exporter, job.gpus[rank][0])
    return between(complement(absent, sim.window.steps), first, last)


def _training_values(sim, job: Job, rank: int, signal: str, first: int, last: int) -> list:
    """The signal at the scrapes [first, last) of the job's span."""
    w = sim.window
    steps = sim.activity.job_steps(job)[first:last]
    whole = [math.floor(s) for s in steps]
    if signal == "steps":
        return whole
    if signal == "tokens":
        return [s * job.tokens_per_step for s in whole]
    if signal == "model_flops":
        return [s * job.tokens_per_step * 6 * MODEL_PARAMS for s in whole]
    rng = seeded(sim.seed, "train", job.id)  # shared by all ranks: they report the same step
    if signal == "loss":
        return [1.7 + 4.5 * math.exp(-s / 20000) + 0.03 * (rng.random() - 0.5) for s in steps]
    if signal == "last_step_time":
        out, stamp = [], 0.0
        for i, step in enumerate(whole):
            jitter = rng.random()
            if i == 0 or step != whole[i - 1]:
                stamp = w.time(first + i) - jitter * min(w.step, job.step_seconds) + 0.001 * rank
            out.append(round(stamp, 3))
        return out
    if signal == "step_seconds":
        pace = _pace(sim, job, first, last)
        increments = [0.0] + [(steps[i] - steps[i - 1]) * job.step_seconds * pace[i] for i in range(1, len(steps))]
        return accumulate(increments, steps[0] * job.step_seconds if steps else 0.0)
    raise KeyError(signal)


def _jitter(sim, job: Job, rank: int | None, scrapes: int) -> list[float]:
    """Step time jitter at each scrape of the job's span: the job's pace varies by 1% (rank None); a rank's own
    work takes up to 1% less than the pace, never more, so only the ranks a fault slows can set the pace."""
    if rank is None:
        r = seeded(sim.seed, "job-time", job.id)
        return [1.0] + [1 + 0.01 * (r.random() - 0.5) for _ in range(1, scrapes)]
    r = seeded(sim.seed, "rank-time", job.id, rank)
    return [1.0] + [1 - 0.01 * r.random() for _ in range(1, scrapes)]


def _own_time(effects: list, jitter: list[float], first: int, last: int) -> tuple[list[float], dict[str, list[float]]]:
    """A rank's own seconds per step at the scrapes [first, last), in nominal steps (the job's step_seconds times its
    pace jitter), given the slowdowns on it: its work stretched by those that name no phase, and per phase the extra
    time of those that name one."""
    base = list(jitter)
    extra = {phase: [0.0] * len(base) for phase in PHASE_SHARES}
    # The slowdowns that stretch the work first: a phase's extra is a share of the work as stretched.
    for effect in sorted(effects, key=lambda e: e.get("phase") is not None):
        phase, factor = effect.get("phase"), effect.get("factor")
        for i in range(max(effect.start, first) - first, min(effect.end, last) - first):
            if phase is None:
                base[i] *= factor
            else:
                extra[phase][i] += base[i] * (factor - 1)
    return base, extra


def _total(own: tuple[list[float], dict[str, list[float]]]) -> list[float]:
    base, extra = own
    return [b + sum(parts) for b, *parts in zip(base, *extra.values())]


def _pace(sim, job: Job, first: int, last: int) -> list[float]:
    """The job's seconds per step at the scrapes [first, last), in nominal steps: the slowest rank's own time, which
    every rank waits for. A rank no fault of its own slows is never slower than the job's own slowdowns make it."""
    scrapes = last - first
    job_effects = sim.faults.effects("job_slow", job.id)
    owns = [_total(_own_time(job_effects, [1.0] * scrapes, first, last))]
    # From the faults, not the ranks: a job on thousands of ranks has one or two that a fault slows.
    slowed = {e.key[1] for f in sim.faults.faults for e in f.effects if e.kind == "rank_slow" and e.key[0] == job.id}
    for rank in sorted(slowed):
        owns.append(_total(_own_time(_slowdowns(sim, job, rank), _jitter(sim, job, rank, scrapes), first, last)))
    return [p * max(values) for p, values in zip(_jitter(sim, job, None, scrapes), zip(*owns))]


def _slowdowns(sim, job: Job, rank: int) -> list:
    return sim.faults.effects("job_slow", job.id) + sim.faults.effects("rank_slow", job.id, rank)


def _phase_values(sim, job: Job, rank: int, first: int, last: int) -> dict[str, list[float]]:
    """Each phase's counter at the scrapes [first, last): a share of the rank's own work, plus the extra time of the
    slowdowns that name the phase, plus in backward its wait for the job's pace. The phases add up to the pace less
    the untimed share of the rank's work: at most its step_seconds."""
    steps = sim.activity.job_steps(job)[first:last]
    pace = _pace(sim, job, first, last)
    pace_jitter = _jitter(sim, job, None, len(steps))
    base, extra = _own_time(_slowdowns(sim, job, rank), _jitter(sim, job, rank, len(steps)), first, last)
    own = _total((base, extra))
    waits = [p - j * o for p, j, o in zip(pace, pace_jitter, own)]
    per_step = {
        phase: [
            j * (b * share + x) + (w if phase == "backward" else 0.0)
            for j, b, x, w in zip(pace_jitter, base, extra[phase], waits)
        ]
        for phase, share in PHASE_SHARES.items()
    }
    start = steps[0] * job.step_seconds if steps else 0.0
    return {
        phase: accumulate(
            [0.0] + [(steps[i] - steps[i - 1]) * job.step_seconds * seconds[i] for i in range(1, len(steps))],
            start * PHASE_SHARES[phase],
        )
        for phase, seconds in per_step.items()
    }


def phase_families(sim) -> Iterator[Family]:
    """hpcobs_training_phase_seconds_total of every rank of the training jobs, one series per phase."""
    metric = sim.sources["training"].metric("phase_seconds")
    jobs = [j for j in sim.cluster.jobs if j.training and any(sim.activity.running(j))]

    def series():
        for job in jobs:
            first, last = sim.activity.span(job)
            for rank, (node_index, _gpu) in enumerate(job.gpus):
                node = sim.cluster.nodes[node_index]
                runs = _rank_runs(sim, job, rank, first, last)
                for phase, values in _phase_values(sim, job, rank, first, last).items():
                    labels = {
                        "hpc_job": job.id,
                        "rank": str(rank),
                        "node": node.name,
                        "phase": phase,
                        **sim.target("training", node.name),
                    }
                    yield labels, placed(sim.window.steps, first, to_unit(values, metric), runs)

    yield Family(metric.name, metric.type, metric.help, series())


def training_families(sim) -> Iterator[Family]:
    source = sim.sources["training"]
    jobs = [j for j in sim.cluster.jobs if j.training and any(sim.activity.running(j))]
    for signal in TRAINING_SIGNALS:
        metric = source.metric(signal)

        def series(signal=signal, metric=metric):
            for job in jobs:
                for rank, (node_index, _gpu) in enumerate(job.gpus):
                    node = sim.cluster.nodes[node_index]
                    labels = {
                        "hpc_job": job.id,
                        "rank": str(rank),
                        "node": node.name,
                        **sim.target("training", node.name),
                    }
                    yield labels, _rank_values(sim, job, rank, signal, metric)

        yield Family(metric.name, metric.type, metric.help, series())


def _nccl_values(
    sim, job: Job, rank: int, comm: Communicator, bucket: Bucket, bandwidth: bool, first: int, last: int
) -> list[float]:
    """The collective's time (or bus bandwidth) at the scrapes [first, last) of the job's span."""
    slow = [1.0] * (last - first)
    if comm.network:  # a slow fabric slows the collectives that cross it
        for effect in sim.faults.effects("nccl_slow", job.id):
            for i in range(max(effect.start, first), min(effect.end, last)):
                slow[i - first] *= effect.get("factor")
    rng = seeded(sim.seed, "nccl", job.id, rank, comm.name, bucket.collective, bucket.message_size)
    nominal = exec_us(comm, bucket)
    times = [nominal * s * (0.95 + 0.1 * rng.random()) for s in slow]
    return [busbw_gbs(comm, bucket, t) for t in times] if bandwidth else times


def _nccl_dumped(sim, job: Job) -> list[bool]:
    """Scrapes whose file the plugin rewrote: a GPU that completed no collective in a dump interval (a hang, a
    stall, a checkpoint) is skipped and its file keeps the previous dump (inspector_prom.cc,
    inspectorPromWriteDeviceBuckets: `if (!device.hasData ...) continue`)."""
    n = sim.window.steps
    blocked = window_mask(n, sim.faults.windows("job_hang", job.id) + sim.faults.windows("job_stall", job.id))
    return [not (b or c) for b, c in zip(blocked, sim.activity.checkpoint_mask(job))]


def _in_dump(dumped: list[bool], evaluating: list[bool], comm: Communicator, bucket: Bucket) -> list[bool]:
    """Scrapes (of the job's span) whose file holds this bucket: each dump writes only the buckets of the
    collectives completed since the previous one (the per-dump bucket map, inspectorPromCommInfoListDump), so a
    training bucket leaves the file while the job evaluates and an evaluation bucket leaves it when training
    resumes."""
    out, last = [], bucket in comm.train
    for rewritten, evaluation in zip(dumped, evaluating):
        if rewritten:
            last = bucket in (comm.evaluate if evaluation else comm.train)
        out.append(last)
    return out


def nccl_families(sim) -> Iterator[Family]:
    source = sim.sources["nccl_inspector"]
    jobs = [j for j in sim.cluster.jobs if j.nccl and any(sim.activity.running(j))]
    for signal in ("coll_busbw", "coll_exec_time"):
        metric = source.metric(signal)

        def series(signal=signal, metric=metric):
            n = sim.window.steps
            scale = 1e9 if signal == "coll_busbw" else 1e-6
            for job in jobs:
                first, last = sim.activity.span(job)
                dumped = _nccl_dumped(sim, job)[first:last]
                evaluating = window_mask(n, sim.faults.windows("evaluate", job.id))[first:last]
                for rank, (node_index, gpu) in enumerate(job.gpus):
                    node = sim.cluster.nodes[node_index]
                    present = _rank_runs(sim, job, rank, first, last, "nccl_inspector")
                    for comm in communicators(job, node_index):
                        for bucket in comm.buckets():
                            labels = {
                                "version": NCCL_VERSION,
                                "slurm_job_id": job.id,
                                "node": node.name,
                                "gpu": f"GPU{gpu}",
                                "comm_name": comm.name,
                                "n_nodes": str(comm.n_nodes),
                                "nranks": str(comm.nranks),
                                "collective": bucket.collective,
                                "message_size": bucket.message_size,
                                "algo_proto": "Ring_ll128" if comm.network else "NVLS_simple",
                                **sim.target("nccl_inspector", node.name),
                            }
                            values = _nccl_values(sim, job, rank, comm, bucket, signal == "coll_busbw", first, last)
                            # A file the plugin did not rewrite keeps the values of its last dump.
                            for i in range(1, len(values)):
                                if not dumped[i]:
                                    values[i] = values[i - 1]
                            on_span = where(
                                _in_dump(dumped, evaluating, comm, bucket), to_unit([v * scale for v in values], metric)
                            )
                            yield labels, placed(n, first, on_span, present)

        yield Family(metric.name, metric.type, metric.help, series())


def families(sim) -> Iterator[Family]:
    if sim.enabled("training"):
        yield from training_families(sim)
        yield from phase_families(sim)
    if sim.enabled("nccl_inspector"):
        yield from nccl_families(sim)
