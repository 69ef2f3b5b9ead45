"""Simulated Slurm GPU cluster emitting what the real exporters emit, with named fault scenarios.

    from hpcobs.proof.simulate import Simulation, write
    sim = Simulation(config, nodes=4, gpus_per_node=8, hours=2, scenarios="xid79,ib_port_down", seed=7)
    write(sim, "openmetrics", open("cluster.om", "w"))     # or "vm", "promtool"
    sim.input_series(names={sim.sources["dcgm"].name("xid", "4.6-4.8")})   # promtool input_series, one metric
    sim.expectations()                                      # PromQL each scenario must satisfy

Modules: model (cluster), scenarios (faults and expectations), background (benign kinds), week (a week's plan),
activity (load over time), one emitter module per domain (gpu, node, slurm, storage, security, training), formats
(writers). docs/simulator.md.
"""

from __future__ import annotations

from typing import TextIO

from hpcobs.proof.simulate import background  # noqa: F401  (registers the background kinds in KINDS)
from hpcobs.proof.simulate.core import UP
from hpcobs.proof.simulate.expect import Expectation
from hpcobs.proof.simulate.formats import FORMATS, WRITERS, Progress, Stats, compress, expand
from hpcobs.proof.simulate.model import DEFAULT_START, Cluster, Job, Node
from hpcobs.proof.simulate.scenarios import KINDS, Spec, kinds
from hpcobs.proof.simulate.simulation import Simulation


def write(
    sim: Simulation, fmt: str, out: TextIO, progress: Progress | None = None, names: set[str] | None = None
) -> Stats:
    """Stream the whole simulation to `out` in one of FORMATS."""
    return WRITERS[fmt](sim.families(names), out, sim.window, progress)


__all__ = [
    "Simulation",
    "Spec",
    "Expectation",
    "Stats",
    "Cluster",
    "Job",
    "Node",
    "KINDS",
    "kinds",
    "FORMATS",
    "DEFAULT_START",
    "UP",
    "write",
    "compress",
    "expand",
]
