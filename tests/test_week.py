"""The week's workload (hpcobs/proof/simulate/week.py): faults at the Llama 3 mix with ground truth, and a
background that never lands on a fault's entity while the fault is there."""

import io
from collections import Counter

import pytest

from hpcobs.proof.simulate import UP, Simulation, write
from hpcobs.proof.simulate.background import MAINTENANCE_REASON, REBOOT_SECONDS
from hpcobs.proof.simulate.gpu import POWER_LIMIT_WATTS
from hpcobs.proof.simulate.scenarios import kind_named
from hpcobs.proof.simulate.week import BACKGROUND, DRAIN_WAIT, LLAMA3_MIX, MARGIN, ONCE, REAL_RATE, schedule


@pytest.fixture(scope="module")
def cluster(config):
    """1,024 GPUs over a week, healthy: the cluster the plans are drawn on."""
    return Simulation(config, nodes=128, gpus_per_node=8, hours=168, seed=1).cluster


def test_the_mix_is_table_5():
    assert sum(c.share for c in LLAMA3_MIX) == pytest.approx(100)
    assert pytest.approx(0.474e-3, rel=1e-3) == REAL_RATE  # 419 in 54 days on 16,384 GPUs
    assert [c.name for c in LLAMA3_MIX if not c.variants] == ["silent data corruption"]


def test_every_class_and_background_maps_to_a_scenario_that_exists():
    for kind in [v.kind for c in LLAMA3_MIX for v in c.variants] + [
        b.kind for b in BACKGROUND + tuple(b for _, b in ONCE)
    ]:
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


def _span(bg):
    """When a background event shows: a node absent before it joins or after it leaves; the others for their
    duration, an hour at most."""
    if bg.kind == "node_joins":
        return 0, bg.start
    if bg.kind == "node_leaves":
        return bg.start, float("inf")
    return bg.start, bg.start + min(bg.duration, 3600)


def test_background_never_lands_on_a_faults_entity_while_it_is_there(cluster):
    plan = schedule(cluster, 3, REAL_RATE * 50)
    assert len(plan.background) > 100
    faults = [(s, t) for t in plan.truth for s in t.specs]
    for bg in plan.background:
        start, end = _span(bg)
        for spec, truth in faults:
            if _held(bg, cluster) & _held(spec, cluster):
                assert start >= truth.end + MARGIN or end <= truth.onset - MARGIN, (bg, truth)


def test_a_week_has_the_background_a_fleet_sees(cluster):
    """1,024 GPUs for a week: each benign kind at its rate, a node added, Prometheus restarted, a node removed."""
    plan = schedule(cluster, 1, REAL_RATE)
    counts = Counter(s.kind for s in plan.background)
    node_or_gpu = [bg for bg in BACKGROUND if bg.kind in ("planned_maintenance", "power_excursion")]
    node_or_gpu += [bg for bg in BACKGROUND if bg.kind.startswith(("job_xid", "node_exporter"))]
    assert len(node_or_gpu) == 6
    for bg in node_or_gpu:  # a few may find every candidate held
        assert 0.8 * bg.per_day * 7 <= counts[bg.kind] <= bg.per_day * 7, bg.kind
    assert [counts[bg.kind] for _, bg in ONCE] == [1, 1, 1]
    joined, left = ({s.node for s in plan.background if s.kind == k} for k in ("node_joins", "node_leaves"))
    assert joined != left  # the node added is not the one removed
    jobs = {j.id: j for j in cluster.jobs}
    for spec in plan.background:
        node = cluster.node(spec.node).index if spec.node else None
        running = [j for j in cluster.jobs_on(node) if j.start <= spec.start < j.end] if node is not None else []
        if spec.kind == "planned_maintenance":  # the node's job, if any, ends before the reboot: none is cancelled
            reboot = spec.start + spec.duration - REBOOT_SECONDS
            assert node in cluster.roles.batch and reboot <= spec.start + DRAIN_WAIT
            assert all(j.end <= reboot for j in running)
        if spec.kind.startswith("job_xid"):  # a user's job runs on the GPU to die of its Xid
            assert node in cluster.roles.batch and running and jobs[running[0].id].end > spec.start + 30
        if spec.kind in ("node_joins", "node_leaves"):
            assert node in cluster.roles.batch and spec.duration is None


