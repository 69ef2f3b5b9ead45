"""Issue 31 end to end, on loopback: a training job instrumented with hpcobs_training, watched as a site watches it.

Eight ranks of job 4242 (real `python` processes running training_rank.py, with the variables srun sets: ranks 0-3
on "n1", 4-7 on "n2") write their textfiles into their node's own job directory (<tmp>/<node>/jobs/<job>/, what
slurm/prolog makes under /run/hpcobs-jobs) and send their traces over OTLP/HTTP to a receiver here, set up by the
standard OTEL_* variables alone. Rank 5 loads its data 6x as long every third step. Each node's jobs' metrics
reader, slurm/job-metrics installed and run (as nobody) the way docs/slurm.md runs it, serves its job directories,
and a real Prometheus scrapes both as job="training" every 5 s with the generated recording and alerting rules of a
site config with short training thresholds (its own rule tests passing). Then:
- TrainingStraggler fires, once, for rank 5 on n2, naming the data phase;
- the training dashboard's per-rank and phase panel queries put rank 5 and its data phase first;
- the spans carry what the TraceQL queries filter on, and every step kept as slow is one of rank 5's slow steps,
  its data span the long one, while the other steps are kept at the sample share.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import json
import os
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

from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel, panel_queries
from hpcobs.authoring.traceql import NAME
from hpcobs.build import outdir, pipeline, validate
from hpcobs.build.cache import Cache
from hpcobs.exporters.sources import Sources
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.servers import Prometheus, free_port
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
from hpcobs.settings.names import DashboardUid
from hpcobs.targets.prometheus import RULES_DIR
from tests.conftest import MEASUREMENT
from tests.live.test_dashboards_live import _substituted
from tests.live.test_slurm_live import NOBODY, Daemons, install_scripts
from tests.live.training_rank import PHASE_SECONDS, SLOW_DATA_FACTOR, SLOW_EVERY
from tests.test_traceql import VARIABLE, conditions, traceql_queries  # noqa: F401 (a fixture)

pytestmark = pytest.mark.live

JOB = "4242"
RANKS = {str(rank): "n1" if rank < 4 else "n2" for rank in range(8)}
SLOW_RANK = "5"
# Scrape and rule evaluation every 5 s, TrainingStraggler after 15 s of straggling: it fires within a minute.
SITE = """\
scrape_interval: 5s
thresholds:
  training_straggler_for: 15s
"""
TRAINING_RULE_TESTS = "prometheus/tests/training/"
# Steps every rank makes before the traces are read: 30 of rank 5's slow steps, 50 s at its 0.55 s a step.
MIN_STEPS = 90
# The sample share is 1%: a binomial draw over a thousand steps or more stays far under 3%.
SHARE_BOUND = 0.03
WAIT = 90.0
POLL = 0.5
STOP_WAIT = 15.0
STAY_EVALUATIONS = 2
READER_PORT = 9500  # slurm/job-metrics's, docs/slurm.md
STEPS = "hpcobs_training_steps"  # the counter family, as the text parser names it (no _total)
RANK_SCRIPT = Path(__file__).with_name("training_rank.py")


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


@dataclass
class Job:
    """The running job and what watches it."""

    config: Config
    prometheus: Prometheus
    traces: TraceReceiver
    job_dirs: dict[str, Path]
    ranks: dict[str, subprocess.Popen]
    stop_file: Path
    started: float
    timings: list[str] = field(default_factory=list)

    def steps(self) -> dict[str, int]:
        """Each rank's steps, as its textfile says."""
        counted = {}
        for rank, node in RANKS.items():
            path = self.job_dirs[node] / f"hpcobs_training_{JOB}_rank{rank}.prom"
            text = path.read_text() if path.exists() else ""
            values = [s.value for f in text_string_to_metric_families(text) for s in f.samples if f.name == STEPS]
            counted[rank] = int(values[0]) if values else 0
        return counted

    def stop(self) -> dict[str, int]:
        """Let every rank leave its loop and exit (its last textfile written, its spans flushed); their steps."""
        self.stop_file.touch()
        for rank, process in self.ranks.items():
            try:
                process.wait(timeout=STOP_WAIT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} did not exit {STOP_WAIT:.0f}s after the stop file", pytrace=False)
            assert process.returncode == 0, f"rank {rank} exited with {process.returncode}"
        return self.steps()


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


