"""Bad config gets one line per problem naming file, key path and fix; exit 2; never a traceback."""

import pytest

from hpcobs.errors import UserError
from hpcobs.exporters import catalogue
from hpcobs.settings import config as config_module
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


def test_value_not_in_enum(tmp_path):
    site, lines = errors_for(tmp_path, "exporters:\n  dcgm:\n    versions: ['4.x']\n")
    families = list(catalogue.load()["dcgm"].versions)
    assert lines == [f"config error: {site}: exporters.dcgm.versions[0]: '4.x' is not one of {families}"]


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
