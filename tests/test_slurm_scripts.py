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

from hpcobs.build import tools
from tests.conftest import ROOT

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
    """A fake compute node: the scripts installed under `root` as docs/slurm.md installs them, with their
    configuration beside them, the directories they write, and a way to run them with the environment slurmd
    would give them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.textfile, self.dcgm, self.amd, self.state, self.jobs = (
            root / name for name in ("textfile", "dcgm", "amd", "state", "jobs")
        )
        self.scripts = root / "hpcobs"
        install_scripts(self.scripts)
        self.config = self.scripts / "hpcobs-slurm.conf"
        self.configure()

    def configure(self, **settings: str) -> None:
        """Write the configuration: the node's directories, and `settings` over them."""
        values = {
            "textfile_dir": str(self.textfile),
            "dcgm_mapping_dir": str(self.dcgm),
            "amd_mapping_dir": str(self.amd),
            "job_metrics_dir": str(self.jobs),
            "state_dir": str(self.state),
            **settings,
        }
        self.config.write_text("".join(f"{key} = {value}\n" for key, value in values.items()))

    def run(
        self, action: str, job: str | None, *arguments: str, timeout: float = 60, environ: dict | None = None, **slurm
    ):
        """The installed script for `job` (SLURM_JOB_ID; None: unset) of uid 1001, with SLURM_<KEY>=value for
        each keyword."""
        slurm = {"job_uid": "1001", "job_gid": "1001", **slurm}
        environment = {**(environ or {}), **{f"SLURM_{k.upper()}": v for k, v in slurm.items()}}
        if job is not None:
            environment["SLURM_JOB_ID"] = job
        return subprocess.run(
            [str(self.scripts / action), *arguments], env=environment, capture_output=True, text=True, timeout=timeout
        )

    def prolog(self, job: str, gpus: str = "", **slurm: str) -> str:
        """Run the prolog (it must exit 0) for a job of alice (uid 1001) in account ml; its stderr."""
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
        return (self.textfile / f"hpcobs_job_{job}.prom").read_bytes().decode()

    def files(self) -> dict[str, bytes]:
        """Every file under the node's directories, by relative path: to compare states."""
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file() and self.scripts not in path.parents
        }


def install_scripts(directory: Path) -> None:
    """As docs/slurm.md installs them: root's directory, the scripts 0755, the module and configuration 0644."""
    directory.mkdir(mode=0o755)
    for name, mode in (("prolog", 0o755), ("epilog", 0o755), ("hpcobs_slurm.py", 0o644)):
        shutil.copy(SLURM / name, directory / name)
        (directory / name).chmod(mode)


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
    """Names and label order as hpcobs/exporters/catalogue/job_info.yaml, the job id the same string as in the
    mapping."""
    node.prolog("4242", "0,1")
    catalogue = yaml.safe_load((ROOT / "hpcobs" / "exporters" / "catalogue" / "job_info.yaml").read_text())
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


def test_what_exporters_read_is_world_readable_what_root_keeps_is_private_and_no_temporary_is_left(node):
    previous = os.umask(0o077)
    try:
        node.prolog("7", "0")
    finally:
        os.umask(previous)
    written = [node.textfile / "hpcobs_job_7.prom", node.dcgm / "0", node.amd / "0"]
    assert {stat.S_IMODE(path.stat().st_mode) for path in written} == {0o644}
    created = [node.textfile, node.dcgm, node.amd, node.jobs]
    assert {stat.S_IMODE(path.stat().st_mode) for path in created} == {0o755}
    # The job records name every job's user, account and job name: root's alone, as the lock.
    assert {stat.S_IMODE(path.stat().st_mode) for path in (node.state, node.state / "jobs")} == {0o700}
    assert {stat.S_IMODE(path.stat().st_mode) for path in (node.state / "lock", node.state / "jobs" / "7.json")} == {
        0o600
    }
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
        f"sys.path.insert(0, {str(node.scripts)!r})\n"
        "import hpcobs_slurm\n"
        "for action in ('prolog', 'epilog'):\n"
        "    assert hpcobs_slurm.main(action, []) == 0\n"
        "print(sorted(set(sys.modules) & {'re', 'json', 'subprocess', 'argparse', 'enum', 'typing', 'collections'}))\n"
    )
    environment = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_UID": "1001", "SLURM_JOB_GID": "1001"}
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


def test_an_unwritable_directory_is_reported_and_the_other_files_still_written(node):
    # Root writes anywhere a path leads: a textfile directory below a regular file cannot be made.
    (node.root / "not-a-directory").write_text("")
    node.configure(textfile_dir=str(node.root / "not-a-directory" / "textfile"))
    done = node.run("prolog", "7", job_gpus="0")
    assert done.returncode == 0
    assert done.stderr.startswith(f"hpcobs prolog: job 7: job info: {node.root}/not-a-directory/textfile: Not a dir")
    assert done.stderr.count("\n") == 1
    assert node.mapping() == {"0": ["7"]}
    node.configure(textfile_dir=str(node.root / "not-a-directory" / "textfile"), strict="yes")
    strict = node.run("prolog", "8", job_gpus="1")
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


