"""Fleet-scale benchmark (not a test): what the dashboards and the recording rules cost as the fleet grows,
beside NVIDIA's dcgm-exporter dashboard (grafana.com 12239), on real Prometheus and VictoriaMetrics.

    python benchmarks/fleet.py --sizes 1024,4096,16384 [--quick] [--hours H] [--out results.json]

For each fleet size (nodes of 8 GPUs, the simulator's healthy cluster: one training job on half the nodes,
single-node batch jobs on the others, an interactive node), the simulated raw series that the rules and the
dashboards read are backfilled into Prometheus (promtool, in chunks) and imported into VictoriaMetrics, the
recording rules are backfilled layer by layer (promtool, vmalert), then, in the same run:

- every dashboard is loaded as Grafana loads it (hpcobs.proof.workload: the step Grafana picks for a panel 1,000
  pixels wide, $__rate_interval, instant panels at the end, variables at All, the one cluster, the
  training job on the largest job, the node drill-downs on one node; a panel with its own relative range,
  "energy today", over the dashboard's range), in three variants, (a) and (c) several times:
  (a) the hpcobs dashboards; (b) the same panels with every recorded series replaced by its expression
  (hpcobs.proof.workload.Expander), i.e. without recording rules; (c) the 12239 dashboard's queries verbatim;
  per query: samples touched (Prometheus `stats=all`, totalQueryableSamples; peakSamples against the default
  --query.max-samples), series its selectors match over the queried range (/api/v1/series), the server's
  execution time, and the client's wall time of the whole load (queries one after the other);
- the recording and alerting rules are evaluated live by Prometheus for a few cycles on the loaded data
  (/api/v1/rules evaluationTime), and each group's rules are also run as instant queries for their samples;
- Prometheus' and VictoriaMetrics' memory (peak and current resident set) and the series stored;
- the central ruler of a sharded site (issue 32): the build's out/scale-out/central/ (vmalert 1.79, its flags)
  run live on VictoriaMetrics for a few cycles after the import and the replay: each group's evaluation time,
  and vmalert's and VictoriaMetrics' CPU seconds and memory meanwhile (Prometheus's CPU during its own live
  cycles too). `--central-only` measures only this, VictoriaMetrics alone, for sizes already in --out.

The data window ends a little after the live evaluation, so that Prometheus evaluates the rules "now" inside
the data. Its results cannot be stored (their timestamps fall before the end of the backfilled blocks; that
costs nothing measurable and is logged by Prometheus as out of bounds).

Results go to --out (JSON, one entry per size, merged with earlier runs of other sizes), the tables are
printed as Markdown, and --plot draws samples per dashboard load against fleet size (needs matplotlib, not
a dependency of hpcobs). `--quick` is the CI smoke run: a tiny fleet, a short window, one load, Prometheus
only, no live rule evaluation. docs/benchmarks.md ("Fleet scale") has the numbers of the project's machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from hpcobs.authoring.context import Context
from hpcobs.build import pipeline
from hpcobs.lang import lint
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import backfill, workload
from hpcobs.proof.backfill import OneAhead
from hpcobs.proof.servers import Alertmanager, Prometheus, Server, VictoriaMetrics, VMAlert, free_port
from hpcobs.proof.simulate import Simulation, write
from hpcobs.settings import config as config_module
from hpcobs.targets import scale_out

ROOT = Path(__file__).resolve().parent.parent
NVIDIA_DASHBOARD = ROOT / "benchmarks" / "data" / "dcgm-exporter-dashboard.json"
NVIDIA_UID = "nvidia-12239"
GPUS_PER_NODE = 8
DEFAULT_SIZES = (1024, 2048, 4096)
# Above this many GPUs the default window is shorter: the data and its backfill would not fit the machine.
LARGE_FLEET = 8192
PROMETHEUS_DEFAULT_MAX_SAMPLES = 50_000_000  # --query.max-samples: a query above it fails on a default Prometheus
OPENMETRICS_DOCUMENT_BYTES = 1 << 30  # a 2-hour document promtool takes (hpcobs.proof.backfill)
VM_BATCH_BYTES = 256 << 20
HTTP_TIMEOUT = 1800.0
LOOKBACK_SECONDS = 300
SAMPLES_BUDGET = 5_000_000  # the ceiling for one hpcobs dashboard load
# The central ruler's vmalert: Debian 12's, the machine's (the central rule files then leave keep_firing_for out).
CENTRAL_VMALERT_VERSION = "1.79"
CENTRAL_IDLE_SECONDS = 30.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LABEL_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
VARIANTS = {
    "0": "hpcobs before (--before)",
    "a": "hpcobs",
    "b": "hpcobs without recording rules",
    "c": "NVIDIA 12239",
}


class BenchPrometheus(Prometheus):
    """Prometheus with the query limits lifted, so that a query over the defaults is measured (and reported as
    failing on a default server from its peak samples) rather than refused; and a public restart."""

    def _arguments(self) -> list[str]:
        return [*super()._arguments(), "--query.max-samples=2000000000", "--query.timeout=30m"]

    def restart(self) -> None:
        self._restart()


# --------------------------------------------------------------------------------------------- loading


class JsonLineBatches:
    """A text stream that gathers the simulator's VictoriaMetrics JSON lines into batches for `ready`."""

    def __init__(self, limit: int, ready: Callable[[list[str]], None]):
        self.limit, self.ready = limit, ready
        self.lines: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        self.lines.append(text)
        self.size += len(text)
        if self.size >= self.limit:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self.lines:
            self.ready(self.lines)
        self.lines, self.size = [], 0


# --------------------------------------------------------------------------------------------- HTTP


def _request(server: Server, path: str, params: dict[str, Any], method: str = "POST") -> tuple[Any, float]:
    """A Prometheus-API call; its `data` and the client's wall seconds (request, transfer and JSON decoding)."""
    body = urllib.parse.urlencode(params, doseq=True)
    if method == "GET":
        request = urllib.request.Request(f"{server.url}{path}?{body}")
    else:
        request = urllib.request.Request(server.url + path, data=body.encode(), method="POST")
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
        data = json.loads(response.read())["data"]
    return data, time.perf_counter() - began


