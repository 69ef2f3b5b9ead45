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
- **Cluster-wide alerts.** An alert that names no node, GPU, HCA or job (SlurmNodesDown counts a partition's
  nodes) cannot be placed by its labels; it is on an event of the window's cluster (the replay holds one) when its
  declaration says the event's scenario kind fires it (`fired_by`, proven live by tests/live/test_alerts_live.py),
  and a declared one only on those, a cluster-wide event too (GpuDriverDrift, per driver: on the rolling update
  reaching a node, not on the peak-hour queue). An alert is not tied to a fault merely because both happened at
  once.
- **Caused by.** An alert episode is caused by the first event on its entity (faults first, then background) that
  it went pending during: from the event's start to SLACK after its end.
- **Detected.** A fault is detected when an alert episode it caused fires; time to detect is from the fault's onset
  to the first such firing (the rule's `for:` included).
- **Pages and repeats.** A notification counts for every fault one of its alerts' episodes (the one firing when
  it was sent) was caused by; one that counts for none, to a pager or a chat receiver, is a false page, listed with
  the background event that caused its alerts, or none. A notification is a repeat when an earlier one went to the
  same aggregation group (its group key) and the group has had an alert firing ever since: a repeat_interval
  re-send, or an alert joining a firing group. PagerDuty sees it as no new incident: Alertmanager's dedup key is
  the hash of the group key (notify/pagerduty/pagerduty.go notifyV2 `DedupKey: key.Hash()`, the key from
  notify.ExtractGroupKey; notify/util.go Key.Hash is its sha256; tag v0.25.0, commit
  258fab7cdd551f2cf251ed0348f0ad7289aee789), and PagerDuty folds an event into the open incident of its dedup key.
  The group closes (its resolve is sent) once none of its alerts fires; the next notification of the key opens a
  new incident. A chat or job owner notification is counted the same way: a page is a new group's message, a
  repeat is the same group's again. Pages and false pages per day count pages; repeats are reported beside them.
- **Unplaced, no signal.** Faults the plan could not place (every target busy) are counted as unplaced, neither
  detected nor missed; classes with no exporter signal are listed as such.
- **Job owners.** A job owner notification counts once for each owner of the jobs its alerts name: the job's user
  as the simulation ran it (`jobs`), else the alert's `user` label (job_info.yaml; GpuXidApplicationClass has
  none); per job too.
- **Totals**: notifications per day per receiver (e-mail ones included); firing episodes per alert name, notified
  or not (inhibited, routed to no integration), and those no fault caused, by the background event that did (or
  nothing).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import pipeline
from hpcobs.lang.escape import alertmanager_matcher
from hpcobs.proof.alerting import Episode, Timeline
from hpcobs.proof.replay import Notification
from hpcobs.proof.servers import Labels
from hpcobs.proof.simulate.model import Job
from hpcobs.proof.simulate.week import LLAMA3_MIX, Plan
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
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

FiredBy = Mapping[str, Collection[str]]  # alert name -> the scenario kinds its declaration says fire it


@dataclass(frozen=True)
class Event:
    """Something on an entity over [start, end] (seconds from the window's start): a fault (`name` its class) or a
    background event (`name` its scenario kind, `why` why no alert should page for it); `kind` is the scenario kind
    that shows it."""

    name: str
    start: float
    end: float
    entity: dict[str, str]
    kind: str | None = None
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


def declared_firings(config: Config) -> dict[str, tuple[str, ...]]:
    """Each alert of the build of `config` with the scenario kinds its declaration says fire it (`fired_by`)."""
    groups = [g for gs in pipeline.built_rule_groups(Context(config)).values() for g in gs]
    return {r.alert: r.fired_by for g in groups for r in g.rules if isinstance(r, Alert)}


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
            spec.kind,
            why,
        )
        for spec, why in plan.background.items()
    ]
    return faults, background


def _named(labels: Labels) -> dict[str, str]:
    """The entity fields the alert's labels name."""
    return {key: labels[label] for key, label in ENTITY_LABELS.items() if label in labels}


def on_entity(labels: Labels, entity: dict[str, str]) -> bool:
    """The alert (its labels) is on the event's entity (module docstring)."""
    named = _named(labels)
    if not entity:
        return not named
    if "node" in named and "node" in entity:
        same = [named[k] == entity[k] for k in ("gpu", "hca") if k in named and k in entity]
        return named["node"] in entity["node"].split(",") and all(same)
    return "job" in named and named["job"] == entity.get("job")


