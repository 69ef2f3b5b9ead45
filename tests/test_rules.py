"""Rule files: shape (SchemaStore), meaning (promtool check + test), and that the tests have teeth."""

import re

import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, LinkBases, Record
from hpcobs.authoring.ruletest import Case
from hpcobs.build import outdir, pipeline, tools, validate
from hpcobs.build.cache import Cache
from hpcobs.lang import lint
from hpcobs.settings.config import DEFAULT_CONFIG
from hpcobs.settings.names import DashboardUid, Team
from tests.conftest import built_sites

RULE_FILES = "prometheus/rules/"
TEST_FILES = "prometheus/tests/"


def files_under(generated, prefix, ending=""):
    return {p: t for p, t in generated.items() if p.startswith(prefix) and p.endswith(ending)}


def rule_test_files(generated):
    """The promtool test files: prometheus/tests/<domain>/<rule>.tests.yaml (beside each, the rules it loads)."""
    return files_under(generated, TEST_FILES, ".tests.yaml")


def rule_name(rule):
    return rule.get("record") or rule["alert"]


def test_rule_files_match_the_schemastore_schema(generated):
    for path, text in files_under(generated, RULE_FILES).items():
        assert validate.schema_errors(path, text) == []


def test_rule_test_files_match_the_schemastore_schema(generated):
    assert rule_test_files(generated) and files_under(generated, TEST_FILES, ".rules.yaml")
    for path, text in files_under(generated, TEST_FILES).items():
        assert validate.schema_errors(path, text) == []


def test_every_rule_file_passes_promtool_check(generated, generated_tree):
    paths = [generated_tree / p for p in files_under(generated, RULE_FILES)]
    result = tools.check_rules(*paths)
    assert result.ok, result.output
    assert result.output.count("SUCCESS") == len(paths)


def test_every_rule_test_passes(generated, generated_tree, private_cache_dir):
    """promtool (check and test) and amtool on every file, both cores at once, through the suite's own cache:
    an entry exists only for the very same bytes and tool version that passed before in this session."""
    assert rule_test_files(generated)
    errors = validate.tool_errors(generated_tree, generated, Cache(private_cache_dir))
    assert not errors, "\n".join(errors)


@pytest.fixture(scope="module")
def groups(config):
    return [g for gs in pipeline.rule_groups(Context(config)).values() for g in gs]


def test_every_recording_rule_has_an_expected_output_test(groups):
    for record in (r for g in groups for r in g.rules if isinstance(r, Record)):
        assert any(case.expect for case in record.tests), f"{record.record} has no case with expected samples"


def test_every_alert_fires_and_stays_silent_somewhere(groups, generated):
    """promtool has no coverage report: this is ours."""
    tests = [t for text in rule_test_files(generated).values() for t in yaml.safe_load(text)["tests"]]
    for alert in (r for g in groups for r in g.rules if isinstance(r, Alert)):
        mine = [a for t in tests for a in t.get("alert_rule_test", []) if a["alertname"] == alert.alert]
        assert any(a["exp_alerts"] for a in mine), f"{alert.alert} never shown firing"
        assert any(not a["exp_alerts"] for a in mine), f"{alert.alert} never shown silent"


# The series an annotation's `query` reads (hpcobs.authoring.rules.Lookup): `query (printf `name{...`.
ANNOTATION_QUERY = re.compile(r"query \(printf `([a-zA-Z_:][a-zA-Z0-9_:]*)\{")


def names_read(rule: dict) -> set[str]:
    """What a rendered rule reads: its expression, and the series its annotations query."""
    queried = ANNOTATION_QUERY.findall(" ".join(rule.get("annotations", {}).values()))
    return lint.metric_names(rule["expr"]) | set(queried)


