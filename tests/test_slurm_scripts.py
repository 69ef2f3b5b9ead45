"""The Slurm prolog and epilog (slurm/, docs/slurm.md) run as slurmd runs them, in a fake node.

Each test runs the real `slurm/prolog` and `slurm/epilog` scripts as processes, with the environment slurmd gives
them and a configuration pointing at temporary directories, then reads what they wrote. Real Slurm, node_exporter
and Prometheus run the same scripts in tests/live/test_slurm_live.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from hpcobs import tools

from .conftest import ROOT

SLURM = ROOT / "slurm"
NOBODY, NOGROUP = "nobody", "nogroup"
RACERS = 16


def _module():
    spec = importlib.util.spec_from_file_location("hpcobs_slurm", SLURM / "hpcobs_slurm.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hpcobs_slurm = _module()


class Node:
    """A fake compute node: the script's directories under `root`, a config file, and a way to run the scripts
    with the environment slurmd would give them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.textfile, self.dcgm, self.amd, self.state = (root / name for name in ("textfile", "dcgm", "amd", "state"))
        self.config = root / "hpcobs-slurm.conf"
        self.configure()

    def configure(self, **settings: str) -> None:
        """Write the configuration: the node's directories, and `settings` over them."""
        values = {
            "textfile_dir": str(self.textfile),
            "dcgm_mapping_dir": str(self.dcgm),
            "amd_mapping_dir": str(self.amd),
            "state_dir": str(self.state),
            **settings,
        }
        self.config.write_text("".join(f"{key} = {value}\n" for key, value in values.items()))

    def run(self, action: str, job: str | None, *arguments: str, user: str | None = None, **slurm: str):
        """The script for `job` (SLURM_JOB_ID; None: unset) with SLURM_<KEY>=value for each keyword."""
        environment = {"HPCOBS_SLURM_CONF": str(self.config), **{f"SLURM_{k.upper()}": v for k, v in slurm.items()}}
        if job is not None:
            environment["SLURM_JOB_ID"] = job
        return subprocess.run(
            [str(SLURM / action), *arguments],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            user=user,
            group=NOGROUP if user else None,
        )

    def prolog(self, job: str, gpus: str = "", **slurm: str) -> str:
        """Run the prolog (it must exit 0) for a job of alice in account ml; its stderr."""
        owner = {"job_user": "alice", "job_account": "ml", "job_partition": "gpu", "cluster_name": "c1"}
        done = self.run("prolog", job, **{**owner, "job_gpus": gpus, **slurm})
        assert done.returncode == 0, done.stderr
        return done.stderr

    def epilog(self, job: str) -> str:
        done = self.run("epilog", job)
        assert done.returncode == 0, done.stderr
        return done.stderr

    def mapping(self) -> dict[str, list[str]]:
        """dcgm-exporter's view: every mapping file it would read, and its job ids."""
        return {
            path.name: path.read_text().split() for path in entries(self.dcgm) if hpcobs_slurm.is_dcgm_name(path.name)
        }

    def amd_files(self) -> dict[str, dict[str, str]]:
        return {path.name: json.loads(path.read_text()) for path in entries(self.amd) if path.name.isdigit()}

    def textfiles(self) -> list[str]:
        return [path.name for path in entries(self.textfile)]

    def job_info(self, job: str) -> str:
        return (self.textfile / f"hpcobs_job_{job}.prom").read_text()

    def files(self) -> dict[str, bytes]:
        """Every file under the node's directories, by relative path: to compare states."""
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }


def entries(directory: Path) -> list[Path]:
    """The directory's entries, sorted; none when it does not exist (the scripts create directories as needed)."""
    return sorted(directory.iterdir()) if directory.exists() else []


@pytest.fixture
def node(tmp_path) -> Node:
    return Node(tmp_path)


def info_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("hpcobs_slurm_job_info{"))


def test_the_shipped_configuration_holds_the_defaults_and_the_build_prefix():
    assert hpcobs_slurm.read_config(str(SLURM / "hpcobs-slurm.conf")) == hpcobs_slurm.DEFAULTS
    default = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    assert hpcobs_slurm.DEFAULTS["metric_prefix"] == default["exporters"]["job_info"]["metric_prefix"]


