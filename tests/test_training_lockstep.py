"""A synchronous job's straggler (issue 31): the training helper times a step from the previous step's end, and every
rank of a synchronous data-parallel job leaves the step's last collective together, so every rank reports the same
step time, the job's pace. The straggler shows only in its phases: its own slow phase grows, and every other rank
waits as long in backward (DDP overlaps the gradient all-reduce with it). The simulator behaves so; the records find
the straggler by its excess over the median rank's phases, and TrainingStraggler fires on it and stays silent when
every rank is slowed alike. The records' and the alert's boundary cases are promtool tests of their modules."""

import json
import statistics

import pytest

from hpcobs.authoring.context import Context
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import Simulation
from hpcobs.settings.names import DashboardUid
from tests.conftest import ROOT, firing_over_simulated
from tests.test_training_phases import hero_counters

TRAINING = f"grafana/dashboards/HPC/{DashboardUid.TRAINING}.json"
START = 600  # seconds: the fault starts at 10m
# Faults that slow every rank of the hero job alike: a slow fabric, no straggler.
EVERYONE_SLOW = ("ib_congestion", "nccl_latency_spike")


def _simulated(config, scenario: str, hours: float) -> Simulation:
    return Simulation(
        config, nodes=4, gpus_per_node=2, hours=hours, scenarios=f"{scenario}:start={START}s:duration=40m", seed=2
    )


def _per_step(sim, begin: int, end: int):
    """Each rank's step time and seconds per step in each phase between the scrapes begin and end."""
    steps = {rank: v[end] - v[begin] for (rank, _), v in hero_counters(sim, "steps").items()}
    step_seconds = {
        rank: (v[end] - v[begin]) / steps[rank] for (rank, _), v in hero_counters(sim, "step_seconds").items()
    }
    phases = {}
    for (rank, phase), v in hero_counters(sim, "phase_seconds").items():
        phases.setdefault(rank, {})[phase] = (v[end] - v[begin]) / steps[rank]
    return step_seconds, phases


def _excess(phases: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each rank's seconds per step beyond the median rank's, per phase, as the records compute it."""
    median = {phase: statistics.median(p[phase] for p in phases.values()) for phase in next(iter(phases.values()))}
    return {rank: {phase: max(0.0, s - median[phase]) for phase, s in p.items()} for rank, p in phases.items()}


def test_every_simulated_rank_steps_at_the_straggler_s_pace_and_the_others_wait_in_backward(config):
    sim = _simulated(config, "straggler", hours=1)
    (fault,) = sim.faults.faults
    straggler = fault.target["rank"]
    step_seconds, phases = _per_step(sim, sim.window.index(START + 300), sim.window.index(START + 1500))
    nominal = next(j for j in sim.cluster.jobs if j.id == fault.target["job"]).step_seconds
    assert len(step_seconds) >= 4, "the median needs 4 ranks or more"
    pace = statistics.median(step_seconds.values())
    assert all(abs(s - pace) < 1e-9 * pace for s in step_seconds.values()), "one pace: lockstep"
    assert pace > 1.5 * nominal, "the straggler's 1.6x sets it"
    assert all(sum(p.values()) <= step_seconds[rank] + 1e-9 for rank, p in phases.items())
    excess = _excess(phases)
    largest = max(excess, key=lambda rank: sum(excess[rank].values()))
    assert largest == straggler
    assert max(excess[straggler], key=excess[straggler].get) == "data"
    # The others' extra time is the straggler's, waited in backward, never in comm.
    for rank, p in phases.items():
        if rank != straggler:
            waited = p["backward"] - (phases[straggler]["backward"])
            assert waited == pytest.approx(phases[straggler]["data"] - p["data"], rel=0.05), rank
    assert sum(excess[straggler].values()) / pace == pytest.approx(1 - 1 / 1.6, rel=0.05), "the ratio reads 1/1.6"


@pytest.mark.parametrize("scenario", EVERYONE_SLOW)
def test_a_slow_fabric_slows_every_rank_alike(config, scenario):
    sim = _simulated(config, scenario, hours=1)
    before, _ = _per_step(sim, sim.window.index(START - 300), sim.window.index(START - 30))
    step_seconds, phases = _per_step(sim, sim.window.index(START + 300), sim.window.index(START + 1500))
    assert len(set(step_seconds.values())) == 1
    assert statistics.median(step_seconds.values()) > 1.15 * statistics.median(before.values())
    assert all(sum(e.values()) < 0.02 * step for e, step in zip(_excess(phases).values(), step_seconds.values()))


@pytest.mark.parametrize("scenario", EVERYONE_SLOW)
def test_training_straggler_is_silent_when_every_rank_is_slow_alike(config, generated, tmp_path, scenario):
    for_ = duration_seconds(Context(config).thresholds.training_straggler_for)
    at = START + for_ + 600
    sim = _simulated(config, scenario, hours=(at + 600) / 3600)
    source = sim.sources["training"]
    series = sim.input_series(
        {source.name(s, v) for s in ("steps", "step_seconds", "phase_seconds") for v in source.versions}
    )
    result = firing_over_simulated(
        generated, tmp_path, "prometheus/tests/training/", "TrainingStraggler", sim, series, "rank", at, []
    )
    assert result.ok, result.output


@pytest.fixture(scope="module")
def panels(generated):
    dashboard = json.loads(generated[TRAINING])
    every = dashboard["panels"] + [p for row in dashboard["panels"] for p in row.get("panels", [])]
    return {panel["title"]: panel for panel in every}, dashboard


def test_the_slowest_ranks_are_ranked_by_excess_when_the_job_times_phases(panels):
    by_title, dashboard = panels
    slowest = " ".join(t["expr"] for t in by_title["Slowest ranks now"]["targets"])
    assert "clamp_min(" in slowest and "job:training_phase_seconds:median" in slowest, "by excess"
    assert "or on () topk(10," in slowest, "by step time when the job times no phase"
    assert all(t.get("instant") for t in by_title["Slowest ranks now"]["targets"]), "raw ranks at one instant only"
    over_range = " ".join(t["expr"] for t in by_title["Ranks that were the slowest over the range"]["targets"])
    assert "job:training_straggler_rank:excess_seconds" in over_range
    assert (
        "job:training_straggler_rank:step_seconds"
        in by_title["Slowest rank now, its node and step time"]["targets"][0]["expr"]
    )
    (rank,) = [v for v in dashboard["templating"]["list"] if v["name"] == "rank"]
    assert "clamp_min(" in rank["query"] and " or on () " in rank["query"]


def test_no_reader_names_the_records_the_straggler_ones_replaced(generated):
    replaced = ("job:training_slowest_rank:step_seconds", "job:training_slowest_rank:phase_seconds")
    readers = [path for path, text in generated.items() if any(name in text for name in replaced)]
    assert not readers, readers
    docs = [p.name for p in (ROOT / "docs").rglob("*.md") if any(n in p.read_text() for n in replaced)]
    assert not docs, docs


def test_the_contract_says_step_seconds_is_the_job_s_pace():
    contracts = (ROOT / "docs" / "contracts.md").read_text()
    training = contracts[contracts.index("## Training metrics") :]
    assert "pace" in training and "lockstep" in training
