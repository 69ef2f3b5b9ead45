"""One rank of an end-to-end training job (test_training_e2e_live.py): a training loop that sleeps in place of its
work, instrumented with hpcobs_training the way docs/training.md adds it. Job, rank and node come from the Slurm
variables srun sets, the textfile directory from HPCOBS_TRAINING_TEXTFILE_DIR, traces from the OTEL_* variables:
nothing here is a path the real job would not take.

    python training_rank.py <ready file> <go file> <stop file> <slow rank> [--lockstep]

The rank touches <ready file> once its tracker exists, starts stepping when <go file> exists (the barrier every
rank of a job passes before its first step), and leaves the loop after the step in which it sees <stop file>. Rank
<slow rank> takes SLOW_DATA_FACTOR times as long in its data phase every SLOW_EVERY steps.

Free-running, each rank steps at its own pace. With --lockstep the ranks are a synchronous data-parallel job: at the
end of backward (where DDP's gradient all-reduce ends) each waits for every rank of its job on a barrier at
MASTER_ADDR:MASTER_PORT (the rendezvous torch.distributed reads), so every rank waits out the slow rank's data phase
there. The barrier also tells each rank whether any saw the stop file: they all leave after the same step.
"""

import argparse
import os
import socket
import time
from pathlib import Path

from hpcobs_training import Tracker

# Seconds of each phase of a step: 0.3 s in all, half of it loading data.
PHASE_SECONDS = {"data": 0.15, "forward": 0.05, "backward": 0.07, "optimizer": 0.03}
# The phase that ends on the collective in lockstep.
COLLECTIVE_PHASE = "backward"
# Every third step of the slow rank loads its data 6x as long: its mean step is 1.8x the others' (the median rank's
# over its own is 0.55, under training_straggler_ratio), its slow step 3.5x its own median step. In lockstep every
# rank's mean step is 1.8x what it would be, and the slow rank's excess over the median rank 0.45 of it.
SLOW_EVERY, SLOW_DATA_FACTOR = 3, 6
# A step is kept as slow past 2.5x its rank's median (the helper's default is 1.5x): on a machine shared with other
# work a sleeping rank was seen to wake up 0.15 s late, half of a step here, never 1.5 steps.
SLOW_FACTOR = 2.5
TOKENS, FLOPS = 4096, 1e12
WRITE_INTERVAL = 1.0  # seconds between textfile writes: under the 5 s scrape, so each scrape sees new steps
POLL = 0.01
STOP, GO_ON = b"1", b"0"


class Barrier:
    """This rank's connection to its job's barrier server (test_training_e2e_live.Barrier)."""

    def __init__(self, host: str, port: int) -> None:
        self.socket = socket.create_connection((host, port))
        # One byte each way per step: never held back to be joined with a next one.
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def any_stops(self, stop: bool) -> bool:
        """Wait for every rank of the job; whether any of them asked to stop."""
        self.socket.sendall(STOP if stop else GO_ON)
        answer = self.socket.recv(1)
        if not answer:
            raise ConnectionError("the barrier server closed the connection")
        return answer == STOP


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(POLL)


def main(ready: Path, go: Path, stop: Path, slow_rank: str, lockstep: bool) -> None:
    barrier = Barrier(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])) if lockstep else None
    with Tracker(interval=WRITE_INTERVAL, slow_factor=SLOW_FACTOR) as tracker:
        slow = tracker.rank == slow_rank
        ready.touch()
        wait_for(go)
        step, leaving = 0, False
        while not leaving:
            step += 1
            leaving = stop.exists()
            with tracker.step(tokens=TOKENS, flops=FLOPS):
                for phase, seconds in PHASE_SECONDS.items():
                    with tracker.phase(phase):
                        late = slow and phase == "data" and step % SLOW_EVERY == 0
                        time.sleep(seconds * (SLOW_DATA_FACTOR if late else 1))
                        if barrier is not None and phase == COLLECTIVE_PHASE:
                            leaving = barrier.any_stops(leaving)
                tracker.loss(2.0 + 1.0 / step)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ready", type=Path)
    parser.add_argument("go", type=Path)
    parser.add_argument("stop", type=Path)
    parser.add_argument("slow_rank")
    parser.add_argument("--lockstep", action="store_true", help="wait for every rank at the end of backward")
    arguments = parser.parse_args()
    main(arguments.ready, arguments.go, arguments.stop, arguments.slow_rank, arguments.lockstep)
