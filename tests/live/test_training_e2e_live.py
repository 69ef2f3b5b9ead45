"""Issue 31 end to end, on loopback: training jobs instrumented with hpcobs_training, watched as a site watches them.

Two jobs run side by side, each of eight ranks (real `python` processes running training_rank.py, with the
variables srun sets: ranks 0-3 on "n1", 4-7 on "n2"): job 4242 free-running (no collective: each rank steps at its
own pace), rank 5 loading its data 6x as long every third step; and job 4243 in lockstep, a synchronous
data-parallel job whose ranks all wait for each other at the end of backward, on a barrier server here (the
rendezvous address in MASTER_ADDR and MASTER_PORT), rank 2 loading its data 6x as long every third step, so every
rank's step is as slow as its. The ranks write their textfiles into their node's own directory of their job
(<tmp>/<node>/jobs/<job>/, what slurm/prolog makes under /run/hpcobs-jobs) and send their traces over OTLP/HTTP to
a receiver here, set up by the standard OTEL_* variables alone. Each node's jobs' metrics reader, slurm/job-metrics
installed and run (as nobody) the way docs/slurm.md runs it, serves its job directories, and a real Prometheus
scrapes both as job="training" every 5 s with the generated recording and alerting rules of a site config with
short training thresholds (its own rule tests passing). Then, for each job:
- TrainingStraggler fires, once, for its slow rank and node, naming the data phase;
- the training dashboard's per-rank and phase panel queries put the slow rank and its data phase first (in
  lockstep but the step-time columns, where every rank reads the same);
- each rank's step time as Prometheus reads it: free-running the slow rank's is its own, past the straggler ratio;
  in lockstep every rank's is the job's pace, within 5%, and only the phases tell the straggler;
- the spans carry what the TraceQL queries filter on; the steps kept as slow are exactly the slowed ones (the slow
  rank's, in lockstep every rank's same steps), the slow rank's data span the long one and in lockstep every other
  rank's backward span, where it waited: on which node and in which function the time is lost. The other steps are
  kept at the sample share.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import hpcobs_training
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from dashboards.training import RANK_ATTRIBUTE, SLOW_ATTRIBUTE
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel, panel_queries
from hpcobs.authoring.traceql import NAME
from hpcobs.build import outdir, pipeline, validate
from hpcobs.build.cache import Cache
from hpcobs.exporters.sources import Sources
from hpcobs.lang.escape import promql_string
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.servers import Prometheus, free_port
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
from hpcobs.settings.names import DashboardUid
from hpcobs.targets.prometheus import RULES_DIR
from tests.conftest import MEASUREMENT
from tests.live.test_dashboards_live import _substituted
from tests.live.test_slurm_live import NOBODY, Daemons, install_scripts
from tests.live.training_rank import COLLECTIVE_PHASE, GO_ON, PHASE_SECONDS, SLOW_DATA_FACTOR, SLOW_EVERY, STOP
from tests.test_traceql import VARIABLE, conditions, traceql_queries  # noqa: F401 (a fixture)

pytestmark = pytest.mark.live

RANKS = {str(rank): "n1" if rank < 4 else "n2" for rank in range(8)}
# Scrape and rule evaluation every 5 s, TrainingStraggler after 15 s of straggling: it fires within a minute.
SITE = """\
scrape_interval: 5s
thresholds:
  training_straggler_for: 15s
