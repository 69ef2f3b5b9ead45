"""Replaying alerts: the notifications a real Alertmanager running the generated config sends for a window of
history, with time compressed by a factor k.

1. Alerts: every alerting rule of the rule files is evaluated over [start, end] by Prometheus's own query engine,
   and the rule manager's state machine applied (hpcobs.proof.alerting): per alert instance, its pending, firing
   and resolved times and the sends Prometheus's notifier would make.
2. Delivery: a real Alertmanager runs the config with every notifying receiver rewritten to a loopback webhook
   (hpcobs.proof.loopback) and every timing that counts time divided by k: group_wait, group_interval and
   repeat_interval of the root route and of every route that sets them, and global resolve_timeout (the root's
   Alertmanager defaults, 30s / 5m / 4h and 5m, are written out first: dispatch/route.go DefaultRouteOpts and
   config/config.go DefaultGlobalConfig, Alertmanager tag v0.25.0, commit 258fab7cdd551f2cf251ed0348f0ad7289aee789).
   Each send is posted to /api/v2/alerts at its evaluation time on the compressed clock.

How replay time maps to real time: replay time t (the history's own Unix time) happens at wall-clock time
origin + (t - start) / k, origin being a moment just after Alertmanager is ready. A send made at evaluation t is
posted at that wall time, its startsAt and endsAt mapped the same way (Alertmanager compares them with its clock:
an alert whose endsAt has passed is resolved, and a new group flushes at once when its first alert's startsAt is
older than group_wait: dispatch/dispatch.go aggrGroup.insert, v0.25.0). A notification arriving at wall time w
happened at replay time start + (w - origin) x k. Everything Alertmanager times is then k times faster, as the
alerts are; HTTP and scheduling latency (milliseconds) is not: it is k times longer in replay time, which is why
the result reports `lag`, the most a post was late, in replay seconds. The mapping is checked by replaying one
slice at k = 1 and at a large k (tests/live/test_replay_live.py).

Limits: time intervals (mute and active) are calendar times and are not scaled; notifications are counted for
firing alerts only (the receivers do not send resolved ones, hpcobs.proof.loopback); alert instances already
firing before `start` are posted at `start` with their last send, as a Prometheus running before the window
would have sent them; notifications after `end` are not waited for.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hpcobs.authoring.rules import Group
from hpcobs.lang.promql import duration_ms
from hpcobs.lang.selectors import alertmanager_matchers, satisfies
from hpcobs.proof import alerting, backfill, loopback, servers, workload
from hpcobs.proof.alerting import Post, Timeline
from hpcobs.proof.servers import Labels
from hpcobs.proof.simulate import UP, Simulation

ROUTE_TIMINGS = {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "4h"}  # DefaultRouteOpts
RESOLVE_TIMEOUT = "5m"  # DefaultGlobalConfig
LEAD = 0.2  # wall seconds from Alertmanager ready to the replay's start
# An inhibiting alert that resolves in the same evaluation as alerts it inhibits (a host back up: ExporterNodeDown
# and each Exporter*Down) is posted this long after them, rank after rank (resolution_ranks). Alertmanager's
# dispatcher and inhibitor each take a post on their own, so with both in one post a group flush can find the source
# resolved and its targets not yet, and notify them: a few milliseconds in real time, seconds of replay time at a
# large k (the full week at k = 2,880 saw a host's exporters notified by three teams as it came back). Prometheus too
# sends each rule's alerts in the group's order, the node's after its exporters'.
SOURCES_RESOLVED_AFTER = 0.005
# The size of the 2-hour OpenMetrics documents promtool takes (hpcobs.proof.backfill): a range of the 1,024-GPU week
# at a 1 m scrape (about 1.8 GB) gets 14 blocks, the whole chunk takes 11 GB of disk (three times: one being written,
# backfill.CHUNKS_AHEAD waiting or loading).
DOCUMENT_BYTES = 128 << 20


@dataclass(frozen=True)
class Notification:
    """A webhook post Alertmanager made: to which receiver, at what replay time, for which alerts (labels), and for
    which aggregation group (its group key: the route's key and the group's labels, dispatch/dispatch.go
    aggrGroup.GroupKey, v0.25.0)."""

    receiver: str
    at: float
    alerts: tuple[Labels, ...]
    group_key: str


@dataclass(frozen=True)
class Replay:
    timelines: list[Timeline]
    notifications: list[Notification]
    lag: float  # the most a post to Alertmanager was late, in replay seconds


@dataclass(frozen=True)
class Clock:
    """Replay time `start` happens at wall time `origin`; replay time runs k times faster."""

    start: float
    origin: float
    k: float

    def wall(self, t: float) -> float:
        return self.origin + (t - self.start) / self.k

    def replay(self, wall: float) -> float:
        return self.start + (wall - self.origin) * self.k


def history(
    sim: Simulation, groups: Sequence[Group], folder: Path, seconds: dict[str, float] | None = None
) -> servers.Prometheus:
    """A started Prometheus (the caller stops it) holding the simulation's raw series that `groups` read, and
    every record of `groups` replayed at each scrape of the window (servers.Prometheus.replay_rules), `folder`
    holding the files between. The series are backfilled in chunks while the simulator writes the next
    (hpcobs.proof.backfill). Backfilled history has no staleness markers: the lookback is 1.5 scrapes, so a
    series that stops vanishes within two scrapes, as a scraped one does at once. `seconds` gets the wall time of
    the backfill and of the records."""
    step = sim.window.step
    prometheus = servers.Prometheus(lookback_delta=f"{step * 3 // 2}s")
    timed = {} if seconds is None else seconds
    try:
        began = time.monotonic()
        names = workload.raw_names_read(sim.config, groups) | {UP}
        backfill.simulation(prometheus.load_openmetrics, sim, names, folder, DOCUMENT_BYTES)
        prometheus.start()
        timed["backfill"], began = time.monotonic() - began, time.monotonic()
        end = sim.window.start + sim.window.duration - step
        prometheus.replay_rules(workload.recording_layer_files(groups, folder), sim.window.start, end, f"{step}s")
        timed["records"] = time.monotonic() - began
    except BaseException:
        prometheus.stop()
        raise
    return prometheus


def restarts(sim: Simulation) -> list[tuple[float, float]]:
    """The (from, to) times the simulation's Prometheus was down (its `prometheus_restart` scenarios)."""
    origin = sim.window.start
    return [(origin + f.start, origin + f.end) for f in sim.faults.faults if f.kind == "prometheus_restart"]


