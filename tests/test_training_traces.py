"""The training helper's traces (issue 31, point 2): the span tree of a step, its resource, when the OTEL_*
variables switch traces on, and which steps the sampler keeps. Step durations come from a fake clock, so which
step is slow is exact; no test needs a network (the OTLP endpoint is a closed loopback port)."""

import random
import socket
import subprocess
import sys
import time

import hpcobs_training
import pytest
from hpcobs_training import RESOURCE_ATTRIBUTES, SPAN_ATTRIBUTES, STEP_SPAN, Tracker, tracing
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

PHASES = ("data", "forward", "backward", "optimizer")
WALL_ORIGIN = 1_800_000_000.0  # the fake wall clock's reading when the fake monotonic clock reads 0


class FakeClock:
    """Stands for the `time` module inside hpcobs_training: the test moves it, the tracker reads it."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return WALL_ORIGIN + self.now

    def time_ns(self) -> int:
        return round((WALL_ORIGIN + self.now) * 1e9)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(hpcobs_training, "time", fake)
    return fake


@pytest.fixture
def memory():
    """An in-memory exporter behind the provider a test injects."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tracker(tmp_path, provider, **keywords):
    return Tracker(job="42", rank=3, node="n1", textfile_dir=tmp_path, tracer_provider=provider, **keywords)


def run_step(tracker, clock, phase_seconds=(0.001, 0.004, 0.004, 0.001)):
    with tracker.step():
        for name, seconds in zip(PHASES, phase_seconds, strict=True):
            with tracker.phase(name):
                clock.now += seconds


def steps_of(exporter):
    return [span for span in exporter.get_finished_spans() if span.name == STEP_SPAN]


def test_a_kept_step_is_a_span_with_its_phases_as_children_at_their_times(tmp_path, clock, memory):
    provider, exporter = memory
    t = tracker(tmp_path, provider, sample_share=1.0)
    clock.now = 5.0
    run_step(t, clock)
    clock.now += 0.5  # between steps: counts in the metric's step time, not in either span
    run_step(t, clock)
    spans = exporter.get_finished_spans()
    steps = steps_of(exporter)
    assert [s.attributes["hpcobs.step"] for s in steps] == [1, 2]
    assert len(spans) == 2 * (1 + len(PHASES))
    first = steps[0]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == first.context.span_id]
    assert [c.name for c in children] == list(PHASES)
    assert all(c.context.trace_id == first.context.trace_id for c in children)
    assert first.parent is None and steps[1].context.trace_id != first.context.trace_id
    # The fake clock's own readings: the step from 5.000 to 5.010, its phases back to back inside it.
    started = round((WALL_ORIGIN + 5.0) * 1e9)
    ns = [started + ms * 1_000_000 for ms in (0, 1, 5, 9, 10)]
    assert (first.start_time, first.end_time) == (ns[0], ns[-1])
    assert [(c.start_time, c.end_time) for c in children] == list(zip(ns, ns[1:], strict=False))
    assert dict(first.attributes) == {"hpcobs.step": 1, "hpcobs.slow": False}


def test_constants_name_what_is_emitted(tmp_path, clock, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.1")  # seconds, in this SDK: close() gives up at once
    t = Tracker(job="42", rank=3, local_rank=1, node="n1", textfile_dir=tmp_path, traces=True, sample_share=1.0)
    exporter = InMemorySpanExporter()
    t.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    run_step(t, clock)
    (step,) = steps_of(exporter)
    assert step.name == STEP_SPAN
    assert tuple(step.attributes) == SPAN_ATTRIBUTES
    resource = dict(step.resource.attributes)
    assert {key: resource[key] for key in RESOURCE_ATTRIBUTES} == {
        "service.name": "training",
        "hpc_job": "42",
        "rank": "3",
        "node": "n1",
        "local_rank": "1",
    }
    t.close()


def test_service_name_comes_from_otel_service_name():
    attributes = tracing.resource_attributes("7", "0", "n", "0", {"OTEL_SERVICE_NAME": "llama-70b"})
    assert attributes["service.name"] == "llama-70b"
    assert tuple(attributes) == RESOURCE_ATTRIBUTES


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
    ],
)
def test_otel_variables_switch_traces(tmp_path, environ, wanted):
    t = Tracker(job="1", textfile_dir=tmp_path, environ=environ)
    assert (t.tracer_provider is not None) is wanted
    t.close()


