"""`python build.py demo`: the generated rules and Alertmanager config running on a simulated cluster, on loopback.

One command does what docs/simulator.md's "Try it locally" spells out step by step: simulate a cluster whose
window ends now with faults late in it (`simulate`'s own arguments, so the recipe and the demo simulate the same
cluster and faults; the demo runs it on past now), backfill it into a real Prometheus that loads out/'s rule
files and sends to a real Alertmanager, which runs out/'s config with every notifying receiver rewritten to a
webhook sink in this process: nothing leaves the machine (no Slack, PagerDuty or SMTP), and notifications can be
counted.

The cluster lives on past the start: it is simulated LIVE beyond now, the past is backfilled, and the rest is
served at its time by loopback stand-ins of the exporters (servers.StandIn) that Prometheus scrapes running on
out/'s generated prometheus.yml (out/prometheus/scrape/: rules, job names, relabelling, intervals), only each target
moved to loopback with its `instance` kept, and listed in the job's file_sd file while the simulation has it (a
training job's exporter exists only while the job runs). So the series never go stale and the faults stay firing
for as long as the demo runs, or as the scenario says: GpuFellOffBus's GPU stops reporting as dcgm-exporter's does.

Alerts reach Alertmanager only from live evaluation, so an alert shows after its `for:` (and the route's
`group_wait`) has passed from the start: promtool's rule backfill writes no ALERTS_FOR_STATE (docs/simulator.md,
"Try it locally"). The demo settles at the first notification, once the faults' alerts that fire on the first
evaluation (no `for:`) are firing; the others follow as notifications.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

import yaml

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group
from hpcobs.build import pipeline, tools
from hpcobs.errors import UserError
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import loopback, servers, workload
from hpcobs.proof.simulate import UP, Simulation, arguments
from hpcobs.proof.simulate.core import Family, Window
from hpcobs.proof.simulate.formats import write_openmetrics
from hpcobs.settings.config import Config
from hpcobs.targets import scrape

Writer = Callable[[Iterable[Family], TextIO, Window], object]  # formats.write_openmetrics, formats.write_vm

# The simulated cluster: `simulate` arguments, the faults' starts counted back from the window's end. A double-bit
# ECC error (Xid 48, row remap pending, health FAIL) and a GPU that fell off the bus fire within a minute or two of
# the start. Xid 79 is late: the GPU's series stop a scrape after it (as dcgm-exporter's do), so GpuFellOffBus
# sees it only while it is within its 5-minute last_over_time. The straggler's alerts (`for: 10m`) stay pending,
# its slow steps fill the training dashboard.
NODES = 4
FAULTS = {"xid79": "1m", "dbe": "10m", "straggler": "30m"}
MIN_DURATION = "40m"  # the straggler's start, plus the ten minutes of history before it
MAX_DURATION = "24h"
LIVE = "2h"  # simulated past the start (seconds) and served live; then each target repeats its last scrape
FIRES_WITHIN = "0s"  # the alerts settling waits for: those firing on the first evaluation
SETTLE_TIMEOUT = 120.0  # the first evaluation comes within 30 s of the start; the routes' group_wait is 30 s
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
    """The alerts the faults fire within FIRES_WITHIN of the start: on the first evaluation."""
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
    alertmanager_yml = options.out / "alertmanager" / "alertmanager.yml"
    with _scratch() as scratch, loopback.Sink() as sink:
        alertmanager = servers.Alertmanager(
            loopback.write_config(loopback.loopback_document(alertmanager_yml, sink), scratch)
        )
        past, live = _simulate(config, options.duration)
        families = _families(live)
        with _Exporters(live.window, families, live.cluster_label, scratch) as exporters:
            prometheus_yml = scratch / "prometheus.yml"
            prometheus = servers.Prometheus(config_file=prometheus_yml)
            prometheus.port, alertmanager.port = options.prometheus_port, options.alertmanager_port
            try:
                _write_history(past, families, scratch / HISTORY)
                alertmanager.start()
                exporters.write_config(options.out / scrape.PROMETHEUS_YML, alertmanager, prometheus_yml)
                prometheus.load_openmetrics(scratch / HISTORY)
                prometheus.start()
                # Records over the history too, for the dashboards and for the rules that read records over a range.
                groups = rule_groups(config)
                end = past.start + past.duration - past.step
                prometheus.backfill_rules(workload.recording_layer_files(groups, scratch), past.start, end, past.step)
                _print_urls(prometheus, alertmanager, options.out)
                expected = expected_alerts(groups)
                state = _settle(prometheus, alertmanager, sink, expected, config.get("cluster", "label"))
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


def _simulate(config: Config, duration: str) -> tuple[Window, Simulation]:
    """The cluster of `simulate`'s demo arguments (its window ends at the last whole scrape before now), simulated
    on for LIVE: the window to backfill, and the whole simulation."""
    argv = [*simulate_arguments(duration), "--out", "-"]  # checked() wants an output; the demo writes its own
    request = arguments.checked(arguments.parser("build.py demo").parse_args(argv))
    step = duration_seconds(config["scrape_interval"])
    start = arguments.window_start(request, step, datetime.now(UTC))
    hours = request.hours + duration_seconds(LIVE) / 3600
    sim = Simulation(config, nodes=request.nodes, hours=hours, scenarios=request.specs, seed=request.seed, start=start)
    return Window(sim.window.start, step, round(request.hours * 3600 / step)), sim


def _families(sim: Simulation) -> list[Family]:
    """Every family with its series in lists: generating them is most of the simulation's cost, and both the
    history and the live exporters read them."""
    return [Family(f.name, f.type, f.help, list(f.series)) for f in sim.families()]


def _write_history(past: Window, families: list[Family], path: Path, writer: Writer = write_openmetrics) -> None:
    """The samples within `past`, in OpenMetrics for promtool (or VictoriaMetrics' JSON lines: formats.write_vm)."""
    with open(path, "w", encoding="utf-8") as out:
        writer(
            (
                Family(f.name, f.type, f.help, [(labels, values[: past.steps]) for labels, values in f.series])
                for f in families
            ),
            out,
            past,
        )


class _Exporters:
    """The simulated exporters from now on: one StandIn serving each target at /<job>/<instance> the sample of the
    current scrape, and a file_sd file per job listing the targets the simulation has at that scrape (rewritten
    each scrape when the list changes; Prometheus watches the files)."""

    def __init__(self, window: Window, families: list[Family], cluster: str, folder: Path) -> None:
        self.window, self.folder = window, folder
        series: dict[str, list[tuple[str, list]]] = defaultdict(list)
        self.up: dict[tuple[str, str], list] = {}
        for family in families:
            for labels, values in family.series:
                target = (labels["job"], labels["instance"])
                if family.name == UP:
                    self.up[target] = values
                else:
                    own = {k: v for k, v in labels.items() if k not in ("job", "instance", cluster)}
                    series[_path(*target)].append((servers.exposition_prefix(family.name, own), values))
        up = {_path(*target): values for target, values in self.up.items()}
        self.server = servers.StandIn(series, lambda _: self.now(), up)
        self.stop = threading.Event()
        self.listed: dict[str, list] = {}

    def now(self) -> int:
        """The index of the window's latest scrape at or before now."""
        return max(0, int(time.time() - self.window.start)) // self.window.step

    def write_config(self, source: Path, alertmanager: servers.Alertmanager, path: Path) -> None:
        """out/'s generated prometheus.yml at `path`, its scrape jobs reading their file_sd files here, its rule
        files found from here, and its alerts sent to the (started) loopback Alertmanager."""
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
        document["rule_files"] = [str(source.parent / pattern) for pattern in document["rule_files"]]
        document["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.url.split("//")[1]]}]}]}
        for job in document["scrape_configs"]:
            job["file_sd_configs"] = [{"files": [str(self._targets_file(job["job_name"]))]}]
        self._list_targets({job["job_name"] for job in document["scrape_configs"]})
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")

    def _targets_file(self, job: str) -> Path:
        return self.folder / f"{job}.targets.json"

    def _list_targets(self, jobs: set[str]) -> None:
        at = self.now()
        for job in sorted(jobs):
            present = [
                {"targets": [self.server.address], "labels": {"instance": instance, "__metrics_path__": path}}
                for (name, instance), values in sorted(self.up.items())
                if name == job and values[min(at, len(values) - 1)] is not None
                for path in [_path(name, instance)]
            ]
            if self.listed.get(job) != present:
                scratch = self._targets_file(job).with_suffix(".tmp")
                scratch.write_text(json.dumps(present), encoding="utf-8")
                scratch.replace(self._targets_file(job))  # whole, never half-written, when Prometheus reads it
                self.listed[job] = present

    def _follow(self) -> None:
        while not self.stop.wait(self.window.step):
            self._list_targets(set(self.listed))

    def __enter__(self) -> _Exporters:
        self.server.__enter__()
        threading.Thread(target=self._follow, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.server.__exit__(*exc_info)


def _path(job: str, instance: str) -> str:
    return f"/{job}/{instance}"


@dataclass(frozen=True)
class _State:
    firing: list[dict]  # Prometheus's firing alerts' labels
    pending: set[str]
    active: list[dict]  # Alertmanager's alerts with their receivers and status
    scraped: dict[tuple[str, str], tuple[int, int]]  # (job, cluster label) -> (targets up, targets)
    notified: Counter[tuple[str, str]]
    settled: bool


def _settle(
    prometheus: servers.Prometheus,
    alertmanager: servers.Alertmanager,
    sink: loopback.Sink,
    expected: set[str],
    cluster: str,
) -> _State:
    """Poll until every expected alert fires in Prometheus and has reached Alertmanager, the sink has had a
    notification (the first comes a route's group_wait after its group's first alert; the later ones follow while
    the demo waits) and every target is up (the first scrape of each comes within its interval), or SETTLE_TIMEOUT
    passes."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        alerts = prometheus.alerts()
        firing = [a["labels"] for a in alerts if a["state"] == "firing"]
        active = alertmanager.alerts()
        received = {a["labels"]["alertname"] for a in active}
        scraped = _scraped(prometheus.targets(), cluster)
        every_target_up = all(up == total for up, total in scraped.values())
        settled = (
            expected <= {a["alertname"] for a in firing}
            and expected <= received
            and bool(sink.snapshot())
            and every_target_up
        )
        if settled or time.monotonic() > deadline:
            pending = {a["labels"]["alertname"] for a in alerts if a["state"] == "pending"}
            return _State(firing, pending, active, scraped, sink.snapshot(), settled)
        time.sleep(POLL)


def _scraped(targets: list[dict], cluster: str) -> dict[tuple[str, str], tuple[int, int]]:
    """Targets up and in all, by job and cluster label."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for target in targets:
        count = counts[target["labels"]["job"], target["labels"].get(cluster, "")]
        count[0] += target["health"] == "up"
        count[1] += 1
    return {key: (up, total) for key, (up, total) in counts.items()}


def _follow(sink: loopback.Sink, printed: Counter[tuple[str, str]]) -> None:
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
    print(f"Scraped live by out/'s scrape jobs ({len(state.scraped)}):")
    for (job, cluster), (up, total) in sorted(state.scraped.items()):
        print(f"  {job:20} {up}/{total} up  {cluster}")
    print(f"Notifications received by the loopback webhook ({sum(state.notified.values())}):")
    _print_notifications(state.notified)
    if not state.settled:
        missing = expected - {a["alertname"] for a in state.firing}
        print(f"Not settled after {SETTLE_TIMEOUT:.0f} s; not firing: {', '.join(sorted(missing)) or 'none'}")
    print(flush=True)