def _metrics(server: Server) -> dict[str, float]:
    """The server's own metrics without labels (name -> value)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            out[name] = float(value.split()[0])
    return out


def _cpu_seconds(server: Server) -> float:
    """User and system CPU seconds the server process has used: /proc/<pid>/stat utime and stime (fields 14 and
    15, proc(5)), counted after the command name, which may hold spaces."""
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[14 - 3]) + int(fields[15 - 3])) / CLOCK_TICKS


class Usage:
    """CPU seconds and memory of servers from now until `measured()`."""

    def __init__(self, servers: dict[str, Server]):
        self.servers = servers
        self.began = time.monotonic()
        self.cpu = {name: _cpu_seconds(server) for name, server in servers.items()}

    def measured(self) -> dict[str, dict[str, Any]]:
        """Per server: CPU seconds, the wall seconds they were used in, cores (their ratio) and resident memory."""
        wall = time.monotonic() - self.began
        out = {}
        for name, server in self.servers.items():
            cpu = _cpu_seconds(server) - self.cpu[name]
            out[name] = {"cpu_seconds": cpu, "wall_seconds": wall, "cores": cpu / wall, "memory_mib": _memory(server)}
        return out


def _vmalert_groups(text: str) -> dict[str, dict[str, float]]:
    """Each rule group's counters from vmalert's /metrics `text`. vmalert 1.79 keeps, per group (labels group and
    file), the summary vmalert_iteration_duration_seconds: the time from a cycle's start until every rule of it is
    evaluated, its series queued for remote write and its alerts sent (app/vmalert/group.go). Its quantiles are
    refreshed only now and then (the metrics library's updateQuantiles), its _sum and _count at each cycle."""
    groups: dict[str, dict[str, float]] = defaultdict(dict)
    wanted = {
        "vmalert_iteration_duration_seconds_sum": "sum",
        "vmalert_iteration_duration_seconds_count": "count",
        "vmalert_iteration_missed_total": "missed",
        "vmalert_iteration_interval_seconds": "interval",
    }
    for line in text.splitlines():
        name, brace, rest = line.partition("{")
        labels_text, _, value = rest.rpartition("}")
        labels = dict(LABEL_PAIR.findall(labels_text))
        if brace and name in wanted and "group" in labels:
            groups[labels["group"]][wanted[name]] = float(value)
    return groups


class CycleTimes:
    """Each group's evaluation seconds cycle by cycle, from the growth of vmalert's duration _sum and _count
    between polls (a poll a second, a cycle every interval: one cycle between two polls)."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self.seconds: dict[str, list[float]] = defaultdict(list)

    def add(self, metrics_text: str) -> None:
        """One poll of vmalert's /metrics."""
        for name, now in _vmalert_groups(metrics_text).items():
            before = self.seen.get(name, {"sum": 0.0, "count": 0.0})
            cycles = int(now.get("count", 0) - before["count"])
            self.seconds[name] += [(now.get("sum", 0.0) - before["sum"]) / cycles] * cycles if cycles > 0 else []
            self.seen[name] = {**before, **now}

    def groups(self) -> dict[str, dict[str, float]]:
        return {
            name: {
                "interval": self.seen[name]["interval"],
                "cycles": len(times),
                "missed": self.seen[name].get("missed", 0.0),
                "seconds": statistics.median(times),
                "max_seconds": max(times),
            }
            for name, times in sorted(self.seconds.items())
        }


def _memory(server: Server) -> dict[str, float]:
    """Peak and current resident set size of the server process, MiB."""
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmHWM", "VmRSS")}


# --------------------------------------------------------------------------------------------- queries


# promql_parser's match operators are not hashable: keyed by their names.
_OPS = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}


def _selectors(node: promql_parser.Expr, extra: float = 0.0) -> Iterable[tuple[str, float, float]]:
    """(selector, seconds of data before the evaluation time it reads, offset seconds) for each selector."""
    if isinstance(node, promql_parser.VectorSelector):
        matchers = ", ".join(f"{m.name}{_OPS[str(m.op)]}{json.dumps(m.value)}" for m in node.matchers.matchers)
        offset = node.offset.total_seconds() if node.offset else 0.0
        yield f"{node.name or ''}{{{matchers}}}", extra + LOOKBACK_SECONDS, offset
    elif isinstance(node, promql_parser.MatrixSelector):
        for selector, _, offset in _selectors(node.vector_selector):
            yield selector, extra + node.range.total_seconds(), offset
    elif isinstance(node, promql_parser.SubqueryExpr):
        yield from _selectors(node.expr, extra + node.range.total_seconds())
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from _selectors(node.lhs, extra)
        yield from _selectors(node.rhs, extra)
    elif isinstance(node, promql_parser.Call):
        for argument in node.args:
            yield from _selectors(argument, extra)
    elif isinstance(node, promql_parser.AggregateExpr | promql_parser.ParenExpr | promql_parser.UnaryExpr):
        yield from _selectors(node.expr, extra)


class Measurer:
    """Runs queries on one server and counts the series their selectors touch (cached per selector)."""

    def __init__(self, server: Server, stats: bool):
        self.server, self.stats = server, stats
        self._series: dict[tuple[str, int, int], int] = {}

    def series_touched(self, expr: str, start: float, end: float) -> int:
        total = 0
        for selector, before, offset in _selectors(promql_parser.parse(expr)):
            key = (selector, int(start - before - offset), int(end - offset))
            if key not in self._series:
                data, _ = _request(self.server, "/api/v1/series", {"match[]": selector, "start": key[1], "end": key[2]})
                self._series[key] = len(data)
            total += self._series[key]
        return total

    def run(self, expr: str, instant: bool, load: workload.Load) -> dict[str, Any]:
        params: dict[str, Any] = {"query": expr}
        if instant:
            path, params["time"] = "/api/v1/query", load.end
        else:
            start, end = load.aligned()
            path, params["start"], params["end"], params["step"] = (
                "/api/v1/query_range",
                start,
                end,
                load.interval_seconds,
            )
        if self.stats:
            params["stats"] = "all"
        data, wall = _request(self.server, path, params)
        out: dict[str, Any] = {
            "wall": wall,
            "series_returned": len(data["result"]) if data["resultType"] != "scalar" else 1,
        }
        if self.stats:
            samples = data["stats"]["samples"]
            out.update(
                samples=samples["totalQueryableSamples"],
                peak=samples["peakSamples"],
                exec=data["stats"]["timings"]["execTotalTime"],
            )
        return out


def measure_dashboard(
    measurer: Measurer, queries: list[tuple[workload.Target, str]], load: workload.Load, loads: int
) -> dict[str, Any]:
    """Full loads of one dashboard: per query its costs (times: medians over the loads), and the totals."""
    runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    load_walls = []
    for _ in range(loads):
        began = time.perf_counter()
        for index, (target, expr) in enumerate(queries):
            runs[index].append(measurer.run(expr, target.instant, load))
        load_walls.append(time.perf_counter() - began)
    out_queries = []
    for index, (target, expr) in enumerate(queries):
        first = runs[index][0]
        start = load.end if target.instant else load.aligned()[0]
        entry = {
            "panel": target.panel,
            "ref": target.ref,
            "instant": target.instant,
            "expr": expr,
            "series": measurer.series_touched(expr, start, load.end),
            "series_returned": first["series_returned"],
            "wall": statistics.median(r["wall"] for r in runs[index]),
        }
        if measurer.stats:
            entry.update(
                samples=first["samples"],
                peak=first["peak"],
                exec=statistics.median(r["exec"] for r in runs[index]),
            )
        out_queries.append(entry)
    totals: dict[str, Any] = {
        "queries": len(queries),
        "series": sum(q["series"] for q in out_queries),
        "wall": statistics.median(load_walls),
        "walls": load_walls,
    }
    if measurer.stats:
        totals.update(
            samples=sum(q["samples"] for q in out_queries),
            exec=sum(q["exec"] for q in out_queries),
            over_default_max_samples=[q["panel"] for q in out_queries if q["peak"] > PROMETHEUS_DEFAULT_MAX_SAMPLES],
        )
    return {**totals, "per_query": out_queries}