"""
TRAINING_RULE_TESTS = "prometheus/tests/training/"
# Steps every rank makes before the step times and the traces are read: 30 of the slow rank's slow steps, 50 s at
# its 0.55 s a step (in lockstep every rank's).
MIN_STEPS = 90
# The rank step time the dashboard shows, over 40 s: some 70 steps, so whether the window holds one slow step more
# or less moves it by 2% at most.
PACE_WINDOW = "40s"
# How far apart the ranks of a job in lockstep may read: the window's edges and a rank's few late wake-ups.
PACE_SPREAD = 0.05
# The sample share is 1%: a binomial draw over a thousand steps or more stays far under 3%.
SHARE_BOUND = 0.03
WAIT = 90.0
POLL = 0.5
STOP_WAIT = 15.0
STAY_EVALUATIONS = 2
READER_PORT = 9500  # slurm/job-metrics's, docs/slurm.md
STEPS = "hpcobs_training_steps"  # the counter family, as the text parser names it (no _total)
RANK_SCRIPT = Path(__file__).with_name("training_rank.py")
# The training dashboard's tables' columns of a rank's step time: now, and its worst while it was the straggler.
STEP_TIME_COLUMNS = ("Step time (s)", "Worst step time")
TIMES_MEDIAN_COLUMNS = ("x median rank",)
MEDIAN_RANK_PHASES = "job:training_phase_seconds:median"  # the record, read alone by the median rank's query


@dataclass(frozen=True)
class Plan:
    """A training job of the test: its id, its slow rank, and whether its ranks run in lockstep."""

    id: str
    slow_rank: str
    lockstep: bool

    @property
    def slow_node(self) -> str:
        return RANKS[self.slow_rank]

    @property
    def slowed_ranks(self) -> set[str]:
        """The ranks whose steps the slow rank's slow data phase slows: itself, or in lockstep every rank."""
        return set(RANKS) if self.lockstep else {self.slow_rank}

    @property
    def median_rank_phase(self) -> str:
        """The median rank's largest phase: free-running a balanced rank's own largest, in lockstep backward, where
        it waits for the slow rank."""
        return COLLECTIVE_PHASE if self.lockstep else max(PHASE_SECONDS, key=PHASE_SECONDS.__getitem__)

    def lost_in(self, rank: str) -> tuple[str, float]:
        """Where a slowed step of a rank of slowed_ranks loses its time, and at least how much: the slow rank in its
        data phase, SLOW_DATA_FACTOR x its own; the others, in lockstep, in backward, waiting out the slow rank's
        extra."""
        if rank == self.slow_rank:
            return "data", PHASE_SECONDS["data"] * SLOW_DATA_FACTOR
        return COLLECTIVE_PHASE, PHASE_SECONDS["data"] * (SLOW_DATA_FACTOR - 1)


# Side by side on the same nodes, readers and Prometheus: a free-running job (no collective: each rank steps at its
# own pace) and a synchronous one.
JOBS = (Plan("4242", slow_rank="5", lockstep=False), Plan("4243", slow_rank="2", lockstep=True))


@dataclass
class Span:
    resource: dict[str, str]
    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    attributes: dict[str, object]
    seconds: float


class TraceReceiver:
    """An OTLP/HTTP trace receiver on loopback (POST /v1/traces, protobuf, optionally gzip as OTEL_*_COMPRESSION
    asks): every span it was sent, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, request: ExportTraceServiceRequest) -> None:
        spans = [
            Span(
                {a.key: _value(a.value) for a in resource_spans.resource.attributes},
                span.name,
                span.trace_id,
                span.span_id,
                span.parent_span_id,
                {a.key: _value(a.value) for a in span.attributes},
                (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9,
            )
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        with self.lock:
            self.spans += spans

    def __enter__(self) -> TraceReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value) -> object:
    """An OTLP AnyValue as Python: string, bool, int or float."""
    return getattr(value, value.WhichOneof("value"))


class Barrier:
    """A job's collective, for its ranks in lockstep (training_rank.Barrier): a server on loopback that takes a
    connection from each rank, then, each round, a byte from every rank, its vote to stop or go on, and answers each
    whether any voted to stop (an all-reduce of one flag). A rank that leaves ends it: its peers' next round fails,
    as a collective fails when a rank dies."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):  # closed under it: the fixture ends
            while len(self.connections) < self.size:
                connection, _ = self.listener.accept()
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.connections.append(connection)
            while all(votes := [connection.recv(1) for connection in self.connections]):
                answer = STOP if STOP in votes else GO_ON
                for connection in self.connections:
                    connection.sendall(answer)
        self._close()

    def _close(self) -> None:
        for connection in [self.listener, *self.connections]:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def __enter__(self) -> Barrier:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._close()
        self.thread.join()