def test_each_test_file_loads_its_rule_and_only_what_it_reads(generated):
    """promtool evaluates every loaded rule at every step of every test: each rule's test file loads, from the
    rule file beside it, that rule and the recording rules it reads (in its expression or its annotations' queries),
    transitively (read by the PromQL parser), nothing else; each loaded rule exactly as deployed, in its deployed
    group (same name, interval, order), the groups in dependency order and evaluated in that order."""
    deployed = {path: yaml.safe_load(text)["groups"] for path, text in files_under(generated, RULE_FILES).items()}
    groups = {g["name"]: g for gs in deployed.values() for g in gs}
    producers = {}
    for group in groups.values():
        for rule in group["rules"]:
            if "record" in rule:
                producers.setdefault(rule["record"], []).append(rule)
    tested_names = set()
    for path, text in rule_test_files(generated).items():
        domain, stem = path.removeprefix(TEST_FILES).removesuffix(".tests.yaml").split("/")
        spec = yaml.safe_load(text)
        assert spec["rule_files"] == [f"{stem}.rules.yaml"], path
        assert {case["name"].split(": ", 1)[0] for case in spec["tests"]} == {stem.replace(".", ":")}, path
        tested = [
            r
            for g in deployed[f"{RULE_FILES}{domain}.rules.yaml"]
            for r in g["rules"]
            if rule_name(r) == stem.replace(".", ":")
        ]
        expected, todo = [], list(tested)
        while todo:
            rule = todo.pop()
            if rule not in expected:
                expected.append(rule)
                todo += [r for name in names_read(rule) for r in producers.get(name, [])]
        loaded_groups = yaml.safe_load(generated[path.replace(".tests.yaml", ".rules.yaml")])["groups"]
        loaded = [r for g in loaded_groups for r in g["rules"]]
        assert len(loaded) == len(expected) and all(r in loaded for r in expected), path
        earlier = set()
        for group in loaded_groups:
            original = groups[group["name"]]
            assert {**group, "rules": None} == {**original, "rules": None}, group["name"]
            assert group["rules"] == [r for r in original["rules"] if r in expected], (path, group["name"])
            reads = {n for r in group["rules"] for n in names_read(r)} & set(producers)
            assert reads <= earlier | {rule_name(r) for r in group["rules"]}, (path, group["name"])
            earlier |= {rule_name(r) for r in group["rules"]}
        assert spec.get("group_eval_order", [g["name"] for g in loaded_groups]) == [g["name"] for g in loaded_groups]
        tested_names.add((domain, stem.replace(".", ":")))
    assert tested_names == {
        (path.removeprefix(RULE_FILES).removesuffix(".rules.yaml"), rule_name(r))
        for path, gs in deployed.items()
        for g in gs
        for r in g["rules"]
    }


def test_conditions_on_per_gpu_series_are_met_before_aggregating(groups, config):
    """A comparison on a GPU exporter's raw series runs before they are relabelled and aggregated: on a healthy
    fleet almost none pass, so the rule costs little more than reading them (docs/benchmarks.md, Fleet scale).
    `max by (gpu) (label_replace(x, ...)) > 0` would relabel and aggregate every GPU at every evaluation."""
    sources = Context(config).sources
    per_gpu = {metric.name for exporter in ("dcgm", "amd") for metric in sources[exporter].metrics()}
    compared_late = {
        rule.record if isinstance(rule, Record) else rule.alert: lint.compared_after_aggregating(rule.expr)
        for group in groups
        for rule in group.rules
    }
    assert {name: sorted(metrics) for name, metrics in compared_late.items() if metrics & per_gpu} == {}


def test_the_late_comparison_check_sees_the_pattern():
    assert lint.compared_after_aggregating('max by (gpu) (label_replace(t{job="d"}, "a", "$1", "b", "(.+)")) > 85') == {
        "t"
    }
    assert lint.compared_after_aggregating("(max by (gpu) (rate(c[2m])) / 1000) > 0.1") == {"c"}
    assert lint.compared_after_aggregating("max by (gpu) (t > 85)") == set()
    assert lint.compared_after_aggregating('count by (node) (x{code=~"48|79"}) > 0') == set()
    assert lint.compared_after_aggregating("node:gpus:count < 8") == set()