def replay(
    prometheus: servers.Prometheus,
    rule_files: Sequence[Path],
    alertmanager_yml: Path,
    start: float,
    end: float,
    k: float,
    default_interval: str = "1m",
    restarts: Sequence[tuple[float, float]] = (),
) -> Replay:
    """The alerts of `rule_files` over [start, end] on `prometheus` (holding the history and its records), and
    the notifications of a real Alertmanager running `alertmanager_yml` for them, time compressed by k.
    `restarts`: when the Prometheus evaluating them was down (`restarts(sim)`)."""
    rules = alerting.rules_of(rule_files, default_interval)
    timelines = alerting.timelines(prometheus, rules, start, end, restarts=restarts)
    notifications, lag = deliver(timelines, alertmanager_yml, start, end, k)
    return Replay(timelines, notifications, lag)


def deliver(
    timelines: Sequence[Timeline], alertmanager_yml: Path, start: float, end: float, k: float
) -> tuple[list[Notification], float]:
    """Post the sends of `timelines` within [start, end] to a fresh Alertmanager on the compressed clock: the
    notifications it makes until `end`, and the lag in replay seconds."""
    folder = Path(tempfile.mkdtemp(prefix="hpcobs-replay-"))
    try:
        with loopback.Sink() as sink:
            document = scaled(loopback.loopback_document(alertmanager_yml, sink), k)
            # Before the clock starts: the week's ranks take seconds, thousands of replay seconds at its k.
            ranks = resolution_ranks(document, [t.labels for t in timelines])
            posts = [(at, _by_rank(sends, ranks)) for at, sends in _sends(timelines, start, end)]
            alertmanager = servers.Alertmanager(loopback.write_config(document, folder))
            with alertmanager:
                clock = Clock(start, time.time() + LEAD, k)
                lag = 0.0
                for at, batches in posts:
                    lag = max(lag, _sleep_until(clock.wall(at)) * k)
                    for i, batch in enumerate(batches):
                        if i:
                            time.sleep(SOURCES_RESOLVED_AFTER)
                        alertmanager.send([_alert(labels, post, clock) for labels, post in batch])
                _sleep_until(clock.wall(end))
                received = sink.received()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    notified = [
        Notification(n.receiver, clock.replay(n.received), tuple(a["labels"] for a in n.alerts), n.group_key)
        for n in received
    ]
    return [n for n in notified if n.at <= end], lag


