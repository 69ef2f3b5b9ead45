"""Step traces for hpcobs_training: one span per kept step, a child span per phase entered in it.

Which steps are kept is decided at the step's end, before any span object exists, so a dropped step costs a
comparison and a random draw: every step slower than `slow_factor` x the running `slow_quantile` of the rank's
last `slow_window` step durations (the steps a straggler hunt needs), and a `sample_share` of the others (the
baseline to compare them with). OpenTelemetry is imported here only when traces are on.
"""

from __future__ import annotations

import bisect
import importlib.util
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "STEP_SPAN",
    "RESOURCE_ATTRIBUTES",
    "SPAN_ATTRIBUTES",
    "SlidingQuantile",
    "StepTracer",
    "resource_attributes",
    "traces_wanted",
]

STEP_SPAN = "step"
RESOURCE_ATTRIBUTES = ("service.name", "hpc_job", "rank", "node", "local_rank")
SPAN_ATTRIBUTES = ("hpcobs.step", "hpcobs.slow")
DEFAULT_SERVICE = "training"
INSTALL_HINT = "pip install 'hpcobs-training[otel]'"


class SlidingQuantile:
    """The q-quantile (nearest rank) of the last `window` values: a ring buffer in arrival order beside the same
    values sorted, so each update is a bisect and a shift of at most `window` floats, and memory is fixed."""

    def __init__(self, window: int, quantile: float) -> None:
        self.window = window
        self.quantile = quantile
        self.arrivals: list[float] = []
        self.ordered: list[float] = []
        self.oldest = 0  # index in `arrivals` of the value to evict next, once the ring is full

    def value(self) -> float | None:
        """None before the first value."""
        if not self.ordered:
            return None
        # Rounded first: 0.1 x 30 is 3.0000000000000004 in floats, whose ceiling would skip a rank.
        return self.ordered[max(0, math.ceil(round(self.quantile * len(self.ordered), 9)) - 1)]

    def add(self, value: float) -> None:
        if len(self.arrivals) < self.window:
            self.arrivals.append(value)
        else:
            evicted = self.arrivals[self.oldest]
            del self.ordered[bisect.bisect_left(self.ordered, evicted)]
            self.arrivals[self.oldest] = value
            self.oldest = (self.oldest + 1) % self.window
        bisect.insort(self.ordered, value)


def installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it (its parent packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def traces_wanted(environ: Mapping[str, str]) -> bool:
    """The default of `Tracker(traces=None)`: an OTLP endpoint is configured, the SDK is not disabled, no other
    traces exporter was asked for, and the SDK is installed."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    if not (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return False
    return installed("opentelemetry.sdk")


def _exporter(environ: Mapping[str, str]) -> Any:
    """The OTLP span exporter the OTEL_* variables of `environ` ask for. The SDK's exporters read the process
    environment for everything else (headers, timeout, compression, certificates); the endpoint is passed so
    that `Tracker(environ=...)` and the exporter agree on it."""
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    ).strip()
    traces_endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base_endpoint = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "grpc":
        if not installed("opentelemetry.exporter.otlp.proto.grpc"):
            raise ValueError("OTLP protocol grpc: the grpc exporter is not installed (hpcobs-training[otel-grpc])")
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        # The gRPC exporter takes either variable as the whole address: no signal path.
        return GrpcExporter(endpoint=traces_endpoint or base_endpoint or None)
    if protocol not in ("", "http/protobuf"):
        raise ValueError(f"OTLP protocol {protocol!r}: expected http/protobuf or grpc")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    # As the SDK resolves it (_common._resolve_endpoint): the traces variable is the full URL, the general one a
    # base that gets the signal path.
    if not traces_endpoint and base_endpoint:
        traces_endpoint = f"{base_endpoint.removesuffix('/')}/v1/traces"
    return HttpExporter(endpoint=traces_endpoint or None)


def resource_attributes(job: str, rank: str, node: str, local_rank: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The attributes a step's resource carries, in RESOURCE_ATTRIBUTES's order (the TraceQL queries filter on
    them); pass them to your own TracerProvider's Resource when injecting one."""
    service = environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE
    return dict(zip(RESOURCE_ATTRIBUTES, (service, job, rank, node, local_rank), strict=True))


def own_provider(attributes: dict[str, str], environ: Mapping[str, str]) -> Any:
    """A TracerProvider with our resource, sending every span it is given (the keeping is ours, so
    OTEL_TRACES_SAMPLER would only drop more) through a BatchSpanProcessor: the export runs in the SDK's thread,
    never in the training loop."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    except ImportError as error:
        raise ImportError(f"traces: the OpenTelemetry SDK is not installed ({INSTALL_HINT})") from error
    provider = TracerProvider(resource=Resource.create(attributes), sampler=ALWAYS_ON, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_exporter(environ)))
    return provider


class StepTracer:
    """Decides which steps to keep and turns a kept step and its phases into spans: through `provider`, else
    through a provider of its own with `attributes` as resource and the exporter `environ` asks for."""

    def __init__(
        self,
        provider: Any,
        attributes: dict[str, str],
        environ: Mapping[str, str],
        *,
        seed: str,
        slow_factor: float,
        slow_quantile: float,
        slow_window: int,
        sample_share: float,
    ) -> None:
        if not slow_factor > 0:
            raise ValueError(f"slow_factor {slow_factor!r}: expected a positive number")
        if not 0 < slow_quantile <= 1:
            raise ValueError(f"slow_quantile {slow_quantile!r}: expected a number in (0, 1]")
        if not (isinstance(slow_window, int) and slow_window >= 1):
            raise ValueError(f"slow_window {slow_window!r}: expected a positive integer")
        if not 0 <= sample_share <= 1:
            raise ValueError(f"sample_share {sample_share!r}: expected a number in [0, 1]")
        # Built after the checks: a refused keyword must not leave an export thread behind.
        self.owned = provider is None
        self.provider = own_provider(attributes, environ) if provider is None else provider
        from opentelemetry import trace

        self.tracer = self.provider.get_tracer("hpcobs_training")
        self.in_parent = trace.set_span_in_context
        self.durations = SlidingQuantile(slow_window, slow_quantile)
        self.slow_factor = slow_factor
        self.sample_share = sample_share
        # Seeded from job and rank: a rerun keeps the same steady steps; ranks draw independently.
        self.random = random.Random(seed)

    def keep(self, seconds: float) -> bool | None:
        """Whether the step that lasted `seconds` is slow (True), sampled (False) or dropped (None). A step is
        judged against the steps before it, so a slow one does not raise its own bar."""
        typical = self.durations.value()
        self.durations.add(seconds)
        if typical is not None and seconds > self.slow_factor * typical:
            return True
        return False if self.random.random() < self.sample_share else None

    def emit(self, number: int, slow: bool, start_ns: int, end_ns: int, phases: Sequence[tuple[str, int, int]]) -> None:
        step = self.tracer.start_span(
            STEP_SPAN, start_time=start_ns, attributes={"hpcobs.step": number, "hpcobs.slow": slow}
        )
        parent = self.in_parent(step)
        for name, phase_start, phase_end in phases:
            self.tracer.start_span(name, context=parent, start_time=phase_start).end(end_time=phase_end)
        step.end(end_time=end_ns)

    def close(self) -> None:
        """Send what is queued and stop the export thread, for a provider of our own; one given to us is its
        owner's to shut down. Blocks at most the exporter's timeout (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT) when the
        collector does not answer."""
        if self.owned:
            self.provider.shutdown()
