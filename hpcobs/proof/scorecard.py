"""The week benchmark's scorecard (issue 28, point 3): what an on-call engineer received for a replayed window,
scored against the ground truth of what was injected.

Inputs: the plan (hpcobs.proof.simulate.week: every fault with its class, onset, end and entity; the background
events with why each is benign), the alert timelines and notifications of the replay (hpcobs.proof.replay), and
each receiver's kind, read from the Alertmanager config (`receiver_kinds`). Times in the plan count from the
window's start; the replay's are Unix times, so the window's start (`origin`) is subtracted.

- **On an entity.** An alert is on an event's entity when it names the same node (one of a leaf switch's nodes)
  and, where both name one, the same GPU and HCA; an alert on no node is on it when it names the event's job (the
  fault's own, or the job the fault interrupts). A cluster-wide event is the cause of alerts on no node, GPU, HCA
  or job only. The labels are the catalogue's: `node`, dcgm-exporter's `gpu`, node_exporter's infiniband `device`,
  the job-info `hpc_job`.
- **Caused by.** An alert episode is caused by the first event on its entity (faults first, then background) that
  it went pending during: from the event's start to SLACK after its end.
- **Detected.** A fault is detected when an alert episode it caused fires; time to detect is from the fault's onset
  to the first such firing (the rule's `for:` included).
- **Pages.** A notification counts for every fault one of its alerts' episodes (the one firing when it was sent)
  was caused by; one that counts for none, to a pager or a chat receiver, is a false page, listed with the
  background event that caused its alerts, or none. Faults the plan could not place (every target busy) are
  counted as unplaced, neither detected nor missed; classes with no exporter signal are listed as such.
- **Totals**: notifications per day per receiver (e-mail ones included); firing episodes per alert name, notified
  or not (inhibited, routed to no integration), and those no fault caused, by the background event that did (or
  nothing).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from hpcobs.lang.escape import alertmanager_matcher
from hpcobs.proof.alerting import Episode, Timeline
from hpcobs.proof.replay import Notification
from hpcobs.proof.servers import Labels
from hpcobs.proof.simulate.week import LLAMA3_MIX, Plan
from hpcobs.settings.names import Team

# The plan's entity fields -> the alert labels naming them (catalogue: dcgm.yaml gpu, node_exporter.yaml infiniband
# device, job_info.yaml hpc_job; node is the canonical node label every exporter's series carries).
ENTITY_LABELS = {"node": "node", "gpu": "gpu", "hca": "device", "job": "hpc_job"}
# A signal shows at the next scrape (30 s) and an alert goes pending at the next evaluation (1 m): an event that
# ends sooner (a missed scrape, a two-minute excursion) still causes what goes pending within this after it.
SLACK = 120
PAGED = ("pager", "chat")  # the kinds a false notification is counted for
KINDS = ("pager", "chat", "job_owner")
OWNER_LABEL = "user"  # job_info.yaml: the job's owner, on every alert joined with the job's info


@dataclass(frozen=True)
class Event:
    """Something on an entity over [start, end] (seconds from the window's start): a fault (`name` its class) or a
    background event (`name` its scenario kind, `why` why no alert should page for it)."""

    name: str
    start: float
    end: float
    entity: dict[str, str]
    kind: str | None = None  # the fault's scenario kind
    why: str = ""


def receiver_kinds(config: dict) -> dict[str, str]:
    """Each receiver's kind by what the Alertmanager config gives it: pager (PagerDuty), chat (Slack), job_owner
    (the receiver the team job-owner route sends to), else its integrations (email, webhook) or none."""
    owner = alertmanager_matcher("team", "=", Team.JOB_OWNER.value)
    owners = {r["receiver"] for r in _routes(config["route"]) if owner in r.get("matchers", [])}
    kinds = {}
    for receiver in config.get("receivers", []):
        integrations = sorted(key.removesuffix("_configs") for key in receiver if key.endswith("_configs"))
        if "pagerduty" in integrations:
            kinds[receiver["name"]] = "pager"
        elif "slack" in integrations:
            kinds[receiver["name"]] = "chat"
        elif receiver["name"] in owners:
            kinds[receiver["name"]] = "job_owner"
        else:
            kinds[receiver["name"]] = "+".join(integrations) or "none"
    return kinds


def _routes(route: dict) -> list[dict]:
    return [route, *(r for child in route.get("routes", []) for r in _routes(child))]


def events(plan: Plan) -> tuple[list[Event], list[Event]]:
    """(faults placed, background events) of the plan."""
    faults = [
        Event(t.fault_class, t.onset, t.end, t.entity, t.kind) for t in plan.truth if t.kind is not None and t.specs
    ]
    background = [
        Event(
            spec.kind,
            spec.start or 0,
            (spec.start or 0) + (spec.duration or 0),
            {key: str(getattr(spec, key)) for key in ENTITY_LABELS if getattr(spec, key) is not None},
            why=why,
        )
        for spec, why in plan.background.items()
    ]
    return faults, background


def on_entity(labels: Labels, entity: dict[str, str]) -> bool:
    """The alert (its labels) is on the event's entity (module docstring)."""
    named = {key: labels[label] for key, label in ENTITY_LABELS.items() if label in labels}
    if not entity:
        return not named
    if "node" in named and "node" in entity:
        same = [named[k] == entity[k] for k in ("gpu", "hca") if k in named and k in entity]
        return named["node"] in entity["node"].split(",") and all(same)
    return "job" in named and named["job"] == entity.get("job")


def cause(labels: Labels, active_at: float, candidates: Sequence[Event]) -> Event | None:
    """The first of `candidates` on the alert's entity that the episode went pending during (active_at in seconds
    from the window's start)."""
    return next((e for e in candidates if e.start <= active_at <= e.end + SLACK and on_entity(labels, e.entity)), None)


def score(
    plan: Plan,
    timelines: Sequence[Timeline],
    notifications: Sequence[Notification],
    kinds: dict[str, str],
    origin: float,
    days: float,
) -> dict:
    """The scorecard (module docstring) as JSON-ready data, every time in seconds from the window's start."""
    faults, background = events(plan)
    caused: dict[int, list[tuple[Timeline, Episode]]] = defaultdict(list)  # fault index -> its alert episodes
    for timeline in timelines:
        for episode in timeline.episodes:
            found = cause(timeline.labels, episode.active_at - origin, faults)
            if found is not None:
                caused[faults.index(found)].append((timeline, episode))
    by_labels = {frozenset(t.labels.items()): t for t in timelines}
    pages: dict[int, list[tuple[str, Notification]]] = defaultdict(list)
    false: dict[str, list[dict]] = {kind: [] for kind in PAGED}
    owners: Counter[str] = Counter()
    for n in notifications:
        kind = kinds.get(n.receiver, "none")
        episodes = [(a, _episode(by_labels.get(frozenset(a.items())), n.at)) for a in n.alerts]
        counted = {faults.index(f) for a, e in episodes if e and (f := cause(a, e.active_at - origin, faults))}
        for index in counted:
            pages[index].append((kind, n))
        if not counted and kind in PAGED:
            false[kind].append(_false_page(n, episodes, background, origin))
        if kind == "job_owner":
            owners.update({a.get(OWNER_LABEL) or f"job {a.get(ENTITY_LABELS['job'], '?')}" for a in n.alerts})
    fired = Counter(t.labels["alertname"] for t in timelines for e in t.episodes if e.fired_at is not None)
    unexplained: dict[str, Counter[str]] = defaultdict(Counter)  # alert -> what caused its firings, if not a fault
    for t in timelines:
        for e in t.episodes:
            if e.fired_at is not None and cause(t.labels, e.active_at - origin, faults) is None:
                found = cause(t.labels, e.active_at - origin, background)
                unexplained[t.labels["alertname"]][found.name if found else "nothing"] += 1
    incidents = [_incident(f, caused[i], pages[i], origin) for i, f in enumerate(faults)]
    return {
        "classes": [_class(c.name, bool(c.variants), plan, incidents) for c in LLAMA3_MIX],
        "incidents": incidents,
        "false_pages": {
            kind: {"per_day": round(len(found) / days, 2), "pages": found} for kind, found in false.items()
        },
        "job_owner_notifications_per_day": {owner: round(count / days, 2) for owner, count in sorted(owners.items())},
        "notifications_per_day": {
            r: round(c / days, 2) for r, c in sorted(Counter(n.receiver for n in notifications).items())
        },
        "alerts_fired": dict(sorted(fired.items())),
        "fired_without_fault": {name: dict(sorted(c.items())) for name, c in sorted(unexplained.items())},
    }


def _episode(timeline: Timeline | None, at: float) -> Episode | None:
    """The episode of the alert instance that was firing when a notification for it was sent."""
    if timeline is None:
        return None
    fired = [e for e in timeline.episodes if e.fired_at is not None and e.fired_at <= at]
    return fired[-1] if fired else None


def _brief(labels: Labels) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k == "alertname" or k in ENTITY_LABELS.values()}