def test_the_epilog_removes_the_job_info_of_its_job_only(node):
    node.prolog("7", "0")
    node.prolog("70", "1")
    (node.textfile / "other.prom").write_text("")
    node.epilog("7")
    assert node.textfiles() == ["hpcobs_job_70.prom", "other.prom"]


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


def scontrol_record(name: str, comment: str = "", account: str = "ml") -> str:
    """A job as Slurm 22.05's `scontrol show job -o` prints it: the fields in their order, free text unquoted."""
    return (
        f"JobId=7 JobName={name} UserId=alice(1001) GroupId=ml(1001) MCS_label=N/A Priority=4294901757 Nice=0 "
        f"Account={account} QOS=high JobState=RUNNING Reason=None Dependency=(null) Comment={comment} "
        "WorkDir=/home/alice NumNodes=1\n"
    )


@pytest.fixture
def scontrol(node) -> Iterator:
    """Install a fake scontrol printing what it is given, byte for byte."""
    bin_dir = node.root / "bin"
    bin_dir.mkdir()
    node.configure(slurm_bin_dir=str(bin_dir), query_scontrol="yes")

    def answer(output: str) -> None:
        (bin_dir / "record").write_text(output)
        fake_slurm_command(bin_dir, "scontrol", f"cat {bin_dir / 'record'}\n")

    return answer


@pytest.mark.parametrize(
    ("name", "comment"),
    [
        ("plain", ""),
        # Separators a user may put in free text: none moves the fields after it.
        ("a b\nJobId=8 JobName=c\u2028d\u0085e\rf", ""),
        ("x UserId=a(1) GroupId=b(2) QOS=fake Account=physics", " Account=physics QOS=low"),
        ("w", "x UserId=alice(1001) GroupId=ml(1001) MCS_label=N/A Priority=1 Nice=0 Account=physics"),
    ],
)
def test_scontrol_fills_job_name_and_qos_and_free_text_forges_nothing(node, scontrol, name, comment):
    scontrol(scontrol_record(name, comment))
    node.prolog("7", "0", job_account="")
    text = node.job_info("7")
    escaped = name.replace("\n", "\\n")
    assert f'account="ml",partition="gpu",job_name="{escaped}",qos="high"}} 1\n' in text


def test_scontrol_output_whose_free_text_imitates_the_owner_fields_is_refused_not_guessed(node, scontrol):
    imitation = " UserId=alice(1001) GroupId=ml(1001) MCS_label=N/A Priority=1 Nice=0 Account=physics QOS=top "
    scontrol(scontrol_record("w", comment=imitation))
    problems = node.prolog("7", "0", job_account="ml")
    assert problems == (
        "hpcobs prolog: job 7: scontrol: scontrol show job 7: 2 sequences of owner fields, where a job has one: a "
        "job name, comment or directory imitates them, so job name and QOS are left empty; fix: none needed (only "
        "this job's labels are affected), or rename the job\n"
    )
    assert 'account="ml",partition="gpu",job_name="",qos=""' in info_line(node.job_info("7"))


