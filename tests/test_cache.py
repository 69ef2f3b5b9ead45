"""The validation cache cannot lie: warm, it still fails a broken rule; a change to anything that decides a tool
run (an input file, the tool's version) reruns exactly the runs it decides; a damaged entry is ignored and
rewritten; a failure is never stored; --no-cache neither reads nor writes it. promtool and amtool run behind
wrapper scripts that log every run, so each test counts what really ran."""

import json
import os
import stat

import pytest

from hpcobs import cli
from hpcobs.build import cache as cache_module
from hpcobs.build import outdir, pipeline, tools, validate
from hpcobs.build.cache import Cache
from hpcobs.errors import UserError

RULES_A = "groups:\n- name: a\n  rules:\n  - record: a:x:ratio\n    expr: x_percent / 100\n"
RULES_B = "groups:\n- name: b\n  rules:\n  - record: b:y:sum\n    expr: sum by (cluster) (y)\n"
TEST = """rule_files: {rule_files}
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: x_percent{{cluster="c"}}
    values: 50x5
  - series: y{{cluster="c", node="n1"}}
    values: 3x5
  - series: y{{cluster="c", node="n2"}}
    values: 4x5
  promql_expr_test:
  - expr: a:x:ratio
    eval_time: 2m
    exp_samples:
    - labels: a:x:ratio{{cluster="c"}}
      value: 0.5
{more}"""
MORE_B = """  - expr: b:y:sum
    eval_time: {at}
    exp_samples:
    - labels: b:y:sum{{cluster="c"}}
      value: 7
"""
# Two rule files, a test file loading one of them and a longer one loading both, each in a domain folder of its
# own (rule tests run a folder at a time), an Alertmanager config.
FILES = {
    "prometheus/rules/a.rules.yaml": RULES_A,
    "prometheus/rules/b.rules.yaml": RULES_B,
    "prometheus/tests/a/a.tests.yaml": TEST.format(rule_files="[../../rules/a.rules.yaml]", more=""),
    "prometheus/tests/ab/ab.tests.yaml": TEST.format(
        rule_files="[../../rules/a.rules.yaml, ../../rules/b.rules.yaml]", more=MORE_B.format(at="4m")
    ),
    "alertmanager/alertmanager.yml": "route:\n  receiver: default\nreceivers:\n- name: default\n",
}
CHECK_A = "promtool check rules prometheus/rules/a.rules.yaml"
CHECK_B = "promtool check rules prometheus/rules/b.rules.yaml"
TEST_A = "promtool test rules prometheus/tests/a/a.tests.yaml"
TEST_AB = "promtool test rules prometheus/tests/ab/ab.tests.yaml"
AMTOOL = "amtool check-config alertmanager/alertmanager.yml"
EVERY_RUN = {CHECK_A, CHECK_B, TEST_A, TEST_AB, AMTOOL}


