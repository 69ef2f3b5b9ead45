"""The week's workload (hpcobs/proof/simulate/week.py): faults at the Llama 3 mix with ground truth, and a
background that never lands on a fault's entity while the fault is there."""

from collections import Counter

import pytest

from hpcobs.proof.simulate import Simulation
from hpcobs.proof.simulate.scenarios import kind_named
from hpcobs.proof.simulate.week import BACKGROUND, LLAMA3_MIX, MARGIN, REAL_RATE, schedule


@pytest.fixture(scope="module")
def cluster(config):
    """1,024 GPUs over a week, healthy: the cluster the plans are drawn on."""
    return Simulation(config, nodes=128, gpus_per_node=8, hours=168, seed=1).cluster


def test_the_mix_is_table_5():
    assert sum(c.share for c in LLAMA3_MIX) == pytest.approx(100)
    assert pytest.approx(0.474e-3, rel=1e-3) == REAL_RATE  # 419 in 54 days on 16,384 GPUs
    assert [c.name for c in LLAMA3_MIX if not c.variants] == ["silent data corruption"]


def test_every_class_and_background_maps_to_a_scenario_that_exists():
    for kind in [v.kind for c in LLAMA3_MIX for v in c.variants] + [b.kind for b in BACKGROUND]:
        assert kind_named(kind, kind).name  # raises for an unknown kind


def test_a_plan_is_deterministic_given_the_seed(cluster):
    assert schedule(cluster, 7, REAL_RATE * 20) == schedule(cluster, 7, REAL_RATE * 20)
    assert schedule(cluster, 7, REAL_RATE * 20) != schedule(cluster, 8, REAL_RATE * 20)


def test_faults_arrive_at_the_rate_and_the_mix(cluster):
    rate, seeds = REAL_RATE * 50, range(12)
    plans = [schedule(cluster, seed, rate, background=False) for seed in seeds]
    drawn = [t for p in plans for t in p.truth]
    expected = rate * 1024 * 7 * len(seeds)
    assert abs(len(drawn) - expected) < 0.1 * expected
    counts = Counter(t.fault_class for t in drawn)
    for cls in LLAMA3_MIX:  # each share within 3 points (its standard error here is at most 0.8)
        assert abs(100 * counts[cls.name] / len(drawn) - cls.share) < 3, cls.name
    placed = [t for t in drawn if t.kind]
    assert len(placed) >= 0.98 * (len(drawn) - counts["silent data corruption"])
    for t in placed:  # the ground truth names what each fault hit and when
        assert t.specs and all(s.start == t.onset and s.start + s.duration == t.end for s in t.specs)
        assert "node" in t.entity or t.entity.keys() == {"job"}


def _held(spec, cluster):
    """What an event holds: its node, its job (and a batch job's node), and the job an Xid 79 hangs."""
    keys = {spec.node, spec.job} - {None}
    if spec.job and spec.job != cluster.roles.hero_job:
        keys |= {cluster.nodes[n].name for n in cluster.job(spec.job).nodes}
    if spec.kind == "xid79":
        node = cluster.node(spec.node).index
        keys |= {j.id for j in cluster.jobs_on_gpu(node, spec.gpu) if j.start <= spec.start < j.end}
    return keys


@pytest.mark.parametrize("seed", range(6))
def test_every_spec_of_a_plan_resolves_on_the_cluster(config, cluster, seed):
    """Targets the scenarios accept: e.g. driver_drift refuses a node without the optional fields."""
    plan = schedule(cluster, seed, REAL_RATE * 50)
    week = Simulation(config, nodes=128, gpus_per_node=8, hours=168, seed=1, scenarios=plan.specs)
    assert len(week.faults.faults) == len(plan.specs)


def test_background_never_lands_on_a_faults_entity_while_it_is_there(cluster):
    plan = schedule(cluster, 3, REAL_RATE * 50)
    assert len(plan.background) > 100
    faults = [(s, t) for t in plan.truth for s in t.specs]
    for bg in plan.background:
        for spec, truth in faults:
            if _held(bg, cluster) & _held(spec, cluster):
                assert bg.start >= truth.end + MARGIN or bg.start + min(bg.duration, 3600) <= truth.onset - MARGIN


def test_a_plan_simulates(config):
    """16 GPUs for a day at a raised rate: every spec resolves against the cluster and the series write."""
    healthy = Simulation(config, nodes=4, gpus_per_node=4, hours=24, seed=2)
    plan = schedule(healthy.cluster, 2, REAL_RATE * 200)
    assert plan.truth and plan.background
    sim = Simulation(config, nodes=4, gpus_per_node=4, hours=24, seed=2, scenarios=plan.scenarios)
    assert len(sim.faults.faults) == len(plan.specs)
    assert sum(len(list(f.series)) for f in sim.families({"DCGM_FI_DEV_XID_ERRORS", "up"})) > 0