# -- the background kinds, as the exporters show them ------------------------------------------------------------------


def _series(sim, name, **labels):
    """{labels: values} of one family, the series carrying `labels`."""
    family = next(f for f in sim.families({name}))
    return [(lab, v) for lab, v in family.series if all(lab.get(k) == x for k, x in labels.items())]


def _of_node(sim, node):
    """Every sample of every series that names the node (its targets' instance, or Slurm's node label)."""
    for family in sim.families():
        for labels, values in family.series:
            if labels.get("instance", "").startswith(f"{node}:") or labels.get("node") == node:
                yield family.name, labels, values


# 8 nodes x 4 GPUs for 6 hours (batch nodes gpu005..gpu007), each background kind on a node of its own.
BACKGROUND_SCENARIOS = ",".join(
    [
        "planned_maintenance:node=gpu005:start=1h",
        "node_leaves:node=gpu006:start=2h",
        "node_joins:node=gpu007:start=3h",
        "power_excursion:node=gpu001:gpu=1:start=1h",
        "prometheus_restart:start=4h",
        "node_exporter_down:node=gpu007:start=5h",
        "job_xid31:node=gpu006:gpu=0:start=30m",
    ]
)


def _background(config):
    return Simulation(config, nodes=8, gpus_per_node=4, hours=6, scenarios=BACKGROUND_SCENARIOS, seed=3)


@pytest.fixture(scope="module")
def background(config):
    return _background(config)


def _fault(sim, kind):
    return next(f for f in sim.faults.faults if f.kind == kind)


def test_planned_maintenance_drains_then_reboots_the_node(background):
    sim, step = background, background.window.step
    fault = _fault(sim, "planned_maintenance")
    first, back = sim.window.index(fault.start), sim.window.index(fault.end)
    reboot = back - REBOOT_SECONDS // step
    ((labels, reason),) = _series(sim, "slurm_node_drain_reason_info", node="gpu005")
    assert labels["reason"] == MAINTENANCE_REASON and reason[first] == 1 and reason[back] is None
    node = sim.cluster.node("gpu005").index
    jobs = sim.cluster.jobs_on(node)
    assert not [j for j in jobs if fault.start <= j.start < fault.end]  # nothing starts on a draining node
    # A job still running at the reboot is cancelled then (the week plans the window to end after its job).
    assert all(j.end <= reboot * step for j in jobs if j.start < fault.start)
    assert all(j.end_state == "CANCELLED" for j in jobs if j.end == reboot * step)
    ups = _series(sim, UP, instance="gpu005:9100") + _series(sim, UP, instance="gpu005:9400")
    assert all(v[reboot:back] == [0] * (back - reboot) and v[back] == 1 for _, v in ups)
    for name, labels, values in _of_node(sim, "gpu005"):
        if "instance" in labels and labels["instance"].startswith("gpu005:") and name != UP:
            assert values[reboot:back] == [None] * (back - reboot), name
    ((_, boot),) = _series(sim, "node_boot_time_seconds", instance="gpu005:9100")
    assert boot[back] > sim.window.time(reboot) > boot[reboot - 1]


def test_a_node_that_joins_has_no_series_before_and_counts_after(background):
    sim = background
    joined = sim.window.index(_fault(sim, "node_joins").start)
    seen = list(_of_node(sim, "gpu007"))
    assert seen and all(v[:joined] == [None] * joined for _, _, v in seen)
    assert any(v[joined] is not None for name, _, v in seen if name == "node_boot_time_seconds")
    ((_, total),) = _series(sim, "slurm_nodes_total")
    assert total[joined - 1] + 1 == total[joined]
    assert all(j.start >= joined * sim.window.step for j in sim.cluster.jobs_on(sim.cluster.node("gpu007").index))


def test_a_node_that_leaves_vanishes_for_good(background):
    sim = background
    fault = _fault(sim, "node_leaves")
    gone = sim.window.index(fault.end)
    ((labels, reason),) = _series(sim, "slurm_node_drain_reason_info", node="gpu006")
    assert labels["reason"] == "decommission" and reason[sim.window.index(fault.start)] == 1
    seen = list(_of_node(sim, "gpu006"))
    assert any(v[gone - 1] is not None for _, _, v in seen)
    assert all(v[gone:] == [None] * (sim.window.steps - gone) for _, _, v in seen)  # up too: no target left


