"""Bad config gets one line per problem naming file, key path and fix; exit 2; never a traceback."""

import json

import pytest

from hpcobs.build import pipeline
from hpcobs.errors import UserError
from hpcobs.exporters import catalogue
from hpcobs.exporters.sources import PROFILES
from hpcobs.settings import config as config_module
from hpcobs.settings import config_checks
from tests.conftest import run_build


def errors_for(tmp_path, text):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    with pytest.raises(UserError) as caught:
        config_module.load(site)
    return site, caught.value.lines


def test_default_config_is_valid():
    config = config_module.load()
    assert config.origin == ("config/default.yaml",)
    assert config.get("exporters", "dcgm", "versions")


def test_site_file_merges_over_defaults(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("cluster:\n  name: lab\nexporters:\n  dcgm:\n    versions: ['3.x-4.5', '4.9']\n")
    config = config_module.load(site)
    assert config.get("cluster", "name") == "lab"
    assert config.get("cluster", "label") == "cluster"  # kept from the defaults
    assert config.get("exporters", "dcgm", "versions") == ["3.x-4.5", "4.9"]  # lists replace
    assert config.get("exporters", "dcgm", "selector") == 'job="dcgm-exporter"'


def test_missing_key(tmp_path):
    site, lines = errors_for(tmp_path, "alertmanager:\n  receivers:\n    - slack_channel: '#x'\n")
    assert lines == [f"config error: {site}: alertmanager.receivers[0].name: missing required key; add it"]


def test_wrong_type(tmp_path):
    site, lines = errors_for(tmp_path, "exporters:\n  dcgm:\n    enabled: 'yes'\n")
    assert lines == [f"config error: {site}: exporters.dcgm.enabled: 'yes' is not of type boolean"]


def test_every_format_the_schema_names_is_checked():
    """jsonschema accepts any value of a format it has no checker for: a generated `versions` format (one per
    exporter with families) or a new grammar needs its check in hpcobs.settings.config_checks."""

    def formats(node):
        if isinstance(node, dict):
            yield from [node["format"]] if isinstance(node.get("format"), str) else []
            for value in node.values():
                yield from formats(value)
        elif isinstance(node, list):
            for value in node:
                yield from formats(value)

    schema = json.loads(config_module.SCHEMA.read_text(encoding="utf-8"))
    assert set(formats(schema)) - set(config_checks.FORMATS.checkers) == set()


def test_value_not_in_enum(tmp_path):
    site, lines = errors_for(tmp_path, "exporters:\n  slurm:\n    flavour: vpenso\n")
    flavours = list(PROFILES["slurm"][1])
    assert lines == [f"config error: {site}: exporters.slurm.flavour: 'vpenso' is not one of {flavours}"]


def test_node_from_names_a_label_the_catalogue_knows(tmp_path):
    site, lines = errors_for(tmp_path, "exporters:\n  dcgm:\n    node_from: Hostname\n")
    choices = list(catalogue.load()["dcgm"].node_from_choices())
    assert choices == ["hostname", "instance"]
    assert lines == [f"config error: {site}: exporters.dcgm.node_from: 'Hostname' is not one of {choices}"]


@pytest.mark.parametrize(
    "release, family",
    [
        ("4.2.3-4.1.1", "3.x-4.5"),  # an image tag: DCGM 4.2.3, dcgm-exporter 4.1.1
        ("4.2.3-4.1.1-ubuntu22.04", "3.x-4.5"),  # as the image reference writes it
        ("4.1.1", "3.x-4.5"),  # a dcgm-exporter version
        ("4.2", "3.x-4.5"),  # DCGM versions
        ("4.2.3", "3.x-4.5"),
        ("3.3.9-3.6.1", "3.x-4.5"),
        ("4.6.0-4.8.3", "4.6-4.8"),
        ("4.8.4", "4.6-4.8"),  # tags without the DCGM version from here on
        ("4.9.0", "4.9"),
        ("4.9.0-distroless", "4.9"),
        ("4.10.0", "4.10+"),
        ("4.11.2", "4.10+"),
        ("4.9", "4.9"),  # a family is its own release
    ],
)
def test_dcgm_versions_take_the_releases_users_have_and_keep_their_family(tmp_path, release, family):
    site = tmp_path / "site.yaml"
    site.write_text(f"exporters:\n  dcgm:\n    versions: ['{release}']\n")
    assert config_module.load(site).get("exporters", "dcgm", "versions") == [family]


def test_a_release_builds_the_same_bytes_as_its_family(tmp_path):
    by_release, by_family = tmp_path / "release.yaml", tmp_path / "family.yaml"
    by_release.write_text("exporters:\n  dcgm:\n    versions: ['4.10.0', '4.2.3-4.1.1', '4.2', '3.x-4.5']\n")
    by_family.write_text("exporters:\n  dcgm:\n    versions: ['4.10+', '3.x-4.5']\n")
    release_config = config_module.load(by_release)
    assert release_config.get("exporters", "dcgm", "versions") == ["4.10+", "3.x-4.5"]  # each family once, in order
    assert pipeline.generate(release_config) == pipeline.generate(config_module.load(by_family))


@pytest.mark.parametrize(
    "release, problem",
    [
        ("4.x", "'4.x' is neither a family nor a dcgm-exporter or DCGM release"),
        (
            "4.8",
            "'4.8' names releases of several families (dcgm-exporter 4.8 is 3.x-4.5 or 4.6-4.8, DCGM 4.8 is 4.10+)",
        ),
        ("4.8.0", "'4.8.0' names releases of several families (dcgm-exporter 4.8.0 is 3.x-4.5, DCGM 4.8.0 is 4.10+)"),
        ("2.4.7-2.6.11", "'2.4.7-2.6.11': dcgm-exporter 2.6.11 is a release no family covers"),
        (
            "4.7.0-4.2.0",
            "'4.7.0-4.2.0' pairs DCGM 4.7.0 (4.9) with dcgm-exporter 4.2.0 (3.x-4.5), which no release does",
        ),
    ],
)
def test_a_release_no_family_or_several_families_cover_is_refused_with_every_family(tmp_path, release, problem):
    site, lines = errors_for(tmp_path, f"exporters:\n  dcgm:\n    versions: ['{release}']\n")
    coverage = catalogue.load()["dcgm"].releases.coverage()
    assert lines == [
        f"config error: {site}: exporters.dcgm.versions[0]: {problem}; write a family, an image tag (4.2.3-4.1.1), "
        f"a dcgm-exporter version (4.1.1) or a DCGM version (4.2): {coverage}"
    ]
    assert coverage.startswith("3.x-4.5 = dcgm-exporter 3.0.0 to 4.8.2, DCGM 3.0 to 4.5.x (tags 3.0.4-3.0.0 to ")


def test_unknown_key_suggests_the_closest(tmp_path):
    site, lines = errors_for(tmp_path, "exporters:\n  dcgm:\n    selectr: 'job=\"x\"'\n")
    assert lines == [f"config error: {site}: exporters.dcgm.selectr: unknown key; did you mean 'selector'?"]


def test_unknown_key_without_close_match_lists_the_allowed(tmp_path):
    site, lines = errors_for(tmp_path, "zzz: 1\n")
    assert len(lines) == 1 and lines[0].startswith(f"config error: {site}: zzz: unknown key; expected one of [")


def test_every_problem_is_reported_once(tmp_path):
    site, lines = errors_for(tmp_path, "scrape_interval: 30 seconds\nexporters:\n  amd:\n    enabled: 1\n")
    assert lines == [
        f"config error: {site}: exporters.amd.enabled: 1 is not of type boolean",
        f"config error: {site}: scrape_interval: '30 seconds' is not a duration such as 30s, 5m or 1h30m",
    ]


def test_bad_yaml_names_line_and_column(tmp_path):
    site, lines = errors_for(tmp_path, "cluster:\n  name: [unclosed\n")
    assert len(lines) == 1
    assert lines[0].startswith(f"config error: {site}:3:1: invalid YAML (")


def test_top_level_must_be_a_mapping(tmp_path):
    site, lines = errors_for(tmp_path, "- a\n- b\n")
    assert lines == [f"config error: {site}: top level must be a mapping of keys, got list"]


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(UserError) as caught:
        config_module.load(missing)
    assert caught.value.lines == [f"config error: {missing}: file not found; pass an existing YAML file to --config"]


def test_bad_selector_is_a_config_error(tmp_path, generated):
    site = tmp_path / "site.yaml"
    site.write_text("exporters:\n  dcgm:\n    selector: 'job=dcgm'\n")
    result = run_build("--config", str(site), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"config error: {site}: exporters.dcgm.selector: 'job=dcgm' is not a list of "
        'label matchers; write e.g. job="dcgm-exporter"'
    )


@pytest.mark.parametrize(
    "text",
    [
        "exporters:\n  dcgm:\n    versions: ['4.x']\n",
        "cluster: [\n",
        "exporters:\n  dcgm:\n    metric_names: {no_such_signal: X}\n",
    ],
)
def test_cli_exits_2_without_traceback_and_leaves_out_alone(tmp_path, text):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("previous build")
    site = tmp_path / "site.yaml"
    site.write_text(text)
    result = run_build("--config", str(site), "--out", str(out))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert all(line.startswith("config error: ") for line in result.stderr.strip().splitlines())
    assert (out / "keep.txt").read_text() == "previous build"
    assert result.stdout == ""
