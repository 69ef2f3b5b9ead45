"""slurm/job-metrics, the reader of the jobs' own metrics directories (docs/slurm.md#security).

Each job writes into `<job_metrics_dir>/<job id>`; the reader serves a sample only when its job label names that
directory, and counts per job what it refused. Most tests read a directory tree in-process through `exposition`;
the server is run as the installed script, as nobody where the test runs as root. The real node_exporter and
Prometheus run the same attack in tests/live/test_job_metrics_live.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hpcobs_training import Tracker

from hpcobs.build import tools
from tests import test_slurm_scripts
from tests.conftest import ROOT
from tests.test_slurm_scripts import NOBODY, NOGROUP, Node

# The fake node of the prolog's tests, and the one nobody can reach (root only).
node, public_node = test_slurm_scripts.node, test_slurm_scripts.public_node

SLURM = ROOT / "slurm"
sys.path.insert(0, str(SLURM))
import hpcobs_job_metrics  # noqa: E402

STEPS = "hpcobs_training_steps_total"
TRAINING_HEAD = f"# HELP {STEPS} Steps.\n# TYPE {STEPS} counter\n"


@pytest.fixture
def jobs(tmp_path) -> Path:
    """job_metrics_dir as the prolog leaves it: root's, 0755."""
    base = tmp_path / "jobs"
    base.mkdir(mode=0o755)
    return base


def write(base: Path, job: str, name: str, text: str) -> Path:
    (base / job).mkdir(exist_ok=True)
    path = base / job / name
    path.write_text(text)
    return path


def served(base: Path) -> str:
    """One scrape's text, read in a thread that must finish in seconds: nothing a job plants may hold it."""
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(hpcobs_job_metrics.exposition(str(base))), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert result, "the scrape did not finish within 20 s"
    return result[0]


def refused(text: str, kind: str = "lines") -> dict[tuple[str, str], int]:
    """{(job, reason): count} of the reader's own refusal series."""
    prefix = f"hpcobs_job_metrics_refused_{kind}{{"
    counts = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            labels, value = line[len(prefix) :].split("} ")
            job, reason = (part.split("=")[1].strip('"') for part in labels.split(","))
            counts[job, reason] = int(value)
    return counts


