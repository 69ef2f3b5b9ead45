"""out/ is deterministic, written atomically, and `check` catches a stale tree."""

import os

import pytest

from hpcobs import cli
from hpcobs.build import outdir, pipeline, validate
from hpcobs.errors import UserError
from tests.conftest import ROOT, run_build


def tree(root):
    return outdir.read_tree(root)


def published(files):
    """What out/ holds after publishing files: them and the marker that says hpcobs wrote the directory."""
    return {**{path: text.encode() for path, text in files.items()}, outdir.MARKER: outdir.MARKER_TEXT.encode()}


# promtool and amtool validation is proven in test_rules.py and test_alertmanager.py; here it would only
# repeat minutes of rule tests per build.
FAST = "--no-tool-checks"


def test_two_builds_are_byte_identical(tmp_path):
    """Both validate fully; the second takes what it can from the cache the first filled, which changes no byte."""
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert run_build("--out", str(first)).returncode == 0
    assert run_build("build", "--out", str(second)).returncode == 0
    assert run_build("build", FAST, "--no-cache", "--out", str(third)).returncode == 0
    assert tree(first) == tree(second) == tree(third)
    assert len(tree(first)) >= 6


def test_output_layout(generated):
    """The layout the README's Output section documents, which deployments mount and reference (a new target adds
    to it: tests/test_targets.py)."""
    assert {p.split("/")[0] for p in generated} >= {
        "alertmanager",
        "falco",
        "grafana",
        "kubernetes",
        "loki",
        "mimir",
        "prometheus",
        "tetragon",
    }
    assert "alertmanager/alertmanager.yml" in generated
    assert "grafana/provisioning/dashboards/hpcobs.yaml" in generated
    assert "grafana/provisioning/datasources/hpcobs.yaml" in generated
    assert "prometheus/rules/gpu.rules.yaml" in generated
    assert "grafana/dashboards/HPC/hpcobs-gpu-cluster.json" in generated


def test_no_timestamps_or_absolute_paths(generated):
    for path, text in generated.items():
        assert text.endswith("\n") and "\r" not in text, path
        assert str(ROOT) not in text and "/tmp/" not in text, path


def test_generation_does_not_depend_on_the_working_directory(tmp_path, generated):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out), cwd=tmp_path).returncode == 0
    assert tree(out) == published(generated)