def test_keywords_override_the_variables(tmp_path, memory):
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}
    assert Tracker(job="1", textfile_dir=tmp_path, environ=endpoint, traces=False).tracer_provider is None
    provider, _ = memory
    assert Tracker(job="1", textfile_dir=tmp_path, environ={}, tracer_provider=provider).tracer_provider is provider
    assert Tracker(job="1", textfile_dir=tmp_path, environ={}, traces=True).tracer_provider is not None


def test_the_endpoint_is_the_sdks(tmp_path):
    base = Tracker(job="1", textfile_dir=tmp_path, environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"})
    full = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"}
    traces = Tracker(job="1", textfile_dir=tmp_path, environ=full)
    endpoints = [
        t.tracer_provider._active_span_processor._span_processors[0]._batch_processor._exporter._endpoint
        for t in (base, traces)
    ]
    assert endpoints == ["http://c:4318/v1/traces", "http://t:1/x"]


@pytest.mark.parametrize(
    ("protocol", "error"),
    [
        ("http/json", "OTLP protocol 'http/json': expected http/protobuf or grpc"),
        ("grpc", "OTLP protocol grpc: the grpc exporter is not installed (hpcobs-training[otel-grpc])"),
    ],
)
def test_an_unusable_protocol_is_one_line(tmp_path, protocol, error):
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}
    with pytest.raises(ValueError) as raised:
        Tracker(job="1", textfile_dir=tmp_path, environ=environ)
    assert str(raised.value) == error


def test_an_unreachable_collector_never_blocks_the_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")  # the exporter thread tries at once, while the loop runs
    t = Tracker(job="1", textfile_dir=tmp_path, sample_share=1.0)
    began = time.monotonic()
    for _ in range(300):
        with t.step(), t.phase("data"):
            pass
    looped = time.monotonic() - began
    t.close()
    closed = time.monotonic() - began - looped
    assert looped < 1.0 and closed < 5.0, (looped, closed)


def test_every_slow_step_is_kept_and_a_seeded_share_of_the_rest(tmp_path, clock, memory):
    provider, exporter = memory
    t = tracker(tmp_path, provider)
    slow = set(range(50, 3001, 50))
    for number in range(1, 3001):
        run_step(t, clock, (0.03, 0, 0, 0) if number in slow else (0.001, 0.004, 0.004, 0.001))
    kept = {s.attributes["hpcobs.step"]: s.attributes["hpcobs.slow"] for s in steps_of(exporter)}
    assert {n for n, is_slow in kept.items() if is_slow} == slow
    # The same draws as the tracker's: one per step that is not slow, from the generator seeded by job/rank.
    draws = random.Random("42/3")
    expected = {n for n in range(1, 3001) if n not in slow and draws.random() < 0.01}
    assert {n for n, is_slow in kept.items() if not is_slow} == expected
    assert 15 <= len(expected) <= 45  # about 1% of 2,940


def test_the_slow_bar_is_strictly_above_factor_times_the_quantile(tmp_path, clock, memory):
    provider, exporter = memory
    t = tracker(tmp_path, provider, sample_share=0.0, slow_factor=2.0)
    # Powers of two, exact in floats: the 10th step is exactly twice the median, the 11th just above.
    for seconds in (2**-7,) * 9 + (2**-6, 2**-6 + 2**-12):
        run_step(t, clock, (seconds, 0, 0, 0))
    assert [s.attributes["hpcobs.step"] for s in steps_of(exporter)] == [11]


def test_reruns_keep_the_same_steps_and_ranks_differ(tmp_path, clock):
    def kept(rank):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        t = Tracker(job="42", rank=rank, node="n1", textfile_dir=tmp_path, tracer_provider=provider)
        for _ in range(2000):
            run_step(t, clock)
        return [s.attributes["hpcobs.step"] for s in steps_of(exporter)]

    assert kept(0) == kept(0) != kept(1)