def _false_page(n: Notification, episodes, background: Sequence[Event], origin: float) -> dict:
    causes = [cause(a, e.active_at - origin, background) for a, e in episodes if e]
    found = next((c for c in causes if c), None)
    return {
        "at": round(n.at - origin),
        "receiver": n.receiver,
        "alerts": [_brief(a) for a in n.alerts],
        "cause": None if found is None else {"event": found.name, "entity": found.entity, "why": found.why},
    }


def _incident(
    fault: Event, episodes: list[tuple[Timeline, Episode]], pages: list[tuple[str, Notification]], origin: float
) -> dict:
    fired = sorted((e.fired_at - origin, t.labels["alertname"]) for t, e in episodes if e.fired_at is not None)
    return {
        "class": fault.name,
        "kind": fault.kind,
        "onset": fault.start,
        "entity": fault.entity,
        "detected_after": round(fired[0][0] - fault.start) if fired else None,
        "alerts": sorted({name for _, name in fired}),
        "pages": {kind: sum(1 for k, _ in pages if k == kind) for kind in KINDS},
        "notifications": [
            {"at": round(n.at - origin), "receiver": n.receiver, "alerts": sorted({a["alertname"] for a in n.alerts})}
            for _, n in pages
        ],
    }


def _class(name: str, signal: bool, plan: Plan, incidents: list[dict]) -> dict:
    truth = [t for t in plan.truth if t.fault_class == name]
    mine = [i for i in incidents if i["class"] == name]
    delays = sorted(i["detected_after"] for i in mine if i["detected_after"] is not None)
    return {
        "class": name,
        "signal": signal,
        "injected": len(mine) if signal else len(truth),
        "unplaced": sum(1 for t in truth if "unplaced" in t.entity),
        "detected": len(delays),
        "detect_seconds": {"median": statistics.median(delays), "p95": _p95(delays)} if delays else None,
        "pages_per_incident": {k: round(sum(i["pages"][k] for i in mine) / len(mine), 2) for k in KINDS}
        if mine
        else None,
        "most_pages": {k: max(i["pages"][k] for i in mine) for k in KINDS} if mine else None,
    }


def _p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile: the smallest value at least 95% of the values are not above."""
    return values[math.ceil(0.95 * len(values)) - 1]