def test_alert_conventions(groups, config):
    for alert in (r for g in groups for r in g.rules if isinstance(r, Alert)):
        rendered = alert.to_dict(LinkBases.of(config))
        assert rendered["labels"]["severity"] in ("critical", "warning", "info")
        assert rendered["annotations"]["summary"].endswith(".")
        assert "{{" not in rendered["annotations"]["summary"]
        assert "{{ $labels." in rendered["annotations"]["description"]
        assert rendered["annotations"]["runbook_url"].startswith(config.get("runbooks", "base_url"))
        assert "for" in rendered or alert.no_for_reason


def test_alert_constructor_refuses_an_alert_without_proof():
    with pytest.raises(ValueError, match="fires_on case and one silent_on"):
        Alert(
            "GpuSomething",
            severity="warning",
            team=Team.GPU_OPS,
            expr="up == 0",
            for_="5m",
            summary="Something.",
            description="x {{ $labels.node }}",
            runbook="gpu",
            dashboard=DashboardUid.GPU_CLUSTER,
            fires_on=[],
            silent_on=[],
        )


def test_alert_constructor_takes_team_and_dashboard_only_from_names():
    """A free string that matches a route or a uid today would silently break when names.py changes."""
    case = Case("c", at="1m", series=[])
    with pytest.raises(
        ValueError,
        match="team must be a hpcobs.settings.names.Team; dashboard must be a hpcobs.settings.names.DashboardUid",
    ):
        Alert(
            "GpuSomething",
            severity="warning",
            team="gpu-ops",
            expr="up == 0",
            for_="5m",
            summary="Something.",
            description="x",
            runbook="gpu",
            dashboard="hpcobs-gpu-cluster",
            fires_on=[case],
            silent_on=[case],
        )


def test_record_names_follow_level_metric_operations():
    with pytest.raises(ValueError, match="level:metric:operations"):
        Record("gpu_utilization", "up")


def _break(generated, tmp_path, path, old, new, name=None, intact_too=True):
    """Break the first rule of a deployed rule file that holds `old` (the rule `name` if given), wherever a test
    loads that rule, and run that rule's own cases against the broken rule (and, with intact_too, the intact one):
    they must fail on the first and pass on the second. (All cases pass in test_every_rule_test_passes; running
    only the broken rule's own shows that they, not some other rule's, catch it.)"""
    rules = [r for g in yaml.safe_load(generated[path])["groups"] for r in g["rules"]]
    intact = next(
        (r for r in rules if old in yaml.safe_dump(r, width=1_000_000) and name in (None, rule_name(r))), None
    )
    assert intact is not None, f"{old!r} not in a rule of {path}"
    broken = yaml.safe_load(yaml.safe_dump(intact, width=1_000_000).replace(old, new, 1))
    assert broken != intact
    domain = path.removeprefix(RULE_FILES).removesuffix(".rules.yaml")
    stem = f"{TEST_FILES}{domain}/{rule_name(intact).replace(':', '.')}"
    loaded = yaml.safe_load(generated[f"{stem}.rules.yaml"])
    assert intact in [r for g in loaded["groups"] for r in g["rules"]]
    for group in loaded["groups"]:
        group["rules"] = [broken if r == intact else r for r in group["rules"]]

    trees = {"broken": yaml.safe_dump(loaded)}
    if intact_too:
        trees["intact"] = generated[f"{stem}.rules.yaml"]
    results = {}
    for tree, rule_text in trees.items():
        files = {f"{stem}.tests.yaml": generated[f"{stem}.tests.yaml"], f"{stem}.rules.yaml": rule_text}
        outdir.write_tree(tmp_path / tree, files)
        results[tree] = tools.test_rules(tmp_path / tree / f"{stem}.tests.yaml")
    assert "intact" not in results or results["intact"].ok, results["intact"].output
    return results["broken"]


def test_tests_catch_a_missing_unit_conversion(generated, tmp_path):
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", " / 100", "")
    assert not result.ok
    assert "gpu:utilization:ratio" in result.output


def test_tests_catch_double_counting_of_shared_gpus(generated, tmp_path):
    result = _break(
        generated,
        tmp_path,
        RULE_FILES + "gpu.rules.yaml",
        "max by (cluster, node, gpu)",
        "max by (cluster, node, gpu, hpc_job)",
    )
    assert not result.ok