class LoggedTools:
    """PROMTOOL and AMTOOL set to wrapper scripts: `--version` prints the version line given, anything else is
    logged and handed to the real tool."""

    def __init__(self, directory, monkeypatch):
        self.directory, self.log = directory, directory / "runs.log"
        self.real = {tool: tools.find(tool) for tool in (tools.PROMTOOL, tools.AMTOOL)}
        for tool in self.real:
            self.version(tool, f"{tool[1]}, version {tool[3][0]}.{tool[3][1]}.0 (wrapper)")
            monkeypatch.setenv(tool[0], str(directory / tool[1]))

    def version(self, tool, line):
        path = self.directory / tool[1]
        path.write_text(
            f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{line}"; exit 0; fi\n'
            f'echo "{tool[1]} $*" >> {self.log}\nexec {self.real[tool]} "$@"\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IEXEC)

    def runs(self) -> list[str]:
        """The runs logged since the previous call."""
        runs = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.write_text("")
        return runs


@pytest.fixture
def logged(tmp_path, monkeypatch):
    directory = tmp_path / "tools"
    directory.mkdir()
    return LoggedTools(directory, monkeypatch)


def validation(root, files, cache) -> list[str]:
    """What a build's validation says of files written under root (a new directory each time, as a build's
    staging directory is): its problems, [] when they are valid."""
    outdir.write_tree(root, files)
    try:
        validate.check(root, files, cache=cache)
    except UserError as exc:
        return exc.lines
    return []


def entries(cache: Cache) -> dict[str, bytes]:
    return outdir.read_tree(cache.directory)


# --- a warm cache does not hide a broken rule -------------------------------------------------------------------

# A job's GPU utilisation: its rule tests, with the GPU recording rules they load, are quick real tests that
# read a unit conversion (gpu:utilization:ratio divides DCGM's percent by 100).
JOB_UTILIZATION = "prometheus/tests/jobs/job.gpu_utilization.avg"
JOBS = ("prometheus/rules/jobs.rules.yaml", f"{JOB_UTILIZATION}.tests.yaml", f"{JOB_UTILIZATION}.rules.yaml")


def test_a_warm_cache_still_fails_a_broken_recording_rule(generated, tmp_path, logged):
    files = {path: generated[path] for path in JOBS}
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", files, cache) == []
    assert sorted(logged.runs()) == [
        "promtool check rules prometheus/rules/jobs.rules.yaml",
        f"promtool test rules {JOB_UTILIZATION}.tests.yaml",
    ]
    assert validation(tmp_path / "warm", files, cache) == [] and logged.runs() == []

    broken = {path: text.replace(" / 100)", ")") for path, text in files.items()}  # percent read as a ratio
    assert broken != files
    problems = validation(tmp_path / "broken", broken, cache)
    assert f"{JOB_UTILIZATION}.tests.yaml: promtool test rules failed:" in problems, problems
    assert any("gpu_utilization" in line for line in problems), problems
    assert logged.runs() == [f"promtool test rules {JOB_UTILIZATION}.tests.yaml"]

    assert validation(tmp_path / "repaired", files, cache) == [] and logged.runs() == []


# --- exactly the affected runs rerun ----------------------------------------------------------------------------


def test_a_warm_cache_runs_nothing_wherever_the_files_are(tmp_path, logged):
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "first", FILES, cache) == []
    assert sorted(logged.runs()) == sorted(EVERY_RUN)
    assert validation(tmp_path / "elsewhere" / "second", FILES, cache) == []
    assert logged.runs() == []


@pytest.mark.parametrize(
    "changed, reruns",
    [
        ("prometheus/rules/b.rules.yaml", {CHECK_B, TEST_AB}),
        ("prometheus/rules/a.rules.yaml", {CHECK_A, TEST_A, TEST_AB}),
        ("prometheus/tests/a/a.tests.yaml", {TEST_A}),
        ("alertmanager/alertmanager.yml", {AMTOOL}),
    ],
)
def test_a_changed_file_reruns_exactly_the_runs_that_read_it(tmp_path, logged, changed, reruns):
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", FILES, cache) == []
    logged.runs()
    changed_files = {**FILES, changed: FILES[changed] + "# a comment is a change\n"}
    assert validation(tmp_path / "changed", changed_files, cache) == []
    assert sorted(logged.runs()) == sorted(reruns)


def test_a_changed_rule_test_reruns_that_file_not_its_folder(tmp_path, logged):
    """Rule tests run a folder at a time, but each file's result is its own: a change to one file of a folder
    reruns that file alone, and a failing file is named while the others' results come from the cache."""
    second = "prometheus/tests/a/a2.tests.yaml"
    files = {**FILES, second: FILES["prometheus/tests/a/a.tests.yaml"]}
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", files, cache) == []
    assert f"{TEST_A} {second}" in logged.runs()
    changed = {**files, second: files[second] + "# a comment is a change\n"}
    assert validation(tmp_path / "changed", changed, cache) == []
    assert logged.runs() == [f"promtool test rules {second}"]
    rule_changed = {**files, "prometheus/rules/a.rules.yaml": RULES_A + "# a comment is a change\n"}
    assert validation(tmp_path / "rule changed", rule_changed, cache) == []
    assert sorted(logged.runs()) == sorted({CHECK_A, f"{TEST_A} {second}", TEST_AB})
    broken = {**files, second: files[second].replace("value: 0.5", "value: 0.25")}
    problems = validation(tmp_path / "broken", broken, cache)
    assert f"{second}: promtool test rules failed:" in problems, problems
    assert not any(line.startswith("prometheus/tests/a/a.tests.yaml") for line in problems), problems
    assert logged.runs() == [f"promtool test rules {second}"]