def test_scontrol_errors_are_one_line(node, scontrol):
    bin_dir = node.root / "bin"
    fake_slurm_command(bin_dir, "scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
    problems = node.prolog("8", "1")
    assert problems == (
        "hpcobs prolog: job 8: scontrol: scontrol show job 8: slurm_load_jobs error: Invalid job id specified; "
        "fix: check slurmctld, or set query_scontrol = no\n"
    )
    assert 'hpc_job="8",user="alice",account="ml"' in node.job_info("8")


# The threat: a local user with a shell on a compute node (docs/slurm.md#security). Each test below runs the attack
# as `nobody`, for real, against the scripts run as root.


@pytest.fixture
def public_node() -> Iterator[Node]:
    """A node in a tree that nobody can reach (pytest's own temporary tree is root's alone), as on a real node."""
    if os.geteuid() != 0:
        pytest.skip("the scripts run as root and the attacks as another user: root is needed")
    with tempfile.TemporaryDirectory(prefix="hpcobs-slurm-") as root:
        Path(root).chmod(0o755)
        yield Node(Path(root))


def as_nobody(code: str, **popen: object) -> subprocess.Popen:
    """Python `code` run by the user nobody: what any local user could do."""
    return subprocess.Popen(
        ["/usr/bin/python3", "-I", "-c", code], user=NOBODY, group=NOGROUP, stdout=subprocess.PIPE, text=True, **popen
    )


def nobody_says(code: str) -> str:
    attacker = as_nobody(code)
    output, _ = attacker.communicate(timeout=30)
    return output.strip()


@pytest.mark.parametrize(
    ("directory", "prepare", "problem"),
    [
        ("textfile", lambda path: path.chmod(0o1777), "writable by others than root (mode 1777); fix: chmod go-w"),
        ("textfile", lambda path: path.chmod(0o777), "writable by others than root (mode 0777); fix: chmod go-w"),
        ("textfile", lambda path: shutil.chown(path, NOBODY), "owned by uid 65534, not root; fix: chown root:"),
        ("dcgm", lambda path: path.chmod(0o775), "writable by others than root (mode 0775); fix: chmod go-w"),
    ],
)
def test_a_directory_another_user_may_change_is_refused_and_root_writes_nothing_there(
    public_node, directory, prepare, problem
):
    node = public_node
    target = getattr(node, directory)
    target.mkdir(mode=0o755)
    prepare(target)
    victim = node.root / "victim"
    victim.write_text("root's\n")
    # What the user would plant: a link under the final name, and files under every temporary name root could use.
    planted = f"""
import os
os.symlink({str(victim)!r}, {str(target / "hpcobs_job_7.prom")!r})
for pid in range(1, 4096):
    open(os.path.join({str(target)!r}, f".hpcobs_job_7.prom.hpcobs-{{pid}}.tmp"), "w").close()
print("planted")
"""
    if directory == "textfile" and target.stat().st_mode & 0o002:
        assert nobody_says(planted) == "planted"
    done = node.run("prolog", "7", job_gpus="0", job_user="alice")
    assert done.returncode == 0
    assert f"{target}: {problem}" in done.stderr and done.stderr.count("\n") == 1
    assert victim.read_text() == "root's\n"
    assert not [path for path in target.iterdir() if path.stat(follow_symlinks=False).st_uid == 0]
    # The other outputs are still written.
    assert (node.amd / "0").exists() and (node.jobs / "7").is_dir()


def test_no_user_can_open_the_lock_so_none_can_hold_it(public_node):
    node = public_node
    node.configure(lock_timeout_seconds="1")
    node.prolog("6", "0")
    holder = as_nobody(
        f"""
import fcntl, time
try:
    lock = open({str(node.state / "lock")!r})
    fcntl.flock(lock, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(30)
except OSError as error:
    print(error.strerror, flush=True)
"""
    )
    try:
        assert holder.stdout and holder.stdout.readline().strip() == "Permission denied"
        done = node.run("prolog", "7", job_gpus="1")
    finally:
        holder.kill()
        holder.wait()
    assert (done.returncode, done.stderr) == (0, "")
    assert node.mapping() == {"0": ["6"], "1": ["7"]}


def test_an_older_installation_s_open_state_directory_is_made_root_s_alone(node):
    node.state.mkdir(mode=0o755)
    (node.state / "lock").touch(mode=0o644)
    node.prolog("7", "0")
    assert stat.S_IMODE(node.state.stat().st_mode) == 0o700
    assert stat.S_IMODE((node.state / "lock").stat().st_mode) == 0o600


def make_fifo(path: Path) -> None:
    os.mkfifo(path)


def make_sparse(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(64 << 30)


@pytest.mark.parametrize(
    ("where", "plant", "problem"),
    [
        ("textfile/hpcobs_job_7.prom", make_fifo, "not a regular file; fix: remove it"),
        ("textfile/hpcobs_job_7.prom", Path.mkdir, "not a regular file; fix: remove it"),
        ("dcgm/0", make_sparse, "68719476736 bytes, more than the scripts write (65536); fix: remove it"),
        ("amd/0", lambda path: path.symlink_to("/dev/zero"), "a symbolic link; fix: remove it"),
        ("state/jobs/7.json", make_fifo, "not a regular file; fix: remove it"),
    ],
)
def test_a_planted_file_never_hangs_nor_crashes_a_run_and_the_other_files_are_written(node, where, plant, problem):
    """Defence in depth: no user can write these directories any more, but whatever stands under a name the
    scripts read is opened without waiting or following, checked, and refused alone."""
    path = node.root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    plant(path)
    done = node.run("prolog", "7", job_gpus="0", job_user="alice", timeout=20)
    assert done.returncode == 0
    assert f"{path}: {problem}" in done.stderr
    written = {"textfile": lambda: node.job_info("7"), "dcgm": lambda: node.mapping()["0"], "amd": node.amd_files}
    for name, read in written.items():
        if not where.startswith(name):
            assert read(), name


def test_each_job_writes_its_metrics_in_its_own_directory_and_nowhere_root_writes(public_node):
    node = public_node
    node.prolog("7", "0", job_uid="65534", job_gid="65534")
    job_dir = node.jobs / "7"
    status = job_dir.stat()
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (65534, 65534, 0o755)
    sentinel = node.root / "kept"
    sentinel.mkdir()
    (sentinel / "file").write_text("root's\n")
    said = nobody_says(
        f"""
import os
for directory in ({str(node.textfile)!r}, {str(node.dcgm)!r}, {str(node.jobs)!r}):
    try:
        open(os.path.join(directory, "x.prom"), "w")
        print("wrote", directory)
    except OSError as error:
        print(error.strerror)
os.makedirs({str(job_dir / "a" / "b")!r})
open({str(job_dir / "a" / "b" / "rank0.prom")!r}, "w").write("hpcobs_training_steps_total 1\\n")
os.symlink({str(sentinel)!r}, {str(job_dir / "a" / "link")!r})
os.symlink({str(sentinel / "file")!r}, {str(job_dir / "file.prom")!r})
print("done")
"""
    )
    assert said.splitlines() == ["Permission denied"] * 3 + ["done"]
    node.epilog("7")
    assert not job_dir.exists()
    assert (sentinel / "file").read_text() == "root's\n"


def test_the_configuration_is_the_installed_file_whatever_the_environment(node):
    elsewhere = node.root / "elsewhere.conf"
    elsewhere.write_text(f"textfile_dir = {node.root / 'chosen'}\n")
    node.prolog("7", environ={"HPCOBS_SLURM_CONF": str(elsewhere)})
    assert node.textfiles() == ["hpcobs_job_7.prom"]
    assert not (node.root / "chosen").exists()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda node: node.config.chmod(0o666), "{config}: writable by others than root (mode 0666); fix: chmod go-w"),
        (lambda node: shutil.chown(node.config, NOBODY), "{config}: owned by uid 65534, not root; fix: chown root:"),
        (
            lambda node: node.scripts.chmod(0o777),
            "{config}: in {scripts}, writable by others than its owner (mode 0777); fix: chmod go-w {scripts}",
        ),
    ],
)
def test_a_configuration_another_user_may_change_is_refused_and_nothing_written(node, change, problem):
    change(node)
    done = node.run("prolog", "7", job_gpus="0")
    assert done.returncode == 0
    expected = problem.format(config=node.config, scripts=node.scripts)
    assert done.stderr.startswith(f"hpcobs prolog: job 7: config error: {expected}")
    assert done.stderr.count("\n") == 1
    assert node.files() == {}


