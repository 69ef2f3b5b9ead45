"""Partitions that overlap (issue 26, point 12): the Slurm exporters count a node in every partition it belongs to
(SckyzO nodes.go counts `sinfo %R|%D|%T` lines, one per partition; node.go writes one series per node and partition),
so a fleet total summed over partitions counts a shared node twice. The simulator puts a node in two partitions as
the exporters report it, and the built cluster record, run in promtool on the simulated series, counts it once."""

import pytest
import yaml

from hpcobs.authoring.ruletest import selector_text
from hpcobs.build import outdir, pipeline, tools
from hpcobs.proof.simulate import Simulation
from hpcobs.proof.simulate.slurm import SlurmView
from hpcobs.settings import config as config_module

RECORD = "cluster:slurm_nodes:count"
BY_PARTITION = "partition:slurm_nodes:count"
SCHEDULABLE = '{state=~"alloc|mixed|idle"}'
TEST_FILES = "prometheus/tests/slurm/"


def _file(record: str) -> str:
    """The rule file a record's promtool test loads (docs/recording-rules.md: its `:` become `.`)."""
    return record.replace(":", ".") + ".rules.yaml"


@pytest.fixture(scope="module", params=["sckyzo", "native"])
def flavoured(request, tmp_path_factory):
    """The default config with each Slurm exporter flavour, its build, and a healthy simulated cluster."""
    path = tmp_path_factory.mktemp("site") / "site.yaml"
    path.write_text(yaml.safe_dump({"exporters": {"slurm": {"flavour": request.param}}}), encoding="utf-8")
    config = config_module.load(path)
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=0.25, scenarios="healthy", seed=5)
    return request.param, pipeline.generate(config), sim


def test_the_simulated_exporter_counts_the_shared_node_in_both_partitions(flavoured):
    flavour, _, sim = flavoured
    view = SlurmView(sim)
    shared = [node for node in sim.cluster.nodes if len(view.partitions_of(node)) > 1]
    assert len(shared) == 1
    nodes = sim.cluster.nodes
    states = ("allocated", "mixed", "idle")
    per_partition = sum(view.count_nodes(states, p)[-1] for p in sim.cluster.partitions)
    assert per_partition == len(nodes) + 1, "the shared node counts in each of its partitions"
    assert view.count_nodes(states)[-1] == len(nodes), "the cluster counts it once"
    if flavour == "sckyzo":
        status = sim.sources["slurm"].name("node_status")
        partitions = [
            labels["partition"]
            for family in sim.families({status})
            for labels, values in family.series
            if labels["node"] == shared[0].name and values[-1] is not None
        ]
        assert sorted(partitions) == sorted(view.partitions_of(shared[0])), "one series per partition (node.go)"


def test_the_cluster_record_counts_each_node_once(flavoured, tmp_path):
    """The built record and its closure, in promtool, over the simulated exporter: every node once, while the
    partition record's states add up to one more (the shared node)."""
    _, generated, sim = flavoured
    step = sim.window.step
    series = sim.input_series({metric.name for metric in sim.sources["slurm"].metrics()})
    at = (sim.window.steps - 1) * step
    test = {
        "rule_files": [_file(RECORD), _file(BY_PARTITION)],
        "evaluation_interval": f"{step}s",
        "tests": [
            {
                "interval": f"{step}s",
                "input_series": [{"series": selector_text(s.name, s.labels), "values": s.values} for s in series],
                "promql_expr_test": [
                    {
                        "expr": f"sum({record}{SCHEDULABLE})",
                        "eval_time": f"{at}s",
                        "exp_samples": [{"labels": "{}", "value": value}],
                    }
                    for record, value in ((RECORD, len(sim.cluster.nodes)), (BY_PARTITION, len(sim.cluster.nodes) + 1))
                ],
            }
        ],
    }
    rules = {TEST_FILES + _file(r): generated[TEST_FILES + _file(r)] for r in (RECORD, BY_PARTITION)}
    outdir.write_tree(tmp_path, {**rules, f"{TEST_FILES}overlap.tests.yaml": yaml.safe_dump(test)})
    result = tools.test_rules(tmp_path / TEST_FILES / "overlap.tests.yaml")
    assert result.ok, result.output