def _rank_environment(rank: str, node: str, job_dir: Path, traces: TraceReceiver) -> dict[str, str]:
    """What srun gives a task, the job directory the prolog would make, and OpenTelemetry's own variables; nothing of
    the test's environment that would change either (its OTEL_* or Slurm variables)."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "SLURM", "HPCOBS_TRAINING")) and key not in ("RANK", "LOCAL_RANK")
    }
    helper = str(Path(hpcobs_training.__file__).resolve().parent.parent)
    return {
        **inherited,
        "PYTHONPATH": os.pathsep.join(filter(None, [helper, inherited.get("PYTHONPATH")])),
        "SLURM_JOB_ID": JOB,
        "SLURM_PROCID": rank,
        "SLURM_LOCALID": str(int(rank) % 4),
        "SLURMD_NODENAME": node,
        hpcobs_training.DIR_VARIABLE: str(job_dir),
        "OTEL_EXPORTER_OTLP_ENDPOINT": traces.endpoint,
        # The batch span processor's export delay, 5 s by default: spans arrive while the test polls.
        "OTEL_BSP_SCHEDULE_DELAY": "500",
    }


def _reader(root: Path, node: str, daemons: Daemons) -> tuple[Path, str]:
    """A node's jobs' metrics reader as docs/slurm.md installs and runs it: slurm/job-metrics in a directory of root's
    with the configuration beside it, as nobody. Its jobs' directory, where the prolog would make the job's own,
    and its address."""
    jobs, address = root / node / "jobs", f"127.0.0.1:{free_port()}"
    scripts = root / node / "hpcobs"
    scripts.parent.mkdir(mode=0o755)
    install_scripts(scripts, {"job_metrics_dir": jobs})
    (jobs / JOB).mkdir(mode=0o755, parents=True)
    daemons.start(f"job-metrics-{node}", [str(scripts / "job-metrics"), "--listen", address], user=NOBODY)
    return jobs / JOB, address


@pytest.fixture(scope="module")
def job(tmp_path_factory, private_cache_dir) -> Iterator[Job]:
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
        go, stop_file = root / "go", root / "stop"
        stack.callback(stop_file.touch)
        ranks = {
            rank: daemons.start(
                f"rank{rank}",
                [sys.executable, str(RANK_SCRIPT), str(root / f"ready{rank}"), str(go), str(stop_file), SLOW_RANK],
                env=_rank_environment(rank, node, nodes[node][0], traces),
            )
            for rank, node in RANKS.items()
        }
        deadline = time.monotonic() + WAIT
        while not all((root / f"ready{rank}").exists() for rank in RANKS):
            failed = {rank: p.returncode for rank, p in ranks.items() if p.poll() is not None}
            if failed or time.monotonic() > deadline:
                tails = "\n".join(f"rank {rank}:\n{daemons.tail(f'rank{rank}')}" for rank in failed)
                pytest.fail(f"ranks not ready (exited: {failed}):\n{tails}", pytrace=False)
            time.sleep(POLL / 10)
        ready_at = time.monotonic()
        go.touch()
        yield Job(
            config,
            prometheus,
            traces,
            {node: job_dir for node, (job_dir, _) in nodes.items()},
            ranks,
            stop_file,
            ready_at,
            [f"training e2e: rules built and tested in {built:.1f}s, ranks ready {ready_at - began:.1f}s after start"],
        )


def _straggler_alerts(prometheus: Prometheus) -> list[dict]:
    return [a for a in prometheus.alerts() if a["labels"]["alertname"] == "TrainingStraggler"]


def test_training_straggler_fires_once_for_the_slow_rank_naming_its_data_phase(job, record_property):
    pending: set[tuple] = set()
    firing: set[tuple] = set()
    last: list[dict] = []
    deadline = time.monotonic() + WAIT
    while not firing and time.monotonic() < deadline:
        last = _straggler_alerts(job.prometheus)
        pending |= {_labels(a) for a in last if a["state"] == "pending"}
        firing |= {_labels(a) for a in last if a["state"] == "firing"}
        time.sleep(POLL)
    assert firing, f"TrainingStraggler not firing {WAIT:.0f}s after the first step; pending: {pending}"
    fired_after = time.monotonic() - job.started
    # Still the one alert firing, and no other, a few evaluations on.
    interval = duration_seconds(Context(job.config).evaluation_interval)
    settled = time.monotonic() + STAY_EVALUATIONS * interval
    while time.monotonic() < settled:
        last = _straggler_alerts(job.prometheus)
        pending |= {_labels(a) for a in last if a["state"] == "pending"}
        firing |= {_labels(a) for a in last if a["state"] == "firing"}
        time.sleep(POLL)
    assert len(firing) == 1, firing
    (alert,) = [a for a in last if a["state"] == "firing"]
    labels = alert["labels"]
    assert (labels["hpc_job"], labels["rank"], labels["node"]) == (JOB, SLOW_RANK, RANKS[SLOW_RANK]), labels
    assert labels.get("phase") == "data", labels
    assert "in its data phase" in alert["annotations"]["description"], alert["annotations"]
    # No other rank was ever the straggler. At the job's start the phase records may come an evaluation after the
    # step-time ones (their group reads the slowest rank's record): the alert is then pending for that evaluation
    # without its phase (the rule's branch for jobs that time none), and starts over with it.
    without_phase = tuple((k, v) for k, v in _labels(alert) if k != "phase")
    assert pending - firing <= {without_phase}, pending
    job.timings.append(
        f"training e2e: TrainingStraggler firing {fired_after:.1f}s after the first step"
        + (", pending without its phase for an evaluation first" if without_phase in pending else "")
    )
    record_property(MEASUREMENT, "; ".join(job.timings))


def _labels(alert: dict) -> tuple:
    return tuple(sorted(alert["labels"].items()))


def _training_dashboard(config) -> dict:
    (text,) = (
        text
        for path, text in pipeline.generate(config).items()
        if path.startswith("grafana/dashboards/") and json.loads(text)["uid"] == DashboardUid.TRAINING
    )
    return json.loads(text)


def _times_median(dashboard: dict) -> set[tuple[str, str]]:
    """(panel title, query) of the tables' "x median rank" columns: a table names its columns by query (refId)."""
    out = set()
    for panel in every_panel(dashboard):
        renamed = {
            name: column
            for step in panel.get("transformations", [])
            for name, column in step.get("options", {}).get("renameByName", {}).items()
        }
        out |= {
            (panel["title"], target["expr"])
            for target in panel.get("targets", [])
            if renamed.get(f"Value #{target['refId']}") == "x median rank"
        }
    return out


