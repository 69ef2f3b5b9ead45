"""Benchmark of the training helper's overhead (not a test): what `hpcobs_training` adds to a training step.

    PYTHONPATH=instrumentation python benchmarks/training_helper.py [--runs 5] [--steps 20000] [--memory-steps 100000]

The measured loop is the helper's own cost, with nothing else in it:

    with tracker.step(tokens=..., flops=...):
        with tracker.phase("data"): ...      # and forward, backward, optimizer: 4 phases
        tracker.loss(...)

in three configurations, one after the other in this process:

- metrics: traces off, the textfile throttled as by default (rewritten at most every 15 s);
- traces, dropped: traces on, spans through the SDK's BatchSpanProcessor to an exporter that drops them (the
  sampler and span creation, no encoding or network);
- traces, OTLP/HTTP: traces on as a site runs them, the provider built from OTEL_EXPORTER_OTLP_ENDPOINT, exporting
  over HTTP/protobuf to a receiver on loopback in this process (answers 200 and counts the spans it decodes).

Each configuration: `--runs` timed runs of `--steps` steps (the median run's microseconds per step, and that as a
share of a 1-second step), then `--memory-steps` steps under tracemalloc: the Python heap and the resident set
after the first 1,000 steps and at the end (flat: no growth with steps). An empty step is far shorter than a real
one, so the steady steps' spread decides which are "slow" and kept (the column "kept" counts them), more than
at a real site; the cost per kept step is paid by the same share of steps whatever their length.
"""

import argparse
import gc
import http.server
import os
import statistics
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from hpcobs_training import PHASES, Tracker, tracing
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

LOOP_PHASES = PHASES[:4]  # data, forward, backward, optimizer
WARM_STEPS = 1_000


class DroppingExporter(SpanExporter):
    """Counts the spans it is given and sends none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans):
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class Receiver(http.server.BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP endpoint: decodes each request and answers 200 with an empty response."""

    spans = 0
    body_bytes = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.body_bytes += len(body)
        request = ExportTraceServiceRequest.FromString(body)
        Receiver.spans += sum(len(scoped.spans) for rs in request.resource_spans for scoped in rs.scope_spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *arguments: object) -> None:
        pass  # one line per request would measure the terminal


def loop(tracker: Tracker, steps: int) -> None:
    for _ in range(steps):
        with tracker.step(tokens=4096, flops=1e12):
            for name in LOOP_PHASES:
                with tracker.phase(name):
                    pass
            tracker.loss(2.5)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(make: Callable[[], Tracker], runs: int, steps: int, memory_steps: int) -> dict[str, float]:
    """Microseconds per step and the resident set's growth from the end of the first timed run to the end of the
    last (no tracemalloc: its own tables would be counted; the first run fills the exporter's queue and
    connections once); then the Python heap's growth over each half of a run under tracemalloc."""
    tracker = make()
    loop(tracker, WARM_STEPS)
    timings = []
    rss = []
    for _ in range(runs):
        began = time.perf_counter()
        loop(tracker, steps)
        timings.append((time.perf_counter() - began) / steps)
        rss.append(resident_bytes())
    figures = {"us": statistics.median(timings) * 1e6, "rss": rss[-1] - rss[0]}
    tracker.close()
    tracker = make()
    gc.collect()
    tracemalloc.start()
    loop(tracker, WARM_STEPS)
    heap = [tracemalloc.get_traced_memory()[0]]
    for _ in range(2):
        loop(tracker, (memory_steps - WARM_STEPS) // 2)
        heap.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    tracker.close()
    return figures | {"first half": heap[1] - heap[0], "second half": heap[2] - heap[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per configuration")
    parser.add_argument("--steps", type=int, default=20_000, help="steps per timed run")
    parser.add_argument("--memory-steps", type=int, default=100_000, help="steps of the memory run")
    options = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="hpcobs-training-bench-"))
    dropping = DroppingExporter()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
    kept: dict[str, int] = {}

    def dropped_provider() -> TracerProvider:
        attributes = tracing.resource_attributes("1", "0", "bench", "0", {})
        provider = TracerProvider(resource=Resource.create(attributes))
        provider.add_span_processor(BatchSpanProcessor(dropping))
        return provider

    configurations: dict[str, Callable[[], Tracker]] = {
        "metrics": lambda: Tracker(job="1", textfile_dir=directory, environ={}),
        "traces, dropped": lambda: Tracker(job="1", textfile_dir=directory, tracer_provider=dropped_provider()),
        "traces, OTLP/HTTP": lambda: Tracker(job="1", textfile_dir=directory, environ=endpoint, traces=True),
    }
    print(
        "| configuration | us per step (median run) | share of a 1 s step | spans sent | RSS growth, runs 2 to last "
        "| heap growth, 1st half | heap growth, 2nd half |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, make in configurations.items():
        before = dropping.spans + Receiver.spans
        figures = measure(make, options.runs, options.steps, options.memory_steps)
        kept[name] = dropping.spans + Receiver.spans - before
        print(
            f"| {name} | {figures['us']:.1f} | {figures['us'] / 1e6:.4%} | {kept[name]:,} "
            f"| {figures['rss'] / 1024:+,.0f} KiB | {figures['first half'] / 1024:+,.0f} KiB "
            f"| {figures['second half'] / 1024:+,.0f} KiB |"
        )
    server.shutdown()
    print(
        f"\nPer configuration: {WARM_STEPS:,} + {options.runs} x {options.steps:,} timed steps, then "
        f"{options.memory_steps:,} under tracemalloc; spans sent = kept steps x (1 + {len(LOOP_PHASES)} phases)."
        f" OTLP/HTTP: {Receiver.body_bytes / max(Receiver.spans, 1):.0f} bytes per span received"
        " (protobuf, uncompressed)."
    )


if __name__ == "__main__":
    main()