@dataclass
class Run:
    """A running job of the test: its ranks, their job directories (one a node) and its stop file."""

    plan: Plan
    job_dirs: dict[str, Path]
    ranks: dict[str, subprocess.Popen]
    stop_file: Path

    def steps(self) -> dict[str, int]:
        """Each rank's steps, as its textfile says."""
        counted = {}
        for rank, node in RANKS.items():
            path = self.job_dirs[node] / f"hpcobs_training_{self.plan.id}_rank{rank}.prom"
            text = path.read_text() if path.exists() else ""
            values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if f.name == STEPS]
            counted[rank] = int(values[0]) if values else 0
        return counted

    def wait_for_steps(self, steps: int) -> None:
        """Wait until every rank has made `steps` steps."""
        deadline = time.monotonic() + WAIT
        while min(self.steps().values()) < steps and time.monotonic() < deadline:
            time.sleep(POLL)
        assert min(self.steps().values()) >= steps, self.steps()

    def stop(self) -> dict[str, int]:
        """Let every rank leave its loop and exit (its last textfile written, its spans flushed); their steps."""
        self.stop_file.touch()
        for rank, process in self.ranks.items():
            try:
                process.wait(timeout=STOP_WAIT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"job {self.plan.id} rank {rank} did not exit {STOP_WAIT:.0f}s after the stop file")
            assert process.returncode == 0, f"job {self.plan.id} rank {rank} exited with {process.returncode}"
        return self.steps()


@dataclass
class Site:
    """The running jobs and what watches them."""

    config: Config
    prometheus: Prometheus
    traces: TraceReceiver
    runs: dict[str, Run]
    started: float
    timings: list[str] = field(default_factory=list)


def _site(folder: Path, cache_dir: Path) -> tuple[Config, list[Path]]:
    """The site's config and its generated Prometheus rule files, the training rule tests passing at its thresholds
    (promtool, as the build runs them)."""
    (folder / "site.yaml").write_text(SITE)
    config = config_module.load(folder / "site.yaml")
    files = {
        path: text
        for path, text in pipeline.generate(config).items()
        if path.startswith((f"{RULES_DIR}/", TRAINING_RULE_TESTS))
    }
    out = folder / "out"
    outdir.write_tree(out, files)
    errors = validate.trees_tool_errors({out: files}, Cache(cache_dir))[out]
    assert not errors, "\n".join(errors)
    return config, sorted((out / RULES_DIR).glob("*.rules.yaml"))


