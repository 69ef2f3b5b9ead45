"""The training instrumentation helper (instrumentation/, package hpcobs_training): what it detects, what it
writes and how (issue 31). The contract's names, types and labels are read from the catalogue, never copied."""

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import hpcobs_training
import pytest
import yaml
from hpcobs_training import Tracker
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT

CATALOGUE = ROOT / "hpcobs" / "exporters" / "catalogue" / "training.yaml"


def families(text):
    """{exposed name: (type, sorted label names of every sample)}; counters are exposed with _total."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {tuple(sorted(sample.labels)) for sample in family.samples}
        found[name] = (family.type, labels)
    return found


def run_steps(tracker, count, tokens=10, flops=100):
    for _ in range(count):
        with tracker.step(tokens=tokens, flops=flops):
            with tracker.phase("data"):
                pass
            tracker.loss(0.5)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURMD_NODENAME": "gpu017"},
            ("4242", "5", "1", "gpu017"),
        ),
        (  # torchrun inside srun: torchrun's ranks win over Slurm's
            {"SLURM_JOB_ID": "77", "SLURM_PROCID": "0", "RANK": "12", "LOCAL_RANK": "4", "SLURMD_NODENAME": "n1"},
            ("77", "12", "4", "n1"),
        ),
        ({}, ("unknown", "0", "0", None)),
    ],
    ids=["slurm", "torchrun", "none"],
)
def test_environment_detection(tmp_path, environ, expected, monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "host3.cluster.example")
    tracker = Tracker(textfile_dir=tmp_path, environ=environ)
    job, rank, local_rank, node = expected
    assert (tracker.job, tracker.rank, tracker.local_rank, tracker.node) == (job, rank, local_rank, node or "host3")
    assert tracker.path == str(tmp_path / f"hpcobs_training_{job}_rank{rank}.prom")
    tracker.close()


def test_keywords_override_the_environment(tmp_path):
    environ = {
        "SLURM_JOB_ID": "1",
        "RANK": "2",
        "LOCAL_RANK": "3",
        "SLURMD_NODENAME": "a",
        "HPCOBS_TRAINING_TEXTFILE_DIR": "/x",
    }
    tracker = Tracker(job="9", rank=8, local_rank=7, node="b", textfile_dir=tmp_path, environ=environ)
    assert (tracker.job, tracker.rank, tracker.local_rank, tracker.node) == ("9", "8", "7", "b")
    assert tracker.path == str(tmp_path / "hpcobs_training_9_rank8.prom")
    tracker.close()
    from_variable = Tracker(environ={**environ, "HPCOBS_TRAINING_TEXTFILE_DIR": str(tmp_path)})
    assert from_variable.path == str(tmp_path / "hpcobs_training_1_rank2.prom")
    from_variable.close()


@pytest.mark.parametrize("job", ["../5", "5/6", ".5", "", "a b"])
def test_a_job_id_never_leaves_its_file_name(tmp_path, job):
    with pytest.raises(ValueError, match="job"):
        Tracker(job=job, textfile_dir=tmp_path)


def test_the_default_directory_is_the_jobs_own_made_by_the_prolog(tmp_path, monkeypatch):
    monkeypatch.setattr(hpcobs_training, "JOBS_DIR", str(tmp_path))
    (tmp_path / "77").mkdir()
    tracker = Tracker(environ={"SLURM_JOB_ID": "77", "SLURM_PROCID": "3"})
    assert tracker.path == str(tmp_path / "77" / "hpcobs_training_77_rank3.prom")
    tracker.close()


def test_no_directory_and_the_root_directory_are_refused():
    with pytest.raises(ValueError, match="textfile"):
        Tracker(environ={})
    with pytest.raises(ValueError, match="root-owned"):
        Tracker(textfile_dir="/var/lib/prometheus/node-exporter", environ={})


def test_series_are_the_contract(tmp_path):
    contract = yaml.safe_load(CATALOGUE.read_text(encoding="utf-8"))["metrics"]
    expected = {m["name"]: (m["type"], {tuple(sorted(m["labels"]))}) for m in contract}
    tracker = Tracker(job="100", rank=0, node="n", textfile_dir=tmp_path, interval=0)
    run_steps(tracker, 3)
    tracker.close()
    text = (tmp_path / "hpcobs_training_100_rank0.prom").read_text()
    assert families(text) == expected
    values = {(s.name, s.labels.get("phase")): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values[("hpcobs_training_steps_total", None)] == 3
    assert values[("hpcobs_training_tokens_total", None)] == 30
    assert values[("hpcobs_training_model_flops_total", None)] == 300
    assert values[("hpcobs_training_loss", None)] == 0.5
    assert values[("hpcobs_training_phase_seconds_total", "data")] >= 0
    assert "_created" not in text


def test_label_values_are_escaped(tmp_path):
    node = 'evil"} 1\nhpcobs_training_loss{hpc_job="other\\'
    tracker = Tracker(job="5", rank=0, node=node, textfile_dir=tmp_path, interval=0)
    run_steps(tracker, 1)
    tracker.close()
    text = (tmp_path / "hpcobs_training_5_rank0.prom").read_text()
    parsed = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels["node"] for s in parsed} == {node}
    assert {s.labels["hpc_job"] for s in parsed} == {"5"}


@pytest.mark.parametrize("name", ["Forward", "1data", "data-load", "", "a" * 33, "phase name"])
def test_bad_phase_names_are_refused(tmp_path, name):
    tracker = Tracker(job="1", textfile_dir=tmp_path)
    with pytest.raises(ValueError, match="phase"), tracker.phase(name):
        pass
    tracker.close()


def test_custom_phase_names(tmp_path):
    tracker = Tracker(job="1", textfile_dir=tmp_path)
    with tracker.phase("all_reduce_2"), tracker.phase("a" * 32):
        pass
    assert set(tracker.phases) == {"all_reduce_2", "a" * 32}
    tracker.close()


def test_writes_are_throttled_by_time(tmp_path):
    tracker = Tracker(job="3", rank=1, textfile_dir=tmp_path, interval=0.3)
    path = tmp_path / "hpcobs_training_3_rank1.prom"
    run_steps(tracker, 1)  # the first step's end writes
    first = path.stat().st_mtime_ns
    assert "hpcobs_training_steps_total" in path.read_text()
    run_steps(tracker, 20)  # within the interval: no rewrite
    assert path.stat().st_mtime_ns == first
    time.sleep(0.35)
    run_steps(tracker, 1)
    text = path.read_text()
    assert 'hpcobs_training_steps_total{hpc_job="3",node="' in text and "} 22.0" in text
    run_steps(tracker, 1)  # again within the interval: the file still says 22 until close
    assert "} 22.0" in path.read_text()
    tracker.close()
    assert "} 23.0" in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def writer(directory, rank, count):
    tracker = Tracker(job="8", rank=rank, node="n", textfile_dir=directory, interval=0)
    for step in range(count):
        with tracker.step(tokens=1, flops=1), tracker.phase(f"phase_{step % 50}"):
            tracker.loss(step)
    tracker.close()


def test_concurrent_writers_never_show_a_partial_file(tmp_path):
    """Two ranks of one node rewrite their files as fast as they can; a collector reading the directory (every
    file ending in .prom, as node_exporter does) always parses complete files."""
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=writer, args=(str(tmp_path), rank, 3000)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    reads = 0
    while any(process.is_alive() for process in ranks) or reads == 0:
        for path in tmp_path.glob("*.prom"):
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            assert set(families(text)) >= {"hpcobs_training_steps_total", "hpcobs_training_phase_seconds_total"}, text
            assert text.endswith("\n")
            reads += 1
    for process in ranks:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hpcobs_training_8_rank0.prom",
        "hpcobs_training_8_rank1.prom",
    ]
    for rank in (0, 1):
        text = (tmp_path / f"hpcobs_training_8_rank{rank}.prom").read_text()
        steps = [s.value for f in text_string_to_metric_families(text) for s in f.samples if f.name.endswith("steps")]
        assert steps == [3000]
    assert reads > 10


CRASHING = """
import sys, time
from hpcobs_training import Tracker
tracker = Tracker(job="21", rank=0, node="n", textfile_dir=sys.argv[1], interval=0)
for _ in range(3):
    with tracker.step(tokens=1):
        pass
with tracker.step(tokens=1):
    print("inside", flush=True)
    time.sleep(60)
"""


def test_a_crash_mid_step_leaves_the_last_complete_file(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CRASHING), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline() == "inside\n"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir()] == ["hpcobs_training_21_rank0.prom"]
    text = (tmp_path / "hpcobs_training_21_rank0.prom").read_text()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["hpcobs_training_steps_total"] == 3
    assert samples["hpcobs_training_tokens_total"] == 3


def test_http_endpoint(tmp_path):
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Tracker(job="6", rank=2, local_rank=0, node="n", http_port=port, environ={}) as tracker:
        run_steps(tracker, 2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'hpcobs_training_steps_total{hpc_job="6",node="n",rank="2"} 2.0' in text
    assert list(tmp_path.iterdir()) == []