def test_a_file_a_glob_starts_to_match_reruns_the_test_that_loads_the_glob(tmp_path, logged):
    files = {**FILES, "prometheus/tests/a/a.tests.yaml": TEST.format(rule_files="['../../rules/a*.yaml']", more="")}
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", files, cache) == []
    logged.runs()
    more = {**files, "prometheus/rules/a2.rules.yaml": RULES_B.replace("name: b", "name: a2")}
    assert validation(tmp_path / "more", more, cache) == []
    assert sorted(logged.runs()) == ["promtool check rules prometheus/rules/a2.rules.yaml", TEST_A]


def test_another_promtool_version_reruns_every_promtool_run(tmp_path, logged):
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", FILES, cache) == []
    logged.runs()
    logged.version(tools.PROMTOOL, "promtool, version 2.42.1-rc.0 (another build)")
    assert validation(tmp_path / "upgraded", FILES, cache) == []
    assert sorted(logged.runs()) == sorted(EVERY_RUN - {AMTOOL})
    assert validation(tmp_path / "again", FILES, cache) == [] and logged.runs() == []


def test_a_failure_is_never_stored_and_always_reruns(tmp_path, logged):
    cache = Cache(tmp_path / "cache")
    broken = {**FILES, "prometheus/rules/b.rules.yaml": RULES_B.replace("sum by (cluster) (y)", "sum(")}
    for attempt in ("first", "second"):
        problems = validation(tmp_path / attempt, broken, cache)
        assert "prometheus/rules/b.rules.yaml: promtool check rules failed:" in problems, problems
        assert "prometheus/tests/ab/ab.tests.yaml: promtool test rules failed:" in problems, problems
        assert sorted(logged.runs()) == sorted(EVERY_RUN if attempt == "first" else {CHECK_B, TEST_AB})
        # stored: the 3 tool runs that passed, and the 5 files the schemas found valid (b's `sum(` is a string to them)
        assert len(entries(cache)) == 3 + 5


# --- a damaged entry is ignored -------------------------------------------------------------------------------


def forged(data: bytes, other: bytes) -> bytes:
    """The entry with its value replaced by a claim of success, its checksum left as it was."""
    entry = json.loads(data)
    return json.dumps({**entry, "value": {"output": "SUCCESS", "seconds": 0}}).encode()


