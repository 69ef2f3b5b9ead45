"""The live harness on a tiny hand-written history: backfill, rule layers, both engines agree, clean stop."""

import json
import math
import socket
from datetime import UTC, datetime, timedelta

import pytest

from hpcobs.errors import ToolError
from hpcobs.proof.servers import Prometheus, VictoriaMetrics

pytestmark = pytest.mark.live

STEP = 30
SAMPLES = 121  # one hour at 30 s, both ends included
END = datetime(2026, 1, 1, tzinfo=UTC)
START = END - timedelta(hours=1)
RULES_START = START + timedelta(minutes=5)  # a full rate window of history behind the first evaluation
INSTANCES = ("n0", "n1")
K = 43  # a sample index inside the hour
AT_SAMPLE = START + timedelta(seconds=K * STEP)
BETWEEN_SAMPLES = AT_SAMPLE + timedelta(seconds=STEP / 2)

LAYER_1 = """groups:
- name: instance
  rules:
  - record: instance:demo_bytes:rate5m
    expr: rate(demo_bytes_total[5m])
"""
LAYER_2 = """groups:
- name: cluster
  rules:
  - record: cluster:demo_bytes:rate5m
    expr: sum(instance:demo_bytes:rate5m)
"""


def counter(instance: int, k: int) -> float:
    return 1000.0 * (instance + 1) * k


def gauge(instance: int, k: int) -> float:
    return 40.0 + instance + k % 5


CLUSTER_RATE = sum(counter(i, 1) - counter(i, 0) for i in range(len(INSTANCES))) / STEP


def timestamp(k: int) -> int:
    return int(START.timestamp()) + k * STEP


def openmetrics() -> str:
    lines = ["# TYPE demo_bytes counter"]
    lines += [
        f'demo_bytes_total{{instance="{name}"}} {counter(i, k)} {timestamp(k)}'
        for i, name in enumerate(INSTANCES)
        for k in range(SAMPLES)
    ]
    lines += ["# TYPE demo_temp gauge"]
    lines += [
        f'demo_temp{{instance="{name}"}} {gauge(i, k)} {timestamp(k)}'
        for i, name in enumerate(INSTANCES)
        for k in range(SAMPLES)
    ]
    return "\n".join(lines + ["# EOF"]) + "\n"


def victoria_lines() -> list[dict]:
    millis = [timestamp(k) * 1000 for k in range(SAMPLES)]
    return [
        {
            "metric": {"__name__": metric, "instance": name},
            "values": [value(i, k) for k in range(SAMPLES)],
            "timestamps": millis,
        }
        for metric, value in (("demo_bytes_total", counter), ("demo_temp", gauge))
        for i, name in enumerate(INSTANCES)
    ]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    (root / "history.om").write_text(openmetrics())
    (root / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in victoria_lines()))
    (root / "layer1.yml").write_text(LAYER_1)
    (root / "layer2.yml").write_text(LAYER_2)
    return root


@pytest.fixture(scope="module")
def layers(inputs):
    return [[inputs / "layer1.yml"], [inputs / "layer2.yml"]]


@pytest.fixture(scope="module")
def prometheus(prometheus_factory, inputs, layers):
    server = prometheus_factory(inputs / "history.om", [f for layer in layers for f in layer])
    server.backfill_rules(layers, RULES_START, END, STEP)
    return server


@pytest.fixture(scope="module")
def victoria(victoria_factory, inputs, layers):
    server = victoria_factory(inputs / "history.jsonl")
    server.backfill_rules(layers, RULES_START, END, STEP)
    return server


@pytest.fixture(params=["prometheus", "victoria"])
def server(request):
    return request.getfixturevalue(request.param)


def by_instance(samples) -> dict[str, float]:
    return {sample.labels["instance"]: sample.value for sample in samples}


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9)


def test_instant_query_sees_backfilled_history(server):
    assert by_instance(server.query("demo_bytes_total", AT_SAMPLE)) == {"n0": counter(0, K), "n1": counter(1, K)}
    assert by_instance(server.query("demo_temp", BETWEEN_SAMPLES)) == {"n0": gauge(0, K), "n1": gauge(1, K)}


def test_range_query_returns_every_step(server):
    end = AT_SAMPLE + timedelta(minutes=5)
    series = server.query_range('demo_temp{instance="n1"}', AT_SAMPLE, end, STEP)
    assert [s.labels for s in series] == [{"__name__": "demo_temp", "instance": "n1"}]
    assert series[0].points == [(timestamp(k), gauge(1, k)) for k in range(K, K + 11)]


