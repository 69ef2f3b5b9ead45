"""Alerts over a window of history, from Prometheus's own evaluator: each alerting rule's expression is range-queried
at its group's evaluation times, and the rule manager's state machine is applied to the results.

promtool's rule backfill writes recording rules only (servers.Prometheus.backfill_rules), so this is how a replay
gets its alerts. The query is Prometheus's (a range query evaluates the expression at exactly the instants an
instant query would); what the rule manager adds on top is copied here from Prometheus v2.42.0 (tag v2.42.0,
commit 225c61122d88b01d1f0eaaee0e05b6f3e0567ac0):

- rules/alerting.go `AlertingRule.Eval`: an alert instance is labelled by its sample's labels without `__name__`,
  then the rule's labels, then `alertname`; a new one is pending with ActiveAt = ts (an instance that was resolved
  starts over); a pending one fires at the first evaluation with ts - ActiveAt >= `for`; one absent from the
  result is dropped if pending, else resolved at ts (ResolvedAt) unless `keep_firing_for` holds it: it keeps
  firing while ts - KeepFiringSince < keep_firing_for, KeepFiringSince being its first absent evaluation (reset
  when it comes back); a resolved one is dropped once absent more than `resolvedRetention` (15 min) after it
  resolved.
- rules/alerting.go `sendAlerts` and `needsSending`: after each evaluation, every firing or resolved instance is
  sent when it resolved since its last send or its last send is more than `resend_delay` old (strictly); the
  send sets ValidUntil = ts + 4 x max(group interval, resend_delay).
- rules/manager.go `SendAlerts`: what reaches Alertmanager is startsAt = FiredAt, endsAt = ResolvedAt if resolved,
  else ValidUntil.
- cmd/prometheus/main.go: `--rules.alert.resend-delay` defaults to 1m, `--rules.for-grace-period` 10m,
  `--rules.for-outage-tolerance` 1h.
- A restart (`restarts`: when Prometheus was down): nothing is evaluated or sent while it is down and the rule
  manager's state is lost; every instance starts over (pending at its first evaluation back). rules/manager.go
  `Group.run` evaluates twice, then `RestoreForState`: for a rule whose `for` is at least the grace period, an
  instance that was active before the restart (its ALERTS_FOR_STATE sample, written at every evaluation, no older
  than the outage tolerance) gets back its ActiveAt: unchanged if it had fired (it fires at the next evaluation),
  else moved so that it fires a grace period from then at the earliest, else shifted by the downtime. A rule with a
  shorter `for` is not restored: its alerts wait their whole `for` again, and Alertmanager resolves them meanwhile
  once the endsAt of their last send passes.

Evaluation times are start, start + interval, ... for every group, where live Prometheus shifts each group by a
hash of its name: an alert's times can differ from a live server's by up to one interval, never its `for:`. The
Prometheus queried must hold the records too (servers.Prometheus.replay_rules) and, as its history has no
staleness markers, a lookback close to the scrape interval makes a vanished series vanish as a scraped one would.
The notifier then adds the external labels and applies alert_relabel_configs (notifier/notifier.go `Manager.Send`);
the generated prometheus.yml sets neither, so the labels here are those Alertmanager receives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import yaml

from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import backfill
from hpcobs.proof.servers import QUERIES_AT_ONCE, Labels, Prometheus

RESEND_DELAY = 60.0  # --rules.alert.resend-delay's default (cmd/prometheus/main.go)
FOR_GRACE_PERIOD = 600.0  # --rules.for-grace-period's default
OUTAGE_TOLERANCE = 3600.0  # --rules.for-outage-tolerance's default
EVALUATIONS_BEFORE_RESTORE = 2  # Group.run evaluates twice after a start, then restores the `for` state
RESOLVED_RETENTION = 15 * 60.0  # resolvedRetention (rules/alerting.go)
VALID_FOR_SENDS = 4  # ValidUntil = ts + 4 x max(interval, resend delay) (rules/alerting.go sendAlerts)
QUERY_SPAN = 24 * 3600.0  # the longest range one query evaluates


@dataclass(frozen=True)
class Rule:
    """An alerting rule as the rule manager holds it: times in seconds."""

    name: str
    expr: str
    interval: float  # its group's
    hold: float = 0.0  # `for`
    keep_firing_for: float = 0.0
    labels: Labels = field(default_factory=dict)


@dataclass
class Episode:
    """One life of an alert instance: pending from `active_at`, firing from `fired_at` (None: it never fired),
    resolved at `resolved_at` (None: still active at the end; for one that never fired, when it was dropped)."""

    active_at: float
    fired_at: float | None = None
    resolved_at: float | None = None


@dataclass(frozen=True)
class Post:
    """One send of an instance to Alertmanager: at evaluation time `at`, with the startsAt and endsAt it carries."""

    at: float
    starts_at: float
    ends_at: float


@dataclass
class Timeline:
    """An alert instance (labels as sent, `alertname` included) over the window: its episodes and its sends."""

    labels: Labels
    episodes: list[Episode] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)


class _State(Enum):
    INACTIVE = 0
    PENDING = 1
    FIRING = 2


@dataclass
class _Active:
    """What rules/alerting.go's Alert keeps between evaluations (None or -inf where Go has the zero time)."""

    timeline: Timeline
    state: _State = _State.PENDING
    resolved_at: float | None = None
    last_sent_at: float = float("-inf")
    keep_firing_since: float | None = None
    valid_until: float = 0.0

    @property
    def episode(self) -> Episode:
        return self.timeline.episodes[-1]