DAMAGE = {
    "truncated": lambda data, other: data[: len(data) // 2],
    "empty": lambda data, other: b"",
    "a changed byte": lambda data, other: data[:40] + bytes([data[40] ^ 1]) + data[41:],
    "another entry's content": lambda data, other: other,
    "a forged value": forged,
    "not text": lambda data, other: b"\xff\xfe" + data,
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_entry_is_ignored_and_rewritten(tmp_path, logged, damage):
    cache = Cache(tmp_path / "cache")
    assert validation(tmp_path / "cold", FILES, cache) == []
    logged.runs()
    stored = entries(cache)
    names = sorted(stored)
    for name, other in zip(names, names[1:] + names[:1]):
        (cache.directory / name).write_bytes(damage(stored[name], stored[other]))
    assert validation(tmp_path / "damaged", FILES, cache) == []
    assert sorted(logged.runs()) == sorted(EVERY_RUN)
    assert sorted(entries(cache)) == names  # every entry rewritten (a run's duration may differ)
    assert validation(tmp_path / "repaired", FILES, cache) == [] and logged.runs() == []


# --- schemas ----------------------------------------------------------------------------------------------------


def test_a_warm_schema_cache_still_reports_a_schema_violation(tmp_path):
    cache = Cache(tmp_path / "cache")
    path = "prometheus/rules/a.rules.yaml"
    assert validate.schema_errors(path, RULES_A, cache) == []
    assert cache.stored == 1 and validate.schema_errors(path, RULES_A, cache) == [] and cache.hits == 1
    wrong = RULES_A.replace("record:", "recorded:")
    assert validate.schema_errors(path, wrong, cache) != []
    assert validate.schema_errors(path, wrong, cache) != [] and cache.stored == 1


# --- the command line -------------------------------------------------------------------------------------------


@pytest.fixture
def build(monkeypatch, capsys):
    """cli.main building FILES (instead of the default config's output), returning its exit code and stderr."""
    monkeypatch.setattr(pipeline, "generate", lambda config: FILES)
    monkeypatch.setattr(pipeline, "budget_report", lambda config: [])

    def run(*args):
        code = cli.main(["build", *map(str, args)])
        return code, capsys.readouterr()

    return run


def snapshot(directory):
    """Names, bytes and modification times under directory: reading an entry changes none of them, writing does."""
    return {
        path: (path.read_bytes() if path.is_file() else None, path.stat().st_mtime_ns) for path in directory.rglob("*")
    }


def test_no_cache_neither_reads_nor_writes_the_cache(tmp_path, monkeypatch, logged, build):
    monkeypatch.setenv("HPCOBS_CACHE_DIR", str(tmp_path / "env-cache"))
    assert build("--no-cache", "--out", tmp_path / "out")[0] == 0
    assert not (tmp_path / "env-cache").exists()
    assert sorted(logged.runs()) == sorted(EVERY_RUN)

    assert build("--out", tmp_path / "out")[0] == 0  # warms the cache
    logged.runs()
    warm = snapshot(tmp_path / "env-cache")
    assert warm
    assert build("--no-cache", "--out", tmp_path / "out")[0] == 0
    assert sorted(logged.runs()) == sorted(EVERY_RUN)
    assert snapshot(tmp_path / "env-cache") == warm


def test_cache_dir_overrides_the_environment(tmp_path, monkeypatch, logged, build):
    monkeypatch.setenv("HPCOBS_CACHE_DIR", str(tmp_path / "env-cache"))
    assert build("--cache-dir", tmp_path / "mine", "--out", tmp_path / "out")[0] == 0
    assert not (tmp_path / "env-cache").exists() and snapshot(tmp_path / "mine")
    logged.runs()
    assert build("--out", tmp_path / "out", "--cache-dir", tmp_path / "mine")[0] == 0
    assert logged.runs() == []


def test_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch, logged, build):
    (tmp_path / "file").write_text("a file where the cache directory should be")
    code, output = build("--cache-dir", tmp_path / "file" / "cache", "--out", tmp_path / "out")
    assert code == 0 and output.err == ""
    assert sorted(logged.runs()) == sorted(EVERY_RUN)


def test_profile_names_every_tool_run_and_whether_it_was_cached(tmp_path, logged, build):
    cache_dir = tmp_path / "cache"
    _, plain = build("--cache-dir", cache_dir, "--out", tmp_path / "out")
    code, profiled = build("--cache-dir", cache_dir, "--out", tmp_path / "out", "--profile")
    assert code == 0 and profiled.out == plain.out
    lines = profiled.err.splitlines()
    assert lines[0] == "profile (wall seconds):"
    for step in (
        "load config",
        "generate (5 files)",
        "schema validation (5 files)",
        "promtool and amtool (5 runs, 5 cached)",
        "publish: exchange with out/, remove the previous tree",
        "total",
    ):
        assert any(line.endswith(step) for line in lines), (step, lines)
    for run in EVERY_RUN:
        command, path = run.rsplit(" ", 1)
        # rule tests run a folder at a time
        path = f"{path.rsplit('/', 1)[0]}/ (1 file)" if path.endswith(".tests.yaml") else path
        assert any(line.strip().startswith(f"{command} {path}: cached, ran ") for line in lines), (run, lines)
    assert lines[-1] == f"cache {cache_dir}: 10 hits, 0 misses, 0 stored"


# --- where the cache lives, and in what order tools run ------------------------------------------------------------


def test_the_default_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv("HPCOBS_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache_module.default_directory() == tmp_path / ".cache" / "hpcobs"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_module.default_directory() == tmp_path / "xdg" / "hpcobs"
    monkeypatch.setenv("HPCOBS_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_module.default_directory() == tmp_path / "explicit"


def test_the_longest_rule_test_starts_first(tmp_path, logged, monkeypatch):
    """Estimated by rule evaluations: ab loads twice the rules of a and evaluates them up to a later time."""
    monkeypatch.setattr(os, "cpu_count", lambda: 1)  # one run at a time, in the order submitted
    outdir.write_tree(tmp_path, FILES)
    assert validate.tool_errors(tmp_path, FILES) == []
    assert logged.runs() == [TEST_AB, TEST_A, CHECK_A, CHECK_B, AMTOOL]
    cost = {
        name: tools.rules_test(f"prometheus/tests/{name}/{name}.tests.yaml", cwd=tmp_path).cost for name in ("a", "ab")
    }
    assert cost == {"a": 3 * 1, "ab": 5 * 2}  # steps 0..2m and 0..4m, times the rules loaded