# --------------------------------------------------------------------------------------------- the run


class Bench:
    """The build, its rules and dashboards, and the measurements of one fleet size after another."""

    def __init__(self, args: argparse.Namespace, scratch: Path):
        self.args, self.scratch = args, scratch
        self.config = config_module.load()
        self.ctx = Context(self.config)
        self.groups = [g for gs in pipeline.rule_groups(self.ctx).values() for g in gs]
        generated = pipeline.generate(self.config)
        self.dashboards = [json.loads(t) for p, t in generated.items() if p.startswith("grafana/dashboards/")]
        self.nvidia = {**json.loads(NVIDIA_DASHBOARD.read_text()), "uid": NVIDIA_UID}
        self.before = (
            [json.loads(path.read_text()) for path in sorted(args.before.glob("*.json"))] if args.before else []
        )
        self.rule_files = []
        for path, text in generated.items():
            if path.startswith("prometheus/rules/"):
                target = scratch / Path(path).name
                target.write_text(text)
                self.rule_files.append(target)
        self.layers = workload.recording_layer_files(
            [g for g in self.groups if any(hasattr(r, "record") for r in g.rules)], scratch
        )
        self.expander = workload.Expander(self.config, self.groups)
        self.scrape = duration_seconds(self.ctx.scrape_interval)
        panel_names = {
            name
            for dashboard in [*self.dashboards, self.nvidia, *self.before]
            for target in workload.targets(dashboard)
            for name in lint.metric_names(
                workload.substitute(target.expr, {}, workload.Load(0, 3600, self.scrape).durations())
            )
        }
        self.names = workload.raw_names_read(self.config, self.groups) | panel_names | {"up"}

    def hours(self, gpus: int) -> float:
        if self.args.hours:
            return self.args.hours
        return 1.0 if self.args.quick else 6.0 if gpus <= LARGE_FLEET else 2.0

    def run(self, gpus: int) -> dict[str, Any]:
        began = time.monotonic()
        hours = self.hours(gpus)
        live = self.args.live_cycles > 0
        on_prometheus = not self.args.central_only
        on_victoria = "victoriametrics" in self.args.backends and not self.args.rules_only
        # The window ends after the live rule evaluations (see the module docstring): how long the run takes to
        # get there is estimated from the number of samples, a little generously (VictoriaMetrics imports and
        # replays about five times faster than Prometheus backfills, compacts and loads the dashboards).
        per_gpu_hour = 0.15 * on_prometheus + 0.03 * on_victoria
        margin = 0 if not live else (900 if on_prometheus else 600) + gpus * hours * per_gpu_hour
        end = time.time() + margin if live else datetime(2026, 1, 1, tzinfo=UTC).timestamp() + hours * 3600
        start = datetime.fromtimestamp(end - hours * 3600, UTC)
        sim = Simulation(
            self.config, nodes=gpus // GPUS_PER_NODE, gpus_per_node=GPUS_PER_NODE, hours=hours, seed=1, start=start
        )
        first, last = sim.window.start, sim.window.start + sim.window.duration - sim.window.step
        hero = next(j for j in sim.cluster.jobs if j.id == sim.cluster.roles.hero_job)
        preferred = {"hpc_job": hero.id, "node": sim.cluster.nodes[hero.nodes[0]].name}
        result: dict[str, Any] = {
            "gpus": gpus,
            "nodes": gpus // GPUS_PER_NODE,
            "jobs": len(sim.cluster.jobs),
            "hero_job_gpus": len(hero.gpus),
            "hours": hours,
            "range_hours": hours,
            "phases": [],
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        }
        range_load = workload.Load(last - hours * 3600 + sim.window.step, last, self.scrape)
        result["step"] = range_load.interval_seconds
        if on_prometheus:
            result["prometheus"] = self._prometheus(sim, first, last, range_load, preferred, result)
        if on_victoria:
            self._victoria(sim, first, last, range_load, preferred, result)
        result["elapsed"] = time.monotonic() - began
        result["benchmark_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result["tools_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        return result

    def _phase(self, result: dict[str, Any], name: str, began: float) -> None:
        seconds = round(time.monotonic() - began, 1)
        result["phases"].append([name, seconds])
        print(f"  {result['gpus']:,} GPUs: {name} {seconds:.0f}s", file=sys.stderr, flush=True)

    def _prometheus(
        self, sim: Simulation, first: int, last: int, load: workload.Load, preferred: dict, result: dict
    ) -> dict[str, Any]:
        prometheus = BenchPrometheus(lookback_delta=f"{LOOKBACK_SECONDS}s")
        try:
            began = time.monotonic()
            folder = Path(tempfile.mkdtemp(dir=self.scratch))
            stats = backfill.simulation(prometheus.load_openmetrics, sim, self.names, folder, self.args.chunk_bytes)
            result.update(raw_series=stats.series, raw_samples=stats.samples)
            prometheus.start()
            self._phase(result, "simulate and backfill raw (Prometheus)", began)
            began = time.monotonic()
            prometheus.backfill_rules(self.layers, first, last, f"{self.scrape}s")
            self._phase(result, "backfill recording rules (Prometheus)", began)
            out: dict[str, Any] = {}
            if not self.args.quick:
                began = time.monotonic()
                out["compaction"] = _settle(prometheus)
                self._phase(result, "compaction", began)
            if self.args.live_cycles:
                began = time.monotonic()
                out["live_rules"] = self._live_rules(prometheus, first, last)
                self._phase(result, "live rule evaluation", began)
            if not self.args.rules_only:
                began = time.monotonic()
                out["dashboards"] = self._dashboards(Measurer(prometheus, stats=True), load, preferred)
                self._phase(result, "dashboard loads (Prometheus)", began)
            began = time.monotonic()
            out["rule_queries"] = self._rule_queries(Measurer(prometheus, stats=True), last)
            self._phase(result, "rules as queries", began)
            out["memory_mib"] = _memory(prometheus)
            recorded, _ = _request(prometheus, "/api/v1/query", {"query": 'count({__name__=~".+:.+"})', "time": last})
            out["recorded_series"] = int(float(recorded["result"][0]["value"][1])) if recorded["result"] else 0
            out["blocks"] = _metrics(prometheus).get("prometheus_tsdb_blocks_loaded")
            return out
        finally:
            prometheus.stop()

    def _victoria(
        self, sim: Simulation, first: int, last: int, load: workload.Load, preferred: dict, result: dict
    ) -> None:
        """VictoriaMetrics loaded with the same data and its records replayed by vmalert; then the central ruler
        live (result["central"]) and the dashboard loads (result["victoriametrics"], not with --central-only)."""
        # The central store's lookback is its Prometheus's (docs/scale-out.md, "What the central store needs").
        victoria = VictoriaMetrics(lookback_delta=f"{LOOKBACK_SECONDS}s")
        try:
            began = time.monotonic()
            victoria.start()
            imports = OneAhead()
            batches = JsonLineBatches(VM_BATCH_BYTES, lambda lines: imports.submit(victoria.import_jsonl, lines))
            write(sim, "vm", batches, names=self.names)  # type: ignore[arg-type]
            batches.flush()
            imports.wait()
            self._phase(result, "simulate and import raw (VictoriaMetrics)", began)
            began = time.monotonic()
            victoria.backfill_rules(self.layers, first, last, f"{self.scrape}s")
            self._phase(result, "backfill recording rules (vmalert)", began)
            if self.args.live_cycles:
                began = time.monotonic()
                result["central"] = self._central_ruler(victoria, first, last)
                self._phase(result, "central ruler live (vmalert)", began)
            if self.args.central_only:
                return
            began = time.monotonic()
            dashboards = self._dashboards(Measurer(victoria, stats=False), load, preferred)
            self._phase(result, "dashboard loads (VictoriaMetrics)", began)
            result["victoriametrics"] = {"dashboards": dashboards, "memory_mib": _memory(victoria)}
        finally:
            victoria.stop()

    def _dashboards(self, measurer: Measurer, load: workload.Load, preferred: dict) -> dict[str, Any]:
        """(a), (b) and (c): each dashboard's queries with its variables resolved on this server."""
        out: dict[str, Any] = {}
        durations = load.durations()
        for variant, dashboard in [
            *(("a", d) for d in self.dashboards),
            ("c", self.nvidia),
            *(("0", d) for d in self.before),
        ]:
            values = workload.variable_values(dashboard, measurer.server, load.end, durations, preferred)
            queries = [(t, workload.substitute(t.expr, values, durations)) for t in workload.targets(dashboard)]
            variants = {variant: queries}
            if variant == "a":
                variants["b"] = [(t, self.expander.expand(expr)) for t, expr in queries]
            for name, chosen in variants.items():
                loads = self.args.loads if name in ("a", "c") else self.args.raw_loads
                out.setdefault(dashboard["uid"], {})[name] = measure_dashboard(measurer, chosen, load, loads)
        return out

    def _live_rules(self, prometheus: BenchPrometheus, first: int, last: int) -> dict[str, Any]:
        """Prometheus evaluating every rule group live for a few cycles: each group's evaluation time per cycle."""
        now = time.time()
        note = ""
        if now > last:
            return {"skipped": f"the data ended {now - last:.0f}s before the live evaluation could start"}
        if now < first + 3600:
            note = f"only {(now - first) / 60:.0f} minutes of data before the evaluation time"
        prometheus.rule_files = self.rule_files
        prometheus.restart()
        cycles: dict[str, dict[str, float]] = defaultdict(dict)
        intervals: dict[str, float] = {}
        wanted = self.args.live_cycles
        usage = Usage({"prometheus": prometheus})
        try:
            deadline = self._live_deadline()
            while time.monotonic() < deadline:
                data, _ = _request(prometheus, "/api/v1/rules", {}, method="GET")
                for group in data["groups"]:
                    intervals[group["name"]] = group["interval"]
                    if not group["lastEvaluation"].startswith("0001"):
                        cycles[group["name"]][group["lastEvaluation"]] = group["evaluationTime"]
                if intervals and all(len(cycles[name]) >= wanted for name in intervals):
                    break
                time.sleep(1)
            resources = usage.measured()
        finally:
            prometheus.rule_files = []
            prometheus.restart()
        groups = {
            name: {
                "interval": intervals[name],
                "cycles": len(cycles[name]),
                "seconds": statistics.median(cycles[name].values()) if cycles[name] else None,
                "max_seconds": max(cycles[name].values(), default=None),
            }
            for name in sorted(intervals)
        }
        return {"evaluated_at": now, "note": note, "groups": groups, "resources": resources["prometheus"]}

    def _live_deadline(self) -> float:
        return time.monotonic() + (self.args.live_cycles + 2) * max(duration_seconds(g.interval) for g in self.groups)

    def _central_ruler(self, victoria: VictoriaMetrics, first: int, last: int) -> dict[str, Any]:
        """vmalert as the central ruler runs it, on this VictoriaMetrics, for a few cycles at "now" inside the data:
        each group's evaluation time per cycle, and what vmalert and VictoriaMetrics used meanwhile."""
        now = time.time()
        if now > last:
            return {"skipped": f"the data ended {now - last:.0f}s before the central ruler could start"}
        note = f"only {(now - first) / 60:.0f} minutes of data before the evaluation time" if now < first + 3600 else ""
        config_file = self.scratch / "alertmanager.yml"
        # Alerts go to an Alertmanager, as the central ruler's do; it notifies nobody.
        config_file.write_text(yaml.safe_dump({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}))
        alertmanager = Alertmanager(config_file)
        alertmanager.port = free_port()
        ruler = VMAlert(self._central_files(victoria, f"127.0.0.1:{alertmanager.port}"))
        try:
            alertmanager.start()
            # VictoriaMetrics may still merge the parts of the import in the background: its CPU before the ruler
            # starts, over as long, tells how much of the figure below is not the ruler's queries and writes.
            idle = Usage({"victoriametrics": victoria})
            time.sleep(CENTRAL_IDLE_SECONDS)
            before = idle.measured()["victoriametrics"]
            ruler.start()
            usage = Usage({"vmalert": ruler, "victoriametrics": victoria})
            wanted, expected = self.args.live_cycles, {group.name for group in self.groups}
            cycles, deadline = CycleTimes(), self._live_deadline()
            while time.monotonic() < deadline:
                with urllib.request.urlopen(ruler.url + "/metrics", timeout=60) as response:
                    cycles.add(response.read().decode())
                if all(len(cycles.seconds[name]) >= wanted for name in expected):
                    break
                time.sleep(1)
            resources = usage.measured()
            groups = cycles.groups()
            executions = _metrics(ruler)
        finally:
            ruler.stop()
            alertmanager.stop()
        return {
            "evaluated_at": now,
            "note": note,
            "vmalert_version": CENTRAL_VMALERT_VERSION,
            "groups": groups,
            # A rule that fails is cheap: the figures hold only with no failures.
            "rule_executions": executions.get("vmalert_execution_total"),
            "rule_failures": executions.get("vmalert_execution_errors_total"),
            "resources": resources,
            "victoriametrics_before": before,
        }

    def _central_files(self, victoria: VictoriaMetrics, alertmanager: str) -> Path:
        """out/scale-out/central/ of a sharded site on this config whose central store is `victoria`: the rule
        files and vmalert's flags, as the build writes them; the flags file's path."""
        site = self.scratch / "central-site.yaml"
        central = {"url": victoria.url, "vmalert_version": CENTRAL_VMALERT_VERSION}
        site.write_text(
            yaml.safe_dump(
                {"scrape": {"alertmanagers": [alertmanager]}, "scale_out": {"topology": "sharded", "central": central}}
            )
        )
        out = self.scratch / "out"
        for path, text in scale_out.files(pipeline.model(config_module.load(site))).items():
            if path.startswith(f"{scale_out.CENTRAL_DIR}/"):
                (out / path).parent.mkdir(parents=True, exist_ok=True)
                (out / path).write_text(text)
        return out / scale_out.CENTRAL_DIR / scale_out.VMALERT_FLAGS

    def _rule_queries(self, measurer: Measurer, last: int) -> dict[str, Any]:
        """Each group's rules run as instant queries at three moments near the end: samples and seconds per cycle."""
        out = {}
        moments = [last - 1200, last - 600, last]
        for group in self.groups:
            runs = [
                [measurer.run(rule.expr, True, workload.Load(moment, moment, self.scrape)) for moment in moments]
                for rule in group.rules
            ]
            per_rule = {
                getattr(rule, "record", None) or getattr(rule, "alert", ""): {
                    "samples": statistics.median(r["samples"] for r in rule_runs),
                    "seconds": statistics.median(r["exec"] for r in rule_runs),
                }
                for rule, rule_runs in zip(group.rules, runs)
            }
            out[group.name] = {
                "interval": duration_seconds(group.interval),
                "rules": len(group.rules),
                "samples": statistics.median(sum(rule_runs[i]["samples"] for rule_runs in runs) for i in range(3)),
                "seconds": statistics.median(sum(rule_runs[i]["exec"] for rule_runs in runs) for i in range(3)),
                "per_rule": per_rule,
            }
        return out


def with_rules_of(earlier: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """A size's results with the rule groups of a --rules-only run: the dashboards stay those of the full run
    (rules do not change what a dashboard reads), the run that measured the rules is named beside them."""
    prometheus = {**earlier["prometheus"]}
    for key in ("live_rules", "rule_queries"):
        prometheus[key] = measured["prometheus"][key]
    remeasured = {key: measured[key] for key in ("date", "elapsed", "phases")}
    return {**earlier, "prometheus": prometheus, "rules_remeasured": remeasured}


def with_central_of(earlier: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """A size's results with the central ruler of a --central-only run (same simulated data, VictoriaMetrics
    only), the run named beside it; everything else stays the full run's."""
    run = {key: measured[key] for key in ("date", "elapsed", "phases")}
    return {**earlier, "central": {**measured["central"], "run": run}}


def _settle(prometheus: Prometheus, quiet: float = 70.0, limit: float = 3600.0) -> dict[str, Any]:
    """Wait until Prometheus has merged the overlapping backfilled blocks (vertical compaction starts within a
    minute of start and runs in the background): the block count and compactions stay unchanged for `quiet`
    seconds. Queries then read one block per time range, as on a server that scraped the data."""
    began = time.monotonic()
    blocks_before = _metrics(prometheus).get("prometheus_tsdb_blocks_loaded")
    previous = None
    while time.monotonic() - began < limit:
        time.sleep(quiet)
        metrics = _metrics(prometheus)
        now = (
            metrics.get("prometheus_tsdb_blocks_loaded"),
            metrics.get("prometheus_tsdb_compactions_total"),
            metrics.get("prometheus_tsdb_compaction_duration_seconds_count"),
        )
        if now == previous:
            break
        previous = now
    return {"blocks_before": blocks_before, "blocks_after": previous[0] if previous else None}


# --------------------------------------------------------------------------------------------- report


DASHBOARD_ORDER = (
    "hpcobs-gpu-cluster",
    "hpcobs-network-storage",
    "hpcobs-training",
    "hpcobs-slurm-jobs",
    "hpcobs-security",
    NVIDIA_UID,
)


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _dashboard_row(uid: str, variant: str, measured: dict[str, Any], victoria: dict[str, Any]) -> str:
    over = " (a query over the default max-samples)" if measured["over_default_max_samples"] else ""
    vm = f"{victoria['wall']:.2f}" if victoria else "-"
    return (
        f"| {uid} | ({variant}) {VARIANTS[variant]} | {measured['queries']} | {_count(measured['samples'])}{over} | "
        f"{_count(measured['series'])} | {measured['exec']:.2f} | {measured['wall']:.2f} | {vm} |"
    )


def summary(results: dict[str, Any]) -> list[str]:
    """Samples per load of every dashboard and variant, and the slowest rule group, by fleet size."""
    sizes = [results["sizes"][key] for key in sorted(results["sizes"], key=int)]
    head = " | ".join(f"{size['gpus']:,} GPUs ({size['range_hours']:g} h)" for size in sizes)
    out = [f"| dashboard | variant | {head} |", "|---|---|" + "---|" * len(sizes)]
    for uid in DASHBOARD_ORDER:
        for variant in VARIANTS:
            cells = [size["prometheus"]["dashboards"].get(uid, {}).get(variant) for size in sizes]
            if any(cells):
                values = " | ".join(_count(cell["samples"]) if cell else "-" for cell in cells)
                out.append(f"| {uid} | ({variant}) | {values} |")
    slowest = []
    for size in sizes:
        groups = size["prometheus"].get("live_rules", {}).get("groups", {})
        name = max(groups, key=lambda group: groups[group]["seconds"] or 0, default=None)
        slowest.append(
            f"{name}: {100 * groups[name]['seconds'] / groups[name]['interval']:.1f}%" if name is not None else "-"
        )
    out.append(f"| slowest rule group | (% of its interval) | {' | '.join(slowest)} |")
    return out


def _extrapolate(points: list[tuple[int, float]], gpus: int) -> float:
    """The line through the two largest sizes measured, at `gpus`: growth no faster than linear keeps it an
    upper bound where the cost grows with nodes and jobs, and it says nothing more than the trend."""
    (g1, v1), (g2, v2) = points[-2:]
    return v2 + (v2 - v1) / (g2 - g1) * (gpus - g2)


def _goal_values(size: dict[str, Any]) -> dict[str, float | None]:
    """The issue's goals' quantities for one size (see GOALS)."""
    dashboards = size["prometheus"]["dashboards"]

    def samples(uid: str, variant: str) -> float | None:
        return dashboards.get(uid, {}).get(variant, {}).get("samples")

    groups = size["prometheus"].get("live_rules", {}).get("groups", {})
    return {
        "gpu_cluster": samples("hpcobs-gpu-cluster", "a"),
        "gpu_cluster_b": samples("hpcobs-gpu-cluster", "b"),
        "nvidia": samples(NVIDIA_UID, "c"),
        "largest": max(samples(uid, "a") or 0 for uid in DASHBOARD_ORDER[:-1]),
        "network": samples("hpcobs-network-storage", "a"),
        "network_before": samples("hpcobs-network-storage", "0"),
        "slowest_group": max((g["seconds"] / g["interval"] for g in groups.values() if g["seconds"]), default=None),
        "slowest_group_alone": max(
            (g["seconds"] / g["interval"] for g in size["prometheus"].get("rule_queries", {}).values()), default=None
        ),
    }


# The issue's goals: label, the quantity from _goal_values' quantities, the bound, at least (True) or at most.
GOALS: tuple[tuple[str, Callable[[dict[str, Any]], float | None], float, bool], ...] = (
    ("GPU cluster: 12239 (c) / hpcobs (a) samples", lambda v: v["nvidia"] / v["gpu_cluster"], 50, True),
    ("GPU cluster: without records (b) / hpcobs (a)", lambda v: v["gpu_cluster_b"] / v["gpu_cluster"], 20, True),
    ("largest hpcobs dashboard load (a), samples", lambda v: v["largest"], SAMPLES_BUDGET, False),
    (
        "network & storage: before (0) / now (a)",
        lambda v: v["network_before"] / v["network"] if v["network_before"] else None,
        20,
        True,
    ),
    ("slowest rule group, share of its interval", lambda v: v["slowest_group"], 0.10, False),
    # The same group's own cost: its rules run one after the other as queries, no other group contending for
    # the cores (the live figure above includes waiting for one of this machine's cores).
    ("slowest rule group alone (as queries), share", lambda v: v["slowest_group_alone"], 0.10, False),
)


def goal_lines(results: dict[str, Any], extrapolate_to: int = 16384) -> list[str]:
    """Each goal at each size measured and, from the two largest sizes with the same range, at `extrapolate_to`
    GPUs (each quantity extrapolated on its own, then the goal computed)."""
    sizes = [results["sizes"][key] for key in sorted(results["sizes"], key=int)]
    measured = [(size["gpus"], _goal_values(size)) for size in sizes]
    same_range = [m for m, size in zip(measured, sizes) if size["range_hours"] == sizes[-1]["range_hours"]]
    extrapolated = None
    if len(same_range) >= 2 and extrapolate_to > same_range[-1][0]:
        extrapolated = {
            key: _extrapolate([(gpus, values[key]) for gpus, values in same_range], extrapolate_to)
            if all(values[key] is not None for _, values in same_range[-2:])
            else None
            for key in same_range[-1][1]
        }
    head = " | ".join(f"{gpus:,} GPUs" for gpus, _ in measured)
    extra = f" | {extrapolate_to:,} GPUs (extrapolated) |" if extrapolated else " |"
    out = [f"| goal | bound | {head}{extra}", "|---|---|" + "---|" * (len(measured) + bool(extrapolated))]
    for label, quantity, bound, at_least in GOALS:
        columns = [values for _, values in measured] + ([extrapolated] if extrapolated else [])
        cells = []
        for values in columns:
            try:
                value = quantity(values)
            except (TypeError, ZeroDivisionError):
                value = None
            if value is None:
                cells.append("-")
                continue
            met = value >= bound if at_least else value <= bound
            shown = f"{value:,.1f}x" if at_least else (f"{value:.1%}" if bound < 1 else f"{value:,.0f}")
            cells.append(f"{shown} ({'met' if met else 'NOT met'})")
        limit = f">= {bound:g}x" if at_least else (f"<= {bound:.0%}" if bound < 1 else f"<= {bound:,.0f}")
        out.append(f"| {label} | {limit} | {' | '.join(cells)} |")
    return out


def growth_lines(results: dict[str, Any]) -> list[str]:
    """How samples per load grow between the smallest and the largest size with the same range, against the
    GPUs: an exponent of 1 is linear in GPUs, 0 constant."""
    sizes = [results["sizes"][key] for key in sorted(results["sizes"], key=int)]
    sizes = [size for size in sizes if size["range_hours"] == sizes[-1]["range_hours"]]
    if len(sizes) < 2:
        return []
    first, last = sizes[0], sizes[-1]
    factor = last["gpus"] / first["gpus"]
    out = [
        f"| dashboard (or rules) | variant | {first['gpus']:,} -> {last['gpus']:,} GPUs (x{factor:g}) "
        "| growth exponent |",
        "|---|---|---|---|",
    ]
    for uid in DASHBOARD_ORDER:
        for variant in VARIANTS:
            pair = [
                size["prometheus"]["dashboards"].get(uid, {}).get(variant, {}).get("samples") for size in (first, last)
            ]
            if pair[0] and pair[1]:
                grown = pair[1] / pair[0]
                out.append(f"| {uid} | ({variant}) | x{grown:,.2f} | {math.log(grown) / math.log(factor):.2f} |")
    for label, total in RULE_TOTALS.items():
        pair = [total(size["prometheus"]) for size in (first, last)]
        if pair[0] and pair[1]:
            grown = pair[1] / pair[0]
            out.append(f"| {label} | | x{grown:,.2f} | {math.log(grown) / math.log(factor):.2f} |")
    return out


# Seconds of rule evaluation per cycle, every group together: live, and each group's rules run as queries.
RULE_TOTALS: dict[str, Callable[[dict[str, Any]], float]] = {
    "all rule groups, live s per cycle": lambda prometheus: sum(
        g["seconds"] or 0 for g in prometheus.get("live_rules", {}).get("groups", {}).values()
    ),
    "all rule groups as queries, s per cycle": lambda prometheus: sum(
        g["seconds"] for g in prometheus.get("rule_queries", {}).values()
    ),
}


def tables(results: dict[str, Any]) -> str:
    """Markdown: the summary across sizes, the goals and the growth; per size the dashboards, the ratios, the
    rule groups, memory and elapsed time."""
    lines = ["### Samples per dashboard load", "", *summary(results), ""]
    lines += ["### Goals", "", *goal_lines(results), ""]
    growth = growth_lines(results)
    lines += ["### Growth", "", *growth, ""] if growth else []
    central = central_summary(results)
    lines += ["### Central ruler", "", *central, ""] if central else []
    for key in sorted(results["sizes"], key=int):
        size = results["sizes"][key]
        prometheus = size["prometheus"]
        victoria = size.get("victoriametrics", {}).get("dashboards", {})
        lines += [
            f"#### {size['gpus']:,} GPUs ({size['nodes']:,} nodes x {GPUS_PER_NODE}; {size['jobs']:,} jobs, the "
            f"largest on {size['hero_job_gpus']:,} GPUs; {size['hours']:g} h of data, {size['range_hours']:g} h "
            f"range, step {size['step']:g} s)",
            "",
            "| dashboard | variant | queries | samples | series | Prometheus exec s | Prometheus load wall s "
            "| VictoriaMetrics load wall s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for uid in DASHBOARD_ORDER:
            for variant in VARIANTS:
                measured = prometheus["dashboards"].get(uid, {}).get(variant)
                if measured:
                    lines.append(_dashboard_row(uid, variant, measured, victoria.get(uid, {}).get(variant, {})))
        lines += ["", *ratio_lines(prometheus["dashboards"]), "", *rule_lines(prometheus), "", *central_lines(size)]
        memory = prometheus["memory_mib"]
        lines += [
            "",
            f"Series stored: {size['raw_series']:,} raw ({size['raw_samples']:,} samples) and "
            f"{prometheus['recorded_series']:,} recorded at the end of the window. Prometheus resident memory: "
            f"{memory['VmRSS']:,.0f} MiB after the loads, {memory['VmHWM']:,.0f} MiB peak"
            + (
                f"; VictoriaMetrics {size['victoriametrics']['memory_mib']['VmRSS']:,.0f} MiB, "
                f"{size['victoriametrics']['memory_mib']['VmHWM']:,.0f} MiB peak"
                if "victoriametrics" in size
                else ""
            )
            + f". Elapsed: {size['elapsed'] / 60:.0f} min ("
            + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in size["phases"])
            + ")."
            + _remeasured_note(size),
            "",
        ]
    return "\n".join(lines)


def _mib(memory: dict[str, float] | None) -> str:
    return "-" if not memory else f"{memory['VmRSS']:,.0f}, {memory['VmHWM']:,.0f}"


def _cores(resources: dict[str, Any] | None) -> str:
    return "-" if not resources else f"{resources['cores']:.2f} ({resources['cpu_seconds']:.0f} s)"


def central_summary(results: dict[str, Any]) -> list[str]:
    """The central ruler against one Prometheus, by fleet size: seconds of rule evaluation per cycle, every group
    together, cores used during the live cycles and resident memory."""
    sizes = [
        results["sizes"][key]
        for key in sorted(results["sizes"], key=int)
        if results["sizes"][key].get("central", {}).get("groups")
    ]
    if not sizes:
        return []
    out = [
        "| GPUs | all groups per cycle, s: Prometheus / vmalert | slowest group on vmalert (% of interval) "
        "| cores (CPU s) during the cycles: Prometheus / vmalert / VictoriaMetrics | VictoriaMetrics idle before "
        "| resident MiB (now, peak): Prometheus / vmalert / VictoriaMetrics |",
        "|---|---|---|---|---|---|",
    ]
    for size in sizes:
        central, live = size["central"], size.get("prometheus", {}).get("live_rules", {})
        ours = central["resources"]
        theirs = live.get("resources")
        slowest = max(central["groups"], key=lambda name: central["groups"][name]["seconds"])
        group = central["groups"][slowest]
        prometheus_total = sum(g["seconds"] or 0 for g in live.get("groups", {}).values())
        out.append(
            f"| {size['gpus']:,} | {f'{prometheus_total:.2f}' if prometheus_total else '-'} / "
            f"{_central_total(central):.2f} | {slowest}: "
            f"{100 * group['seconds'] / group['interval']:.1f}% | {_cores(theirs)} / {_cores(ours['vmalert'])} / "
            f"{_cores(ours['victoriametrics'])} | {central['victoriametrics_before']['cores']:.2f} | "
            f"{_mib(theirs and theirs['memory_mib'])} / {_mib(ours['vmalert']['memory_mib'])} / "
            f"{_mib(ours['victoriametrics']['memory_mib'])} |"
        )
    return out


def _central_total(central: dict[str, Any]) -> float:
    return sum(group["seconds"] for group in central["groups"].values())


def central_lines(size: dict[str, Any]) -> list[str]:
    """Every rule group's evaluation time on the central ruler beside Prometheus's, the costliest first."""
    central = size.get("central")
    if not central:
        return []
    if "skipped" in central:
        return [f"Central ruler: {central['skipped']}.", ""]
    prometheus = size.get("prometheus", {}).get("live_rules", {}).get("groups", {})
    out = [
        f"Central ruler (vmalert {central['vmalert_version']} on VictoriaMetrics, the generated central rule files):",
        "",
        "| rule group | interval | vmalert s (median, max) | % of interval | cycles (missed) | Prometheus live s |",
        "|---|---|---|---|---|---|",
    ]
    for name, group in sorted(central["groups"].items(), key=lambda item: -item[1]["seconds"]):
        theirs = prometheus.get(name, {}).get("seconds")
        out.append(
            f"| {name} | {group['interval']:g} s | {group['seconds']:.3f}, {group['max_seconds']:.3f} | "
            f"{100 * group['seconds'] / group['interval']:.1f}% | {group['cycles']:.0f} ({group['missed']:.0f}) | "
            + ("-" if theirs is None else f"{theirs:.3f}")
            + " |"
        )
    out.append(f"| all groups | | {_central_total(central):.2f} | | | |")
    out += ["", f"Rule executions {central['rule_executions']:,.0f}, failed {central['rule_failures']:,.0f}."]
    run = central.get("run")
    if run:
        out += [
            "",
            f"Measured {run['date']} with --central-only (same simulated data, VictoriaMetrics only: "
            f"{run['elapsed'] / 60:.0f} min)" + (f"; {central['note']}" if central["note"] else "") + ".",
        ]
    return [*out, ""]


def _remeasured_note(size: dict[str, Any]) -> str:
    again = size.get("rules_remeasured")
    if not again:
        return ""
    return (
        f" The rule groups were measured again after a rule change ({again['date']}, --rules-only, same data and "
        f"method, no dashboard loads: {again['elapsed'] / 60:.0f} min); the dashboards, memory and series are the "
        "full run's."
    )


def ratio_lines(dashboards: dict[str, Any]) -> list[str]:
    """Pair-by-pair ratios of samples per load, in the same run: how many times (a) is cheaper."""
    nvidia = dashboards[NVIDIA_UID]["c"]
    out = [
        "| dashboard | (b) / (a) samples | (c) / (a) samples | (0) / (a) samples | (b) / (a) wall | (c) / (a) wall |",
        "|---|---|---|---|---|---|",
    ]
    for uid in DASHBOARD_ORDER[:-1]:
        variants = dashboards.get(uid)
        if not variants:
            continue
        own = variants["a"]

        def times(other: dict[str, Any] | None, key: str = "samples", own: dict[str, Any] = own) -> str:
            # "-": not measured, or nothing to divide by (a dashboard silent on a healthy cluster reads nothing).
            return "-" if other is None or not own[key] else f"{other[key] / own[key]:,.1f}x"

        out.append(
            f"| {uid} | {times(variants['b'])} | {times(nvidia)} | {times(variants.get('0'))} | "
            f"{times(variants['b'], 'wall')} | {times(nvidia, 'wall')} |"
        )
    return out


def rule_lines(prometheus: dict[str, Any]) -> list[str]:
    """Every rule group's evaluation time per cycle against its interval, the costliest first."""
    live = prometheus.get("live_rules", {})
    measured = live.get("groups", {})
    out = [
        "| rule group | interval | live evaluation s (median, max) | % of interval | samples per cycle | "
        "seconds as queries |",
        "|---|---|---|---|---|---|",
    ]
    order = sorted(
        prometheus["rule_queries"].items(),
        key=lambda item: -(measured.get(item[0], {}).get("seconds") or item[1]["seconds"]),
    )
    for name, queried in order:
        seconds, interval = measured.get(name, {}).get("seconds"), queried["interval"]
        evaluation = (
            f"{seconds:.3f}, {measured[name]['max_seconds']:.3f} | {100 * seconds / interval:.1f}%"
            if seconds is not None
            else "- | -"
        )
        out.append(
            f"| {name} | {interval:g} s | {evaluation} | {_count(queried['samples'])} | {queried['seconds']:.3f} |"
        )
    if measured:
        total = sum(group["seconds"] or 0 for group in measured.values())
        out.append(f"| all groups | | {total:.2f} | | | |")
    if live.get("skipped") or live.get("note"):
        out += ["", f"Live evaluation: {live.get('skipped') or live.get('note')}."]
    used = live.get("resources")
    if used:
        out += [
            "",
            f"Prometheus during the live cycles: {used['cpu_seconds']:.0f} CPU s in {used['wall_seconds']:.0f} s "
            f"({used['cores']:.2f} cores), resident {_mib(used['memory_mib'])} MiB (now, peak).",
        ]
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    """Samples per dashboard load against fleet size: (a) solid, (b) dashed, (c) black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results["sizes"].values(), key=lambda s: s["gpus"])
    gpus = [s["gpus"] for s in sizes]
    figure, axes = plt.subplots(figsize=(9, 5.5), dpi=110)
    colours = dict(zip(DASHBOARD_ORDER[:-1], ("tab:green", "tab:blue", "tab:orange", "tab:purple", "tab:brown")))
    for uid, colour in colours.items():
        for variant, style, marker in (("a", "-", "o"), ("b", "--", "^")):
            # A log scale cannot draw 0 (the security dashboard reads nothing on a healthy cluster).
            values = [s["prometheus"]["dashboards"][uid][variant]["samples"] or float("nan") for s in sizes]
            label = f"{uid.removeprefix('hpcobs-')} ({variant})"
            axes.plot(gpus, values, style, color=colour, marker=marker, label=label)
    axes.plot(
        gpus,
        [s["prometheus"]["dashboards"][NVIDIA_UID]["c"]["samples"] for s in sizes],
        "-",
        color="black",
        marker="s",
        linewidth=2,
        label="NVIDIA 12239 (c)",
    )
    axes.axhline(SAMPLES_BUDGET, color="grey", linestyle=":", label="5 M samples budget")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(gpus, [f"{g:,}" for g in gpus])
    axes.set_xlabel("GPUs (nodes of 8)")
    axes.set_ylabel("samples touched per dashboard load")
    hours = sorted({s["range_hours"] for s in sizes})
    figure.suptitle(
        "Dashboard load cost: (a) hpcobs, (b) same panels without recording rules, (c) NVIDIA 12239\n"
        f"Prometheus stats=all, variables at All, {'/'.join(f'{h:g}' for h in hours)} h range, step for 1,000 px; "
        "security (a) reads nothing on a healthy fleet",
        fontsize=9,
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


# --------------------------------------------------------------------------------------------- command line


def _sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part]
    bad = [size for size in sizes if size < GPUS_PER_NODE or size % GPUS_PER_NODE]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad}: sizes are GPU counts, multiples of {GPUS_PER_NODE}")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, help="GPU counts, e.g. 1024,4096,16384")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 128 GPUs, 1 h, one load, Prometheus")
    parser.add_argument(
        "--hours", type=float, help=f"data window and dashboard range (6, or 2 above {LARGE_FLEET:,} GPUs)"
    )
    parser.add_argument("--loads", type=int, help="full loads of (a) and (c); times are their medians (3)")
    parser.add_argument(
        "--raw-loads", type=int, default=1, help="full loads of (b), minutes each at the largest sizes (1)"
    )
    parser.add_argument("--live-cycles", type=int, help="live rule evaluation cycles (4; 0 skips it)")
    parser.add_argument("--backends", help="prometheus,victoriametrics (both; --quick: prometheus)")
    parser.add_argument("--chunk-bytes", type=int, default=OPENMETRICS_DOCUMENT_BYTES, help=argparse.SUPPRESS)
    parser.add_argument(
        "--before",
        type=Path,
        help="a folder of hpcobs dashboards (another build's grafana/dashboards/HPC) to load as variant (0)",
    )
    parser.add_argument("--out", type=Path, help="results JSON, merged with the sizes already in it")
    parser.add_argument(
        "--rules-only",
        action="store_true",
        help="after a rule change: measure the rule groups again for sizes already in --out, keep their dashboards",
    )
    parser.add_argument(
        "--central-only",
        action="store_true",
        help="for sizes already in --out: VictoriaMetrics and the central ruler (vmalert) live only, no Prometheus",
    )
    parser.add_argument("--plot", type=Path, help="PNG of samples per load against fleet size (needs matplotlib)")
    parser.add_argument("--report-only", action="store_true", help="print tables (and --plot) from --out, run nothing")
    args = parser.parse_args()
    # Ended by SIGTERM, still stop the servers and remove the temporary data (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("fleet: terminated (SIGTERM); servers stopped, data removed"))
    args.sizes = args.sizes or ([128] if args.quick else list(DEFAULT_SIZES))
    args.loads = args.loads or (1 if args.quick else 3)
    args.live_cycles = args.live_cycles if args.live_cycles is not None else (0 if args.quick else 4)
    args.backends = (args.backends or ("prometheus" if args.quick else "prometheus,victoriametrics")).split(",")
    if args.central_only:
        args.backends = ["victoriametrics"]

    results: dict[str, Any] = {"sizes": {}}
    if args.out and args.out.exists():
        results = json.loads(args.out.read_text())
    missing = [gpus for gpus in args.sizes if str(gpus) not in results["sizes"]]
    again = "--rules-only" if args.rules_only else "--central-only" if args.central_only else None
    if args.rules_only and args.central_only:
        parser.error("--rules-only measures Prometheus, --central-only the central ruler: one at a time")
    if again and not args.report_only and (not args.out or missing):
        parser.error(f"{again} measures sizes already in --out again; run {missing or args.sizes} in full first")
    if not args.report_only:
        results["machine"] = _machine()
        with tempfile.TemporaryDirectory(prefix="hpcobs-fleet-") as scratch:
            bench = Bench(args, Path(scratch))
            for gpus in args.sizes:
                measured = bench.run(gpus)
                key = str(gpus)
                if args.rules_only:
                    measured = with_rules_of(results["sizes"][key], measured)
                elif args.central_only:
                    measured = with_central_of(results["sizes"][key], measured)
                results["sizes"][key] = measured
                if args.out:
                    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(tables(results))
    if args.plot:
        plot(results, args.plot)


def _machine() -> dict[str, Any]:
    def package(name: str) -> str:
        """The Debian package's version (victoria-metrics prints none)."""
        done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True, timeout=60)
        return done.stdout.strip() or "unknown"

    return {
        "cores": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": sys.version.split()[0],
        "prometheus": package("prometheus"),
        "victoriametrics": package("victoria-metrics"),
        "load_average": os.getloadavg(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }


if __name__ == "__main__":
    main()