def test_the_dashboard_per_rank_and_phase_panels_put_the_straggler_first(job):
    ctx = Context(job.config)
    values = {ctx.cluster: ctx.config.get("cluster", "name"), "hpc_job": JOB}
    dashboard = _training_dashboard(job.config)
    queries = [
        (title, _substituted(expr, values)) for _, title, expr, kind in panel_queries(dashboard) if kind == "prometheus"
    ]
    times_median = {f"{title}: {_substituted(expr, values)}" for title, expr in _times_median(dashboard)}
    highlight = 1 / ctx.thresholds.training_straggler_ratio

    def read() -> dict[str, list]:
        return {f"{title}: {expr}": job.prometheus.query(expr, time.time()) for title, expr in queries}

    def per_rank(results: dict[str, list]) -> dict[str, list]:
        return {q: r for q, r in results.items() if r and all("rank" in s.labels for s in r)}

    def per_phase(results: dict[str, list]) -> dict[str, list]:
        return {q: r for q, r in results.items() if r and all("phase" in s.labels for s in r)}

    def complete(results: dict[str, list]) -> bool:
        """Every rank has a step time, every phase query an answer (its records evaluated at least once)."""
        everyone = max(map(len, per_rank(results).values()), default=0) >= len(RANKS)
        return everyone and all(samples for query, samples in results.items() if "phase" in query)

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
        top = max(samples, key=lambda s: s.value)
        assert (top.labels["rank"], top.labels["node"]) == (SLOW_RANK, RANKS[SLOW_RANK]), (query, samples)
        if query in times_median:
            # An "x median rank" column: the straggler (its data phase) red, every other rank (phase) green.
            assert top.value > highlight, (query, samples)
            assert all(s.value < highlight for s in samples if s is not top), (query, samples)
    for query, samples in phases.items():
        top = max(samples, key=lambda s: s.value)
        assert top.labels["phase"] == "data", (query, samples)
        if "rank" in top.labels:
            assert top.labels["rank"] == SLOW_RANK, (query, samples)