def test_slurm_commands_another_user_may_change_are_never_run(node, scontrol):
    scontrol(scontrol_record("x"))
    marker = node.root / "ran"
    fake_slurm_command(node.root / "bin", "scontrol", f"touch {marker}\n")
    (node.root / "bin" / "scontrol").chmod(0o777)
    problems = node.prolog("7", "0", job_account="")
    assert f"scontrol: {node.root}/bin/scontrol: writable by others than root (mode 0777)" in problems
    assert not marker.exists()
    assert 'hpc_job="7",user="alice"' in node.job_info("7")


def test_the_sweep_lists_each_directory_a_fixed_number_of_times_whatever_the_jobs(tmp_path, monkeypatch):
    """Its cost is linear in the files it finds: listing a directory per job made it quadratic."""
    listings: dict[int, dict[str, int]] = {}
    for planted in (5, 200):
        (tmp_path / str(planted)).mkdir()
        node = Node(tmp_path / str(planted))
        fake_slurm_command(node.root, "squeue", "true\n")
        settings = hpcobs_slurm.Settings(
            str(node.config), hpcobs_slurm.read_config(str(node.config)) | {"slurm_bin_dir": str(node.root)}
        )
        node.prolog("7", "0")
        for job in range(1000, 1000 + planted):
            (node.textfile / f"hpcobs_job_{job}.prom").write_text("")
        counted: dict[str, int] = {}
        real_scandir, real_listdir = os.scandir, os.listdir

        def scandir(path=".", count=counted, real=real_scandir):
            count[str(path)] = count.get(str(path), 0) + 1
            return real(path)

        def listdir(path=".", count=counted, real=real_listdir):
            count[str(path)] = count.get(str(path), 0) + 1
            return real(path)

        with monkeypatch.context() as patched:
            patched.setattr(os, "scandir", scandir)
            patched.setattr(os, "listdir", listdir)
            swept, problems = hpcobs_slurm.sweep(settings, "n1")
        assert (len(swept), problems) == (planted + 1, [])
        assert node.textfiles() == []
        listings[planted] = {
            str(Path(path).relative_to(node.root)) if path.startswith("/") else "by descriptor": n
            for path, n in counted.items()
        }
    assert listings[5] == listings[200]
    assert max(listings[200].values()) <= 2
