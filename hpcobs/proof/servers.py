"""Real Prometheus and VictoriaMetrics servers on loopback, loaded with history, for tests and benchmarks.

Each server owns a temporary work directory (config, storage, log) that `stop()` always removes, listens on
a free 127.0.0.1 port, and is stopped even if the Python process dies (parent-death signal).
"""

from __future__ import annotations

import ctypes
import http.server
import json
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

import yaml

from hpcobs.build import tools
from hpcobs.errors import ToolError
from hpcobs.lang.promql import duration_ms
from hpcobs.proof import backfill

# (env var, binary, Debian package, minimum version), as in tools.find
PROMETHEUS = ("PROMETHEUS", "prometheus", "prometheus", (2, 42))
VICTORIA_METRICS = ("VICTORIA_METRICS", "victoria-metrics", "victoria-metrics", (1, 79))
VMALERT = ("VMALERT", "vmalert", "victoria-metrics", (1, 79))
VMAGENT = ("VMAGENT", "vmagent", "victoria-metrics", (1, 79))
ALERTMANAGER = ("ALERTMANAGER", "prometheus-alertmanager", "prometheus-alertmanager", (0, 25))

READY_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
RUN_TIMEOUT = 1800.0
HTTP_TIMEOUT = 300.0
LOG_TAIL_LINES = 20
QUERIES_AT_ONCE = 2  # range queries in flight when replaying history: Prometheus runs each on a core of its own
IMPORT_BATCH_BYTES = 8 << 20
MAX_POINTS = 11_000  # steps of one range query Prometheus answers (web/api/v1/api.go, tag v2.42.0)

Timestamp = datetime | float
Step = str | int  # a duration ("30s") or whole seconds
Labels = dict[str, str]


class Sample(NamedTuple):
    labels: Labels
    value: float


class Series(NamedTuple):
    labels: Labels
    points: list[tuple[float, float]]


@dataclass(frozen=True)
class QueryCost:
    """What a query cost: samples the engine touched (None when it does not say) and seconds spent."""

    samples: int | None
    seconds: float