def on_event(labels: Labels, event: Event, fired_by: FiredBy) -> bool:
    """The alert is on the event: by its entity, or, naming none, by its declaration when it has one, on any event
    (module docstring, cluster-wide alerts)."""
    declared = fired_by.get(labels["alertname"], ())
    if not _named(labels) and (event.entity or declared):
        return event.kind in declared
    return on_entity(labels, event.entity)


def cause(labels: Labels, active_at: float, candidates: Sequence[Event], fired_by: FiredBy) -> Event | None:
    """The first of `candidates` the alert is on that the episode went pending during (active_at in seconds from
    the window's start)."""
    return next(
        (e for e in candidates if e.start <= active_at <= e.end + SLACK and on_event(labels, e, fired_by)), None
    )


def score(
    plan: Plan,
    timelines: Sequence[Timeline],
    notifications: Sequence[Notification],
    kinds: dict[str, str],
    origin: float,
    days: float,
    jobs: Sequence[Job] = (),
    fired_by: FiredBy | None = None,
) -> dict:
    """The scorecard (module docstring) as JSON-ready data, every time in seconds from the window's start. `jobs`:
    the simulation's, for their owners; `fired_by`: the alerts' declarations, by default those of the default
    config's build (what the benchmark replays)."""
    fired_by = declared_firings(config_module.load()) if fired_by is None else fired_by
    faults, background = events(plan)
    caused: dict[int, list[tuple[Timeline, Episode]]] = defaultdict(list)  # fault index -> its alert episodes
    for timeline in timelines:
        for episode in timeline.episodes:
            found = cause(timeline.labels, episode.active_at - origin, faults, fired_by)
            if found is not None:
                caused[faults.index(found)].append((timeline, episode))
    by_labels = {frozenset(t.labels.items()): t for t in timelines}
    repeats = _repeats(notifications, by_labels)
    pages: dict[int, list[tuple[str, Notification, bool]]] = defaultdict(list)
    false: dict[str, list[dict]] = {kind: [] for kind in PAGED}
    for i, n in enumerate(notifications):
        kind, repeat = kinds.get(n.receiver, "none"), i in repeats
        episodes = [(a, _episode(by_labels.get(frozenset(a.items())), n.at)) for a in n.alerts]
        counted = {
            faults.index(f) for a, e in episodes if e and (f := cause(a, e.active_at - origin, faults, fired_by))
        }
        for index in counted:
            pages[index].append((kind, n, repeat))
        if not counted and kind in PAGED:
            false[kind].append(_false_page(n, repeat, episodes, background, origin, fired_by))
    owners, owned_jobs = _job_owners([n for n in notifications if kinds.get(n.receiver) == "job_owner"], jobs)
    fired = Counter(t.labels["alertname"] for t in timelines for e in t.episodes if e.fired_at is not None)
    unexplained: dict[str, Counter[str]] = defaultdict(Counter)  # alert -> what caused its firings, if not a fault
    for t in timelines:
        for e in t.episodes:
            if e.fired_at is not None and cause(t.labels, e.active_at - origin, faults, fired_by) is None:
                found = cause(t.labels, e.active_at - origin, background, fired_by)
                unexplained[t.labels["alertname"]][found.name if found else "nothing"] += 1
    incidents = [_incident(f, caused[i], pages[i], origin) for i, f in enumerate(faults)]
    return {
        "classes": [_class(c.name, bool(c.variants), plan, incidents) for c in LLAMA3_MIX],
        "incidents": incidents,
        "false_pages": {
            kind: {
                "per_day": _per_day(sum(1 for p in found if not p["repeat"]), days),
                "repeats_per_day": _per_day(sum(1 for p in found if p["repeat"]), days),
                "pages": found,
            }
            for kind, found in false.items()
        },
        "job_owner_notifications_per_day": {owner: _per_day(c, days) for owner, c in sorted(owners.items())},
        "job_owner_notifications_per_job_per_day": {job: _per_day(c, days) for job, c in sorted(owned_jobs.items())},
        "notifications_per_day": {
            r: _per_day(c, days) for r, c in sorted(Counter(n.receiver for n in notifications).items())
        },
        "alerts_fired": dict(sorted(fired.items())),
        "fired_without_fault": {name: dict(sorted(c.items())) for name, c in sorted(unexplained.items())},
    }


