"""Where a step's time goes (issue 31, points 1 and 3): the phase counter in the contract, the simulated ranks timing
their phases as the helper does, TrainingStraggler naming the straggler's slow phase over them, and the training
dashboard's "Where time goes" row. The records' and the alert's boundary cases are promtool tests of their modules."""

import json
import statistics

import hpcobs_training
import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import Simulation
from hpcobs.settings.names import DashboardUid
from tests.conftest import ROOT, firing_over_simulated

CATALOGUE = ROOT / "hpcobs" / "exporters" / "catalogue" / "training.yaml"
TRAINING = f"grafana/dashboards/HPC/{DashboardUid.TRAINING}.json"
PHASE_RECORDS = ("job:training_phase_seconds:median", "job:training_straggler_rank:phase_seconds")
START = 600  # seconds: the straggler starts at 10m


def test_the_phase_counter_is_optional_and_labelled_as_the_helper_writes_it():
    (phase,) = [m for m in yaml.safe_load(CATALOGUE.read_text())["metrics"] if m["signal"] == "phase_seconds"]
    assert phase["optional"], "a site's own training code may time no phase"
    assert phase["labels"] == [*hpcobs_training.LABELS, "phase"]


def test_the_contract_names_every_phase_of_the_helper():
    contracts = (ROOT / "docs" / "contracts.md").read_text()
    training = contracts[contracts.index("## Training metrics") :]
    assert "hpcobs_training_phase_seconds_total" in training
    assert all(f"`{phase}`" in training for phase in hpcobs_training.PHASES)


def _straggling(config, hours):
    return Simulation(config, nodes=4, gpus_per_node=2, hours=hours, scenarios=f"straggler:start={START}s", seed=2)


def hero_counters(sim, signal):
    """{(rank, phase or None): values} of one training signal of the hero job, which every training fault targets."""
    job = sim.cluster.roles.hero_job
    name = sim.sources["training"].metric(signal).name
    return {
        (labels["rank"], labels.get("phase")): values
        for family in sim.families({name})
        for labels, values in family.series
        if labels["hpc_job"] == job
    }


def test_simulated_phases_add_up_to_at_most_the_step_and_the_straggler_loses_its_time_in_data(config):
    sim = _straggling(config, hours=1)
    steps = hero_counters(sim, "step_seconds")
    phases = hero_counters(sim, "phase_seconds")
    assert {phase for _, phase in phases} == {"data", "forward", "backward", "optimizer", "comm"}
    for (rank, _), step_seconds in steps.items():
        mine = [values for (r, _), values in phases.items() if r == rank]
        for scrape, step in enumerate(step_seconds):
            if step is not None:
                assert sum(values[scrape] for values in mine) <= step + 1e-9, (rank, scrape)
    (fault,) = sim.faults.faults
    straggler, end = fault.target["rank"], sim.window.index(START + 1500)
    begin = sim.window.index(START)

    def per_phase(rank):
        return {phase: v[end] - v[begin] for (r, phase), v in phases.items() if r == rank}

    # Over the median rank: the others wait for the straggler (in backward), so the median rank is a waiter.
    slow, ranks = per_phase(straggler), {rank for rank, _ in steps}
    median = {phase: statistics.median(per_phase(rank)[phase] for rank in ranks) for phase in slow}
    excess = {phase: slow[phase] - median[phase] for phase in slow}
    assert max(excess, key=excess.get) == "data"
    assert excess["data"] > 10 * max(max(v, 0) for phase, v in excess.items() if phase != "data")


@pytest.mark.parametrize("with_phases", [True, False], ids=["names-data", "no-phase-series"])
def test_training_straggler_fires_over_the_simulated_straggler(config, generated, tmp_path, with_phases):
    """The built alert and the records it reads over the simulated ranks: it names the straggler's data phase; when
    the job times no phase it stays silent, as it must: the simulated ranks step in lockstep, every one at the job's
    pace, and only their phases tell the straggler from the ranks that wait for it."""
    for_ = duration_seconds(Context(config).thresholds.training_straggler_for)
    at = START + for_ + 600
    sim = _straggling(config, hours=(at + 600) / 3600)
    source = sim.sources["training"]
    signals = ("steps", "step_seconds") + (("phase_seconds",) if with_phases else ())
    series = sim.input_series({source.name(s, v) for s in signals for v in source.versions})
    (fault,) = sim.faults.faults
    by, expected = ("phase", ["data"]) if with_phases else ("rank", [])
    result = firing_over_simulated(
        generated, tmp_path, "prometheus/tests/training/", "TrainingStraggler", sim, series, by, at, expected
    )
    assert result.ok, result.output


@pytest.fixture(scope="module")
def where_time_goes(generated):
    panels = json.loads(generated[TRAINING])["panels"]
    titles = [panel["title"] for panel in panels if panel["type"] == "row"]
    assert titles.index("Where time goes") == titles.index("Progress") + 1
    start = next(i for i, panel in enumerate(panels) if panel["title"] == "Where time goes")
    following = next(i for i in range(start + 1, len(panels)) if panels[i]["type"] == "row")
    return {panel["title"]: panel for panel in panels[start + 1 : following]}


def test_the_phase_row_draws_records_over_time_and_the_raw_ranks_at_one_instant(where_time_goes):
    for panel in where_time_goes.values():
        exprs = " ".join(target["expr"] for target in panel["targets"])
        if panel["type"] == "timeseries":
            assert "hpcobs_training_" not in exprs, f"{panel['title']}: over time, the records only"
            assert any(record in exprs for record in PHASE_RECORDS)
        else:
            assert panel["type"] == "table"
            assert all(target.get("instant") for target in panel["targets"])
            assert 'hpc_job="$hpc_job"' in exprs and "topk(10," in exprs, "one job's ranks, the slowest only"


def test_the_slowest_ranks_phases_put_the_largest_excess_on_top(where_time_goes):
    table = where_time_goes["Slowest ranks' phases now"]
    assert table["options"]["sortBy"] == [{"displayName": "x median rank", "desc": True}]
    coloured = [o for o in table["fieldConfig"]["overrides"] if "x median rank" in o["matcher"]["options"]["names"]]
    steps = next(p["value"]["steps"] for p in coloured[0]["properties"] if p["id"] == "thresholds")
    assert [step["color"] for step in steps] == ["green", "red"]
