"""The cluster `build.py preview` draws by default: simulated with faults, its window ending now, backfilled with its
records into a loopback Prometheus (the live tests' harness, hpcobs.proof.servers) that is stopped on the way out.

Each dashboard has a fault to show: the GPU cluster a double-bit ECC error, a thermal slowdown, NVLink errors and a
GPU fallen off the bus; network and storage an InfiniBand port down and a Lustre OST filling; security a crypto
miner (Falco and Tetragon); training a straggler; Slurm the jobs the faults hit. They fall in the last hour, so any
window of an hour or more shows all of them; no Alertmanager, no live scraping: a preview reads the past only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from hpcobs.build import tools
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import demo, servers, workload
from hpcobs.proof.simulate import Simulation, write
from hpcobs.settings.config import Config

NODES = 4
# name -> (start counted back from the window's end, its other parameters). Xid 79 takes a GPU of the shared node:
# on the hero job it would stop a rank, and a hung job has no straggler to show. Faults without a duration last to
# the end, so the tables of what is wrong now list them.
FAULTS = {
    "straggler": ("50m", ""),
    "fs_filling": ("45m", "duration=40m"),
    "thermal": ("45m", "duration=30m"),
    "idle_gpus": ("40m", ""),
    "nvlink_errors": ("40m", ""),
    "ib_link_errors": ("35m", ""),
    "ib_port_down": ("30m", ""),
    "unexpected_outbound": ("25m", ""),
    "crypto_miner": ("20m", ""),
    "dbe": ("10m", ""),
    "xid79": ("5m", "node=gpu004:gpu=7"),
}
MIN_WINDOW = "1h"  # the earliest fault's start, and ten minutes of calm before it


def scenarios(window_seconds: int) -> str:
    """The faults as `simulate --scenario` text for a window of `window_seconds`."""
    return ",".join(
        ":".join(filter(None, (name, f"start={(window_seconds - duration_seconds(lead)) // 60}m", rest)))
        for name, (lead, rest) in FAULTS.items()
    )


@contextmanager
def serving(config: Config, window_seconds: int) -> Iterator[str]:
    """The URL of a loopback Prometheus holding the fault cluster's last `window_seconds` (at least MIN_WINDOW) and
    every recording rule's series over it."""
    for tool in (tools.PROMTOOL, servers.PROMETHEUS):  # one line naming the package, before simulating
        tools.find(tool)
    window_seconds = max(window_seconds, duration_seconds(MIN_WINDOW))
    step = duration_seconds(config["scrape_interval"])
    steps = window_seconds // step
    start = datetime.fromtimestamp(int(datetime.now(UTC).timestamp()) // step * step - (steps - 1) * step, UTC)
    sim = Simulation(config, nodes=NODES, hours=steps * step / 3600, scenarios=scenarios(window_seconds), start=start)
    with tempfile.TemporaryDirectory(prefix="hpcobs-preview-cluster-") as scratch:
        history = Path(scratch) / "cluster.om"
        with open(history, "w", encoding="utf-8") as out:
            write(sim, "openmetrics", out)
        prometheus = servers.Prometheus()
        try:
            prometheus.load_openmetrics(history)  # before the start: no restart
            prometheus.start()
            layers = workload.recording_layer_files(demo.rule_groups(config), Path(scratch))
            last = sim.window.time(sim.window.steps - 1)
            prometheus.replay_rules(layers, sim.window.start, last, step)
            yield prometheus.url
        finally:
            prometheus.stop()
