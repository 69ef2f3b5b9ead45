"""Per-rank training metrics (the hpcobs training contract, catalogue `training`) and NCCL Inspector.

Ranks of a synchronous job step in lockstep: the job's step rate is set by its slowest rank. A rank's
step_seconds counts its own time per step (its compute and collectives, as a per-rank timer around the
step does), so a straggler shows a larger mean step time than its peers while their steps stay equal.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from hpcobs.proof.simulate.core import Family, accumulate, seeded, to_unit, where, window_mask
from hpcobs.proof.simulate.model import Job

TRAINING_SIGNALS = ("steps", "step_seconds", "tokens", "model_flops", "loss", "last_step_time")
MODEL_PARAMS = 8e9  # model size behind the FLOPs counter (6 * params * tokens)
NCCL_VERSION = "v5.1"
# (collective, message_size bucket, bytes, bus factor: busbw = algbw * factor(n))
COLLECTIVES = (
    ("AllReduce", "128-129MB", 128 * 1024**2, lambda n: 2 * (n - 1) / n),
    ("AllGather", "64-65MB", 64 * 1024**2, lambda n: (n - 1) / n),
    ("ReduceScatter", "64-65MB", 64 * 1024**2, lambda n: (n - 1) / n),
)


def _busbw(job: Job) -> float:
    """GB/s: NVLink inside one node, the IB fabric (400 Gb/s per GPU) across nodes."""
    return 360.0 if len(job.nodes) == 1 else 42.0


def _exec_us(job: Job, size: int, factor) -> float:
    n = max(2, len(job.gpus))
    return size * factor(n) / (_busbw(job) * 1e9) * 1e6


def allreduce_time_us(job: Job) -> float:
    _, _, size, factor = COLLECTIVES[0]
    return _exec_us(job, size, factor)


def _rank_present(sim, job: Job, rank: int) -> list[bool]:
    present = sim.activity.running(job)
    lost = sim.faults.mask("rank_lost", job.id, rank)
    return [here and not gone for here, gone in zip(present, lost)] if lost else present


def _training_values(sim, job: Job, rank: int, signal: str) -> list:
    n, w = sim.window.steps, sim.window
    steps = sim.activity.job_steps(job)
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
        out, last = [], None
        for i in range(n):
            moved = i == 0 or whole[i] != whole[i - 1]
            jitter = rng.random()
            if moved or last is None:
                last = w.time(i) - jitter * min(w.step, job.step_seconds) + 0.001 * rank
            out.append(round(last, 3))
        return out
    if signal == "step_seconds":
        slow = [1.0] * n
        for effect in sim.faults.effects("job_slow", job.id) + sim.faults.effects("rank_slow", job.id, rank):
            for i in range(effect.start, min(effect.end, n)):
                slow[i] *= effect.get("factor")
        r = seeded(sim.seed, "rank-time", job.id, rank)
        increments = [0.0] + [
            (steps[i] - steps[i - 1]) * job.step_seconds * slow[i] * (1 + 0.01 * (r.random() - 0.5))
            for i in range(1, n)
        ]
        return accumulate(increments, steps[0] * job.step_seconds)
    raise KeyError(signal)


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
                    yield (
                        labels,
                        where(_rank_present(sim, job, rank), to_unit(_training_values(sim, job, rank, signal), metric)),
                    )

        yield Family(metric.name, metric.type, metric.help, series())


def _nccl_values(sim, job: Job, rank: int, collective: tuple, bandwidth: bool) -> list[float]:
    n = sim.window.steps
    _, _, size, factor = collective
    slow = [1.0] * n
    for effect in sim.faults.effects("nccl_slow", job.id):
        for i in range(effect.start, min(effect.end, n)):
            slow[i] *= effect.get("factor")
    rng = seeded(sim.seed, "nccl", job.id, rank, collective[0])
    base, busbw = _exec_us(job, size, factor), _busbw(job)
    times = [base * s * (0.95 + 0.1 * rng.random()) for s in slow]
    values = [busbw * base / t for t in times] if bandwidth else times
    # No collective completes while the job hangs or stalls: the plugin keeps its last file.
    frozen = window_mask(n, sim.faults.windows("job_hang", job.id) + sim.faults.windows("job_stall", job.id))
    for i in range(1, n):
        if frozen[i]:
            values[i] = values[i - 1]
    return values


def nccl_families(sim) -> Iterator[Family]:
    source = sim.sources["nccl_inspector"]
    jobs = [j for j in sim.cluster.jobs if j.nccl and any(sim.activity.running(j))]
    for signal in ("coll_busbw", "coll_exec_time"):
        metric = source.metric(signal)

        def series(signal=signal, metric=metric):
            for job in jobs:
                for rank, (node_index, gpu) in enumerate(job.gpus):
                    node = sim.cluster.nodes[node_index]
                    present = _rank_present(sim, job, rank)
                    scraped = sim.scraped("nccl_inspector", node_index)
                    if scraped is not None:
                        present = [a and b for a, b in zip(present, scraped)]
                    for collective in COLLECTIVES:
                        labels = {
                            "version": NCCL_VERSION,
                            "slurm_job_id": job.id,
                            "node": node.name,
                            "gpu": f"GPU{gpu}",
                            "comm_name": "DP Group 0",
                            "n_nodes": str(len(job.nodes)),
                            "nranks": str(len(job.gpus)),
                            "collective": collective[0],
                            "message_size": collective[1],
                            "algo_proto": "Ring_ll128" if len(job.nodes) > 1 else "NVLS_simple",
                            **sim.target("nccl_inspector", node.name),
                        }
                        values = _nccl_values(sim, job, rank, collective, signal == "coll_busbw")
                        yield (
                            labels,
                            where(
                                present,
                                to_unit([v * (1e9 if signal == "coll_busbw" else 1e-6) for v in values], metric),
                            ),
                        )

        yield Family(metric.name, metric.type, metric.help, series())


def families(sim) -> Iterator[Family]:
    if sim.enabled("training"):
        yield from training_families(sim)
    if sim.enabled("nccl_inspector"):
        yield from nccl_families(sim)