def test_a_range_query_of_more_steps_than_a_server_answers_is_asked_in_pieces(server):
    """An hour at 0.25 s is 14,400 steps, more than Prometheus's 11,000: every step still comes back, once."""
    series = server.query_range('demo_temp{instance="n1"}', START, END, "250ms")
    assert [p[0] for p in series[0].points] == [START.timestamp() + n / 4 for n in range(3600 * 4 + 1)]


def test_prometheus_reports_query_cost(prometheus):
    samples, cost = prometheus.query_with_cost("sum_over_time(demo_temp[5m])", AT_SAMPLE)
    # Prometheus 2.x range selectors include both ends: 11 samples per series in 5m at 30s
    window = range(K - 10, K + 1)
    assert by_instance(samples) == {"n0": sum(gauge(0, k) for k in window), "n1": sum(gauge(1, k) for k in window)}
    assert cost.samples == 2 * len(window)
    assert cost.seconds >= 0


def test_victoria_reports_client_side_cost_only(victoria):
    _, cost = victoria.query_with_cost("demo_temp", AT_SAMPLE)
    assert cost.samples is None and cost.seconds > 0


def test_second_layer_rules_cover_the_past_range(server, layers):
    series = server.query_range("cluster:demo_bytes:rate5m", RULES_START, END, STEP)
    assert [s.labels for s in series] == [{"__name__": "cluster:demo_bytes:rate5m"}]
    points = series[0].points
    # promtool offsets each group's evaluations by up to one interval (a hash of the group), so each
    # layer may start up to one interval after the one it reads; vmalert aligns them all to the interval
    assert points[0][0] <= RULES_START.timestamp() + len(layers) * STEP
    assert points[-1][0] == END.timestamp()
    assert all(close(value, CLUSTER_RATE) for _, value in points)


@pytest.mark.parametrize(
    "expr",
    [
        "demo_temp",
        "sum by (instance) (demo_bytes_total)",
        "rate(demo_bytes_total[5m])",
        "instance:demo_bytes:rate5m",
        "cluster:demo_bytes:rate5m",
    ],
)
def test_victoria_agrees_with_prometheus(prometheus, victoria, expr):
    expected = prometheus.query(expr, BETWEEN_SAMPLES)
    found = victoria.query(expr, BETWEEN_SAMPLES)
    assert expected
    assert [s.labels for s in found] == [s.labels for s in expected]
    assert all(close(f.value, e.value) for f, e in zip(found, expected))


@pytest.mark.parametrize("server_class", [Prometheus, VictoriaMetrics])
def test_leaving_the_context_stops_the_server_and_frees_its_port(server_class):
    with server_class() as running:
        assert running.query("vector(1)", END) == [({}, 1.0)]
        process, port, workdir = running.process, running.port, running.workdir
    assert process.returncode is not None
    assert not workdir.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    "server_class, env, message",
    [
        (Prometheus, "PROMETHEUS", "prometheus not found: apt-get install prometheus, or set PROMETHEUS"),
        (
            VictoriaMetrics,
            "VICTORIA_METRICS",
            "victoria-metrics not found: apt-get install victoria-metrics, or set VICTORIA_METRICS",
        ),
    ],
)
def test_missing_binary_is_a_clear_error(monkeypatch, tmp_path, server_class, env, message):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(env, raising=False)
    server = server_class()
    with pytest.raises(ToolError) as caught:
        server.start()
    assert str(caught.value) == message
    assert server.process is None


def test_server_that_dies_at_start_shows_its_log(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n- name: broken\n  rules:\n  - record: broken\n    expr: rate(x[\n")
    server = Prometheus([broken])
    with pytest.raises(ToolError) as caught:
        server.start()
    assert "prometheus exited with code 1 before it was ready" in str(caught.value)
    assert "broken.yml" in str(caught.value)
    assert not server.running


def test_query_error_carries_the_server_message(server):
    with pytest.raises(ToolError, match=r"failed \(HTTP 4\d\d\): .+\[query: rate\(demo_bytes_total\[\]"):
        server.query("rate(demo_bytes_total[", END)


@pytest.mark.parametrize(
    "bad_line, logged",
    [
        ("not json", "cannot unmarshal json line"),
        ({"metric": {"__name__": "future"}, "values": [1], "timestamps": [4102444800000]}, "too big timestamp"),
    ],
)
def test_victoria_import_that_drops_data_is_an_error(victoria_factory, bad_line, logged):
    victoria = victoria_factory()
    with pytest.raises(ToolError, match=f"dropped data during import; its log says:\n.*{logged}"):
        victoria.import_jsonl([bad_line])