def rules_of(files: Sequence[Path], default_interval: str = "1m") -> list[Rule]:
    """Every alerting rule of these Prometheus rule files, with its group's interval (`default_interval` when the
    group sets none: the global evaluation_interval, 1m unless prometheus.yml says otherwise)."""
    rules: list[Rule] = []
    for path in files:
        for group in yaml.safe_load(Path(path).read_text(encoding="utf-8"))["groups"]:
            interval = duration_seconds(group.get("interval", default_interval))
            rules.extend(
                Rule(
                    rule["alert"],
                    rule["expr"],
                    interval,
                    duration_seconds(rule.get("for", "0s")),
                    duration_seconds(rule.get("keep_firing_for", "0s")),
                    {k: str(v) for k, v in rule.get("labels", {}).items()},
                )
                for rule in group["rules"]
                if "alert" in rule
            )
    return rules


def evaluate(
    rule: Rule,
    results: Iterable[tuple[float, Sequence[Labels]]],
    resend_delay: float = RESEND_DELAY,
    restarts: Sequence[tuple[float, float]] = (),
) -> list[Timeline]:
    """The rule's instances over its evaluations: `results` gives, at each evaluation time in order, the label sets
    the expression returned; `restarts`, the (from, to) times Prometheus was down. Returns the timelines, one per
    instance, in order of first appearance."""
    timelines: dict[frozenset, Timeline] = {}
    active: dict[frozenset, _Active] = {}
    # ALERTS_FOR_STATE: each pending or firing instance's ActiveAt and when it was last written
    for_state: dict[frozenset, tuple[float, float]] = {}
    down = sorted(restarts)
    since_start = EVALUATIONS_BEFORE_RESTORE  # evaluations since the last start: no restore due
    for ts, samples in results:
        if any(begin <= ts < end for begin, end in down):
            continue
        if down and ts >= down[0][1]:
            for lost in active.values():
                if lost.episode.resolved_at is None:
                    lost.episode.resolved_at = down[0][0]  # what this Prometheus knew of it ends there
            down = [d for d in down if ts < d[1]]
            active.clear()
            since_start = 0
        present = {}
        for sample in samples:
            labels = {k: v for k, v in sample.items() if k != "__name__"} | rule.labels | {"alertname": rule.name}
            present[frozenset(labels.items())] = labels
        for key, labels in present.items():
            alert = active.get(key)
            if alert is None or alert.state is _State.INACTIVE:
                timeline = timelines.setdefault(key, Timeline(labels))
                timeline.episodes.append(Episode(ts))
                active[key] = _Active(timeline)
        for key, alert in list(active.items()):
            if key not in present:
                keep_firing = False
                if alert.state is _State.FIRING and rule.keep_firing_for > 0:
                    if alert.keep_firing_since is None:
                        alert.keep_firing_since = ts
                    keep_firing = ts - alert.keep_firing_since < rule.keep_firing_for
                retired = alert.resolved_at is not None and ts - alert.resolved_at > RESOLVED_RETENTION
                if alert.state is _State.PENDING or retired:
                    del active[key]
                if alert.state is not _State.INACTIVE and not keep_firing:
                    alert.state, alert.resolved_at = _State.INACTIVE, ts
                    alert.episode.resolved_at = ts
                if not keep_firing:
                    continue
            else:
                alert.keep_firing_since = None
            if alert.state is _State.PENDING and ts - alert.episode.active_at >= rule.hold:
                alert.state, alert.episode.fired_at = _State.FIRING, ts
        for alert in active.values():
            if _needs_sending(alert, ts, resend_delay):
                alert.last_sent_at = ts
                alert.valid_until = ts + VALID_FOR_SENDS * max(rule.interval, resend_delay)
                ends_at = alert.resolved_at if alert.resolved_at is not None else alert.valid_until
                assert alert.episode.fired_at is not None  # only firing or resolved instances are sent
                alert.timeline.posts.append(Post(ts, alert.episode.fired_at, ends_at))
        since_start += 1
        if since_start == EVALUATIONS_BEFORE_RESTORE:
            _restore_for_state(rule, active, for_state, ts)
        for key, alert in active.items():  # a rule writes its ALERTS_FOR_STATE once restored (rules/alerting.go Eval)
            if alert.state is not _State.INACTIVE and since_start >= EVALUATIONS_BEFORE_RESTORE:
                for_state[key] = (alert.episode.active_at, ts)
    return list(timelines.values())