def test_making_spans_does_not_slow_the_next_step(tmp_path, clock, memory, monkeypatch):
    provider, exporter = memory
    t = tracker(tmp_path, provider, sample_share=0.0)
    for _ in range(10):
        run_step(t, clock)
    emit = tracing.StepTracer.emit

    def one_second_emit(self, *arguments):
        clock.now += 1.0
        emit(self, *arguments)

    monkeypatch.setattr(tracing.StepTracer, "emit", one_second_emit)
    run_step(t, clock, (0.1, 0, 0, 0))  # slow, kept: its spans take a second to make
    run_step(t, clock)
    assert [s.attributes["hpcobs.step"] for s in steps_of(exporter)] == [11]


def test_the_window_stays_at_slow_window(tmp_path, clock, memory):
    provider, _ = memory
    t = tracker(tmp_path, provider, slow_window=16, sample_share=0.0)
    for number in range(1, 1001):
        run_step(t, clock, (number / 1e5, 0, 0, 0))
    window = t._tracer.durations
    assert len(window.arrivals) == len(window.ordered) == 16
    assert window.ordered == sorted(window.arrivals)


@pytest.mark.parametrize("quantile", [0.1, 0.5, 0.9, 1.0])
def test_the_running_quantile_is_the_nearest_rank_of_the_last_window(quantile):
    draws = random.Random(quantile)
    values = [draws.random() for _ in range(500)]
    window = tracing.SlidingQuantile(30, quantile)
    for index, value in enumerate(values):
        window.add(value)
        last = sorted(values[max(0, index - 29) : index + 1])
        assert window.value() == last[max(0, -(-len(last) * round(quantile * 10) // 10) - 1)]


def test_a_step_that_raises_leaves_no_span(tmp_path, clock, memory):
    provider, exporter = memory
    t = tracker(tmp_path, provider, sample_share=1.0)
    with pytest.raises(RuntimeError), t.step(), t.phase("data"):
        raise RuntimeError("out of memory")
    assert exporter.get_finished_spans() == ()
    run_step(t, clock)
    (step,) = steps_of(exporter)
    assert step.attributes["hpcobs.step"] == 1
    assert len(exporter.get_finished_spans()) == 1 + len(PHASES)  # the failed step's data phase is not there


def test_an_injected_provider_is_left_open_at_close(tmp_path, clock, memory):
    provider, exporter = memory
    t = tracker(tmp_path, provider, sample_share=1.0)
    t.close()
    provider.get_tracer("after").start_span("still-open").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["still-open"]


@pytest.mark.parametrize(
    ("keyword", "value", "error"),
    [
        ("slow_factor", 0, "slow_factor 0: expected a positive number"),
        ("slow_quantile", 0, "slow_quantile 0: expected a number in (0, 1]"),
        ("slow_window", 0, "slow_window 0: expected a positive integer"),
        ("sample_share", 1.5, "sample_share 1.5: expected a number in [0, 1]"),
    ],
)
def test_sampler_keywords_are_checked(tmp_path, memory, keyword, value, error):
    with pytest.raises(ValueError) as raised:
        tracker(tmp_path, memory[0], **{keyword: value})
    assert str(raised.value) == error


def test_without_traces_opentelemetry_is_never_imported(tmp_path):
    script = (
        "import sys, hpcobs_training\n"
        f"t = hpcobs_training.Tracker(job='1', textfile_dir={str(tmp_path)!r}, environ={{}})\n"
        "with t.step(), t.phase('data'): pass\n"
        "t.close()\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_without_the_sdk_traces_stay_off_unless_asked_for(tmp_path):
    script = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "import hpcobs_training\n"
        f"make = lambda **k: hpcobs_training.Tracker(job='1', textfile_dir={str(tmp_path)!r}, **k)\n"
        "assert make(environ={'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4318'}).tracer_provider is None\n"
        "try:\n"
        "    make(environ={}, traces=True)\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    assert done.stdout == "traces: the OpenTelemetry SDK is not installed (pip install 'hpcobs-training[otel]')\n"
