"""dcgm-exporter against a standalone nv-hostengine (-r localhost:5555), in real Prometheus: every series of the
simulated fleet says hostname "localhost" (hostname.go UseRemoteHE, docs/exporters.md#the-node-name). Read from
instance (exporters.dcgm.node_from), each node keeps its own GPUs; read from the hostname, as the default config
does, ExporterGpuNodeNameShared's condition holds for "localhost" with the whole fleet's GPUs."""

import pytest

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import pipeline
from hpcobs.proof.simulate import Simulation, write
from hpcobs.settings import config as config_module

NODES, GPUS = 4, 8  # a small fleet: every NVIDIA node of it against its own hostengine


@pytest.fixture(scope="module")
def remote(tmp_path_factory, prometheus_factory):
    folder = tmp_path_factory.mktemp("remote-hostengine")
    site = folder / "site.yaml"
    site.write_text("exporters:\n  dcgm:\n    node_from: instance\n")
    config = config_module.load(site)
    sim = Simulation(config, nodes=NODES, gpus_per_node=GPUS, hours=0.5, scenarios="healthy", seed=1)
    ctx = Context(config)
    names = {ctx.sources["dcgm"].name("gpu_utilization", v) for v in ctx.sources["dcgm"].versions}
    with open(folder / "cluster.om", "w") as out:
        write(sim, "openmetrics", out, names=names)
    at = sim.window.start + sim.window.duration - 60
    nvidia = {node.name for node in sim.cluster.nodes if node.vendor == "nvidia"}
    return ctx, prometheus_factory(openmetrics=folder / "cluster.om"), at, nvidia


@pytest.mark.live
def test_the_node_read_from_instance_keeps_each_nodes_gpus(remote):
    ctx, prometheus, at, nvidia = remote
    per_node = ctx.select("dcgm", ["gpu_utilization"], ("node", "gpu"), op="group")
    counted = prometheus.query(f"count by (node) ({per_node})", at)
    assert {s.labels["node"]: s.value for s in counted} == dict.fromkeys(nvidia, GPUS)


@pytest.mark.live
def test_the_hostname_shared_by_the_fleet_raises_the_alert(remote):
    _, prometheus, at, nvidia = remote
    default = Context(config_module.load())
    shared = next(
        rule
        for groups in pipeline.rule_groups(default).values()
        for group in groups
        for rule in group.rules
        if isinstance(rule, Alert) and rule.alert == "ExporterGpuNodeNameShared"
    )
    firing = prometheus.query(shared.expr, at)
    assert [(s.labels["node"], s.value) for s in firing] == [("localhost", len(nvidia) * GPUS)]