def _rank_environment(
    plan: Plan, rank: str, job_dir: Path, traces: TraceReceiver, barrier: Barrier | None
) -> dict[str, str]:
    """What srun gives a task, the job directory the prolog would make, OpenTelemetry's own variables and, in
    lockstep, the rendezvous address a job's launcher would give; nothing of the test's environment that would
    change either (its OTEL_*, Slurm or rendezvous variables)."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "SLURM", "HPCOBS_TRAINING"))
        and key not in ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    }
    helper = str(Path(hpcobs_training.__file__).resolve().parent.parent)
    rendezvous = {}
    if barrier is not None:
        host, port = barrier.address
        rendezvous = {"MASTER_ADDR": host, "MASTER_PORT": str(port)}
    return {
        **inherited,
        **rendezvous,
        "PYTHONPATH": os.pathsep.join(filter(None, [helper, inherited.get("PYTHONPATH")])),
        "SLURM_JOB_ID": plan.id,
        "SLURM_PROCID": rank,
        "SLURM_LOCALID": str(int(rank) % 4),
        "SLURMD_NODENAME": RANKS[rank],
        hpcobs_training.DIR_VARIABLE: str(job_dir),
        "OTEL_EXPORTER_OTLP_ENDPOINT": traces.endpoint,
        # The batch span processor's export delay, 5 s by default: spans arrive while the test polls.
        "OTEL_BSP_SCHEDULE_DELAY": "500",
    }


def _reader(root: Path, node: str, daemons: Daemons) -> tuple[Path, str]:
    """A node's jobs' metrics reader as docs/slurm.md installs and runs it: slurm/job-metrics in a directory of root's
    with the configuration beside it, as nobody, with the directory the prolog would make for each job. Its jobs'
    directory and its address."""
    jobs, address = root / node / "jobs", f"127.0.0.1:{free_port()}"
    scripts = root / node / "hpcobs"
    scripts.parent.mkdir(mode=0o755)
    install_scripts(scripts, {"job_metrics_dir": jobs})
    for plan in JOBS:
        (jobs / plan.id).mkdir(mode=0o755, parents=True)
    daemons.start(f"job-metrics-{node}", [str(scripts / "job-metrics"), "--listen", address], user=NOBODY)
    return jobs, address


@pytest.fixture(scope="module")
def site(tmp_path_factory, private_cache_dir) -> Iterator[Site]:
    began = time.monotonic()
    config, rule_files = _site(tmp_path_factory.mktemp("training-e2e"), private_cache_dir)
    built = time.monotonic() - began
    # Not under pytest's temporary directory: the readers run as nobody, and need every parent to be searchable.
    with tempfile.TemporaryDirectory(prefix="hpcobs-training-e2e-") as directory, contextlib.ExitStack() as stack:
        root = Path(directory)
        root.chmod(0o755)
        (root / "logs").mkdir()
        daemons = Daemons(root / "logs")
        stack.callback(daemons.stop)
        traces = stack.enter_context(TraceReceiver())
        nodes = {node: _reader(root, node, daemons) for node in sorted(set(RANKS.values()))}
        # As a site scrapes the jobs' metrics readers: their scrape job, the cluster label, an instance per node.
        cluster_labels = Context(config).cluster_labels
        prometheus = Prometheus(
            rule_files,
            scrape_configs=[
                {
                    "job_name": Sources(config)["training"].scrape_labels()["job"],
                    "static_configs": [
                        {"targets": [address], "labels": {**cluster_labels, "instance": f"{node}:{READER_PORT}"}}
                        for node, (_, address) in nodes.items()
                    ],
                }
            ],
            scrape_interval=config.get("scrape_interval"),
            evaluation_interval=Context(config).evaluation_interval,
        )
        stack.callback(prometheus.stop)
        prometheus.start()
        go = root / "go"
        runs, ready = {}, []
        for plan in JOBS:
            barrier = stack.enter_context(Barrier(len(RANKS))) if plan.lockstep else None
            stop_file = root / f"stop-{plan.id}"
            stack.callback(stop_file.touch)
            processes = {}
            for rank, node in RANKS.items():
                ready_file = root / f"ready-{plan.id}-{rank}"
                ready.append((plan, rank, ready_file))
                command = [sys.executable, str(RANK_SCRIPT), str(ready_file), str(go), str(stop_file), plan.slow_rank]
                processes[rank] = daemons.start(
                    f"{plan.id}-rank{rank}",
                    command + ["--lockstep"] * plan.lockstep,
                    env=_rank_environment(plan, rank, nodes[node][0] / plan.id, traces, barrier),
                )
            job_dirs = {node: jobs / plan.id for node, (jobs, _) in nodes.items()}
            runs[plan.id] = Run(plan, job_dirs, processes, stop_file)
        deadline = time.monotonic() + WAIT
        while not all(path.exists() for _, _, path in ready):
            failed = {
                (plan.id, rank): runs[plan.id].ranks[rank].returncode
                for plan, rank, _ in ready
                if runs[plan.id].ranks[rank].poll() is not None
            }
            if failed or time.monotonic() > deadline:
                tails = "\n".join(
                    f"job {job} rank {rank}:\n{daemons.tail(f'{job}-rank{rank}')}" for job, rank in failed
                )
                pytest.fail(f"ranks not ready (exited: {failed}):\n{tails}", pytrace=False)
            time.sleep(POLL / 10)
        ready_at = time.monotonic()
        go.touch()
        yield Site(
            config,
            prometheus,
            traces,
            runs,
            ready_at,
            [f"training e2e: rules built and tested in {built:.1f}s, ranks ready {ready_at - began:.1f}s after start"],
        )


@pytest.fixture(params=JOBS, ids=[plan.id for plan in JOBS])
def job(request, site) -> Run:
    return site.runs[request.param.id]


@dataclass
class Watched:
    """A job's TrainingStraggler alerts as Prometheus listed them, polled from the first step on: every label set
    ever pending or firing, the last listing, and when one first fired (seconds after the first step)."""

    pending: set[tuple] = field(default_factory=set)
    firing: set[tuple] = field(default_factory=set)
    last: list[dict] = field(default_factory=list)
    fired_after: float | None = None


@pytest.fixture(scope="module")
def straggler_alerts(site) -> dict[str, Watched]:
    """Each job's TrainingStraggler, watched until it has fired and stayed a few evaluations on: both jobs at once,
    so that the second's watch costs no time of its own."""
    stay = STAY_EVALUATIONS * duration_seconds(Context(site.config).evaluation_interval)
    watched = {plan.id: Watched() for plan in JOBS}
    deadline = time.monotonic() + WAIT + stay

    def settled(job: Watched) -> bool:
        return job.fired_after is not None and time.monotonic() - site.started >= job.fired_after + stay

    while not all(map(settled, watched.values())) and time.monotonic() < deadline:
        alerts = [a for a in site.prometheus.alerts() if a["labels"]["alertname"] == "TrainingStraggler"]
        for job_id, job in watched.items():
            job.last = [a for a in alerts if a["labels"].get("hpc_job") == job_id]
            job.pending |= {_labels(a) for a in job.last if a["state"] == "pending"}
            job.firing |= {_labels(a) for a in job.last if a["state"] == "firing"}
            if job.firing and job.fired_after is None:
                job.fired_after = time.monotonic() - site.started
        time.sleep(POLL)
    return watched