def test_the_job_info_file_has_the_contract_names_and_labels(node):
    """Names and label order as hpcobs/catalogue/job_info.yaml, the job id the same string as in the mapping."""
    node.prolog("4242", "0,1")
    catalogue = yaml.safe_load((ROOT / "hpcobs" / "catalogue" / "job_info.yaml").read_text())
    labels = {metric["name"]: metric["labels"] for metric in catalogue["metrics"]}
    info, start = [line for line in node.job_info("4242").splitlines() if not line.startswith("#")]
    assert info == (
        'hpcobs_slurm_job_info{hpc_job="4242",user="alice",account="ml",partition="gpu",job_name="",qos=""} 1'
    )
    assert labels["slurm_job_info"] == ["hpc_job", "user", "account", "partition", "job_name", "qos"]
    assert start.startswith('hpcobs_slurm_job_start_time_seconds{hpc_job="4242"} ')
    assert labels["slurm_job_start_time_seconds"] == ["hpc_job"]
    assert node.mapping() == {"0": ["4242"], "1": ["4242"]}


def test_label_values_are_escaped_and_the_file_passes_promtool(node):
    start = 'llama "70b"\\run\nnext'
    node.prolog("7", "0", job_name=start + os.fsdecode(b"\xff") + "x" * 200, job_qos="high")
    text = node.job_info("7")
    # Cut to 128 characters, the byte that is not UTF-8 replaced, then escaped.
    name = 'llama \\"70b\\"\\\\run\\nnext\ufffd' + "x" * (128 - len(start) - 1)
    assert f'job_name="{name}",qos="high"' in info_line(text)
    done = subprocess.run(
        [tools.find(tools.PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_files_and_directories_are_world_readable_and_temporaries_are_never_left(node):
    previous = os.umask(0o077)
    try:
        node.prolog("7", "0")
    finally:
        os.umask(previous)
    written = [node.textfile / "hpcobs_job_7.prom", node.dcgm / "0", node.amd / "0"]
    assert {stat.S_IMODE(path.stat().st_mode) for path in written} == {0o644}
    created = [node.textfile, node.dcgm, node.amd, node.state / "jobs"]
    assert {stat.S_IMODE(path.stat().st_mode) for path in created} == {0o755}
    assert not [path for path in node.root.rglob(".*") if path.is_file()]


def test_a_shared_gpu_holds_a_line_per_job_and_each_epilog_removes_only_its_own(node):
    node.prolog("7", "0,1")
    node.prolog("8", "1,2")
    assert node.mapping() == {"0": ["7"], "1": ["7", "8"], "2": ["8"]}
    node.epilog("7")
    # Emptied, not removed: dcgm-exporter fails a scrape when a listed file vanishes before it reads it.
    assert node.mapping() == {"0": [], "1": ["8"], "2": ["8"]}
    assert not (node.textfile / "hpcobs_job_7.prom").exists()
    assert 'hpc_job="8"' in node.job_info("8")
    node.epilog("8")
    assert node.mapping() == {"0": [], "1": [], "2": []}
    assert node.textfiles() == []
    assert entries(node.state / "jobs") == []


def test_amd_files_hold_the_newest_job_and_pass_to_the_remaining_one(node):
    node.prolog("7", "0,1", job_user="alice")
    node.prolog("8", "1", job_user="bob")
    files = node.amd_files()
    assert files["0"] == {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "c1",
        "SLURM_JOB_GPUS": "0,1",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert files["1"]["SLURM_JOB_ID"] == "8"
    assert all(isinstance(value, str) for payload in files.values() for value in payload.values())
    node.epilog("8")
    assert node.amd_files()["1"] == {**files["0"], "CUDA_VISIBLE_DEVICES": "1"}
    node.epilog("7")
    assert node.amd_files() == {}


def test_mig_instances_are_named_gpu_dot_instance_from_the_site_gpu_map(node):
    gpu_map = node.root / "gpu-map"
    gpu_map.write_text("# slurm id, exporter gpu\n0 0.1\n1 0.2\n2 1\n")
    node.configure(gpu_map=str(gpu_map), amd_mapping_dir="")
    node.prolog("7", "0,2")
    node.prolog("8", "1")
    assert node.mapping() == {"0.1": ["7"], "0.2": ["8"], "1": ["7"]}
    node.epilog("7")
    assert node.mapping() == {"0.1": [], "0.2": ["8"], "1": []}


def test_a_gpu_missing_from_the_map_is_reported_and_the_job_info_still_written(node):
    gpu_map = node.root / "gpu-map"
    gpu_map.write_text("0 0.1\n")
    node.configure(gpu_map=str(gpu_map), amd_mapping_dir="")
    problems = node.prolog("7", "0,5")
    assert "no line for Slurm GPU 5" in problems
    assert node.mapping() == {}
    assert 'hpc_job="7"' in node.job_info("7")


@pytest.mark.parametrize("name", ["0", "7", "12", "0.1", "3.10", "", ".", "0.", ".1", "1.2.3", "a", "٣", "0.x", "-1"])
def test_mapping_names_are_the_ones_dcgm_exporter_reads(name):
    """Its internal/pkg/transformation/hpc.go reads the files whose whole name matches this (Go's \\d is ASCII)."""
    assert hpcobs_slurm.is_dcgm_name(name) == bool(re.fullmatch(r"[0-9]+(\.[0-9]+)?", name))


def test_json_written_by_hand_reads_back():
    hostile = {"name": 'a"b\\c\nd\te\x00\x1f\x7f é ✓', "ids": [0, 12], "gpus": ["1", "0.2"], "time": 1796203294}
    assert json.loads(hpcobs_slurm.json_text(hostile)) == hostile


def test_the_prolog_and_epilog_import_nothing_slow(node):
    """No re, json, subprocess, argparse (nor what they pull in) on the common path, an NVIDIA node: they would
    double the start-up time (benchmarks/prolog.py measures it; a timed test would only measure the machine)."""
    node.configure(amd_mapping_dir="")
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(SLURM)!r})\n"
        "import hpcobs_slurm\n"
        "for action in ('prolog', 'epilog'):\n"
        "    assert hpcobs_slurm.main(action, []) == 0\n"
        "print(sorted(set(sys.modules) & {'re', 'json', 'subprocess', 'argparse', 'enum', 'typing', 'collections'}))\n"
    )
    environment = {"HPCOBS_SLURM_CONF": str(node.config), "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1"}
    done = subprocess.run(["/usr/bin/python3", "-IS", "-c", code], env=environment, capture_output=True, text=True)
    assert (done.stdout, done.stderr) == ("[]\n", "")
    assert node.mapping() == {"0": [], "1": []}


def test_slurm_gpu_ranges_are_expanded():
    assert hpcobs_slurm.slurm_gpu_ids("0-2,5,1") == [0, 1, 2, 5]
    assert hpcobs_slurm.slurm_gpu_ids("") == []


def test_racing_prologs_and_epilogs_on_one_gpu_lose_no_line(node):
    jobs = [str(job) for job in range(100, 100 + RACERS)]
    with ThreadPoolExecutor(RACERS) as pool:
        list(pool.map(lambda job: node.prolog(job, "0,1"), jobs))
    assert {name: sorted(lines) for name, lines in node.mapping().items()} == {"0": jobs, "1": jobs}
    ending, staying = jobs[::2], jobs[1::2]
    with ThreadPoolExecutor(RACERS) as pool:
        list(pool.map(node.epilog, ending))
    assert {name: sorted(lines) for name, lines in node.mapping().items()} == {"0": staying, "1": staying}
    assert node.textfiles() == [f"hpcobs_job_{job}.prom" for job in staying]


def test_the_prolog_is_idempotent(node):
    node.prolog("7", "0,1")
    before = node.files()
    node.prolog("7", "0,1")
    assert node.files() == before


def test_a_rerun_with_other_gpus_moves_the_job(node):
    node.prolog("7", "0,1")
    node.prolog("7", "2")
    assert node.mapping() == {"0": [], "1": [], "2": ["7"]}
    assert set(node.amd_files()) == {"2"}


@pytest.mark.parametrize("job", [None, "", "12a", "../../etc/passwd", "7 8"])
def test_a_malformed_job_id_writes_nothing_and_does_not_fail_the_job(node, job):
    done = node.run("prolog", job, job_gpus="0")
    assert done.returncode == 0
    assert done.stderr.count("\n") == 1
    assert "SLURM_JOB_ID:" in done.stderr and "is not a job id; fix:" in done.stderr
    assert node.mapping() == {} and node.textfiles() == []


def test_malformed_gpus_skip_the_mapping_but_not_the_job_info(node):
    problems = node.prolog("7", "0,gpu1")
    assert problems.startswith("hpcobs prolog: job 7: GPUs: SLURM_JOB_GPUS: '0,gpu1' is not a list of GPU ids; fix:")
    assert node.mapping() == {}
    assert 'hpc_job="7"' in node.job_info("7")


def test_a_job_without_gpus_gets_its_job_info_only(node):
    assert node.prolog("7") == ""
    assert node.mapping() == {} and node.amd_files() == {}
    assert 'user="alice"' in node.job_info("7")


@pytest.fixture
def unwritable_textfile_node() -> Iterator[tuple[Node, str | None]]:
    """A node whose textfile directory its scripts cannot write, and the user to run them as. Root writes
    anywhere, so as root the scripts run as nobody, in a tree nobody can reach (pytest's is private to root)."""
    with tempfile.TemporaryDirectory(prefix="hpcobs-slurm-") as root:
        node = Node(Path(root))
        for directory in (node.dcgm, node.amd, node.state, node.textfile):
            directory.mkdir()
        node.textfile.chmod(0o555)
        user = None
        if os.geteuid() == 0:
            user = NOBODY
            Path(root).chmod(0o755)
            for directory in (node.dcgm, node.amd, node.state):
                shutil.chown(directory, NOBODY, NOGROUP)
        yield node, user


def test_an_unwritable_directory_is_reported_and_the_other_files_still_written(unwritable_textfile_node):
    node, user = unwritable_textfile_node
    done = node.run("prolog", "7", job_gpus="0", user=user)
    assert done.returncode == 0
    assert done.stderr.startswith(f"hpcobs prolog: job 7: job info: {node.textfile}/.hpcobs_job_7.prom.hpcobs-")
    assert "Permission denied; fix: check that the directory set in hpcobs-slurm.conf is on a writable" in done.stderr
    assert node.mapping() == {"0": ["7"]}
    node.configure(strict="yes")
    strict = node.run("prolog", "8", job_gpus="1", user=user)
    assert strict.returncode == 1 and "job info:" in strict.stderr
    assert node.mapping() == {"0": ["7"], "1": ["8"]}


def test_strict_mode_fails_the_job_on_a_broken_configuration_and_only_then(node):
    node.configure(strict="yes", metric_prefix="9bad")
    done = node.run("prolog", "7", job_gpus="0")
    assert done.returncode == 1
    assert done.stderr == (
        f"hpcobs prolog: job 7: config error: {node.config}: metric_prefix: '9bad' cannot start a metric name; "
        "fix: use letters, digits, '_' or ':' (no digit first), as config/default.yaml's metric_prefix\n"
    )
    node.configure(strict="no", metric_prefix="9bad")
    assert node.run("prolog", "7", job_gpus="0").returncode == 0
    node.configure(strict="yes")
    assert node.run("prolog", "7", job_gpus="0").returncode == 0


def test_a_held_lock_times_out_without_failing_the_job_unless_strict(node):
    import fcntl

    node.configure(lock_timeout_seconds="0.2")
    node.prolog("6", "0")
    with open(node.state / "lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        relaxed = node.run("prolog", "7", job_gpus="0")
        node.configure(lock_timeout_seconds="0.2", strict="yes")
        strict = node.run("prolog", "7", job_gpus="0")
    assert (relaxed.returncode, strict.returncode) == (0, 1)
    assert "still locked after 0.2s; fix: find its holder" in relaxed.stderr
    assert node.mapping() == {"0": ["6"]}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("textfil_dir = /x", "textfil_dir: unknown key; fix: use one of textfile_dir, "),
        ("strict = maybe", "strict: 'maybe' is not yes or no; fix: write strict = yes or no"),
        ("state_dir = run/x", "state_dir: 'run/x' is relative; fix: give a full path"),
        ("lock_timeout_seconds = soon", "lock_timeout_seconds: 'soon' is not 0 to 300 seconds; fix: write e.g. 10"),
        ("just words", "line 1: 'just words' is not key = value; fix: write it so"),
    ],
)
def test_configuration_errors_are_one_line_naming_the_file_and_key(node, line, problem):
    node.config.write_text(line + "\n")
    done = node.run("prolog", "7")
    assert done.returncode == 0 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"hpcobs prolog: job 7: config error: {node.config}: {problem}")
    check = node.run("epilog", None, "--check")
    assert check.returncode == 2 and check.stderr.startswith(f"config error: {node.config}: {problem}")