def _restore_for_state(
    rule: Rule, active: dict[frozenset, _Active], for_state: dict[frozenset, tuple[float, float]], ts: float
) -> None:
    """rules/manager.go `RestoreForState` at `ts`, once per start: the ActiveAt of the instances active before it."""
    if rule.hold < FOR_GRACE_PERIOD:
        return
    for key, alert in active.items():
        if key not in for_state or alert.state is not _State.PENDING:
            continue
        active_at, down_at = for_state[key]
        if down_at < ts - OUTAGE_TOLERANCE:
            continue
        remaining = rule.hold - (down_at - active_at)
        if remaining <= 0:
            restored = active_at
        elif remaining < FOR_GRACE_PERIOD:
            restored = ts + FOR_GRACE_PERIOD - rule.hold
        else:
            restored = active_at + (ts - down_at)
        alert.episode.active_at = restored


def _needs_sending(alert: _Active, ts: float, resend_delay: float) -> bool:
    if alert.state is _State.PENDING:
        return False
    if alert.resolved_at is not None and alert.resolved_at > alert.last_sent_at:
        return True
    return alert.last_sent_at + resend_delay < ts


def timelines(
    prometheus: Prometheus,
    rules: Sequence[Rule],
    start: float,
    end: float,
    resend_delay: float = RESEND_DELAY,
    restarts: Sequence[tuple[float, float]] = (),
) -> list[Timeline]:
    """Every rule's instances over [start, end], evaluated at start, start + its interval, ... (none while
    Prometheus is down, `restarts`) by range queries on `prometheus`, QUERIES_AT_ONCE rules at a time."""
    with ThreadPoolExecutor(max_workers=QUERIES_AT_ONCE) as pool:
        found = pool.map(
            lambda rule: evaluate(rule, _results(prometheus, rule, start, end), resend_delay, restarts), rules
        )
        return [timeline for timelines in found for timeline in timelines]


def _results(prometheus: Prometheus, rule: Rule, start: float, end: float) -> Iterable[tuple[float, list[Labels]]]:
    """(evaluation time, label sets returned) at every evaluation, those returning nothing included; queried a
    day at a time (a week's range query at 30 s would pass Prometheus's 11,000 points per series)."""
    found: dict[float, list[Labels]] = defaultdict(list)
    for first, last in backfill.pieces(start, end, rule.interval, QUERY_SPAN):
        for series in prometheus.query_range(rule.expr, first, last, f"{rule.interval:g}s"):
            for t, _ in series.points:
                found[round(t, 3)].append(series.labels)
    evaluations = int((end - start) // rule.interval) + 1
    return [(start + n * rule.interval, found.get(round(start + n * rule.interval, 3), [])) for n in range(evaluations)]