def test_training_straggler_fires_once_for_the_slow_rank_naming_its_data_phase(
    site, job, straggler_alerts, record_property
):
    plan, watched = job.plan, straggler_alerts[job.plan.id]
    assert watched.firing, f"TrainingStraggler not firing {WAIT:.0f}s after the first step; pending: {watched.pending}"
    # Still the one alert firing, and no other, a few evaluations on.
    assert len(watched.firing) == 1, watched.firing
    (alert,) = [a for a in watched.last if a["state"] == "firing"]
    labels = alert["labels"]
    assert (labels["rank"], labels["node"]) == (plan.slow_rank, plan.slow_node), labels
    assert labels.get("phase") == "data", labels
    assert "in its data phase" in alert["annotations"]["description"], alert["annotations"]
    # No other rank was ever the straggler. At the job's start the phase records may come an evaluation after the
    # step-time ones (their group reads the slowest rank's record): the alert is then pending for that evaluation
    # without its phase (the rule's branch for jobs that time none), and starts over with it.
    without_phase = tuple((k, v) for k, v in _labels(alert) if k != "phase")
    assert watched.pending - watched.firing <= {without_phase}, watched.pending
    site.timings.append(
        f"job {plan.id}: TrainingStraggler firing {watched.fired_after:.1f}s after the first step"
        + (", pending without its phase for an evaluation first" if without_phase in watched.pending else "")
    )
    record_property(MEASUREMENT, "; ".join(site.timings))


def _labels(alert: dict) -> tuple:
    return tuple(sorted(alert["labels"].items()))


def _training_dashboard(config) -> dict:
    (text,) = (
        text
        for path, text in pipeline.generate(config).items()
        if path.startswith("grafana/dashboards/") and json.loads(text)["uid"] == DashboardUid.TRAINING
    )
    return json.loads(text)


def _columns(dashboard: dict, columns: tuple[str, ...]) -> set[tuple[str, str]]:
    """(panel title, query) of the tables' columns named one of `columns`: a table names its columns by query
    (refId)."""
    out = set()
    for panel in every_panel(dashboard):
        renamed = {
            name: title
            for step in panel.get("transformations", [])
            for name, title in step.get("options", {}).get("renameByName", {}).items()
        }
        out |= {
            (panel["title"], target["expr"])
            for target in panel.get("targets", [])
            if renamed.get(f"Value #{target['refId']}") in columns
        }
    return out