def test_check_passes_on_a_fresh_tree(tmp_path):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    result = run_build("check", FAST, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_check_reports_a_hand_edited_and_a_missing_file(tmp_path):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    edited = out / "alertmanager/alertmanager.yml"
    edited.write_text(edited.read_text() + "# hand edit\n")
    (out / "prometheus/rules/gpu.rules.yaml").unlink()
    (out / "extra.txt").write_text("left over")
    result = run_build("check", FAST, "--out", str(out))
    assert result.returncode == 1
    assert "alertmanager/alertmanager.yml: differs from a fresh build" in result.stderr
    assert "prometheus/rules/gpu.rules.yaml: missing from out/" in result.stderr
    assert "extra.txt: in out/ but no longer generated" in result.stderr


def test_check_compares_without_validating(tmp_path, monkeypatch, capsys):
    """check only renders and compares: no schema, no promtool, no amtool (out/ was validated when built)."""
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    monkeypatch.setenv("PROMTOOL", str(tmp_path / "no-promtool"))
    monkeypatch.setenv("AMTOOL", str(tmp_path / "no-amtool"))
    monkeypatch.setattr(validate, "schema_errors", lambda *args: pytest.fail("check validated a schema"))
    assert cli.main(["check", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{out} is up to date ({len(tree(out)) - 1} files)\n"


def test_check_help_says_what_it_does_not_check():
    text = " ".join(run_build("check", "--help").stdout.split())
    assert "It does not validate: no JSON schemas, no promtool, no amtool" in text


@pytest.mark.parametrize("command", ["build", "check"])
def test_profile_goes_to_stderr_and_leaves_stdout_alone(tmp_path, command):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    plain = run_build(command, FAST, "--out", str(out))
    profiled = run_build(command, FAST, "--out", str(out), "--profile")
    assert profiled.returncode == plain.returncode == 0 and profiled.stdout == plain.stdout
    assert plain.stderr == ""
    steps = [line.split(None, 1)[1] for line in profiled.stderr.splitlines()[1:] if line[:8].strip()]
    assert profiled.stderr.startswith("profile (wall seconds):\n")
    expected = {
        "build": [
            "start-up: Python and imports",
            "load config",
            "generate",
            "lock out/'s directory",
            "schema validation",
            "publish",
            "cardinality budget",
            "total",
        ],
        "check": ["start-up: Python and imports", "load config", "generate", "compare with", "total"],
    }
    assert [step for step in expected[command] if not any(s.startswith(step) for s in steps)] == [], steps


def test_committed_out_is_fresh():
    """CI also runs `build.py check`; this keeps the failure visible in the test run."""
    result = run_build("check", FAST)
    assert result.returncode == 0, result.stderr


def test_failed_validation_leaves_previous_out_untouched(tmp_path, config, monkeypatch):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    before = tree(out)
    files = {
        **pipeline.generate(config),
        "prometheus/rules/gpu.rules.yaml": "groups:\n- name: broken\n  rules:\n  - record: x\n    expr: 'sum('\n",
    }

    def fail(root):
        # Only the broken rule file and the Alertmanager config: enough to prove promtool blocks the swap.
        validate.check(root, {p: t for p, t in files.items() if p.endswith(("gpu.rules.yaml", "alertmanager.yml"))})

    with pytest.raises(UserError) as caught:
        outdir.staged(out, files, fail)
    assert "promtool check rules failed" in "\n".join(caught.value.lines)
    assert tree(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the temp dir is gone too


FAILING_TEST = """rule_files: []
tests:
- input_series: [{series: 'up{job="x"}', values: 1x5}]
  promql_expr_test: [{expr: up, eval_time: 1m, exp_samples: [{labels: 'up{job="x"}', value: 2}]}]
"""


def test_tool_failures_are_shown_under_the_file_name(tmp_path):
    """Rule tests run a folder at a time: only the failing file is named, with its own part of the output."""
    files = {
        "prometheus/rules/gpu.rules.yaml": "groups:\n- name: broken\n  rules:\n  - record: x\n    expr: 'sum('\n",
        "prometheus/tests/gpu/passing.tests.yaml": "rule_files: []\ntests: []\n",
        "prometheus/tests/gpu/failing.tests.yaml": FAILING_TEST,
        "alertmanager/alertmanager.yml": "route:\n  receiver: nobody\nreceivers: []\n",
    }
    outdir.write_tree(tmp_path, files)
    lines = validate.tool_errors(tmp_path, files)
    headers = [line for line in lines if not line.startswith("    ")]
    assert headers == [
        "prometheus/rules/gpu.rules.yaml: promtool check rules failed:",
        "prometheus/tests/gpu/failing.tests.yaml: promtool test rules failed:",
        "alertmanager/alertmanager.yml: amtool check-config failed:",
    ]
    rules_message = lines[1 : lines.index(headers[1])]
    assert any("unclosed left parenthesis" in line for line in rules_message), lines
    test_message = lines[lines.index(headers[1]) : lines.index(headers[2])]
    assert any("exp:" in line for line in test_message) and not any("passing" in line for line in lines), lines
    assert any('undefined receiver "nobody"' in line for line in lines[lines.index(headers[2]) :]), lines
    assert not any(str(tmp_path) in line for line in lines)


def test_crash_midway_through_writing_leaves_previous_out_untouched(tmp_path, config, monkeypatch):
    out = tmp_path / "out"
    assert run_build(FAST, "--out", str(out)).returncode == 0
    before = tree(out)
    real_open = open
    written = []

    def crashing_open(path, *args, **kwargs):
        written.append(path)
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", crashing_open)
    with pytest.raises(OSError):
        outdir.staged(out, pipeline.generate(config), lambda root: None)
    monkeypatch.undo()
    assert tree(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_swap_replaces_the_whole_tree(tmp_path):
    out = tmp_path / "out"
    outdir.write_tree(out, {"old.txt": "old"})
    tmp = outdir.staged(out, {"new.txt": "new"}, lambda root: None)
    outdir.swap_in(tmp, out)
    assert tree(out) == published({"new.txt": "new"})
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("args", [["--help"], ["build", "--help"], ["check", "--help"]])
def test_every_subcommand_has_help(args):
    result = run_build(*args)
    assert result.returncode == 0
    assert "--config" in result.stdout and "--out" in result.stdout


def test_options_work_before_and_after_the_subcommand():
    before = cli.parser().parse_args(["--out", "x", "check"])
    after = cli.parser().parse_args(["check", "--out", "x"])
    assert before.out == after.out == "x" and before.command == after.command == "check"