def test_a_prometheus_restart_is_a_gap_in_every_series(background):
    sim = background
    fault = _fault(sim, "prometheus_restart")
    first, last = sim.window.index(fault.start), sim.window.index(fault.end)
    for family in sim.families({UP, "DCGM_FI_DEV_GPU_UTIL", "slurm_nodes_total"}):
        for labels, values in family.series:
            assert values[first:last] == [None] * (last - first), (family.name, labels)
            if values[first - 1] is not None:  # a series there before is there after (gpu007 joins later)
                assert values[last] is not None, (family.name, labels)


def test_a_power_excursion_caps_power_not_thermal(background):
    sim = background
    fault = _fault(sim, "power_excursion")
    first, last = sim.window.index(fault.start), sim.window.index(fault.end)
    ((_, power),) = _series(sim, "DCGM_FI_DEV_POWER_USAGE", Hostname="gpu001", gpu="1") or _series(
        sim, "DCGM_FI_DEV_POWER_USAGE", hostname="gpu001", gpu="1"
    )
    assert all(p > POWER_LIMIT_WATTS for p in power[first:last]) and power[first - 1] < POWER_LIMIT_WATTS
    events = {
        lab["clock_event"]: v
        for lab, v in _series(sim, "DCGM_EXP_CLOCK_EVENTS_COUNT", gpu="1")
        if "gpu001" in lab.values()
    }
    assert max(v or 0 for v in events["power_cap"]) > 0
    assert all(v is None for e in ("hw_thermal", "sw_thermal", "hw_slowdown") for v in events.get(e, []))


def test_a_users_job_dies_of_its_own_xid(background):
    sim, step = background, background.window.step
    fault = _fault(sim, "job_xid31")
    job = sim.cluster.job(fault.target["job"])
    assert (job.end, job.end_state) == (fault.start + step, "FAILED")
    xid = _series(sim, "DCGM_FI_DEV_XID_ERRORS", gpu="0", err_code="31")
    xid = [(lab, v) for lab, v in xid if "gpu006" in lab.values()]
    first = sim.window.index(fault.start)
    # Sticky on the GPU: with the job while it lives, without hpc_job after; until the node leaves (node_leaves).
    assert {lab.get("hpc_job") for lab, v in xid if v[first] == 31} == {job.id}
    assert any(v[first + 2] == 31 for lab, v in xid if "hpc_job" not in lab)


def test_a_node_exporter_timeout_misses_its_scrape_only(background):
    sim = background
    first = sim.window.index(_fault(sim, "node_exporter_down").start)
    ((_, up),) = _series(sim, UP, instance="gpu007:9100")
    ((_, dcgm),) = _series(sim, UP, instance="gpu007:9400")
    assert up[first - 1 : first + 2] == [1, 0, 1] and dcgm[first] == 1
    ((_, boot),) = _series(sim, "node_boot_time_seconds", instance="gpu007:9100")
    assert boot[first] is None and boot[first + 1] is not None


def test_the_background_is_deterministic(config, background):
    again = _background(config)
    one, two = io.StringIO(), io.StringIO()
    names = {UP, "node_boot_time_seconds", "slurm_nodes_total", "DCGM_FI_DEV_XID_ERRORS"}
    write(background, "vm", one, names=names)
    write(again, "vm", two, names=names)
    assert one.getvalue() == two.getvalue() and len(one.getvalue()) > 10_000


def test_a_plan_simulates(config):
    """16 GPUs for a day at a raised rate: every spec resolves against the cluster and the series write."""
    healthy = Simulation(config, nodes=4, gpus_per_node=4, hours=24, seed=2)
    plan = schedule(healthy.cluster, 2, REAL_RATE * 200)
    assert plan.truth and plan.background
    sim = Simulation(config, nodes=4, gpus_per_node=4, hours=24, seed=2, scenarios=plan.scenarios)
    assert len(sim.faults.faults) == len(plan.specs)
    assert sum(len(list(f.series)) for f in sim.families({"DCGM_FI_DEV_XID_ERRORS", "up"})) > 0