def test_tests_catch_an_alert_that_no_longer_fires(generated, tmp_path):
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", 'err_code=~"79"', 'err_code=~"80"')
    assert not result.ok
    assert "GpuFellOffBus" in result.output


def test_tests_catch_an_alert_that_fires_too_early(generated, tmp_path):
    text = generated[RULE_FILES + "gpu.rules.yaml"]
    assert re.search(r"\n(\s+)for: 1m\n", text)
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", "for: 1m", "for: 0s")
    assert not result.ok


def test_every_for_not_yet_elapsed_case_has_teeth(generated, tmp_path):
    """The cases hpcobs.authoring.alert_cases derives before `for` has elapsed evaluate a fault whose condition already
    holds: without the `for`, each alert fires there and its own cases fail."""
    alerts = [
        (path, rule)
        for path, text in files_under(generated, RULE_FILES, ".rules.yaml").items()
        for group in yaml.safe_load(text)["groups"]
        for rule in group["rules"]
        if "alert" in rule and rule.get("for")
    ]
    assert len(alerts) > 40

    def without_for(path, rule):
        # Intact, these cases pass: test_every_rule_test_passes runs them all.
        root = tmp_path / rule["alert"]
        return _break(generated, root, path, f"for: {rule['for']}", "for: 0s", rule["alert"], intact_too=False)

    with tools.pool() as pool:
        futures = {rule["alert"]: pool.submit(without_for, path, rule) for path, rule in alerts}
        passing = [name for name, future in futures.items() if future.result().ok]
    assert not passing, f"nothing fails without `for`: {passing}"


def test_synthetic_series_written_in_si_units_convert_value_by_value(config):
    """Rule tests write raw series in SI units; each dcgm-exporter version gets the values it exposes."""
    from hpcobs.authoring.synthetic import raw_values

    ctx = Context(config)
    assert raw_values(ctx, "dcgm", "gpu_utilization", "0x100 0.01 0x79", "4.6-4.8") == "0x100 1 0x79"
    assert raw_values(ctx, "dcgm", "gpu_utilization", "0x100 0.01 0x79", "4.9") == "0x100 0.01 0x79"
    assert raw_values(ctx, "dcgm", "gpu_utilization", "_x120 0.55x60 stale", "3.x-4.5") == "_x120 55x60 stale"
    assert raw_values(ctx, "dcgm", "energy", "0+12000x40", "4.6-4.8") == "0+12000000x40"
    assert raw_values(ctx, "dcgm", "energy", "0+12000x40", "4.10+") == "0+12000x40"
    assert raw_values(ctx, "dcgm", "fb_used", f"{2**33}x20 -1048576", "4.6-4.8") == "8192x20 -1"
    assert raw_values(ctx, "amd", "gfx_activity", "0.9-0.1x3 Inf NaN") == "90-10x3 Inf NaN"
    with pytest.raises(ValueError, match="not a promtool series value"):
        raw_values(ctx, "dcgm", "gpu_utilization", "80%x10", "4.9")


# Every `for` a site may set, at 0s: Prometheus then fires on the first evaluation where the condition holds.
FOR_THRESHOLDS = sorted(
    name for name in yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))["thresholds"] if name.endswith("_for")
)


@pytest.fixture(scope="module")
def zero_for_builds(tmp_path_factory, private_cache_dir):
    """Each `for` threshold set to 0s on its own, built and tested by promtool."""
    return built_sites(
        tmp_path_factory, private_cache_dir, {name: f"thresholds: {{{name}: 0s}}\n" for name in FOR_THRESHOLDS}
    )


@pytest.mark.parametrize("threshold", FOR_THRESHOLDS)
def test_a_for_of_0s_builds_and_its_alerts_fire_at_once(zero_for_builds, threshold):
    """A site may set any `for` to 0s: its alerts' cases still pass promtool, firing on the fault and silent on
    it before its onset (the cases before `for` has elapsed have no time left to evaluate)."""
    files, errors = zero_for_builds[threshold]
    assert any("for: 0s" in text for text in files.values())
    assert not errors, "\n".join(errors)
