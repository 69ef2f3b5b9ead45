"""Rule files: shape (SchemaStore), meaning (promtool check + test), and that the tests have teeth."""
import posixpath
import re

import pytest
import yaml

from hpcobs import lint, pipeline, tools, validate
from hpcobs.cache import Cache
from hpcobs.context import Context
from hpcobs.rules import Alert, Record

RULE_FILES = "prometheus/rules/"
TEST_FILES = "prometheus/tests/"
TEST_RULE_FILES = "prometheus/tests/rules/"


def files_under(generated, prefix):
    return {p: t for p, t in generated.items() if p.startswith(prefix)}


def rule_test_files(generated):
    """The promtool test files (prometheus/tests/rules/ holds rule files they load)."""
    return {p: t for p, t in files_under(generated, TEST_FILES).items() if not p.startswith(TEST_RULE_FILES)}


def test_rule_files_match_the_schemastore_schema(generated):
    for path, text in files_under(generated, RULE_FILES).items():
        assert validate.schema_errors(path, text) == []


def test_rule_test_files_match_the_schemastore_schema(generated):
    assert rule_test_files(generated) and files_under(generated, TEST_RULE_FILES)
    for path, text in files_under(generated, TEST_FILES).items():
        assert validate.schema_errors(path, text) == []


def test_every_rule_file_passes_promtool_check(generated, generated_tree):
    paths = [generated_tree / p for p in files_under(generated, RULE_FILES)]
    result = tools.check_rules(*paths)
    assert result.ok, result.output
    assert result.output.count("SUCCESS") == len(paths)


def all_tool_checks_pass(root, files, cache_dir):
    """promtool (check and test) and amtool on every file, both cores at once, through the suite's own cache:
    an entry exists only for the very same bytes and tool version that passed before in this session."""
    assert rule_test_files(files)
    errors = validate.tool_errors(root, files, Cache(cache_dir))
    assert not errors, "\n".join(errors)


def test_every_rule_test_passes(generated, generated_tree, private_cache_dir):
    all_tool_checks_pass(generated_tree, generated, private_cache_dir)


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


def test_each_test_file_loads_its_rule_file_and_only_the_recording_groups_it_reads(generated):
    """promtool evaluates every loaded rule at every step of every test: a domain's test file loads its own rule
    file as deployed, plus copies of exactly the recording groups of other domains that its rules read,
    transitively (no alert, no unread group), each after the groups it reads."""
    deployed = {path: yaml.safe_load(text)["groups"] for path, text in files_under(generated, RULE_FILES).items()}
    producer = {rule["record"]: (path, group["name"]) for path, groups in deployed.items() for group in groups
                for rule in group["rules"] if "record" in rule}
    copies_seen = 0
    for path, text in rule_test_files(generated).items():
        domain = path.removeprefix(TEST_FILES).removesuffix(".tests.yaml")
        own = f"{RULE_FILES}{domain}.rules.yaml"
        copies = f"{TEST_RULE_FILES}{domain}.rules.yaml"
        loaded = yaml.safe_load(text)["rule_files"]
        assert loaded[-1] == f"../rules/{domain}.rules.yaml"
        assert loaded[:-1] == ([f"rules/{domain}.rules.yaml"] if copies in generated else [])
        read, todo = set(), [r["expr"] for g in deployed[own] for r in g["rules"]]
        while todo:
            for name in lint.metric_names(todo.pop()):
                if name in producer and producer[name][0] != own and producer[name][1] not in read:
                    read.add(producer[name][1])
                    todo += [r["expr"] for g in deployed[producer[name][0]] if g["name"] == producer[name][1]
                             for r in g["rules"] if "record" in r]
        copied = yaml.safe_load(generated[copies])["groups"] if copies in generated else []
        assert {g["name"] for g in copied} == read, domain
        earlier = set()
        for group in copied:
            original = next(g for gs in deployed.values() for g in gs if g["name"] == group["name"])
            assert group["rules"] == [r for r in original["rules"] if "record" in r] and group["rules"], group["name"]
            reads = {producer[n][1] for r in group["rules"] for n in lint.metric_names(r["expr"]) if n in producer}
            assert reads - {group["name"]} <= earlier | {g["name"] for g in deployed[own]}, group["name"]
            earlier.add(group["name"])
        copies_seen += len(copied)
    assert copies_seen, "no test file reads another domain's records: the check above proves nothing"


def test_alert_conventions(groups, config):
    for alert in (r for g in groups for r in g.rules if isinstance(r, Alert)):
        rendered = alert.to_dict(config.get("grafana", "url"), config.get("runbooks", "base_url"))
        assert rendered["labels"]["severity"] in ("critical", "warning", "info")
        assert rendered["annotations"]["summary"].endswith(".")
        assert "{{" not in rendered["annotations"]["summary"]
        assert "{{ $labels." in rendered["annotations"]["description"]
        assert rendered["annotations"]["runbook_url"].startswith(config.get("runbooks", "base_url"))
        assert "for" in rendered or alert.no_for_reason


def test_alert_constructor_refuses_an_alert_without_proof():
    with pytest.raises(ValueError, match="fires_on case and one silent_on"):
        Alert("GpuSomething", severity="warning", team="gpu-ops", expr="up == 0", for_="5m",
              summary="Something.", description="x {{ $labels.node }}", runbook="gpu", dashboard="d",
              dashboard_vars=(), fires_on=[], silent_on=[])


def test_record_names_follow_level_metric_operations():
    with pytest.raises(ValueError, match="level:metric:operations"):
        Record("gpu_utilization", "up")


