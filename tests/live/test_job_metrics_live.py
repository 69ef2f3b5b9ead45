"""One job forging another's training series on a shared node: node_exporter serves the forgery, slurm/job-metrics
refuses it (docs/slurm.md#security, docs/exporters.md "node_exporter textfile collector").

Job 42 writes, in its own metrics directory, the series of job 43 with another value; job 43 writes its own. Debian's
prometheus-node-exporter 1.5.0, reading both directories through a glob as an unprivileged user, serves one of the
two, the forger's (the first file in path order), and answers 200. slurm/job-metrics, installed beside the prolog
as docs/slurm.md installs it and run as nobody, serves the victim's value, and a real Prometheus scraping it as the
training scrape job stores the victim's value and the forger's refusal.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcobs.exporters.sources import Sources
from hpcobs.proof.servers import Prometheus, free_port
from tests.live.test_slurm_live import NOBODY, NODE_EXPORTER, RULE_INTERVAL, Daemons, by, wait_until
from tests.test_job_metrics import STEPS, TRAINING_HEAD, install_reader, samples
from tests.test_slurm_scripts import Node

pytestmark = pytest.mark.live

FORGER, VICTIM = "42", "43"
# Labels in node_exporter's order (sorted), so that both exporters print the series alike.
SERIES = f'{STEPS}{{hpc_job="{VICTIM}",node="n1",rank="0"}}'
DUPLICATE_ERROR = "was collected before with the same name and label values"


@pytest.fixture
def shared_node() -> Iterator[Node]:
    """Two jobs' directories as the prolog makes them (owned by the job's user, here nobody for both), in a tree
    nobody can read, each holding what its job wrote."""
    if not shutil.which(NODE_EXPORTER):
        pytest.fail(f"{NODE_EXPORTER} not found: apt-get install -y prometheus-node-exporter", pytrace=False)
    if os.geteuid() != 0:
        pytest.skip("the exporters run as nobody on directories the prolog makes as root: root is needed")
    with tempfile.TemporaryDirectory(prefix="hpcobs-job-metrics-") as directory:
        Path(directory).chmod(0o755)
        node = Node(Path(directory))
        for job in (FORGER, VICTIM):
            node.prolog(job, job_uid="65534", job_gid="65534")
        (node.jobs / FORGER / "forged.prom").write_text(TRAINING_HEAD + f"{SERIES} 5\n")
        (node.jobs / VICTIM / f"hpcobs_training_{VICTIM}_rank0.prom").write_text(TRAINING_HEAD + f"{SERIES} 7\n")
        yield node


def scrape(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.status, response.read().decode()


def ready(port: int) -> tuple[int, str] | None:
    try:
        return scrape(port)
    except OSError:
        return None


def test_node_exporter_serves_the_forgery_and_job_metrics_the_victim_s_value(shared_node, config, tmp_path):
    node = shared_node
    daemons = Daemons(tmp_path)
    exporter_port, reader_port = free_port(), free_port()
    try:
        daemons.start(
            "node_exporter",
            [NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
             f"--collector.textfile.directory={node.jobs}/*", f"--web.listen-address=127.0.0.1:{exporter_port}"],
            user=NOBODY,
        )  # fmt: skip
        daemons.start("job_metrics", [str(install_reader(node)), "--listen", f"127.0.0.1:{reader_port}"], user=NOBODY)
        # node_exporter: one of the two series, the forger's, with HTTP 200 and an error in its log alone.
        status, text = wait_until(lambda: ready(exporter_port), "node_exporter answering")
        assert status == 200
        assert [line for line in samples(text) if line.startswith(STEPS)] == [f"{SERIES} 5"]
        assert DUPLICATE_ERROR in wait_until(
            lambda: DUPLICATE_ERROR in daemons.tail("node_exporter") and daemons.tail("node_exporter"),
            "node_exporter logging the duplicate",
        )
        # job-metrics: the victim's own value, and the forger's line refused.
        status, text = wait_until(lambda: ready(reader_port), "job-metrics answering")
        assert status == 200
        assert samples(text) == [f"{SERIES} 7"]
        training = Sources(config)["training"]
        prometheus = Prometheus(
            scrape_configs=[
                {
                    "job_name": training.scrape_labels()["job"],
                    "static_configs": [{"targets": [f"127.0.0.1:{reader_port}"]}],
                }
            ],
            scrape_interval=RULE_INTERVAL,
        )
        try:
            prometheus.start()
            stored = wait_until(lambda: by(prometheus, f'{STEPS}{{hpc_job="{VICTIM}"}}', "job"), "the victim's series")
            assert stored == {("training",): 7}
            refusals = by(prometheus, "hpcobs_job_metrics_refused_lines", "hpc_job", "reason")
            assert refusals == {(FORGER, "other_job"): 1}
            assert by(prometheus, f"count({STEPS})") == {(): 1}
            assert by(prometheus, "up", "job") == {("training",): 1}
        finally:
            prometheus.stop()
    finally:
        daemons.stop()
