"""`python build.py demo`: the generated rules and Alertmanager config running on a simulated cluster, on loopback.

One command does what docs/simulator.md's "Try it locally" spells out step by step: simulate a cluster whose
window ends now with faults late in it (`simulate`'s own arguments, so the recipe and the demo run the same
simulation), backfill it into a real Prometheus that loads out/'s rule files and sends to a real Alertmanager,
which runs out/'s config with every notifying receiver rewritten to a webhook sink in this process: nothing
leaves the machine (no Slack, PagerDuty or SMTP), and notifications can be counted.

Alerts reach Alertmanager only from live evaluation, so an alert shows after its `for:` (and the route's
`group_wait`) has passed from the start: promtool's rule backfill writes no ALERTS_FOR_STATE, and Prometheus
restores `for:` state only for rules whose `for:` is at least `--rules.alert.for-grace-period` (docs/simulator.md,
"Try it locally"). The faults' alerts with a `for:` of at most FIRES_WITHIN are the ones the demo waits for.
Nothing is scraped: the window's last samples stay visible for Prometheus's lookback (5 minutes), then every
series goes stale and the alerts resolve.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group
from hpcobs.build import pipeline, tools
from hpcobs.errors import UserError
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import servers, workload
from hpcobs.proof.simulate import Simulation, arguments, write
from hpcobs.settings.config import Config

# The simulated cluster: `simulate` arguments, the faults' starts counted back from the window's end. A double-bit
# ECC error (Xid 48, row remap pending, health FAIL) and a GPU that fell off the bus fire within a minute or two of
# the start. Xid 79 is late: the GPU's series stop a scrape after it (as dcgm-exporter's do), so GpuFellOffBus
# sees it only while it is within its 5-minute last_over_time. The straggler's alerts (`for: 10m`) stay pending,
# its slow steps fill the training dashboard.
NODES = 4
FAULTS = {"xid79": "1m", "dbe": "10m", "straggler": "30m"}
MIN_DURATION = "40m"  # the straggler's start, plus the ten minutes of history before it
MAX_DURATION = "24h"
FIRES_WITHIN = "1m"  # an alert with a longer `for:` does not fire before the window leaves the lookback
SETTLE_TIMEOUT = 240.0  # `for: 1m` fires within 90 s of the first evaluation; the routes' group_wait is 30 s
POLL = 2.0
HISTORY = "cluster.om"


@dataclass(frozen=True)
class Options:
    out: Path
    duration: str = "1h"
    wait: bool = True
    prometheus_port: int | None = None
    alertmanager_port: int | None = None


def simulate_arguments(duration: str) -> list[str]:
    """The `simulate` arguments of the demo's cluster (docs/simulator.md's recipe runs the same)."""
    seconds = duration_seconds(duration)
    scenarios = ",".join(f"{name}:start={(seconds - duration_seconds(lead)) // 60}m" for name, lead in FAULTS.items())
    return ["--nodes", str(NODES), "--hours", f"{seconds / 3600:g}", "--scenario", scenarios]


def rule_groups(config: Config) -> list[Group]:
    """Every rule group as the build writes it for the config."""
    return [g for gs in pipeline.built_rule_groups(Context(config)).values() for g in gs]


def expected_alerts(groups: list[Group]) -> set[str]:
    """The alerts the faults fire within FIRES_WITHIN of the start."""
    return {
        a.alert
        for a in (r for g in groups for r in g.rules)
        if isinstance(a, Alert)
        and set(a.fired_by) & FAULTS.keys()
        and duration_seconds(a.for_ or "0s") <= duration_seconds(FIRES_WITHIN)
    }


def run(config: Config, options: Options) -> int:
    """Start, report once the alerts have settled, then follow the notifications until SIGINT/SIGTERM (cli turns
    them into an exception), or return with `wait=False`: 0 when settled. The servers stop and every temp dir
    goes on the way out, whatever ends it."""
    preflight(options.duration)
    rule_files = sorted((options.out / "prometheus" / "rules").glob("*.yaml"))
    alertmanager_yml = options.out / "alertmanager" / "alertmanager.yml"
    with _scratch() as scratch, _Sink() as sink:
        alertmanager = servers.Alertmanager(_loopback_config(alertmanager_yml, sink, scratch))
        prometheus = servers.Prometheus(rule_files, alertmanager=alertmanager)
        prometheus.port, alertmanager.port = options.prometheus_port, options.alertmanager_port
        try:
            sim = _simulate(config, options.duration, scratch)
            alertmanager.start()
            prometheus.load_openmetrics(scratch / HISTORY)
            prometheus.start()
            # Records over the history too, for the dashboards and for the rules that read records over a range.
            groups = rule_groups(config)
            window = sim.window
            end = window.start + window.duration - window.step
            prometheus.backfill_rules(workload.recording_layer_files(groups, scratch), window.start, end, window.step)
            _print_urls(prometheus, alertmanager, options.out)
            expected = expected_alerts(groups)
            state = _settle(prometheus, alertmanager, sink, expected)
            _print_state(state, expected)
            if not options.wait:
                return 0 if state.settled else 1
            print("Ctrl-C stops both servers and removes their files. Notifications as they come:", flush=True)
            _follow(sink, state.notified)
        finally:
            prometheus.stop()
            alertmanager.stop()
    return 0


def preflight(duration: str) -> None:
    """One line, before anything is built or started, for a bad --duration or a missing tool (with its package)."""
    for tool in (tools.PROMTOOL, servers.PROMETHEUS, servers.ALERTMANAGER):
        tools.find(tool)
    try:
        seconds = duration_seconds(duration)
    except ValueError:
        seconds = -1
    if not duration_seconds(MIN_DURATION) <= seconds <= duration_seconds(MAX_DURATION):
        raise UserError(
            f"demo: --duration {duration}: give a Prometheus duration from {MIN_DURATION} to {MAX_DURATION}, e.g. 2h"
        )


@contextmanager
def _scratch() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hpcobs-demo-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _simulate(config: Config, duration: str, folder: Path) -> Simulation:
    """The cluster, written to HISTORY as `simulate` writes it with the demo's arguments: its window ends at the
    last whole scrape."""
    history = folder / HISTORY
    argv = [*simulate_arguments(duration), "--out", str(history)]
    request = arguments.checked(arguments.parser("build.py demo").parse_args(argv))
    sim = arguments.simulation(request, config)
    with open(history, "w", encoding="utf-8") as out:
        write(sim, "openmetrics", out)
    return sim


def _loopback_config(source: Path, sink: _Sink, folder: Path) -> Path:
    """out/'s Alertmanager config with each notifying receiver's integrations replaced by one webhook to the sink
    (path = receiver name); receivers with none (the inhibit-only and blackhole ones) stay silent. Template paths
    are made absolute, as the copy lives elsewhere."""
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    for receiver in config.get("receivers", []):
        integrations = [key for key in receiver if key.endswith("_configs")]
        if integrations:
            for key in integrations:
                del receiver[key]
            receiver["webhook_configs"] = [{"url": f"{sink.url}/{receiver['name']}", "send_resolved": False}]
            sink.receivers.add(receiver["name"])
    if "templates" in config:
        config["templates"] = [str(source.parent / pattern) for pattern in config["templates"]]
    copy = folder / "alertmanager.yml"
    copy.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return copy


class _Sink:
    """A webhook receiver on a free loopback port counting alerts notified, by (receiver, alertname)."""

    def __init__(self) -> None:
        self.notified: Counter[tuple[str, str]] = Counter()
        self.receivers: set[str] = set()  # those rewritten to post here
        self.lock = lock = threading.Lock()
        notified = self.notified

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    notified.update((self.path.strip("/"), a["labels"]["alertname"]) for a in body["alerts"])
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:  # Alertmanager's posts are counted, not logged
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def snapshot(self) -> Counter[tuple[str, str]]:
        with self.lock:
            return Counter(self.notified)

    def __enter__(self) -> _Sink:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class _State:
    firing: list[dict]  # Prometheus's firing alerts' labels
    pending: set[str]
    active: list[dict]  # Alertmanager's alerts with their receivers and status
    notified: Counter[tuple[str, str]]
    settled: bool


def _settle(
    prometheus: servers.Prometheus, alertmanager: servers.Alertmanager, sink: _Sink, expected: set[str]
) -> _State:
    """Poll until every expected alert fires in Prometheus and has reached Alertmanager, and the sink has had a
    notification (the first comes a route's group_wait after its group's first alert; the later ones follow while
    the demo waits), or SETTLE_TIMEOUT passes."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        alerts = prometheus.alerts()
        firing = [a["labels"] for a in alerts if a["state"] == "firing"]
        active = alertmanager.alerts()
        received = {a["labels"]["alertname"] for a in active}
        settled = expected <= {a["alertname"] for a in firing} and expected <= received and bool(sink.snapshot())
        if settled or time.monotonic() > deadline:
            pending = {a["labels"]["alertname"] for a in alerts if a["state"] == "pending"}
            return _State(firing, pending, active, sink.snapshot(), settled)
        time.sleep(POLL)