def test_the_dashboard_per_rank_and_phase_panels_put_the_straggler_first(site, job):
    plan = job.plan
    ctx = Context(site.config)
    values = {ctx.cluster: ctx.config.get("cluster", "name"), "hpc_job": plan.id}
    dashboard = _training_dashboard(site.config)
    queries = [
        (title, _substituted(expr, values)) for _, title, expr, kind in panel_queries(dashboard) if kind == "prometheus"
    ]
    times_median, step_time = (
        {(title, _substituted(expr, values)) for title, expr in _columns(dashboard, columns)}
        for columns in (TIMES_MEDIAN_COLUMNS, STEP_TIME_COLUMNS)
    )
    assert times_median and step_time
    highlight = 1 / ctx.thresholds.training_straggler_ratio

    # (panel title, query) -> its samples
    def read() -> dict[tuple[str, str], list]:
        return {(title, expr): site.prometheus.query(expr, time.time()) for title, expr in queries}

    def per_rank(results: dict[tuple[str, str], list]) -> dict[tuple[str, str], list]:
        return {q: r for q, r in results.items() if r and all("rank" in s.labels for s in r)}

    def per_phase(results: dict[tuple[str, str], list]) -> dict[tuple[str, str], list]:
        return {q: r for q, r in results.items() if r and all("phase" in s.labels for s in r)}

    def complete(results: dict[tuple[str, str], list]) -> bool:
        """Every rank has a step time, every phase query an answer (its records evaluated at least once)."""
        everyone = max(map(len, per_rank(results).values()), default=0) >= len(RANKS)
        return everyone and all(samples for (_, expr), samples in results.items() if "phase" in expr)

    deadline = time.monotonic() + WAIT
    results = read()
    while not complete(results) and time.monotonic() < deadline:
        time.sleep(POLL)
        results = read()
    assert complete(results), {query: samples for query, samples in results.items() if not samples}
    ranks, phases = per_rank(results), per_phase(results)
    assert ranks, "no per-rank panel query returned data"
    assert phases, "no phase panel query returned data"
    for query, samples in ranks.items():
        if plan.lockstep and query in step_time:
            # Every rank steps at the job's pace (test_each_rank_s_step_time_as_prometheus_reads_it): by step time
            # any rank is the slowest, and a rank named the straggler for an evaluation at the job's start, before
            # the phase records (see the alert's test), has as bad a worst step time as the straggler.
            continue
        top = max(samples, key=lambda s: s.value)
        assert (top.labels["rank"], top.labels["node"]) == (plan.slow_rank, plan.slow_node), (query, samples)
        if query in times_median:
            # An "x median rank" column: the straggler (its data phase) red, every other rank (phase) green.
            assert top.value > highlight, (query, samples)
            assert all(s.value < highlight for s in samples if s is not top), (query, samples)
    for query, samples in phases.items():
        top = max(samples, key=lambda s: s.value)
        _, expr = query
        if expr.startswith(f"{MEDIAN_RANK_PHASES}{{"):
            assert top.labels["phase"] == plan.median_rank_phase, (query, samples)
        else:
            assert top.labels["phase"] == "data", (query, samples)
        if "rank" in top.labels:
            assert top.labels["rank"] == plan.slow_rank, (query, samples)


def test_each_rank_s_step_time_as_prometheus_reads_it(site, job, record_property):
    """Free-running, the slow rank's step time is its own and gives it away; in lockstep every rank's is the job's
    pace, and only the phases find the straggler."""
    plan = job.plan
    ctx = Context(site.config)
    job.wait_for_steps(MIN_STEPS)

    def rate(signal: str) -> str:
        return ctx.select(
            "training",
            [signal],
            ("rank", "node"),
            over=lambda selected: f"rate({selected}[{PACE_WINDOW}])",
            op="sum",
            where={"hpc_job": f"={promql_string(plan.id)}"},
        )

    samples = site.prometheus.query(f"{rate('step_seconds')} / {rate('steps')}", time.time())
    step = {s.labels["rank"]: s.value for s in samples}
    assert step.keys() == RANKS.keys(), samples
    slowest = max(step, key=step.get)
    by_step = statistics.median(step.values()) / step[slowest]
    if plan.lockstep:
        assert max(step.values()) < (1 + PACE_SPREAD) * min(step.values()), step
    else:
        assert slowest == plan.slow_rank, step
        assert by_step < ctx.thresholds.training_straggler_ratio, step
    record_property(
        MEASUREMENT,
        f"job {plan.id}: rank step times {min(step.values()):.3f}-{max(step.values()):.3f}s, "
        f"median / slowest {by_step:.2f}",
    )


def _attributes(query: str) -> set[str]:
    return {attribute for attribute, _, _ in conditions(query)}


def _selected(query: str, spans: list[Span], plan: Plan) -> list[Span]:
    """The spans a dashboard's TraceQL span selector picks, its job variable at the job and its rank variable at its
    slow rank: conditions on a resource or span attribute, or on the span's name, joined by `&&`."""
    text = unquote(VARIABLE.sub(lambda m: plan.id if (m[1] or m[2]) == "hpc_job" else plan.slow_rank, query))
    wanted = conditions(text)
    assert wanted and all(operator == "=" for _, operator, _ in wanted), query

    def value(span: Span, attribute: str) -> object:
        scope, _, name = attribute.partition(".")
        return span.name if attribute == NAME else (span.resource if scope == "resource" else span.attributes).get(name)

    return [s for s in spans if all(value(s, attribute) == json.loads(v) for attribute, _, v in wanted)]