def promtool_accepts(text: str) -> None:
    done = subprocess.run(
        [tools.find(tools.PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith(("#", "hpcobs_job_metrics_"))]


def test_a_job_s_series_naming_another_job_are_refused_and_counted_its_own_served_byte_for_byte(jobs):
    # The shadowing node_exporter allows: job 42's file holds job 43's series, first in path order.
    own = 'nccl_bus_bandwidth_gbs{slurm_job_id="42",gpu="0",comm_name="0x1\\"a\\\\b\\nc"} 1.50e+03'
    write(
        jobs,
        "42",
        "a.prom",
        TRAINING_HEAD + f'{STEPS}{{hpc_job="43",rank="0",node="n1"}} 5\n'
        f'{STEPS}{{rank="0", hpc_job="42" ,node="n1",}} 0001\n'
        f"{own}\n"
        'nccl_bus_bandwidth_gbs{slurm_job_id="43",gpu="0"} 9\n'
        f'{STEPS}{{hpc_job="42",slurm_job_id="43",rank="1",node="n1"}} 9\n'
        f'{STEPS}{{hpc_job="42\\n",rank="2",node="n1"}} 9\n'
        f'{STEPS}{{rank="3",node="n1"}} 9\n',
    )
    victim = TRAINING_HEAD + f'{STEPS}{{hpc_job="43",rank="0",node="n1"}} 7\n'
    write(jobs, "43", "hpcobs_training_43_rank0.prom", victim)
    text = served(jobs)
    assert samples(text) == [
        f'{STEPS}{{rank="0",hpc_job="42",node="n1"}} 0001',
        f'{STEPS}{{hpc_job="43",rank="0",node="n1"}} 7',
        own,
    ]
    assert refused(text) == {("42", "other_job"): 5}
    assert refused(text, "files") == {}
    promtool_accepts(text)


def test_escapes_are_kept_and_a_line_the_text_format_does_not_allow_is_refused(jobs):
    lines = [
        f'{STEPS}{{hpc_job="7",rank="0",node="a\\\\b\\"c\\nd}}e"}} 1',  # kept: every escape, a brace inside
        f'{STEPS}{{hpc_job="7",rank="1",node="a\\tb"}} 1',  # no such escape
        f'{STEPS}{{hpc_job="7",rank="2",node="n1"}} 1 1700000000000',  # a timestamp
        f'{STEPS}{{hpc_job="7",rank="3",rank="4"}} 1',  # a label twice
        f'{STEPS}{{hpc_job="7",__name__="x"}} 1',  # a reserved label
        f'{STEPS}{{hpc_job="7",rank="5"}} 1_000',  # Python reads it, Prometheus does not
        f'{STEPS}{{hpc_job="7" rank="6"}} 1',  # no comma
        f'{STEPS}{{hpc_job="7",rank="7"}}',  # no value
        "# TYPE other_metric countr",
        "# HELP other_metric a\\tb",  # no such escape in HELP either
    ]
    write(jobs, "7", "a.prom", "\n".join(lines) + "\n")
    text = served(jobs)
    assert samples(text) == [lines[0]]
    assert refused(text) == {("7", "malformed"): 9}
    promtool_accepts(text)


def test_duplicates_keep_the_first_in_file_order_and_reserved_names_are_refused(jobs):
    write(jobs, "7", "a.prom", f'{STEPS}{{hpc_job="7",rank="0"}} 1\n{STEPS}{{rank="0",hpc_job="7"}} 2\n')
    write(jobs, "7", "b.prom", f'{STEPS}{{hpc_job="7",rank="0"}} 3\n')
    write(jobs, "7", "c.prom", 'hpcobs_job_metrics_refused_lines{hpc_job="7",reason="other_job"} 0\n')
    text = served(jobs)
    assert samples(text) == [f'{STEPS}{{hpc_job="7",rank="0"}} 1']
    assert refused(text) == {("7", "duplicate"): 2, ("7", "reserved_name"): 1}


def test_a_family_a_job_types_two_ways_is_refused_for_that_job_alone(jobs):
    write(jobs, "7", "a.prom", TRAINING_HEAD + f'{STEPS}{{hpc_job="7",rank="0"}} 1\n')
    write(jobs, "7", "b.prom", f'# TYPE {STEPS} gauge\n{STEPS}{{hpc_job="7",rank="1"}} 1\n')
    write(jobs, "8", "a.prom", TRAINING_HEAD + f'{STEPS}{{hpc_job="8",rank="0"}} 1\n')
    text = served(jobs)
    assert samples(text) == [f'{STEPS}{{hpc_job="8",rank="0"}} 1']
    assert f"# TYPE {STEPS} counter" in text
    assert refused(text) == {("7", "conflicting_metadata"): 2}
    promtool_accepts(text)


def test_jobs_that_disagree_on_a_family_keep_their_series_and_neither_s_metadata_is_served(jobs):
    write(jobs, "7", "a.prom", TRAINING_HEAD + f'{STEPS}{{hpc_job="7",rank="0"}} 1\n')
    histogram = f'# HELP {STEPS} Forged.\n# TYPE {STEPS} histogram\n{STEPS}_bucket{{hpc_job="8",le="+Inf"}} 1\n'
    write(jobs, "8", "a.prom", histogram + f'{STEPS}_count{{hpc_job="8"}} 1\n{STEPS}_bucket{{hpc_job="8",le="1"}} 1\n')
    text = served(jobs)
    assert "Forged" not in text and "Steps." not in text and f"# TYPE {STEPS} " not in text
    assert sorted(samples(text)) == sorted(
        [
            f'{STEPS}{{hpc_job="7",rank="0"}} 1',
            f'{STEPS}_bucket{{hpc_job="8",le="+Inf"}} 1',
            f'{STEPS}_bucket{{hpc_job="8",le="1"}} 1',
            f'{STEPS}_count{{hpc_job="8"}} 1',
        ]
    )
    assert refused(text) == {}
    promtool_accepts(text)


def make_sparse(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(64 << 30)


def test_links_fifos_oversized_files_and_too_many_files_are_refused_without_blocking(jobs, tmp_path):
    secret = tmp_path / "secret.prom"
    secret.write_text('secret{hpc_job="7"} 1\n')
    write(jobs, "7", "a_own.prom", f'{STEPS}{{hpc_job="7",rank="0"}} 1\n')
    (jobs / "7" / "b_link.prom").symlink_to(secret)
    os.mkfifo(jobs / "7" / "c_fifo.prom")
    make_sparse(jobs / "7" / "d_sparse.prom")
    (jobs / "7" / "e_dir.prom").mkdir()
    (jobs / "7" / "f_zero.prom").symlink_to("/dev/zero")
    (jobs / "8").symlink_to(jobs / "7")  # a directory under a job's name, from a link: not that job's
    for number in range(hpcobs_job_metrics.FILES_PER_JOB + 3):
        write(jobs, "9", f"{number:03}.prom", f'{STEPS}{{hpc_job="9",rank="{number}"}} 1\n')
    for number in range(hpcobs_job_metrics.ENTRIES_PER_JOB + 1):
        write(jobs, "10", f"{number}.txt", "")
    write(jobs, "10", "a.prom", f'{STEPS}{{hpc_job="10",rank="0"}} 1\n')
    began = time.monotonic()
    text = served(jobs)
    assert time.monotonic() - began < 10
    assert refused(text, "files") == {
        ("7", "link"): 2,
        ("7", "not_regular"): 2,
        ("7", "too_large"): 1,
        ("8", "link"): 1,
        ("9", "too_many"): 3,
        ("10", "too_many"): 1,
    }
    ranks = [line for line in samples(text) if 'hpc_job="9"' in line]
    assert len(ranks) == hpcobs_job_metrics.FILES_PER_JOB and 'rank="0"' in ranks[0]
    assert [line for line in samples(text) if 'hpc_job="9"' not in line] == [f'{STEPS}{{hpc_job="7",rank="0"}} 1']
    promtool_accepts(text)


def test_a_file_over_the_size_limit_is_refused_and_one_at_it_read(jobs):
    line = f'{STEPS}{{hpc_job="7",rank="0"}} 1\n'
    write(jobs, "7", "a.prom", line + "#" * (hpcobs_job_metrics.FILE_BYTES - len(line) - 1) + "\n")
    write(jobs, "7", "b.prom", line.replace("0", "1") + "#" * (hpcobs_job_metrics.FILE_BYTES - len(line) + 1))
    text = served(jobs)
    assert samples(text) == [line.strip()]
    assert refused(text, "files") == {("7", "too_large"): 1}


def test_an_untrusted_jobs_directory_is_refused_and_a_missing_one_serves_nothing(jobs):
    assert served(jobs / "missing") == ""
    jobs.chmod(0o777)
    with pytest.raises(hpcobs_job_metrics.hpcobs_slurm.SetupError, match="writable by others than root"):
        hpcobs_job_metrics.exposition(str(jobs))


def test_the_training_helper_s_files_are_served_and_the_epilog_removes_them(node):
    """The chain on one node: the prolog makes the job's directory, the training helper writes into it, the
    reader serves its series, the epilog removes the directory, the files in it and a link planted there."""
    node.prolog("7", "0", job_uid=str(os.geteuid()), job_gid=str(os.getegid()))
    job_dir = node.jobs / "7"
    for rank in (0, 1):
        tracker = Tracker(job="7", rank=rank, local_rank=rank, node="n1", textfile_dir=job_dir)
        with tracker, tracker.step(tokens=10, flops=1e9), tracker.phase("forward"):
            tracker.loss(2.5)
    written = sorted(path.name for path in job_dir.iterdir())
    assert written == ["hpcobs_training_7_rank0.prom", "hpcobs_training_7_rank1.prom"]
    text = served(node.jobs)
    for path in job_dir.iterdir():
        assert set(samples(path.read_text())) <= set(samples(text))
    assert f'{STEPS}{{hpc_job="7",node="n1",rank="1"}} 1.0' in text
    assert refused(text) == {} and refused(text, "files") == {}
    promtool_accepts(text)
    sentinel = node.root / "kept"
    sentinel.write_text("root's\n")
    (job_dir / "link.prom").symlink_to(sentinel)
    node.epilog("7")
    assert not job_dir.exists()
    assert sentinel.read_text() == "root's\n"
    assert served(node.jobs) == ""


def install_reader(node: Node) -> Path:
    """The reader beside the prolog, as docs/slurm.md installs it."""
    for name, mode in (("job-metrics", 0o755), ("hpcobs_job_metrics.py", 0o644)):
        shutil.copy(SLURM / name, node.scripts / name)
        (node.scripts / name).chmod(mode)
    return node.scripts / "job-metrics"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, method: str = "GET") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_the_reader_serves_metrics_alone_as_an_unprivileged_user(public_node):
    node = public_node
    reader = install_reader(node)
    node.prolog("7", "0", job_uid="65534", job_gid="65534")
    write(node.jobs, "7", "a.prom", f'{STEPS}{{hpc_job="7",rank="0"}} 3\n{STEPS}{{hpc_job="8",rank="0"}} 4\n')
    port = free_port()
    server = subprocess.Popen(
        [str(reader), "--listen", f"127.0.0.1:{port}"], user=NOBODY, group=NOGROUP, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status, text = get(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr and server.stderr.read()
                time.sleep(0.05)
        assert status == 200
        assert samples(text) == [f'{STEPS}{{hpc_job="7",rank="0"}} 3']
        assert refused(text) == {("7", "other_job"): 1}
        assert get(f"http://127.0.0.1:{port}/")[0] == 404
        assert get(f"http://127.0.0.1:{port}/metrics", "POST")[0] == 501
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize(
    ("arguments", "config", "problem"),
    [
        (["--listen", "9500"], "", "job-metrics: --listen: '9500' is not HOST:PORT; fix: write e.g. --listen :9500"),
        (["--listen", "127.0.0.1:70000"], "", "is not HOST:PORT"),
        (["--listen", "192.0.2.1:9500"], "", "job-metrics: --listen 192.0.2.1:9500: Cannot assign requested address"),
        ([], "job_metrics_dir =\n", "job_metrics_dir: empty; fix: set it to the prolog's jobs' directory"),
        ([], "job_metrics_dir = jobs\n", "job_metrics_dir: 'jobs' is relative; fix: give a full path"),
        ([], "colour = blue\n", "colour: unknown key; fix: use one of"),
    ],
)
def test_bad_flags_and_configuration_are_one_line_and_exit_2(node, arguments, config, problem):
    reader = install_reader(node)
    if config:
        node.config.write_text(node.config.read_text() + config)
    done = subprocess.run([str(reader), *arguments], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert problem in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_job_that_ends_while_its_directory_is_read_costs_the_scrape_nothing(jobs, monkeypatch):
    """The epilog removes a job's directory at any time: between the listing and the open of the directory or of
    a file, the other jobs are still served and nothing is refused (a 500 would blind every job of the node)."""
    write(jobs, "7", "a.prom", f'{STEPS}{{hpc_job="7",rank="0"}} 1\n')
    write(jobs, "8", "a.prom", f'{STEPS}{{hpc_job="8",rank="0"}} 1\n')
    write(jobs, "9", "a.prom", f'{STEPS}{{hpc_job="9",rank="0"}} 1\n')
    read_job, read_file = hpcobs_job_metrics.read_job, hpcobs_job_metrics.read_file

    def job_ends_before_its_directory_opens(base: int, job_id: str):
        if job_id == "8":
            shutil.rmtree(jobs / "8")
        return read_job(base, job_id)

    def job_ends_before_its_file_opens(directory: int, name: str):
        if (jobs / "9" / name).exists() and os.path.samestat(os.fstat(directory), os.stat(jobs / "9")):
            (jobs / "9" / name).unlink()
        return read_file(directory, name)

    monkeypatch.setattr(hpcobs_job_metrics, "read_job", job_ends_before_its_directory_opens)
    monkeypatch.setattr(hpcobs_job_metrics, "read_file", job_ends_before_its_file_opens)
    text = served(jobs)
    assert samples(text) == [f'{STEPS}{{hpc_job="7",rank="0"}} 1']
    assert refused(text) == {} and refused(text, "files") == {}
