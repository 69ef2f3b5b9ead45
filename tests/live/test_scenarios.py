"""Every fault scenario of the simulator shows its signal in real Prometheus and real VictoriaMetrics.

The simulated cluster is backfilled into both servers and each scenario's expected signal (a PromQL
query from hpcobs.proof.simulate) is evaluated there, never by reading the generator back.
"""

import pytest

from hpcobs.proof.simulate import Simulation, kinds, write

FAULTS = [name for name in kinds() if name != "healthy"]
# Faults of the hero training job take turns: a hang or a dead rank would hide a straggler.
HERO_JOB_SLOTS = {
    "evaluation_pass": "start=1m:duration=8m",
    "straggler": "start=10m:duration=20m",
    "nccl_latency_spike": "start=35m:duration=15m",
    "checkpoint_stall": "start=55m:duration=20m",
    "training_hang": "start=80m:duration=30m",
    "ib_congestion": "start=115m:duration=15m",
    "checkpoint_long": "start=130m:duration=10m",
    "xid79": "start=140m",
}
# A GPU exports one Xid, its last: xid13 and xid48 (both on GPU 1 by default) at once would overwrite each other, as
# on a real GPU (hpcobs.proof.simulate.gpu._xid_parts), so xid13 takes a GPU of its own.
OWN_GPU = {"xid13": "gpu=0"}
# Background that ends jobs or cuts every series goes last, where it hides no other scenario: the users' jobs dying of
# their Xids are the shared node's two notebook jobs (the batch nodes' jobs are taken by the faults at 10m), and
# Prometheus restarts after every other expectation.
LATE = {
    "job_xid13": "node=gpu010:gpu=0:start=150m",
    "job_xid31": "node=gpu010:gpu=1:start=150m",
    "job_xid43": "node=gpu010:gpu=5:start=150m",
    "prometheus_restart": "start=160m:duration=1m",
}
SCENARIOS = ",".join(
    ":".join([name, *filter(None, (HERO_JOB_SLOTS.get(name), OWN_GPU.get(name), LATE.get(name)))]) for name in FAULTS
)
HOURS = 2.75


@pytest.fixture(scope="module")
def simulation(config):
    return Simulation(config, nodes=10, gpus_per_node=8, hours=HOURS, scenarios=SCENARIOS, seed=1)


@pytest.fixture(scope="module")
def metrics(simulation):
    """Only the families the expectations read: a few MB instead of every exporter's output."""
    return {m for e in simulation.expectations() for m in e.metrics}


@pytest.fixture(scope="module")
def servers(simulation, metrics, tmp_path_factory, prometheus_factory, victoria_factory):
    folder = tmp_path_factory.mktemp("scenarios")
    openmetrics, jsonl = folder / "cluster.om", folder / "cluster.jsonl"
    with open(openmetrics, "w") as out:
        write(simulation, "openmetrics", out, names=metrics)
    with open(jsonl, "w") as out:
        write(simulation, "vm", out, names=metrics)
    return {"prometheus": prometheus_factory(openmetrics=openmetrics), "victoriametrics": victoria_factory(jsonl=jsonl)}


def test_every_scenario_has_an_expected_signal(simulation):
    covered = {e.scenario for e in simulation.expectations()}
    assert set(FAULTS) <= covered, set(FAULTS) - covered


@pytest.mark.live
@pytest.mark.parametrize("backend", ["prometheus", "victoriametrics"])
def test_every_scenario_shows_its_signal(servers, simulation, backend):
    server = servers[backend]
    missing = []
    for expectation in simulation.expectations():
        at = simulation.window.start + expectation.at
        if not server.query(expectation.query, at):
            missing.append(
                f"{expectation.scenario}: {expectation.description}: {expectation.query} @ +{expectation.at}s"
            )
    assert not missing, "\n".join(missing)