def test_the_sampler_keeps_the_slowed_steps_and_the_tempo_links_select_them(
    site,
    job,
    traceql_queries,  # noqa: F811 (the fixture imported above)
    record_property,
):
    plan = job.plan
    job.wait_for_steps(MIN_STEPS)
    steps = job.stop()
    spans = [span for span in list(site.traces.spans) if span.resource.get("hpc_job") == plan.id]
    assert spans, "no span received"
    for span in spans:
        assert set(hpcobs_training.RESOURCE_ATTRIBUTES) <= span.resource.keys(), span.resource
        rank = span.resource["rank"]
        expected = {
            "service.name": "training",
            "hpc_job": plan.id,
            "rank": rank,
            "node": RANKS[rank],
            "local_rank": str(int(rank) % 4),
        }
        assert {k: span.resource[k] for k in hpcobs_training.RESOURCE_ATTRIBUTES} == expected, span.resource
    step_spans = [s for s in spans if s.name == hpcobs_training.STEP_SPAN]
    children: dict[bytes, list[Span]] = {}
    for span in spans:
        if span.name != hpcobs_training.STEP_SPAN:
            children.setdefault(span.parent_span_id, []).append(span)
    for span in step_spans:
        assert set(hpcobs_training.SPAN_ATTRIBUTES) <= span.attributes.keys(), span.attributes
        phases = children.get(span.span_id, [])
        assert sorted(p.name for p in phases) == sorted(PHASE_SECONDS), span
        assert all(p.trace_id == span.trace_id for p in phases)

    def phases_of(span: Span) -> dict[str, float]:
        return {p.name: p.seconds for p in children[span.span_id]}

    slow = [s for s in step_spans if s.attributes["hpcobs.slow"] is True]
    # Every step the slow rank's slow data phase slowed, and nothing else, kept as slow: free-running the slow rank's
    # own, in lockstep every rank's.
    kept = {(s.resource["rank"], s.attributes["hpcobs.step"]): s for s in slow}
    slowed = {(rank, n) for rank in plan.slowed_ranks for n in range(SLOW_EVERY, steps[rank] + 1, SLOW_EVERY)}
    assert kept.keys() == slowed, (
        sorted(slowed - kept.keys()),
        [(rank, n, phases_of(kept[rank, n])) for rank, n in sorted(kept.keys() - slowed)],
    )
    # Where each lost its time: the slow rank in data, the others in backward, waiting for it.
    for (rank, n), span in kept.items():
        phases = phases_of(span)
        phase, at_least = plan.lost_in(rank)
        others = sum(seconds for name, seconds in phases.items() if name != phase)
        assert phases[phase] > others and phases[phase] >= at_least, (rank, n, phases)
    # The other steps kept at the sample share: some, and far fewer than 3% of them.
    rest = [s for s in step_spans if s.attributes["hpcobs.slow"] is False]
    fast_steps = sum(steps.values()) - len(slow)
    assert 0 < len(rest) <= SHARE_BOUND * fast_steps, (len(rest), fast_steps)
    # The training dashboard's Tempo links, at the job and its slow rank: each selects spans, and each that asks for
    # slow steps selects exactly the kept slow steps of the ranks it asks for (the slow rank, or every rank).
    links = [query for dashboard, _, query in traceql_queries if dashboard["uid"] == DashboardUid.TRAINING]
    assert links
    for query in links:
        selected = _selected(query, spans, plan)
        assert selected, query
        if SLOW_ATTRIBUTE in _attributes(query):
            of_rank = RANK_ATTRIBUTE in _attributes(query)
            wanted = {s.span_id for s in slow if s.resource["rank"] == plan.slow_rank or not of_rank}
            assert {span.span_id for span in selected} == wanted, query
    record_property(
        MEASUREMENT,
        f"job {plan.id}: {sum(steps.values())} steps, {len(slow)} kept as slow "
        f"(ranks {','.join(sorted(plan.slowed_ranks))}), {len(rest)} sampled of {fast_steps} others, "
        f"{len(spans)} spans received",
    )