def resolution_ranks(config: dict, instances: Sequence[Labels]) -> dict[str, int]:
    """Per alert name, when its resolutions are posted within an evaluation (SOURCES_RESOLVED_AFTER): 0 for an alert
    that inhibits none of `instances` (with the `equal` labels of the rule), else one more than the highest of those
    it inhibits (a cycle of names is cut where it closes)."""
    inhibits: dict[str, set[str]] = defaultdict(set)
    for rule in config.get("inhibit_rules", []):
        equal = rule.get("equal", [])
        targets: dict[tuple[str, ...], set[str]] = defaultdict(set)  # the targets' names by their `equal` values
        for i in instances:
            if _matches(rule.get("target_matchers", []), i):
                targets[tuple(i.get(label, "") for label in equal)].add(i["alertname"])
        for i in instances:
            if _matches(rule.get("source_matchers", []), i):
                inhibits[i["alertname"]] |= targets[tuple(i.get(label, "") for label in equal)] - {i["alertname"]}
    ranks: dict[str, int] = {}

    def rank(name: str, path: frozenset[str]) -> int:
        if name not in ranks:
            below = [rank(target, path | {name}) for target in sorted(inhibits[name]) if target not in path]
            ranks[name] = 1 + max(below, default=-1)
        return ranks[name]

    for name in sorted(inhibits):
        rank(name, frozenset())
    return ranks


def _matches(matchers: Sequence[str], labels: Labels) -> bool:
    """All the Alertmanager matchers hold for the labels (a missing label is empty)."""
    return all(satisfies(m, labels.get(m.label, "")) for text in matchers for m in alertmanager_matchers(text))


def _by_rank(sends: list[tuple[Labels, Post]], ranks: dict[str, int]) -> list[list[tuple[Labels, Post]]]:
    """An evaluation's sends in the order they are posted: the firing ones and the resolutions of alerts that inhibit
    nothing, then the resolutions of each rank of inhibiting alerts in turn (resolution_ranks)."""
    batches: dict[int, list[tuple[Labels, Post]]] = defaultdict(list)
    for labels, post in sends:
        batches[ranks.get(labels["alertname"], 0) if post.ends_at <= post.at else 0].append((labels, post))
    return [batches[r] for r in sorted(batches)]


def scaled(config: dict, k: float) -> dict:
    """The Alertmanager config with every timing it counts time by divided by k (in whole milliseconds, 1 at
    least), the root route's and global defaults written out first so that they are divided too."""
    config = copy.deepcopy(config)
    settings = config.setdefault("global", {})
    settings["resolve_timeout"] = _divided(settings.get("resolve_timeout", RESOLVE_TIMEOUT), k)
    config["route"] = {**ROUTE_TIMINGS, **config["route"]}
    for route in _routes(config["route"]):
        for key in ROUTE_TIMINGS.keys() & route.keys():
            route[key] = _divided(route[key], k)
    return config


def _routes(route: dict) -> Iterator[dict]:
    yield route
    for child in route.get("routes", []):
        yield from _routes(child)


def _divided(duration: str, k: float) -> str:
    return f"{max(1, round(duration_ms(duration) / k))}ms"


def _sends(timelines: Sequence[Timeline], start: float, end: float) -> list[tuple[float, list[tuple[Labels, Post]]]]:
    """(replay time, [(instance labels, send)]) in time order: the sends within [start, end], and at `start` the
    last send before it of each instance still active then."""
    by_time: dict[float, list[tuple[Labels, Post]]] = defaultdict(list)
    for timeline in timelines:
        before = [p for p in timeline.posts if p.at < start]
        if before and before[-1].ends_at > start:
            by_time[start].append((timeline.labels, before[-1]))
        for post in timeline.posts:
            if start <= post.at <= end:
                by_time[post.at].append((timeline.labels, post))
    return sorted(by_time.items())


def _alert(labels: Labels, post: Post, clock: Clock) -> dict:
    return {
        "labels": labels,
        "startsAt": _rfc3339(clock.wall(post.starts_at)),
        "endsAt": _rfc3339(clock.wall(post.ends_at)),
    }


def _rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _sleep_until(wall: float) -> float:
    """Sleep until wall-clock time `wall`; how late it already was (seconds, 0 if on time)."""
    late = time.time() - wall
    if late < 0:
        time.sleep(-late)
    return max(0.0, late)