def _job_owners(notifications: Sequence[Notification], jobs: Sequence[Job]) -> tuple[Counter[str], Counter[str]]:
    """Job owner notifications counted once per owner of the jobs their alerts name (`job <id>` when neither the
    simulation nor the alert says who), and once per job."""
    users = {job.id: job.user for job in jobs}
    owners: Counter[str] = Counter()
    owned_jobs: Counter[str] = Counter()
    for n in notifications:
        named = {a[ENTITY_LABELS["job"]]: a.get(OWNER_LABEL) for a in n.alerts if ENTITY_LABELS["job"] in a}
        owned_jobs.update(named.keys())
        owners.update({users.get(job) or user or f"job {job}" for job, user in named.items()})
    return owners, owned_jobs


def _per_day(count: int, days: float) -> float:
    return round(count / days, 2)


def _repeats(notifications: Sequence[Notification], by_labels: dict[frozenset, Timeline]) -> set[int]:
    """The indices of the notifications that repeat an earlier one's group while it stayed open (module docstring):
    the group's alerts (every one it has notified) had one firing at every moment from that notification to this."""
    last: dict[str, float] = {}  # group key -> when it was last notified
    members: dict[str, dict[frozenset, Timeline]] = defaultdict(dict)
    repeats = set()
    for i in sorted(range(len(notifications)), key=lambda i: notifications[i].at):
        n = notifications[i]
        group = members[n.group_key]
        group.update((key, by_labels[key]) for key in (frozenset(a.items()) for a in n.alerts) if key in by_labels)
        if n.group_key in last and _firing_throughout(group.values(), last[n.group_key], n.at):
            repeats.add(i)
        last[n.group_key] = n.at
    return repeats


def _firing_throughout(timelines: Collection[Timeline], since: float, until: float) -> bool:
    """Some episode of `timelines` was firing at every moment of [since, until]."""
    firing = sorted(
        (e.fired_at, math.inf if e.resolved_at is None else e.resolved_at)
        for t in timelines
        for e in t.episodes
        if e.fired_at is not None
    )
    covered = None  # firing from `since` without a gap until this
    for start, end in firing:
        if covered is None and start <= since < end:
            covered = end
        elif covered is not None and start <= covered:
            covered = max(covered, end)
    return covered is not None and covered >= until


def _episode(timeline: Timeline | None, at: float) -> Episode | None:
    """The episode of the alert instance that was firing when a notification for it was sent."""
    if timeline is None:
        return None
    fired = [e for e in timeline.episodes if e.fired_at is not None and e.fired_at <= at]
    return fired[-1] if fired else None


def _brief(labels: Labels) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k == "alertname" or k in ENTITY_LABELS.values()}


def _false_page(
    n: Notification, repeat: bool, episodes, background: Sequence[Event], origin: float, fired_by: FiredBy
) -> dict:
    causes = [cause(a, e.active_at - origin, background, fired_by) for a, e in episodes if e]
    found = next((c for c in causes if c), None)
    return {
        "at": round(n.at - origin),
        "receiver": n.receiver,
        "repeat": repeat,
        "alerts": [_brief(a) for a in n.alerts],
        "cause": None if found is None else {"event": found.name, "entity": found.entity, "why": found.why},
    }


def _incident(
    fault: Event, episodes: list[tuple[Timeline, Episode]], pages: list[tuple[str, Notification, bool]], origin: float
) -> dict:
    fired = sorted((e.fired_at - origin, t.labels["alertname"]) for t, e in episodes if e.fired_at is not None)
    return {
        "class": fault.name,
        "kind": fault.kind,
        "onset": fault.start,
        "entity": fault.entity,
        "detected_after": round(fired[0][0] - fault.start) if fired else None,
        "alerts": sorted({name for _, name in fired}),
        "pages": {kind: sum(1 for k, _, repeat in pages if k == kind and not repeat) for kind in KINDS},
        "repeats": {kind: sum(1 for k, _, repeat in pages if k == kind and repeat) for kind in KINDS},
        "notifications": [
            {
                "at": round(n.at - origin),
                "receiver": n.receiver,
                "repeat": repeat,
                "alerts": sorted({a["alertname"] for a in n.alerts}),
            }
            for _, n, repeat in pages
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
        "pages_per_incident": _mean(mine, "pages"),
        "repeats_per_incident": _mean(mine, "repeats"),
        "most_pages": {k: max(i["pages"][k] for i in mine) for k in KINDS} if mine else None,
    }


def _mean(incidents: list[dict], field: str) -> dict[str, float] | None:
    """Per receiver kind, the incidents' mean count of `field` (pages or repeats)."""
    if not incidents:
        return None
    return {k: round(sum(i[field][k] for i in incidents) / len(incidents), 2) for k in KINDS}


def _p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile: the smallest value at least 95% of the values are not above."""
    return values[math.ceil(0.95 * len(values)) - 1]