def test_check_prints_the_configuration(node):
    done = node.run("prolog", None, "--check")
    assert done.returncode == 0
    assert f"dcgm_mapping_dir = {node.dcgm}\n" in done.stdout and "metric_prefix = hpcobs_\n" in done.stdout


def test_the_epilog_of_a_job_it_never_saw_is_quiet(node):
    node.prolog("7", "0")
    assert node.epilog("99") == ""
    assert node.mapping() == {"0": ["7"]}


def test_the_epilog_removes_the_training_metrics_of_its_job_only(node):
    node.prolog("7", "0")
    for name in ("hpcobs_training_7_rank0.prom", "hpcobs_training_70_rank0.prom", "other.prom"):
        (node.textfile / name).write_text("")
    node.epilog("7")
    assert node.textfiles() == ["hpcobs_training_70_rank0.prom", "other.prom"]


def fake_slurm_command(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_the_sweep_empties_the_files_of_jobs_slurm_no_longer_has(node):
    bin_dir = node.root / "bin"
    bin_dir.mkdir()
    node.configure(slurm_bin_dir=str(bin_dir))
    node.prolog("7", "0")
    node.prolog("8", "0,1")
    (node.textfile / "hpcobs_job_5.prom").write_text("")  # a crashed node's leftover: no record, no mapping
    (node.dcgm / "3").write_text("4\n")
    fake_slurm_command(bin_dir, "squeue", '[ "$3" = n1 ] && echo 8\n')
    done = node.run("epilog", None, "--sweep", "--node", "n1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "swept 3 jobs no longer on n1: 4 5 7\n"
    assert node.mapping() == {"0": ["8"], "1": ["8"], "3": []}
    assert node.textfiles() == ["hpcobs_job_8.prom"]
    assert [path.name for path in entries(node.state / "jobs")] == ["8.json"]


def test_the_sweep_passes_amd_files_only_to_running_jobs(node):
    bin_dir = node.root / "bin"
    bin_dir.mkdir()
    node.configure(slurm_bin_dir=str(bin_dir))
    for job in ("7", "8", "9"):
        node.prolog(job, "0")
    fake_slurm_command(bin_dir, "squeue", "echo 7\n")
    assert node.run("epilog", None, "--sweep", "--node", "n1").stdout == "swept 2 jobs no longer on n1: 8 9\n"
    assert node.amd_files()["0"]["SLURM_JOB_ID"] == "7"
    fake_slurm_command(bin_dir, "squeue", "true\n")
    assert node.run("epilog", None, "--sweep", "--node", "n1").stdout == "swept 1 jobs no longer on n1: 7\n"
    assert node.amd_files() == {}


def test_the_sweep_removes_nothing_when_slurm_does_not_answer(node):
    bin_dir = node.root / "bin"
    bin_dir.mkdir()
    node.configure(slurm_bin_dir=str(bin_dir))
    node.prolog("7", "0")
    fake_slurm_command(
        bin_dir, "squeue", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    done = node.run("epilog", None, "--sweep", "--node", "n1")
    assert done.returncode == 2
    assert done.stderr == (
        "squeue --nodelist n1: slurm_load_jobs error: Unable to contact slurm controller; "
        "fix: check slurmctld and the node name (--node)\n"
    )
    assert node.mapping() == {"0": ["7"]}


def test_scontrol_fills_the_job_name_and_qos_when_asked(node):
    bin_dir = node.root / "bin"
    bin_dir.mkdir()
    node.configure(slurm_bin_dir=str(bin_dir), query_scontrol="yes")
    # A job name that imitates the fields after it: the greedy match still ends at the real ones.
    fake_slurm_command(
        bin_dir,
        "scontrol",
        "echo 'JobId=7 JobName=x UserId=a(1) GroupId=b(2) QOS=fake UserId=alice(1001) GroupId=ml(1001) "
        "MCS_label=N/A Priority=1 Account=ml QOS=high JobState=RUNNING'\n",
    )
    node.prolog("7", "0", job_account="")
    assert 'account="ml",partition="gpu",job_name="x UserId=a(1) GroupId=b(2) QOS=fake",qos="high"' in info_line(
        node.job_info("7")
    )
    fake_slurm_command(bin_dir, "scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
    problems = node.prolog("8", "1")
    assert problems == (
        "hpcobs prolog: job 8: scontrol: scontrol show job 8: slurm_load_jobs error: Invalid job id specified; "
        "fix: check slurmctld, or set query_scontrol = no\n"
    )
    assert 'hpc_job="8",user="alice",account="ml"' in node.job_info("8")
