"""One rank of the end-to-end training job (test_training_e2e_live.py): a training loop that sleeps in place of its
work, instrumented with hpcobs_training the way docs/training.md adds it. Job, rank and node come from the Slurm
variables srun sets, the textfile directory from HPCOBS_TRAINING_TEXTFILE_DIR, traces from the OTEL_* variables:
nothing here is a path the real job would not take.

    python training_rank.py <ready file> <go file> <stop file> <slow rank>

The rank touches <ready file> once its tracker exists, starts stepping when <go file> exists (the barrier every
rank of a job passes before its first step), and leaves the loop once <stop file> exists. Rank <slow rank> takes
SLOW_DATA_FACTOR times as long in its data phase every SLOW_EVERY steps.
"""

import sys
import time
from pathlib import Path

from hpcobs_training import Tracker

# Seconds of each phase of a step: 0.3 s in all, half of it loading data.
PHASE_SECONDS = {"data": 0.15, "forward": 0.05, "backward": 0.07, "optimizer": 0.03}
# Every third step of the slow rank loads its data 6x as long: its mean step is 1.8x the others' (the median rank's
# over its own is 0.55, under training_straggler_ratio), its slow step 3.5x its own median step.
SLOW_EVERY, SLOW_DATA_FACTOR = 3, 6
# A step is kept as slow past 2.5x its rank's median (the helper's default is 1.5x): on a machine shared with other
# work a sleeping rank was seen to wake up 0.15 s late, half of a step here, never 1.5 steps.
SLOW_FACTOR = 2.5
TOKENS, FLOPS = 4096, 1e12
WRITE_INTERVAL = 1.0  # seconds between textfile writes: under the 5 s scrape, so each scrape sees new steps
POLL = 0.01


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(POLL)


def main(ready: Path, go: Path, stop: Path, slow_rank: str) -> None:
    with Tracker(interval=WRITE_INTERVAL, slow_factor=SLOW_FACTOR) as tracker:
        slow = tracker.rank == slow_rank
        ready.touch()
        wait_for(go)
        step = 0
        while not stop.exists():
            step += 1
            with tracker.step(tokens=TOKENS, flops=FLOPS):
                for phase, seconds in PHASE_SECONDS.items():
                    with tracker.phase(phase):
                        late = slow and phase == "data" and step % SLOW_EVERY == 0
                        time.sleep(seconds * (SLOW_DATA_FACTOR if late else 1))
                tracker.loss(2.0 + 1.0 / step)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
