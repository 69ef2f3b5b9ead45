"""How busy things are at each scrape: jobs, GPUs, training progress. Pure functions of the model and faults.

Every emitter reads these instead of re-deriving them, so a GPU that is idle is idle in dcgm, in the
IB traffic of its node and in the training series of its rank alike.
"""

from __future__ import annotations

import math
from functools import lru_cache

from hpcobs.proof.simulate.core import seeded, window_mask
from hpcobs.proof.simulate.model import Job

CHECKPOINT_EVERY = 1800  # seconds between checkpoints of a training job
CHECKPOINT_TAKES = 90  # seconds a healthy checkpoint blocks training
JOBS_CACHED = 128


class Activity:
    def __init__(self, sim):
        self.sim = sim
        self.window = sim.window
        self.faults = sim.faults
        self.n = sim.window.steps
        # Emitters walk a node's GPUs one after the other, each through every job it ran in the window: the caches
        # hold all of a node's jobs (58 at most in the 1,024-GPU week), or each lookup misses (a 16-entry LRU cycled
        # through 20 jobs and computed every job's week again for every GPU of every family).
        self.job_profile = lru_cache(maxsize=JOBS_CACHED)(self._job_profile)
        self.job_speed = lru_cache(maxsize=JOBS_CACHED)(self._job_speed)
        self.checkpoint_mask = lru_cache(maxsize=JOBS_CACHED)(self._checkpoint_mask)
        self.job_steps = lru_cache(maxsize=JOBS_CACHED)(self._job_steps)  # the same for every rank
        self.node_work = lru_cache(maxsize=4)(self._node_work)

    def span(self, job: Job) -> tuple[int, int]:
        """Scrape indices [first, last) at which the job runs."""
        return self.window.index(job.start), self.window.index(job.end)

    def running(self, job: Job) -> list[bool]:
        return window_mask(self.n, [self.span(job)])

    def _checkpoint_mask(self, job: Job) -> tuple[bool, ...]:
        """Scrapes during which the job writes a checkpoint (training blocked, storage busy): every
        CHECKPOINT_EVERY for CHECKPOINT_TAKES, and the long checkpoints of scenarios.

        A hung job writes no scheduled checkpoint: the training loop saves between steps, once a step has returned
        (Megatron-LM megatron/training/training.py train(), checkpoint_and_decide_exit after train_step, commit
        001b00c2734d8f0fad096fe48a382fedf755d321), and a rank blocked in a collective never returns from its step."""
        if not job.training:
            return (False,) * self.n
        first = job.start + CHECKPOINT_EVERY * max(1, math.ceil((0 - job.start) / CHECKPOINT_EVERY))
        hung = window_mask(self.n, self.faults.windows("job_hang", job.id))
        wins = [
            (self.window.index(t), self.window.index(t + CHECKPOINT_TAKES))
            for t in range(first, min(job.end, self.window.duration), CHECKPOINT_EVERY)
            if not hung[min(self.window.index(t), self.n - 1)]
        ]
        return tuple(window_mask(self.n, wins + self.faults.windows("checkpoint", job.id)))

    def _job_profile(self, job: Job) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(busy, work) of the job's GPUs at each scrape: busy = share of time a kernel runs (utilisation),
        work = how hard the GPU works (power, clocks, temperatures, traffic follow it)."""
        n = self.n
        if job.training:
            busy, work = [1.0] * n, [0.95] * n
            for i, ckpt in enumerate(self.checkpoint_mask(job)):
                if ckpt:
                    busy[i], work[i] = 0.05, 0.05
        else:  # interactive: a notebook's load comes and goes over the hour
            rng = seeded(self.sim.seed, "interactive", job.id)
            phase = rng.uniform(0, 2 * math.pi)
            wave = [0.35 + 0.25 * math.sin(phase + 2 * math.pi * self.window.offset(i) / 3600) for i in range(n)]
            busy, work = [min(1.0, w + 0.2) for w in wave], wave
        for kind, b, w in (("job_stall", 0.0, 0.03), ("job_hang", 1.0, 0.25)):
            for start, end in self.faults.windows(kind, job.id):
                busy[start:end] = [b] * (end - start)
                work[start:end] = [w] * (end - start)
        return tuple(busy), tuple(work)

    def gpu(self, node: int, gpu: int) -> tuple[list[float], list[float], list[bool]]:
        """(busy, work, held) of one GPU; held = a job holds its memory."""
        n = self.n
        busy, work, held = [0.0] * n, [0.0] * n, [False] * n
        for job in self.sim.cluster.jobs_on_gpu(node, gpu):
            first, last = self.span(job)
            if last <= first:
                continue
            jb, jw = self.job_profile(job)
            idle_until = self.window.index(job.idle_until) if (node, gpu) in job.idle_gpus else first
            held[first:last] = [True] * (last - first)
            start = max(first, idle_until)
            if start < last:  # a shared GPU is as busy as its busiest job
                busy[start:last] = map(max, busy[start:last], jb[start:last])
                work[start:last] = map(max, work[start:last], jw[start:last])
        for start, end in self.faults.windows("gpu_idle", node, gpu):
            busy[start:end] = [0.0] * max(0, min(end, n) - start)
            work[start:end] = [0.0] * max(0, min(end, n) - start)
        return busy, work, held

    def _node_work(self, node: int, gpus: int) -> tuple[float, ...]:
        """Mean work of a node's GPUs (drives IB traffic, CPU load, host power)."""
        total = [0.0] * self.n
        for g in range(gpus):
            _, work, _ = self.gpu(node, g)
            total = [a + b for a, b in zip(total, work)]
        return tuple(t / gpus for t in total)

    def _job_speed(self, job: Job) -> tuple[float, ...]:
        """Steps per second of a training job at each scrape (0 while blocked), lockstep for all ranks."""
        rng = seeded(self.sim.seed, "speed", job.id)
        slow = [1.0] * self.n
        for kind in ("job_slow",):
            for effect in self.faults.effects(kind, job.id):
                for i in range(effect.start, min(effect.end, self.n)):
                    slow[i] *= effect.get("factor")
        rank_factor = [1.0] * self.n
        for rank in range(len(job.gpus)):
            for effect in self.faults.effects("rank_slow", job.id, rank):
                for i in range(effect.start, min(effect.end, self.n)):
                    rank_factor[i] = max(rank_factor[i], effect.get("factor"))
        # An evaluation pass runs between optimizer steps: no step completes while it runs.
        held = ("job_hang", "job_stall", "evaluate")
        blocked = [
            a or b
            for a, b in zip(
                self.checkpoint_mask(job),
                window_mask(self.n, [w for kind in held for w in self.faults.windows(kind, job.id)]),
            )
        ]
        return tuple(
            0.0
            if blocked[i]
            else 1.0 / (job.step_seconds * slow[i] * rank_factor[i] * (1 + 0.02 * (rng.random() - 0.5)))
            for i in range(self.n)
        )

    def _job_steps(self, job: Job) -> tuple[float, ...]:
        """Optimizer steps completed since the job (process) started, at each scrape (float, floor it)."""
        speed = self.job_speed(job)
        first, _ = self.span(job)
        done = max(0.0, (self.window.offset(first) - job.start) / job.step_seconds * 0.97)
        out = []
        for i in range(self.n):
            if i > first:
                done += speed[i] * self.window.step
            out.append(done)
        return tuple(out)
