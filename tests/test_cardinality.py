"""The recording-rule budget (docs/recording-rules.md#budget), on the reference cluster of hpcobs.build.cardinality."""

import re

import pytest

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Record, layers
from hpcobs.build import cardinality, pipeline
from hpcobs.lang import lint

REF = cardinality.REFERENCE
GPUS = REF["nodes"] * REF["gpus_per_node"]


@pytest.fixture(scope="module")
def ctx(config):
    return Context(config)


@pytest.fixture(scope="module")
def groups(ctx):
    return [g for gs in pipeline.rule_groups(ctx).values() for g in gs]


@pytest.fixture(scope="module")
def costs(groups, ctx):
    return cardinality.costs(groups, ctx.sources, ctx.cluster)


def records(groups):
    return [r for g in groups for r in g.rules if isinstance(r, Record)]


def test_at_most_four_recorded_series_per_gpu(costs):
    per_gpu = sum(c.per.get("gpu", 0) for c in costs) / GPUS
    assert per_gpu <= 4, per_gpu


def test_all_recorded_series_stay_within_the_budget_of_the_raw_gpu_series(costs, ctx, config):
    budget = config.get("cardinality", "budget_percent")
    # Raised from 25 on purpose (issue 30): the on-call views' sparse records cost 1.3 points; a change of the budget
    # is a reviewed decision, never a side effect (docs/recording-rules.md#budget).
    assert budget == 26
    recorded = sum(c.recorded for c in costs)
    assert recorded <= budget / 100 * cardinality.gpu_exporter_series(ctx.sources)


def test_no_recorded_series_per_rank(groups, ctx):
    for record in records(groups):
        labels = cardinality.record_labels(record, ctx.cluster)
        if "rank" in labels:
            assert "hpc_job" in labels and record.expr.startswith("topk by"), record.record


def test_job_level_series_are_constant_per_job(groups, ctx):
    for record in records(groups):
        kind, count = cardinality.recorded_per(cardinality.record_labels(record, ctx.cluster))
        if record.record.startswith("job:"):
            assert kind == "job" and count <= REF["jobs"] * REF["nccl_groups"], record.record


def test_record_levels_match_their_labels(groups, ctx):
    """A record named node:... keys on node, job:... on hpc_job, and so on."""
    key = {"gpu": "gpu", "node": "node", "job": "hpc_job", "account": "account", "partition": "partition", "fs": "fs"}
    for record in records(groups):
        level = record.record.split(":")[0]
        labels = cardinality.record_labels(record, ctx.cluster)
        if level in key:
            assert key[level] in labels, record.record
        if level == "cluster":
            assert not labels & {"node", "gpu", "hpc_job"}, record.record


def test_the_build_prints_the_budget(tmp_path):
    from tests.conftest import run_build

    result = run_build("--no-tool-checks", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "cardinality on the reference cluster (2048 nodes x 8 GPUs, 300 jobs, 16384 ranks)" in result.stdout
    assert "hpcobs-gpu-normalise" in result.stdout and "(budget 26%, cardinality.budget_percent)" in result.stdout


def test_a_config_over_the_budget_does_not_build_and_the_value_it_names_does(tmp_path):
    """The budget is a gate, for build and check alike: one line naming the key and the value that accepts the
    estimate, nothing published; that value builds. A budget below the default config's estimate stays over it
    whatever the content becomes."""
    from tests.conftest import run_build

    out = tmp_path / "out"
    site = tmp_path / "site.yaml"
    site.write_text("cardinality: {budget_percent: 10}\n")
    for command in ("build", "check"):
        result = run_build(command, "--no-tool-checks", "--config", str(site), "--out", str(out))
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith(f"build error: {site}: cardinality.budget_percent: "), line
        assert "over the budget of 10%; no group grew beyond the default config's estimate" in line, line
        assert not out.exists()
    accepted = re.search(r"set cardinality\.budget_percent: ([0-9.]+) to accept it$", line).group(1)
    site.write_text(f"cardinality: {{budget_percent: {accepted}}}\n")
    result = run_build("--no-tool-checks", "--config", str(site), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"(budget {accepted}%, cardinality.budget_percent)" in result.stdout


@pytest.mark.parametrize("exporter", ["lustre", "falco", "tetragon", "nccl_inspector", "training", "slurm"])
def test_turning_an_exporter_off_makes_no_group_grow(exporter, costs, tmp_path):
    """The estimate is of the groups the build writes, which keep no record of a disabled exporter
    (hpcobs.build.enabled). Before, tetragon off kept its records, counted at full size once their raw metrics were
    no enabled exporter's (hpcobs-security 925 -> 12,603): the gate refused a site for turning an exporter off."""
    from hpcobs.settings import config as config_module

    site = tmp_path / "site.yaml"
    site.write_text(f"exporters: {{{exporter}: {{enabled: false}}}}\n")
    off = Context(config_module.load(site))
    before = {cost.group: cost.recorded for cost in costs}
    grown = [
        (cost.group, before.get(cost.group, 0), cost.recorded)
        for cost in pipeline.estimate(off, pipeline.built_rule_groups(off)).groups
        if cost.recorded > before.get(cost.group, 0)
    ]
    assert grown == []


def test_the_refusal_names_the_groups_that_grew_and_by_how_much():
    """Measured on the first gate: disabling tetragon moved hpcobs-security from 925 to 12,603 series."""

    def estimate(**recorded):
        return cardinality.Estimate(
            [cardinality.GroupCost(name, 0, n, {"node": n}) for name, n in recorded.items()], yardstick=417_792
        )

    default = estimate(**{"hpcobs-gpu-normalise": 33_096, "hpcobs-security": 925, "hpcobs-slurm": 241})
    site = estimate(**{"hpcobs-gpu-normalise": 33_096, "hpcobs-security": 12_603, "hpcobs-new": 80_000})
    line = cardinality.overrun(site, default, 25, "site.yaml")
    assert line == (
        "build error: site.yaml: cardinality.budget_percent: the recording rules record 125,699 series on the "
        "reference cluster, 30.1% of the 417,792 the GPU exporters emit, over the budget of 25%; grown beyond the "
        "default config's estimate: hpcobs-new +80,000 (0 -> 80,000), hpcobs-security +11,678 (925 -> 12,603); "
        "set cardinality.budget_percent: 30.1 to accept it, or turn back what grew"
    )


def test_groups_form_layers_without_reading_their_own_records(groups):
    layered = layers(groups)
    assert sum(map(len, layered)) == len(groups)
    produced_by = {r.record: g.name for g in groups for r in g.rules if isinstance(r, Record)}
    for group in groups:
        for rule in group.rules:
            assert all(produced_by.get(n) != group.name for n in lint.metric_names(rule.expr)), rule
