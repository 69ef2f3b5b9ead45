"""Falco native metrics and Tetragon on every node. Rule matches and policy events are event-driven:
their series only appear with the first match (Falco emits rules_matches_total for rules with count > 0).

The security scenarios (scenarios.py) name the rules and policies that match; they are the ones hpcobs ships,
with their priorities, tags and hooks (hpcobs.security.names; tests/test_security_content.py checks it)."""

from __future__ import annotations

from collections.abc import Iterator

from hpcobs.proof.simulate.core import Family, accumulate, seeded, to_unit, where
from hpcobs.proof.simulate.model import Node
from hpcobs.targets.falco import RULES_FILE

FALCO_VERSION = "0.41.0"
# Falco's default rules and hpcobs' rules file, installed as docs/security-content.md says.
FALCO_RULES_FILES = (
    ("/etc/falco/falco_rules.yaml", "1d7f3c9a"),
    (f"/etc/falco/rules.d/{RULES_FILE}", "9b2e40c7"),
)
SCAP_DROP_BUFFERS = (
    ("enter", "clone_fork"),
    ("exit", "clone_fork"),
    ("enter", "execve"),
    ("exit", "execve"),
    ("enter", "connect"),
    ("exit", "connect"),
)
TETRAGON_BINARIES = ("/usr/bin/python3", "/usr/bin/bash", "/usr/bin/srun", "/usr/sbin/sshd")
TETRAGON_POLICY_STATES = ("disabled", "enabled", "error", "load_error", "partially_enabled", "skipped")
TETRAGON_BUILD = {
    "commit": "4fbfe2d74ecb",
    "go_version": "go1.24.4",
    "modified": "false",
    "time": "2026-06-02T10:11:12Z",
    "version": "v1.5.0",
}


def _matches(sim, effects, n: int, first: int, per_minute: float) -> list:
    """A counter that starts with `first` matches at the effect's start, then grows per_minute; absent before."""
    inc = [0.0] * n
    for effect in effects:
        if effect.start < n:
            inc[effect.start] += first
        for i in range(effect.start + 1, min(effect.end, n)):
            inc[i] += per_minute * sim.window.step / 60
    start = min(e.start for e in effects)
    return [v if i >= start else None for i, v in enumerate(accumulate(inc))]


def _falco(sim, signal: str, node: Node, n: int):
    rng = seeded(sim.seed, "falco", signal, node.name)
    step = sim.window.step
    work = sim.activity.node_work(node.index, node.gpus)
    if signal == "rule_matches":
        by_rule: dict = {}
        for effect in sim.faults.effects("falco_rule", node.index):
            by_rule.setdefault((effect.get("rule"), effect.get("priority"), effect.get("tags")), []).append(effect)
        for (rule, priority, tags), effects in sorted(by_rule.items()):
            labels = {"rule_name": rule, "priority": priority, "source": "syscall", **{f"tag_{t}": v for t, v in tags}}
            yield labels, _matches(sim, effects, n, 3, 1.0)
        return
    table = {
        "scap_events": lambda: accumulate([4e4 * (0.5 + w) * step for w in work], rng.uniform(1e10, 5e10)),
        "scap_drops": lambda: [0] * n,
        "outputs_queue_drops": lambda: [0] * n,
        "start_time": lambda: [sim.window.start - 3 * 86400 - node.index * 61] * n,
        "cpu_usage": lambda: [0.01 + 0.02 * w + 0.004 * rng.random() for w in work],
        "memory_rss": lambda: [1.9e8 + 1e7 * rng.random() for _ in range(n)],
    }
    if signal in table:
        yield {}, table[signal]()
    elif signal == "scap_drops_buffer":
        for direction, drop in SCAP_DROP_BUFFERS:
            yield {"dir": direction, "drop": drop}, [0] * n
    elif signal == "hostname_info":
        yield {"hostname": node.name}, [1] * n
    elif signal == "version_info":
        yield {"version": FALCO_VERSION}, [1] * n
    elif signal == "rules_files_info":
        for name, digest in FALCO_RULES_FILES:
            yield {"file_name": name, "sha256": digest * 8}, [1] * n


def _tetragon(sim, signal: str, node: Node, n: int):
    rng = seeded(sim.seed, "tetragon", signal, node.name)
    step = sim.window.step
    # Default --metrics-label-filter keeps namespace, workload, pod, binary; node_name is "" (and on bare
    # metal namespace/pod/workload are "" too): empty labels are the same as absent.
    blank = {"namespace": "", "node_name": "", "pod": "", "workload": ""}
    if signal == "events":
        for binary in TETRAGON_BINARIES:
            for kind in ("PROCESS_EXEC", "PROCESS_EXIT"):
                yield (
                    {"binary": binary, "type": kind, **blank},
                    accumulate([rng.uniform(0.01, 0.5) * step] * n, rng.uniform(1e3, 1e6)),
                )
    elif signal == "policy_events":
        by_policy: dict = {}
        for effect in sim.faults.effects("tetragon_policy", node.index):
            by_policy.setdefault((effect.get("policy"), effect.get("hook"), effect.get("binary")), []).append(effect)
        for (policy, hook, binary), effects in sorted(by_policy.items()):
            yield {"binary": binary, "hook": hook, "policy": policy, **blank}, _matches(sim, effects, n, 2, 1.0)
    elif signal == "selector_actions":
        by_action: dict = {}
        for effect in sim.faults.effects("tetragon_action", node.index):
            by_action.setdefault((effect.get("policy"), effect.get("hook"), effect.get("action")), []).append(effect)
        for (policy, hook, action), effects in sorted(by_action.items()):
            yield (
                {
                    "action": action,
                    "hook": hook,
                    "hook_index": "0",
                    "policy": policy,
                    "policy_namespace": "",
                    "selector_index": "0",
                    "selector_label": "",
                },
                _matches(sim, effects, n, 1, 2.0),
            )
    elif signal == "policies_loaded":
        for state in TETRAGON_POLICY_STATES:
            yield {"state": state}, [2 if state == "enabled" else 0] * n
    elif signal in ("ringbuf_lost", "notify_overflowed"):
        yield {}, [0] * n
    elif signal == "ringbuf_received":
        yield {}, accumulate([rng.uniform(5, 50) * step] * n, rng.uniform(1e6, 1e8))
    elif signal == "build_info":
        yield TETRAGON_BUILD, [1] * n


def families(sim) -> Iterator[Family]:
    n = sim.window.steps
    for exporter, model in (("falco", _falco), ("tetragon", _tetragon)):
        if not sim.enabled(exporter):
            continue
        source = sim.sources[exporter]
        for signal in source.exporter.signals():
            metric = source.metric(signal)

            def series(exporter=exporter, model=model, signal=signal, metric=metric):
                for node in sim.cluster.nodes:
                    target = sim.target(exporter, node.name)
                    scraped = sim.scraped(exporter, node.index)
                    for labels, values in model(sim, signal, node, n):
                        raw = to_unit(values, metric)
                        yield {**labels, **target}, raw if scraped is None else where(scraped, raw)

            yield Family(metric.name, metric.type, metric.help, series())