def _selected(query: str, spans: list[Span]) -> list[Span]:
    """The spans a dashboard's TraceQL span selector picks, its job variable at JOB and its rank variable at
    SLOW_RANK: conditions on a resource or span attribute, or on the span's name, joined by `&&`."""
    text = unquote(VARIABLE.sub(lambda m: JOB if (m[1] or m[2]) == "hpc_job" else SLOW_RANK, query))
    wanted = conditions(text)
    assert wanted and all(operator == "=" for _, operator, _ in wanted), query

    def value(span: Span, attribute: str) -> object:
        scope, _, name = attribute.partition(".")
        return span.name if attribute == NAME else (span.resource if scope == "resource" else span.attributes).get(name)

    return [s for s in spans if all(value(s, attribute) == json.loads(v) for attribute, _, v in wanted)]


def test_the_sampler_keeps_the_straggler_slow_steps_and_the_tempo_links_select_them(
    job,
    traceql_queries,  # noqa: F811 (the fixture imported above)
    record_property,
):
    deadline = time.monotonic() + WAIT
    while min(job.steps().values()) < MIN_STEPS and time.monotonic() < deadline:
        time.sleep(POLL)
    steps = job.stop()
    assert min(steps.values()) >= MIN_STEPS, steps
    spans = list(job.traces.spans)
    assert spans, "no span received"
    for span in spans:
        assert set(hpcobs_training.RESOURCE_ATTRIBUTES) <= span.resource.keys(), span.resource
        rank = span.resource["rank"]
        expected = {
            "service.name": "training",
            "hpc_job": JOB,
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
    slow = [s for s in step_spans if s.attributes["hpcobs.slow"] is True]
    # Every slow step of rank 5, and nothing else, kept as slow.
    assert {s.resource["rank"] for s in slow} == {SLOW_RANK}, [
        (s.resource["rank"], s.attributes["hpcobs.step"], {p.name: p.seconds for p in children[s.span_id]})
        for s in slow
        if s.resource["rank"] != SLOW_RANK
    ]
    slow_steps = sorted(s.attributes["hpcobs.step"] for s in slow)
    assert slow_steps == list(range(SLOW_EVERY, steps[SLOW_RANK] + 1, SLOW_EVERY)), slow_steps
    for span in slow:
        phases = {p.name: p.seconds for p in children[span.span_id]}
        others = sum(seconds for name, seconds in phases.items() if name != "data")
        assert phases["data"] > others, phases
        assert phases["data"] >= PHASE_SECONDS["data"] * SLOW_DATA_FACTOR, phases
    # The other steps kept at the sample share: some, and far fewer than 3% of them.
    rest = [s for s in step_spans if s.attributes["hpcobs.slow"] is False]
    fast_steps = sum(steps.values()) - len(slow)
    assert 0 < len(rest) <= SHARE_BOUND * fast_steps, (len(rest), fast_steps)
    # The training dashboard's Tempo links, at job 4242 and rank 5: each selects spans, and each that asks for slow
    # steps (of the rank or of every rank) selects exactly rank 5's slow steps.
    links = [query for dashboard, _, query in traceql_queries if dashboard["uid"] == DashboardUid.TRAINING]
    assert links
    slow_ids = {span.span_id for span in slow}
    for query in links:
        selected = _selected(query, spans)
        assert selected, query
        if "hpcobs.slow" in query:
            assert {span.span_id for span in selected} == slow_ids, query
    record_property(
        MEASUREMENT,
        f"training e2e: {sum(steps.values())} steps, {len(slow)} kept as slow (all rank {SLOW_RANK}'s), "
        f"{len(rest)} sampled of {fast_steps} others, {len(spans)} spans received",
    )
