"""`build.py doctor` without a Prometheus: what it cannot ask is one line and exit 2, never a traceback (the checks
themselves run against a real Prometheus in tests/live/test_doctor_live.py)."""

import http.server
import threading

import pytest

from hpcobs.cli import main
from hpcobs.proof.servers import free_port


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ["--prometheus", "http://127.0.0.1:{port}"],
            "doctor error: cannot reach Prometheus at http://127.0.0.1:{port}: [Errno 111] Connection refused; "
            "check --prometheus and that it runs",
        ),
        (
            ["--prometheus", "prometheus:9090"],
            "doctor error: --prometheus prometheus:9090: not an http(s) URL with a host; write e.g. "
            "http://prometheus:9090",
        ),
        (
            ["--prometheus", "http://127.0.0.1:{port}", "--time", "yesterday"],
            "doctor error: --time 'yesterday' is not an RFC 3339 instant; write e.g. 2026-03-01T12:00:00Z",
        ),
    ],
)
def test_what_doctor_cannot_ask_is_one_line_and_exit_2(arguments, line, capsys):
    port = free_port()  # nothing listens there
    status = main(["doctor", *(argument.format(port=port) for argument in arguments)])
    out, err = capsys.readouterr()
    assert (status, out, err) == (2, "", line.format(port=port) + "\n")


class _NotPrometheus(http.server.BaseHTTPRequestHandler):
    """Answers 501 to every GET, silently."""

    def log_message(self, *args) -> None:
        pass


def test_a_url_that_is_not_prometheus_is_one_line_and_exit_2(capsys):
    server = http.server.HTTPServer(("127.0.0.1", 0), _NotPrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        status = main(["doctor", "--prometheus", url])
    finally:
        server.shutdown()
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err == (
        f"doctor error: {url} answered HTTP 501 to /api/v1/query: no Prometheus API at that URL; pass Prometheus' "
        "root URL (with its path prefix, if it has one)\n"
    )
