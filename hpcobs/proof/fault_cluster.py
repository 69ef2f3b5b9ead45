"""The cluster `build.py preview` draws by default: simulated with faults, its window ending now, backfilled with its
records into a loopback Prometheus (the live tests' harness, hpcobs.proof.servers) that is stopped on the way out.

Each dashboard has a fault to show: the GPU cluster a double-bit ECC error, a thermal slowdown, NVLink errors and a
GPU fallen off the bus; network and storage an InfiniBand port down, a marginal link, a bad cable and a Lustre OST
filling; security a crypto miner, an unexpected outbound connection and foreign checkpoint reads (Falco and
Tetragon); training a straggler; Slurm a job whose GPUs have idled for an hour, a node down and another drained.
They fall in the last 75 minutes, so any window of 90 minutes or more shows all of them. No Alertmanager, no live
scraping: a preview reads the past.
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

NODES = 5  # two on the hero job, two batch nodes (one goes down, one is drained), one shared
# name -> (start counted back from the window's end, its other parameters). Most last to the end (a scenario's own
# duration is often shorter), so the tables of what is wrong now list them; the OST fills to 98% over its duration.
# Xid 79 takes a GPU of the shared node: on the hero job it would stop a rank, and a hung job has no straggler.
# The down node stops its exporters: it hosts no other fault.
FAULTS = {
    "idle_gpus": ("75m", "duration=inf"),  # listed as idle after a whole hour at 0% (node:gpus_allocated_idle_by_job)
    "slurm_nodes_down": ("60m", "duration=inf"),
    "straggler": ("50m", "duration=inf"),
    "fs_filling": ("45m", "duration=40m"),
    "thermal": ("45m", "duration=30m"),
    "nvlink_errors": ("40m", "duration=inf"),
    "ib_link_errors": ("35m", "duration=inf"),
    "ib_symbol_errors": ("35m", "duration=inf"),
    "ib_port_down": ("30m", "duration=inf"),
    "unexpected_outbound": ("25m", "duration=inf"),
    "crypto_miner": ("20m", "duration=inf"),
    "checkpoint_foreign_read": ("15m", "duration=inf"),
    "dbe": ("10m", "duration=inf"),
    "xid79": ("5m", "node={shared}:gpu=7"),
}
MIN_WINDOW = "90m"  # the earliest fault's start, and a quarter of an hour of calm before it


def scenarios(window_seconds: int, nodes: int = NODES) -> str:
    """The faults as `simulate --scenario` text for a window of `window_seconds` on `nodes` nodes (the last one is
    the shared node)."""
    return ",".join(
        ":".join(
            filter(
                None,
                (
                    name,
                    f"start={(window_seconds - duration_seconds(lead)) // 60}m",
                    rest.format(shared=f"gpu{nodes:03d}"),
                ),
            )
        )
        for name, (lead, rest) in FAULTS.items()
    )


@contextmanager
def serving(config: Config, window_seconds: int, nodes: int = NODES) -> Iterator[tuple[str, float, dict[str, str]]]:
    """The URL of a loopback Prometheus holding the fault cluster's last `window_seconds` (at least MIN_WINDOW) on
    `nodes` nodes of 8 GPUs and every recording rule's series over it, the moment its window ends (simulating and
    recording take minutes at a thousand GPUs, so "now" has moved on once it is served) and the variables that
    show its training faults: the hero job, the oldest, where Training opens on the newest running job."""
    for tool in (tools.PROMTOOL, servers.PROMETHEUS):  # one line naming the package, before simulating
        tools.find(tool)
    window_seconds = max(window_seconds, duration_seconds(MIN_WINDOW))
    step = duration_seconds(config["scrape_interval"])
    steps = window_seconds // step
    start = datetime.fromtimestamp(int(datetime.now(UTC).timestamp()) // step * step - (steps - 1) * step, UTC)
    sim = Simulation(
        config, nodes=nodes, hours=steps * step / 3600, scenarios=scenarios(window_seconds, nodes), start=start
    )
    with tempfile.TemporaryDirectory(prefix="hpcobs-preview-cluster-") as scratch:
        history = Path(scratch) / "cluster.om"
        with open(history, "w", encoding="utf-8") as out:
            write(sim, "openmetrics", out)
        prometheus = servers.Prometheus()
        try:
            prometheus.load_openmetrics(history)  # before the start: no restart
            prometheus.start()
            layers = workload.replay_layers(demo.rule_groups(config), Path(scratch))
            last = sim.window.time(sim.window.steps - 1)
            prometheus.replay_rules(layers, sim.window.start, last, step)
            yield prometheus.url, float(last), {"hpc_job": str(sim.cluster.roles.hero_job)}
        finally:
            prometheus.stop()