def free_port() -> int:
    """A loopback port free right now (the OS picks it; another process could still take it first)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ExpositionServer:
    """A loopback HTTP server answering every GET with `body(path)` in the Prometheus text format, status 200, or
    503 where `body` gives None (a scrape that fails: `up` 0): the stand-in of an exporter a test cannot run,
    scraped by a real Prometheus."""

    def __init__(self, body: Callable[[str], str | None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                answer = body(self.path)
                text = b"" if answer is None else answer.encode()
                self.send_response(503 if answer is None else 200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ExpositionServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()


class StandIn(ExpositionServer):
    """Simulated exporters on one server: /<job>/<instance> serves that target's series (exposition prefixes, without
    the labels the scrape adds, and their values) at the scrape `at(path)` gives, the last one past the end; a
    missing value is left out, as the exporter drops a series it no longer has; a target without series answers
    empty, as an idle exporter does, and one whose `up` is 0 at that scrape answers 503."""

    def __init__(
        self,
        series: dict[str, list[tuple[str, list]]],
        at: Callable[[str], int],
        up: dict[str, list] | None = None,
    ) -> None:
        self.series, self.at, self.up = defaultdict(list, series), at, up or {}
        super().__init__(self.exposition)

    def exposition(self, path: str) -> str | None:
        at = self.at(path)
        up = self.up.get(path)
        if up is not None and up[min(at, len(up) - 1)] == 0:
            return None
        lines = [f"{prefix} {values[min(at, len(values) - 1)]}" for prefix, values in self.series[path]]
        return "\n".join(line for line in lines if not line.endswith(" None")) + "\n"


def exposition_prefix(name: str, labels: Labels) -> str:
    """`name{labels}` in the text format, empty labels left out (the exporter does not write them)."""
    text = ",".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()) if value != "")
    return f"{name}{{{text}}}"


class Server:
    """A server process with a temp work dir, a readiness wait and an HTTP query API."""

    name: str
    binary: tuple[str, str, str, tuple[int, int]]
    ready_path: str

    def __init__(self) -> None:
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self._workdir: Path | None = None

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=f"hpcobs-{self.name}-"))
        return self._workdir

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> Server:
        """Start (keeping the port of a previous run) and wait until ready; on failure, clean up and raise."""
        if self.running:
            return self
        try:
            binary = tools.find(self.binary)
            self.port = self.port or free_port()
            with open(self.log_path, "ab") as log:
                self.process = process = subprocess.Popen(
                    [binary, *self._arguments()],
                    cwd=self._working_directory(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent,
                )
            self._wait_ready(process)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the process (terminate, then kill after STOP_TIMEOUT) and remove the work dir."""
        self._terminate()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def query(self, expr: str, at: Timestamp) -> list[Sample]:
        return self.query_with_cost(expr, at)[0]

    def query_range(self, expr: str, start: Timestamp, end: Timestamp, step: Step) -> list[Series]:
        """Range query; a range of more than MAX_POINTS steps (a week at 30 s) is asked in pieces and joined."""
        begin, finish, seconds = _unix(start), _unix(end), duration_ms(_duration(step)) / 1000
        joined: dict[tuple, Series] = {}
        while begin <= finish:
            last = min(finish, begin + seconds * MAX_POINTS)
            for series in self.query_range_with_cost(expr, begin, last, step)[0]:
                joined.setdefault(tuple(_label_order(series)), Series(series.labels, [])).points.extend(series.points)
            begin = last + seconds
        return sorted(joined.values(), key=_label_order)

    def stored(self, selector: str, start: Timestamp, end: Timestamp) -> list[Series]:
        """The samples stored for the series `selector` matches in (start, end], as written: no lookback, no step,
        no rollup (an instant query of `selector[end - start]`), so two servers' writes compare point by point; a
        series that stopped is gone once its last sample leaves the range. VictoriaMetrics lists staleness markers
        (NaN: vmagent and vmalert write them when a series stops), Prometheus leaves them out."""
        seconds = _unix(end) - _unix(start)
        data, _ = self._query("/api/v1/query", {"query": f"{selector}[{seconds * 1000:.0f}ms]", "time": _unix(end)})
        series = [Series(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]
        return sorted(series, key=_label_order)

    def query_with_cost(self, expr: str, at: Timestamp) -> tuple[list[Sample], QueryCost]:
        """Instant query: one sample per series (a scalar result is one sample with no labels)."""
        data, cost = self._query("/api/v1/query", {"query": expr, "time": _unix(at)})
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))], cost
        samples = [Sample(r["metric"], float(r["value"][1])) for r in data["result"]]
        return sorted(samples, key=_label_order), cost

    def query_range_with_cost(
        self, expr: str, start: Timestamp, end: Timestamp, step: Step
    ) -> tuple[list[Series], QueryCost]:
        params = {"query": expr, "start": _unix(start), "end": _unix(end), "step": _duration(step)}
        data, cost = self._query("/api/v1/query_range", params)
        series = [Series(r["metric"], [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]]
        return sorted(series, key=_label_order), cost

    def _arguments(self) -> list[str]:
        raise NotImplementedError

    def _working_directory(self) -> Path:
        return self.workdir

    def _query(self, path: str, params: dict) -> tuple[dict, QueryCost]:
        began = time.perf_counter()
        body = json.loads(self._post(path, params))
        return body["data"], self._cost(body["data"], time.perf_counter() - began)

    def _cost(self, data: dict, client_seconds: float) -> QueryCost:
        return QueryCost(None, client_seconds)

    def _post(self, path: str, params: dict | None = None, body: bytes | None = None) -> bytes:
        """POST form parameters or a raw body; ToolError with the server's own message on failure."""
        url = self.url + path
        if params is not None:
            body = urllib.parse.urlencode(params).encode()
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, data=body or b"", method="POST"), timeout=HTTP_TIMEOUT
            ) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            raise ToolError(
                f"{self.name} {path} failed (HTTP {error.code}): {_error_message(error.read())}"
                + (f" [query: {params['query']}]" if params and "query" in params else "")
            ) from None
        except urllib.error.URLError as error:
            raise ToolError(f"{self.name} at {self.url} is not reachable: {error.reason}") from None

    def _require_running(self, action: str) -> None:
        if not self.running:
            raise ToolError(f"{self.name} must be running to {action}: call start() first")

    def _wait_ready(self, process: subprocess.Popen) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ToolError(
                    f"{self.name} exited with code {process.returncode} before it was ready; "
                    f"last lines of its log:\n{self._log_tail()}"
                )
            if self._is_ready():
                return
            time.sleep(0.05)
        raise ToolError(
            f"{self.name} was not ready on {self.url} after {READY_TIMEOUT:.0f}s; "
            f"last lines of its log:\n{self._log_tail()}"
        )

    def _is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.ready_path, timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _log_tail(self) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def _terminate(self) -> None:
        """End the process but keep the work dir, so a restart serves the same data on the same port."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def _restart(self) -> None:
        self._terminate()
        self.start()


class Prometheus(Server):
    """Prometheus with no scrape targets serving backfilled blocks; `rule_files` are loaded (listed by
    /api/v1/rules) but evaluated live at wall-clock time only: history comes from `backfill_rules`. Given a
    started `alertmanager`, its live alerts are sent there (the `alerting:` block). Given a `config_file`, it runs on
    that prometheus.yml instead (out/prometheus/scrape/'s, a site's), scrape jobs and all; given `scrape_configs`,
    its own configuration scrapes those jobs every `scrape_interval` (live exporters on loopback).

    Prometheus loads blocks from its storage dir at start, and otherwise only on its own block reload
    (once a minute), so `add_blocks` restarts a running server to make new history visible at once.
    Backfilled blocks overlap each other (one per rule group) and may overlap the head: Prometheus 2.42
    always accepts overlapping blocks (it logs a warning and compacts them vertically), the old
    `--storage.tsdb.allow-overlapping-blocks` flag is a hidden no-op since 2.39.
    An instant query only sees a sample within `lookback_delta` before the query time (5m by default):
    query history at or just after sample times, never past the end of the data plus lookback.
    """

    name = "prometheus"
    binary = PROMETHEUS
    ready_path = "/-/ready"

    def __init__(
        self,
        rule_files: Sequence[Path] = (),
        *,
        evaluation_interval: str = "30s",
        retention: str = "10y",
        lookback_delta: str = "5m",
        alertmanager: Alertmanager | None = None,
        config_file: Path | None = None,
        scrape_configs: Sequence[dict] = (),
        scrape_interval: str = "1m",
    ) -> None:
        super().__init__()
        self.config_file = config_file
        self.scrape_configs = list(scrape_configs)
        self.scrape_interval = scrape_interval
        self.rule_files = [Path(f).resolve() for f in rule_files]
        self.alertmanager = alertmanager  # where live alerts are sent, if anywhere
        self.evaluation_interval = evaluation_interval
        self.retention = retention
        self.lookback_delta = lookback_delta

    @property
    def storage_dir(self) -> Path:
        return self.workdir / "data"

    def load_openmetrics(self, openmetrics: Path) -> None:
        """Backfill an OpenMetrics file (`promtool tsdb create-blocks-from openmetrics`); cheapest before start."""
        with self._scratch_dir() as output:
            _create_blocks(openmetrics, Path(output))
            self.add_blocks(Path(output))

    def add_blocks(self, blocks_dir: Path) -> None:
        """Move the TSDB blocks found in `blocks_dir` into storage; restart if running so they are loaded."""
        blocks = sorted(p.parent for p in Path(blocks_dir).glob("*/meta.json"))
        if not blocks:
            return
        self.storage_dir.mkdir(parents=True, exist_ok=True)
        for block in blocks:
            shutil.move(str(block), str(self.storage_dir / block.name))
        if self.running:
            self._restart()

    def backfill_rules(
        self, layers: Sequence[Sequence[Path]], start: Timestamp, end: Timestamp, step: Step = "30s"
    ) -> None:
        """Record every recording rule of `layers` over [start, end] so recorded series exist in the past.

        `promtool tsdb create-blocks-from rules` evaluates against what the running server stores, so a
        layer may only read raw series and the layers before it: each layer's blocks are loaded (restart)
        before the next. promtool writes one block per rule group and 2h window, none for a group with no
        result; each group's samples carry the group's usual evaluation offset (a hash of its name), so the
        first recorded point is up to one interval after `start`. Alerting rules are skipped (no ALERTS
        series). `step` is the interval of groups that set none.
        """
        self._require_running("backfill rules")
        for layer in layers:
            with self._scratch_dir() as output:
                _run(
                    tools.PROMTOOL,
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    "--quiet",
                    f"--url={self.url}",
                    f"--start={_rfc3339(start)}",
                    f"--end={_rfc3339(end)}",
                    f"--output-dir={output}",
                    f"--eval-interval={_duration(step)}",
                    *map(str, layer),
                )
                self.add_blocks(Path(output))

    def replay_rules(
        self, layers: Sequence[Sequence[Path]], start: Timestamp, end: Timestamp, step: Step = "30s"
    ) -> None:
        """Record every recording rule of `layers` at exactly start, start + step, ..., end, as vmalert's
        replay does on VictoriaMetrics: each rule's expression is range-queried, the result backfilled as
        OpenMetrics blocks, layer after layer. Unlike `backfill_rules` (promtool shifts each group by a
        hash offset), both engines then evaluate the same expressions at the same instants, which is
        what comparing their results needs. Each layer is queried and written one block range at a time
        (hpcobs.proof.backfill: promtool reads a document once per block range it spans), QUERIES_AT_ONCE rules
        at a time, promtool taking each range's document while the next is queried; a layer's blocks are loaded
        together: one restart per layer."""
        self._require_running("replay rules")
        step_seconds = duration_ms(_duration(step)) / 1000
        for layer in layers:
            rules = list(_recording_rules(layer))
            loader = backfill.OneAhead()
            with (
                self._scratch_dir() as scratch,
                self._scratch_dir() as output,
                ThreadPoolExecutor(max_workers=QUERIES_AT_ONCE) as pool,
            ):
                for first, last in backfill.pieces(_unix(start), _unix(end), step_seconds, backfill.BLOCK_SECONDS):
                    openmetrics = Path(scratch) / f"recorded-{first:.0f}.om"
                    stamps = _Stamps()
                    with open(openmetrics, "w", encoding="utf-8") as out:
                        exprs = [rule["expr"] for rule in rules]
                        found = pool.map(self.query_range, exprs, repeat(first), repeat(last), repeat(step))
                        # OpenMetrics wants each family once: rules recording one name (ALERTS) are written together.
                        families: dict[str, list[str]] = {}
                        for rule, result in zip(rules, found, strict=True):
                            lines = families.setdefault(rule["record"], [])
                            lines += (_recorded_series(rule, series, stamps) for series in result)
                        for name, lines in families.items():
                            out.write(f"# TYPE {name} gauge\n")
                            out.writelines(lines)
                        out.write("# EOF\n")
                    loader.submit(_create_blocks, openmetrics, Path(output))
                loader.wait()
                self.add_blocks(Path(output))

    def alerts(self) -> list[dict]:
        """The alerting rules' active alerts (/api/v1/alerts): labels, state (pending or firing), activeAt."""
        self._require_running("list alerts")
        with urllib.request.urlopen(self.url + "/api/v1/alerts", timeout=HTTP_TIMEOUT) as response:
            return json.loads(response.read())["data"]["alerts"]

    def targets(self) -> list[dict]:
        """The scrape targets (/api/v1/targets' activeTargets): labels after relabelling, health, lastScrape."""
        self._require_running("list targets")
        with urllib.request.urlopen(self.url + "/api/v1/targets?state=active", timeout=HTTP_TIMEOUT) as response:
            return json.loads(response.read())["data"]["activeTargets"]

    def _scratch_dir(self) -> tempfile.TemporaryDirectory:
        """Inside the work dir, so blocks move into storage by rename, not copy."""
        return tempfile.TemporaryDirectory(prefix="blocks-", dir=self.workdir)

    def _arguments(self) -> list[str]:
        return [
            f"--config.file={self.config_file or self._own_config()}",
            f"--storage.tsdb.path={self.storage_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--storage.tsdb.retention.time={self.retention}",
            f"--query.lookback-delta={self.lookback_delta}",
            "--web.enable-admin-api",
        ]

    def _own_config(self) -> Path:
        config = self.workdir / "prometheus.yml"
        settings: dict = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(f) for f in self.rule_files],
        }
        if self.scrape_configs:
            settings["scrape_configs"] = self.scrape_configs
        if self.alertmanager is not None:
            target = f"127.0.0.1:{self.alertmanager.port}"
            settings["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [target]}]}]}
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        return config

    def _query(self, path: str, params: dict) -> tuple[dict, QueryCost]:
        return super()._query(path, {**params, "stats": "all"})

    def _cost(self, data: dict, client_seconds: float) -> QueryCost:
        stats = data["stats"]
        return QueryCost(stats["samples"]["totalQueryableSamples"], stats["timings"]["execTotalTime"])


class VictoriaMetrics(Server):
    """Single-node VictoriaMetrics serving imported history.

    The response cache is off (`-search.disableCache`), so data imported into the past is seen at once
    and a benchmark measures the query, not the cache; `-search.latencyOffset=0s` shows the newest points.
    Imports are flushed (`/internal/force_flush`) before returning, so they are queryable immediately.
    An instant query exactly at a series' first sample does not return it (Prometheus does): query inside
    the data. Without `lookback_delta` a query looks back as far as the gaps between a series' samples suggest
    (`-search.maxLookback` unset), so a series that comes and goes (a filtered record) reads as present in
    between; with it, as far as Prometheus's `--query.lookback-delta` of that value.
    Values are stored with about 12 significant decimal digits: compare with a relative tolerance.
    """

    name = "victoria-metrics"
    binary = VICTORIA_METRICS
    ready_path = "/health"

    def __init__(self, retention: str = "100y", lookback_delta: str | None = None) -> None:
        super().__init__()
        self.retention = retention
        self.lookback_delta = lookback_delta

    def import_jsonl(self, source: Path | Iterable[str | dict]) -> None:
        """Import VictoriaMetrics JSON lines, one series a line: {"metric": {...}, "values": [...],
        "timestamps": [ms...]}, from a file or an iterable of lines or dicts, in bounded batches."""
        self._require_running("import")
        log_offset = self.log_path.stat().st_size
        for batch in _batches(_jsonl_lines(source), IMPORT_BATCH_BYTES):
            self._post("/api/v1/import", body=batch)
        self._post("/internal/force_flush")
        self._raise_on_logged_errors(log_offset, "import")

    def backfill_rules(
        self, layers: Sequence[Sequence[Path]], start: Timestamp, end: Timestamp, step: Step = "30s"
    ) -> None:
        """Record the rules of `layers` over [start, end] with `vmalert` replay mode, one run per layer.

        Like Prometheus's backfill, a layer reads raw series and earlier layers; each run's writes are
        flushed before the next. Unlike promtool, vmalert also replays alerting rules (ALERTS and
        ALERTS_FOR_STATE series) and aligns evaluation times to the interval. `-datasource.queryStep=0s`
        is needed, else replay evaluates every 5m whatever the group interval. `step` is the interval of
        groups that set none. vmalert splits `-rule` values on commas: rule paths must not contain one.
        """
        self._require_running("backfill rules")
        log_offset = self.log_path.stat().st_size
        for layer in layers:
            _run(
                VMALERT,
                *(f"-rule={f}" for f in layer),
                f"-datasource.url={self.url}",
                f"-remoteWrite.url={self.url}",
                f"-replay.timeFrom={_rfc3339(start)}",
                f"-replay.timeTo={_rfc3339(end)}",
                f"-evaluationInterval={_duration(step)}",
                "-datasource.queryStep=0s",
                "-replay.rulesDelay=0s",
                "-replay.ruleRetryAttempts=1",
                "-replay.disableProgressBar",
                "-disableAlertgroupLabel",
                "-loggerLevel=ERROR",
            )
            self._post("/internal/force_flush")
        self._raise_on_logged_errors(log_offset, "rule replay")

    def _raise_on_logged_errors(self, log_offset: int, action: str) -> None:
        """VictoriaMetrics answers writes with bad lines, or samples outside retention, by a success: it logs
        and skips them. Its log since `log_offset` tells."""
        with open(self.log_path, "rb") as log:
            log.seek(log_offset)
            lines = log.read().decode(errors="replace").splitlines()
        dropped = [line for line in lines if "\terror\t" in line or "warn occurred during rows addition" in line]
        if dropped:
            raise ToolError(
                f"victoria-metrics dropped data during {action}; its log says:\n" + "\n".join(dropped[:LOG_TAIL_LINES])
            )

    def _arguments(self) -> list[str]:
        return [
            f"-storageDataPath={self.workdir / 'data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-retentionPeriod={self.retention}",
            "-search.latencyOffset=0s",
            "-search.disableCache",
            "-loggerLevel=WARN",
            *([f"-search.maxLookback={self.lookback_delta}"] if self.lookback_delta else []),
        ]


class FlagServer(Server):
    """A VictoriaMetrics component started from the directory of a generated `*.flags` file on its lines, as
    docs/scale-out.md says to run it (its relative paths are the directory's), plus the listen address and the
    work dir's paths this class owns."""

    def __init__(self, flags_file: Path, extra_flags: Sequence[str] = ()) -> None:
        super().__init__()
        self.directory = Path(flags_file).resolve().parent
        self.flags = [*Path(flags_file).read_text(encoding="utf-8").splitlines(), *extra_flags]

    def _working_directory(self) -> Path:
        return self.directory

    def _arguments(self) -> list[str]:
        return [*self.flags, f"-httpListenAddr=127.0.0.1:{self.port}", "-loggerLevel=WARN"]

    def _get(self, path: str) -> dict:
        self._require_running(f"read {path}")
        with urllib.request.urlopen(self.url + path, timeout=HTTP_TIMEOUT) as response:
            return json.loads(response.read())


class VMAgent(FlagServer):
    """vmagent: scrapes by its -promscrape.config and remote writes every sample to each -remoteWrite.url; its
    on-disk queue lives in the work dir. File service discovery is re-read every second (30 s by default), so
    a target list rewritten during a test is followed as Prometheus's inotify follows it."""

    name = "vmagent"
    binary = VMAGENT
    ready_path = "/health"

    def _arguments(self) -> list[str]:
        return [
            *super()._arguments(),
            f"-remoteWrite.tmpDataPath={self.workdir / 'queue'}",
            "-promscrape.fileSDCheckInterval=1s",
        ]

    def targets(self) -> list[dict]:
        """The scrape targets kept by relabelling (/api/v1/targets' activeTargets, as Prometheus lists them)."""
        return self._get("/api/v1/targets?state=active")["data"]["activeTargets"]


class VMAlert(FlagServer):
    """vmalert evaluating its -rule files live against -datasource.url."""

    name = "vmalert"
    binary = VMALERT
    ready_path = "/health"

    def alerts(self) -> list[dict]:
        """Active alerts (/api/v1/alerts): labels, state (pending or firing), activeAt."""
        return self._get("/api/v1/alerts")["data"]["alerts"]


class Alertmanager(Server):
    """A single Alertmanager (clustering off) with a given configuration, to check routing and inhibition:
    post alerts, read back which are inhibited and by what."""

    name = "alertmanager"
    binary = ALERTMANAGER
    ready_path = "/-/ready"

    def __init__(self, config_file: Path) -> None:
        super().__init__()
        self.config_file = Path(config_file)

    def post(self, alerts: Sequence[dict[str, str]]) -> None:
        """Fire alerts given by their labels (they stay active for the default resolve timeout)."""
        self.send([{"labels": labels} for labels in alerts])

    def send(self, alerts: Sequence[dict]) -> None:
        """Post alerts as /api/v2/alerts takes them: labels, and startsAt / endsAt (RFC 3339) where given."""
        body = json.dumps(list(alerts)).encode()
        request = urllib.request.Request(
            self.url + "/api/v2/alerts", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            response.read()

    def alerts(self) -> list[dict]:
        """Every active alert with its `status` (state, inhibitedBy, silencedBy)."""
        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=HTTP_TIMEOUT) as response:
            return json.loads(response.read())

    def _arguments(self) -> list[str]:
        return [
            f"--config.file={self.config_file}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]


def _run(tool: tuple[str, str, str, tuple[int, int]], *args: str) -> None:
    """Run a command-line tool to completion; ToolError with its output when it fails."""
    command = [tools.find(tool), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{tool[1]} did not finish in {RUN_TIMEOUT:.0f}s: {' '.join(command)}") from None
    if done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
        raise ToolError(f"{tool[1]} failed (exit {done.returncode}): {' '.join(command)}\n{output}")


def _create_blocks(openmetrics: Path, output: Path) -> None:
    """`promtool tsdb create-blocks-from openmetrics`: the document's blocks written into `output`."""
    _run(tools.PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(openmetrics), str(output))


class _Stamps(dict):
    """Sample line endings (` <timestamp>\\n`) by timestamp, each formatted once: a piece's series share their
    instants, and formatting the timestamps was most of the cost of writing recorded samples."""

    def __missing__(self, t: float) -> str:
        text = self[t] = f" {t:.3f}\n"
        return text


def _recorded_series(rule: dict, series: Series, stamps: _Stamps) -> str:
    """A recording rule's result series as OpenMetrics sample lines, named by the rule, its labels added."""
    labels = {**series.labels, **rule.get("labels", {})}
    labels.pop("__name__", None)
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    head = f"{rule['record']}{{{text}}} "
    return "".join([head + _openmetrics_value(v) + stamps[t] for t, v in series.points])


def _die_with_parent() -> None:
    """In the child: ask Linux to send SIGTERM when the parent dies, so no server outlives a crashed run."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _jsonl_lines(source: Path | Iterable[str | dict]) -> Iterable[bytes]:
    if isinstance(source, Path):
        with open(source, "rb") as lines:
            yield from lines
        return
    for line in source:
        text = line if isinstance(line, str) else json.dumps(line, separators=(",", ":"))
        yield (text.rstrip("\n") + "\n").encode()


def _batches(lines: Iterable[bytes], limit: int) -> Iterable[bytes]:
    """Whole lines joined into bodies of about `limit` bytes."""
    batch: list[bytes] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if size >= limit:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


def _error_message(body: bytes) -> str:
    """The `error` field of a Prometheus-API error body, else the body text."""
    text = body.decode(errors="replace").strip()
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return text


def _label_order(item: Sample | Series) -> list[tuple[str, str]]:
    return sorted(item.labels.items())


def _unix(at: Timestamp) -> float:
    return at.timestamp() if isinstance(at, datetime) else float(at)


def _recording_rules(files: Sequence[Path]) -> Iterable[dict]:
    for path in files:
        for group in yaml.safe_load(Path(path).read_text(encoding="utf-8"))["groups"]:
            yield from (rule for rule in group["rules"] if "record" in rule)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _openmetrics_value(value: float) -> str:
    return "NaN" if value != value else repr(float(value))


def _rfc3339(at: Timestamp) -> str:
    moment = at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(step: Step) -> str:
    return step if isinstance(step, str) else f"{step}s"
