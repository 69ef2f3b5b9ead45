"""The PrometheusRule manifest and the Mimir ruler namespace file: the deployed groups, in their validators."""

import copy

import pytest
import yaml

from hpcobs.build import validate
from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets import rule_targets


@pytest.fixture(scope="module")
def deployed_groups(generated):
    """Every group of out/prometheus/rules/, in build order (domain files by name are not build order)."""
    return [
        group
        for path, text in generated.items()
        if path.startswith("prometheus/rules/")
        for group in yaml.safe_load(text)["groups"]
    ]


@pytest.fixture(scope="module")
def manifest(generated):
    return yaml.safe_load(generated[rule_targets.PROMETHEUS_RULE])


@pytest.fixture(scope="module")
def mimir(generated, config):
    return yaml.safe_load(generated[rule_targets.mimir_path(config)])


def by_name(groups):
    return {group["name"]: group for group in groups}


def test_both_files_hold_every_deployed_group_unchanged(deployed_groups, manifest, mimir):
    assert len(deployed_groups) == len(by_name(deployed_groups))
    assert by_name(manifest["spec"]["groups"]) == by_name(deployed_groups)
    assert mimir["groups"] == manifest["spec"]["groups"]


def test_manifest_names_the_configured_object(manifest, mimir, config):
    settings = config.get("rule_targets", "prometheus_rule")
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert manifest["metadata"] == {
        "name": settings["name"],
        "namespace": settings["namespace"],
        "labels": settings["labels"],
    }
    assert mimir["namespace"] == config.get("rule_targets", "mimir_namespace")


def test_both_files_match_their_schemas(generated, config):
    for path in (rule_targets.PROMETHEUS_RULE, rule_targets.mimir_path(config)):
        assert validate.schema_for(path) is not None
        assert validate.schema_errors(path, generated[path]) == []


def broken(document, change):
    changed = copy.deepcopy(document)
    change(changed)
    return yaml_text(changed, GENERATED)


@pytest.mark.parametrize(
    ("change", "blamed"),
    [
        (lambda m: m["spec"]["groups"][0].pop("name"), "spec.groups.0: 'name' is a required property"),
        (lambda m: m["spec"]["groups"][0]["rules"][0].pop("expr"), "spec.groups.0.rules.0: 'expr' is a required"),
        (lambda m: m["spec"]["groups"][0].update(interval="30 seconds"), "spec.groups.0.interval: '30 seconds'"),
        (lambda m: m["spec"].update(groups={}), "spec.groups: {} is not of type 'array'"),
        # Fields the API server would prune without a word: refused rather than lost on apply.
        (lambda m: m["spec"]["groups"][0]["rules"][0].update(severity="page"), "'severity' was unexpected"),
        (lambda m: m["spec"].update(group=[]), "spec: Additional properties are not allowed ('group'"),
    ],
)
def test_the_crd_schema_refuses_a_broken_manifest(manifest, change, blamed):
    errors = validate.schema_errors(rule_targets.PROMETHEUS_RULE, broken(manifest, change))
    assert any(blamed in line for line in errors), errors


def test_the_mimir_schema_refuses_a_file_without_namespace_or_with_a_foreign_key(mimir, config):
    path = rule_targets.mimir_path(config)
    assert any("'namespace' is a required" in e for e in validate.schema_errors(path, broken(mimir, dict.clear)))
    errors = validate.schema_errors(path, broken(mimir, lambda m: m.update(tenant="a")))
    assert any("('tenant' was unexpected)" in line for line in errors), errors


def test_promtool_accepts_the_groups_of_both_files(generated, generated_tree, config, tmp_path):
    targets = {path: generated[path] for path in (rule_targets.PROMETHEUS_RULE, rule_targets.mimir_path(config))}
    runs = validate._groups_only_runs(tmp_path, targets)
    assert set(runs) == set(targets)
    assert validate.tool_errors(generated_tree, targets) == []


def test_promtool_refuses_a_rule_with_both_record_and_alert(manifest, mimir, config, tmp_path):
    """What the CRD schema lets through (the operator's admission webhook would refuse it), promtool refuses."""

    def record_and_alert(document):
        rules = document.get("spec", document)["groups"][0]["rules"]
        rules[0]["alert"] = "Both"

    files = {
        rule_targets.PROMETHEUS_RULE: broken(manifest, record_and_alert),
        rule_targets.mimir_path(config): broken(mimir, record_and_alert),
    }
    assert validate.schema_errors(rule_targets.PROMETHEUS_RULE, files[rule_targets.PROMETHEUS_RULE]) == []
    errors = validate.tool_errors(tmp_path, files)
    for path in files:
        assert f"{path}: promtool check rules failed:" in errors, errors
    assert any("only one of 'record' and 'alert' must be set" in line for line in errors), errors