def _break(generated, tmp_path, path, old, new):
    """Break one rule file and run the test files that load it (the others load copies of what they read)."""
    files = dict(generated)
    assert old in files[path], f"{old!r} not in {path}"
    files[path] = files[path].replace(old, new, 1)
    from hpcobs import outdir
    outdir.write_tree(tmp_path, files)
    loading = [p for p, text in rule_test_files(files).items()
               if path in {posixpath.normpath(posixpath.join(posixpath.dirname(p), f))
                           for f in yaml.safe_load(text)["rule_files"]}]
    assert loading, f"no test file loads {path}"
    return tools.test_rules(*(tmp_path / p for p in loading))


def test_tests_catch_a_missing_unit_conversion(generated, tmp_path):
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", " / 100", "")
    assert not result.ok
    assert "gpu:utilization:ratio" in result.output


def test_tests_catch_double_counting_of_shared_gpus(generated, tmp_path):
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", "max by (cluster, node, gpu)",
                    "max by (cluster, node, gpu, hpc_job)")
    assert not result.ok


def test_tests_catch_an_alert_that_no_longer_fires(generated, tmp_path):
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", ") == 79", ") == 80")
    assert not result.ok
    assert "GpuFellOffBus" in result.output


def test_tests_catch_an_alert_that_fires_too_early(generated, tmp_path):
    text = generated[RULE_FILES + "gpu.rules.yaml"]
    assert re.search(r"\n(\s+)for: 1m\n", text)
    result = _break(generated, tmp_path, RULE_FILES + "gpu.rules.yaml", "for: 1m", "for: 0s")
    assert not result.ok


def test_synthetic_series_written_in_si_units_convert_value_by_value(config):
    """Rule tests write raw series in SI units; each dcgm-exporter version gets the values it exposes."""
    from hpcobs.synthetic import raw_values
    ctx = Context(config)
    assert raw_values(ctx, "dcgm", "gpu_utilization", "0x100 0.01 0x79", "4.6-4.8") == "0x100 1 0x79"
    assert raw_values(ctx, "dcgm", "gpu_utilization", "0x100 0.01 0x79", "4.9") == "0x100 0.01 0x79"
    assert raw_values(ctx, "dcgm", "gpu_utilization", "_x120 0.55x60 stale", "3.x-4.5") == "_x120 55x60 stale"
    assert raw_values(ctx, "dcgm", "energy", "0+12000x40", "4.6-4.8") == "0+12000000x40"
    assert raw_values(ctx, "dcgm", "energy", "0+12000x40", "4.10+") == "0+12000x40"
    assert raw_values(ctx, "dcgm", "fb_used", f"{2 ** 33}x20 -1048576", "4.6-4.8") == "8192x20 -1"
    assert raw_values(ctx, "amd", "gfx_activity", "0.9-0.1x3 Inf NaN") == "90-10x3 Inf NaN"
    with pytest.raises(ValueError, match="not a promtool series value"):
        raw_values(ctx, "dcgm", "gpu_utilization", "80%x10", "4.9")


DCGM_DISABLED_AMD_ONLY = "exporters:\n  dcgm: {enabled: false}\n  amd: {enabled: true}\n"
EVERY_DCGM_VERSION = "exporters:\n  dcgm:\n    versions: ['3.x-4.5', '4.6-4.8', '4.9', '4.10+']\n"
# 3.x-4.5 (Hostname), 4.6-4.8 (hostname), 4.9 (renamed, SI) and 4.10+ in one cluster.
EVERY_SPELLING = ('"Hostname"', '"hostname"', "DCGM_FI_DEV_GPU_UTIL{", "DCGM_FI_DEV_GPU_UTIL_RATIO{",
                  "DCGM_FI_DEV_XID_ERRORS{", "DCGM_FI_DEV_XID_ERROR{")


@pytest.mark.parametrize("site_text, in_gpu_rules, nowhere", [
    pytest.param(EVERY_DCGM_VERSION, EVERY_SPELLING, (), id="every-dcgm-version"),
    pytest.param(EVERY_DCGM_VERSION + "  amd: {enabled: true, metric_prefix: amd_}\n  slurm: {flavour: native}\n"
                 "  job_info: {source: jontk}\n", EVERY_SPELLING, (), id="every-dcgm-version+amd+slurm-native+jontk"),
    pytest.param("exporters:\n  dcgm:\n    versions: ['4.9']\n", (), (), id="dcgm-4.9"),
    pytest.param("exporters:\n  dcgm:\n    versions: ['4.10+']\n", (), (), id="dcgm-4.10+"),
    pytest.param("exporters:\n  dcgm:\n    versions: ['4.10+', '3.x-4.5']\n", (), (), id="dcgm-4.10+-then-3.x"),
    pytest.param(DCGM_DISABLED_AMD_ONLY, (), ("DCGM_",), id="amd-only"),
])
def test_a_site_builds_and_passes_every_rule_test(tmp_path, private_cache_dir, site_text, in_gpu_rules, nowhere):
    """Fleets mixing every dcgm-exporter version (with AMD nodes, Slurm's native metrics and jontk's job
    info in one variant), fleets whose first version exposes SI units (utilisation as a 0-1 ratio, bytes,
    joules), and a fleet without dcgm-exporter: every rule, alert and dashboard builds, every domain's
    promtool tests pass, and nothing reads a series the fleet does not have."""
    from hpcobs import config as config_module
    from hpcobs import outdir
    site = tmp_path / "site.yaml"
    site.write_text(site_text)
    files = pipeline.generate(config_module.load(site))
    assert all(spelling in files[RULE_FILES + "gpu.rules.yaml"] for spelling in in_gpu_rules)
    assert not [path for path, text in files.items() for name in nowhere if name in text]
    outdir.write_tree(tmp_path / "out", files)
    all_tool_checks_pass(tmp_path / "out", files, private_cache_dir)
