"""The output targets (hpcobs.targets) are the one place a format is declared: every generated file belongs to
exactly one registered target, which says how it is validated, where the diff shows it and which page documents
it; a target registered here, and nowhere else, is generated, validated and compared like the shipped ones."""

import ast
from collections import Counter

import pytest

from hpcobs.build import outdir, pipeline, validate
from hpcobs.delivery import semantic_diff
from hpcobs.lang.render import GENERATED, load_yaml, yaml_text
from hpcobs.targets import registry, scale_out
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_SCHEMA
from tests.conftest import ROOT
from tests.test_runbooks import anchors

# A vmalert rule file holding every group: what a new target takes, written in this test only.
VMALERT = "vmalert/hpcobs.rules.yaml"


def vmalert_files(model: Model) -> dict[str, str]:
    return {VMALERT: yaml_text({"groups": model.every_group}, GENERATED)}


TOY = Target(
    name="vmalert rule file",
    paths=("vmalert/",),
    files=vmalert_files,
    checks=(Check(".yaml", RULES_SCHEMA, "promtool check rules"),),
    diff="files",
    docs="output.md#more-rule-targets",
    rule_groups_at=("groups",),
)


@pytest.fixture
def registered(monkeypatch):
    """Registers targets beside the shipped ones for one test."""

    def register(*targets: Target) -> None:
        monkeypatch.setattr(registry, "TARGETS", [*registry.TARGETS, *targets])

    return register


def test_every_generated_file_belongs_to_exactly_one_target(generated):
    owners = {path: [target.name for target in registry.TARGETS if target.owns(path)] for path in generated}
    assert {path: names for path, names in owners.items() if len(names) != 1} == {}


# Written only when the config asks for them (scale_out.topology): tests/test_scale_out.py builds a site that does.
OPT_IN = {scale_out.TARGET.name}


def test_every_target_writes_files(generated):
    writing = {registry.owner(path) for path in generated}
    assert [target.name for target in registry.TARGETS if target not in writing and target.name not in OPT_IN] == []


def test_every_file_is_validated_but_grafanas_provisioning(generated):
    """Grafana publishes no schema for its provisioning files, and no tool checks them (docs/output.md#grafana-
    provisioning): their values are tested where they land (tests/test_escaping.py, tests/test_deploy.py)."""
    unchecked = {registry.owner(path).name for path in generated if not registry.owner(path).checks_of(path)}
    assert unchecked == {"Grafana provisioning"}


def test_every_target_has_a_section_of_the_diff():
    sections = {area for area, _, _ in semantic_diff.AREAS} | {semantic_diff.COPIES}
    assert {target.name: target.diff for target in registry.TARGETS if target.diff not in sections} == {}


def test_every_target_is_documented():
    missing = []
    for target in registry.TARGETS:
        page, _, anchor = target.docs.partition("#")
        if not (ROOT / "docs" / page).is_file() or anchor not in anchors((ROOT / "docs" / page).read_text()):
            missing.append(f"{target.name}: docs/{target.docs}")
    assert missing == []


def _string_constants(path):
    """The string literals of a module, docstrings left out (they may say where a file goes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_paths_under_out_are_spelled_by_their_target_only():
    """No module but the target's own writes a target's path (`grafana/dashboards`, `prometheus/rules`, ...): the
    engine and the content read it from the target."""
    # A folder by its name and a slash (`mimir/`), a deeper path without its last slash (`grafana/dashboards`).
    fragments = {
        owned.rstrip("/") if "/" in owned.rstrip("/") else owned for t in registry.TARGETS for owned in t.paths
    }
    modules = [
        path
        for folder in ("hpcobs", "alerts", "dashboards", "recording_rules", "security")
        for path in (ROOT / folder).rglob("*.py")
        if "targets" not in path.relative_to(ROOT).parts
    ]
    spelled = [
        f"{path.relative_to(ROOT)}: {text!r}"
        for path in modules
        for text in _string_constants(path)
        if any(fragment in text for fragment in fragments)
    ]
    assert spelled == []


# --------------------------------------------------------------------------------------------- a new target


def test_a_registered_target_is_generated(config, generated, registered):
    registered(TOY)
    built = pipeline.generate(config)
    assert set(built) - set(generated) == {VMALERT}
    assert load_yaml(built[VMALERT])["groups"] == load_yaml(built["kubernetes/prometheusrule.yaml"])["spec"]["groups"]


def test_a_registered_target_is_validated(config, registered, tmp_path):
    registered(TOY)
    text = pipeline.generate(config)[VMALERT]
    assert validate.schema_for(VMALERT) == RULES_SCHEMA
    assert validate.schema_errors(VMALERT, text) == []
    assert validate.schema_errors(VMALERT, first_rule(text, lambda rule: rule.pop("expr"))) != []
    broken = {VMALERT: first_rule(text, lambda rule: rule.update(expr="sum("))}
    outdir.write_tree(tmp_path, broken)
    errors = validate.tool_errors(tmp_path, broken)
    assert f"{VMALERT}: promtool check rules failed:" in errors, errors


def first_rule(text: str, change) -> str:
    document = load_yaml(text)
    change(document["groups"][0]["rules"][0])
    return yaml_text(document, GENERATED)


def test_a_registered_target_is_compared(config, generated, registered):
    registered(TOY)
    built = pipeline.generate(config)
    added = semantic_diff.compare(generated, built)
    assert [(section.area, section.changes) for section in added.sections] == [
        ("files", (semantic_diff.Change("file", VMALERT, "added"),))
    ]
    # Its copy of the rule groups is noise, like the PrometheusRule's; what else it says is compared leaf by leaf.
    document = load_yaml(built[VMALERT])
    document["groups"][0]["interval"] = "5m"
    document["tenant"] = "hpc"
    changed = semantic_diff.compare(built, {**built, VMALERT: yaml_text(document, GENERATED)})
    assert changed.noise == Counter({"rule copies": 1})
    assert [change.as_dict()["field"] for section in changed.sections for change in section.changes] == ["tenant"]


def test_a_target_writing_outside_its_paths_is_refused(config, registered):
    registered(Target("stray", ("stray/",), lambda model: {"elsewhere.yaml": ""}, (), "files", TOY.docs))
    with pytest.raises(ValueError, match=r"target stray writes outside its paths \('stray/',\): \['elsewhere.yaml'\]"):
        pipeline.generate(config)


def test_a_target_writing_into_another_targets_paths_is_refused(config, registered):
    registered(Target("squatter", ("mimir/",), lambda model: {"mimir/x.yaml": ""}, (), "files", TOY.docs))
    with pytest.raises(ValueError, match="target squatter writes outside its paths"):
        pipeline.generate(config)