def _follow(sink: _Sink, printed: Counter[tuple[str, str]]) -> None:
    """Print each notification the sink receives from now on, until interrupted."""
    while True:
        time.sleep(POLL)
        latest = sink.snapshot()
        _print_notifications(latest - printed)
        printed = latest


def _print_notifications(notified: Counter[tuple[str, str]]) -> None:
    for (receiver, name), count in sorted(notified.items()):
        print(f"  {receiver:20} {name:32} x{count}", flush=True)


def _print_urls(prometheus: servers.Prometheus, alertmanager: servers.Alertmanager, out: Path) -> None:
    print(
        f"Prometheus    {prometheus.url}  (alerts: {prometheus.url}/alerts)\n"
        f"Alertmanager  {alertmanager.url}  (receivers rewritten to a loopback webhook: nothing is sent out)\n"
        f"Grafana       point a Grafana at {out / 'grafana' / 'provisioning'} (docs/deploy.md), its Prometheus "
        f"datasource's url set to {prometheus.url}\n"
        f"Waiting for the faults' alerts to fire and be notified (up to {SETTLE_TIMEOUT:.0f} s)...",
        flush=True,
    )


def _print_state(state: _State, expected: set[str]) -> None:
    print(f"Firing in Prometheus ({len(state.firing)}):")
    for labels in sorted(state.firing, key=lambda a: sorted(a.items())):
        where = " ".join(f"{k}={labels[k]}" for k in ("node", "gpu", "err_code") if k in labels)
        print(f"  {labels['alertname']:32} {where}")
    if state.pending:
        print(f"Pending (a longer for:): {', '.join(sorted(state.pending))}")
    suppressed = sorted({a["labels"]["alertname"] for a in state.active if a["status"]["state"] == "suppressed"})
    if suppressed:
        print(f"Inhibited in Alertmanager: {', '.join(suppressed)}")
    print(f"Notifications received by the loopback webhook ({sum(state.notified.values())}):")
    _print_notifications(state.notified)
    if not state.settled:
        missing = expected - {a["alertname"] for a in state.firing}
        print(f"Not settled after {SETTLE_TIMEOUT:.0f} s; not firing: {', '.join(sorted(missing)) or 'none'}")
    print(flush=True)
