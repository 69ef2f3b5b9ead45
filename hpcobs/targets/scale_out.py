"""out/scale-out/: beyond one Prometheus (docs/scale-out.md), written when scale_out.topology is not single.

- placement.yaml: where each rule group may run: on a collection shard (node-local: hpcobs.lang.placement) or only
  centrally, where every node's series are.
- shard-<i>/ (topology sharded) or collector/ (topology clusters): a collector's config, the scrape jobs of
  out/prometheus/scrape/ remote-writing to the central store; sharded, each keeps the nodes whose name hashes to
  its number, so that every exporter of a node lands on the same shard.
- central/: the rule files of the groups the central ruler evaluates and vmalert's flags, one a line.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import promql_parser

from hpcobs.authoring.rules import Alert, Group, Record, layers, names_read
from hpcobs.exporters.labels_contract import contract
from hpcobs.exporters.sources import Sources
from hpcobs.lang import placement as analysis
from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
from hpcobs.targets import scrape
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_DIR, RULES_SCHEMA

SCALE_OUT_DIR = "scale-out"
PLACEMENT = f"{SCALE_OUT_DIR}/placement.yaml"
CENTRAL_DIR = f"{SCALE_OUT_DIR}/central"
VMALERT_FLAGS = "vmalert.flags"
# vmalert learnt keep_firing_for in v1.92.0 (VictoriaMetrics issue 4529); older ones refuse the rule file.
KEEP_FIRING_FOR_SINCE = (1, 92)
# Every rule names the node it is about by this label (the normalising records write it: docs/collection.md).
NODE = "node"
# Relabelling scratch labels: Prometheus and vmagent drop every label starting with __ once relabelling ends.
NODE_NAME = "__tmp_node_name"
SHARD = "__tmp_shard"
# A target's host:port, the host captured; relabel regexes are anchored at both ends.
_HOST_OF_TARGET = "(.+):[0-9]+"
# VictoriaMetrics single-node's Prometheus remote-write endpoint (its docs: "Prometheus setup").
REMOTE_WRITE_PATH = "/api/v1/write"


@dataclass(frozen=True)
class GroupPlacement:
    group: str
    domain: str
    file: str  # the rule file of out/ that holds it
    runs: Literal["shard", "central"]
    why: str


def placement(config: Config, rule_groups: Mapping[str, Sequence[Group]]) -> list[GroupPlacement]:
    """Where each rule group may run, in build order: on a shard when each of its rules answers for a node from
    that node's series alone, centrally otherwise (the first rule that cannot, and why)."""
    node_jobs, controller_jobs = _jobs_by_host(config)
    # Record name -> why it is not node-local, None when it is; filled group by group in dependency order.
    recorded: dict[str, str | None] = {}

    def selector(node: promql_parser.VectorSelector) -> str | None:
        name = node.name or ""
        if ":" in name:
            return None if name in recorded and recorded[name] is None else f"reads {name}, recorded centrally"
        jobs = [m.value for m in node.matchers.matchers if m.name == "job" and m.op == promql_parser.MatchOp.Equal]
        if jobs and jobs[0] in node_jobs:
            return None
        if jobs and jobs[0] in controller_jobs:
            return f'reads {name}{{job="{jobs[0]}"}}, scraped once for the cluster from the controller'
        return f"reads {name}, which no scrape job of the nodes produces"

    why: dict[str, str | None] = {}
    for layer in layers([group for groups in rule_groups.values() for group in groups]):
        for group in layer:
            reasons = []
            for rule in group.rules:
                reason = _rule_reason(rule, selector, recorded)
                if isinstance(rule, Record):
                    recorded[rule.record] = reason
                if reason:
                    reasons.append(f"{rule.record if isinstance(rule, Record) else rule.alert} {reason}")
            why[group.name] = reasons[0] if reasons else None
    return [
        GroupPlacement(
            group.name,
            domain,
            f"{RULES_DIR}/{domain}.rules.yaml",
            "central" if why[group.name] else "shard",
            why[group.name] or f"every rule keeps {NODE} and reads only node-local series",
        )
        for domain, groups in rule_groups.items()
        for group in groups
    ]


def _rule_reason(rule: Record | Alert, selector: analysis.SelectorCheck, recorded: dict[str, str | None]) -> str | None:
    reason = analysis.mixes(rule.expr, NODE, selector)
    if reason or isinstance(rule, Record):
        return reason
    # An annotation's query runs where the alert does: what it reads must be there too.
    return next(
        (
            f"fills its {key} annotation from {name}, recorded centrally"
            for key, lookup in rule.lookups.items()
            for name in lookup.reads
            if recorded.get(name, "") is not None
        ),
        None,
    )


def _jobs_by_host(config: Config) -> tuple[set[str], set[str]]:
    """The scrape jobs of exporters on every node, and of those scraped once from the controller."""
    hosts = [(c.job, c.runs_on) for c in contract(config["exporters"], Sources(config)) if c.job is not None]
    on_controller = {job for job, runs_on in hosts if runs_on == "controller"}
    return {job for job, runs_on in hosts if runs_on == "node"} - on_controller, on_controller


def shard_relabel(config: Config, shard: int) -> list[dict]:
    """The relabelling that keeps, of every scrape job, the targets of the nodes whose name hashes to `shard`: the
    node's name is the host part of its address, or of `instance` where the target group names the node there
    (a node reached at another address: scrape.target_groups), so a node's exporters all hash alike."""
    return [
        {"source_labels": ["__address__"], "regex": _HOST_OF_TARGET, "target_label": NODE_NAME},
        {"source_labels": ["instance"], "regex": _HOST_OF_TARGET, "target_label": NODE_NAME},
        {
            "source_labels": [NODE_NAME],
            "modulus": config.get("scale_out", "shards"),
            "target_label": SHARD,
            "action": "hashmod",
        },
        {"source_labels": [SHARD], "regex": str(shard), "action": "keep"},
    ]


def remote_write_url(config: Config) -> str:
    return config.get("scale_out", "central", "url").rstrip("/") + REMOTE_WRITE_PATH


def vmalert_flags(config: Config, rule_files: Sequence[str]) -> list[str]:
    """vmalert's command line for the central ruler, one flag each: the rule files (paths as vmalert is started
    with), VictoriaMetrics as what it queries, where its recording rules and alert state go and where the state is
    restored from, and every Alertmanager. No -external.label: the series already carry the cluster label, and one
    vmalert serves every cluster in topology clusters."""
    url = config.get("scale_out", "central", "url")
    return [
        *(f"-rule={path}" for path in rule_files),
        f"-datasource.url={url}",
        f"-remoteWrite.url={url}",
        f"-remoteRead.url={url}",
        *(f"-notifier.url=http://{address}" for address in config.get("scrape", "alertmanagers")),
        f"-evaluationInterval={config['evaluation_interval']}",
        # vmalert labels each alert and recorded series with its group's name unless told not to: the alerts would
        # not be the single Prometheus's (Alertmanager's inhibitions and silences match on the full label set).
        "-disableAlertgroupLabel",
    ]


def files(model: Model) -> dict[str, str]:
    config = model.config
    topology = config.get("scale_out", "topology")
    if topology == "single":
        return {}
    scrape_files = scrape.files(model)
    if not scrape_files:
        raise config_module.refusal(
            config,
            [
                (
                    ["scale_out", "topology"],
                    f"{topology} collection splits the scrape jobs of out/prometheus/scrape/, which this config "
                    'does not generate; set scrape.enabled: true with each exporter\'s selector naming its job="...", '
                    "or set scale_out.topology: single",
                )
            ],
        )
    placed = placement(config, model.rule_groups)
    on_shards = _rules_on_shards(config, placed, model.rule_groups)
    targets = {
        posixpath.relpath(path, scrape.SCRAPE_DIR): text
        for path, text in scrape_files.items()
        if path.startswith(f"{scrape.SCRAPE_DIR}/{scrape.TARGETS_DIR}/")
    }
    collectors = (
        {f"shard-{shard}": shard for shard in range(config.get("scale_out", "shards"))}
        if topology == "sharded"
        else {"collector": None}
    )
    out = {PLACEMENT: yaml_text({"groups": [asdict(p) for p in placed]}, GENERATED)}
    for directory, shard in collectors.items():
        collector_files = {
            **targets,
            **_collector(model, shard, _rule_files(model, on_shards)),
        }
        out |= {f"{SCALE_OUT_DIR}/{directory}/{path}": text for path, text in collector_files.items()}
    keeps_firing = _version(config.get("scale_out", "central", "vmalert_version")) >= KEEP_FIRING_FOR_SINCE
    central = _rule_files(model, {p.group for p in placed} - on_shards, keeps_firing)
    if not keeps_firing:
        out[PLACEMENT] = yaml_text(
            {"groups": [asdict(p) for p in placed], "keep_firing_for_left_out": _keeping_firing(model)}, GENERATED
        )
    out |= {f"{CENTRAL_DIR}/{path}": text for path, text in central.items()}
    out[f"{CENTRAL_DIR}/{VMALERT_FLAGS}"] = "".join(f"{flag}\n" for flag in vmalert_flags(config, list(central)))
    return out


def _rules_on_shards(
    config: Config, placed: list[GroupPlacement], rule_groups: Mapping[str, Sequence[Group]]
) -> set[str]:
    """scale_out.rules_on_shards, refused where a group is no node-local group of this build, or reads records
    of a group left to the central ruler (a shard evaluates from its own storage only)."""
    listed = config.get("scale_out", "rules_on_shards")
    by_name = {p.group: p for p in placed}
    problems = []
    for index, name in enumerate(listed):
        where = ["scale_out", "rules_on_shards", index]
        if name not in by_name:
            problems.append((where, f"{name!r} is no rule group of this build; write one of {PLACEMENT}'s groups"))
        elif by_name[name].runs == "central":
            problems.append(
                (
                    where,
                    f"group {name} reads series of more than one node ({by_name[name].why}); it must run centrally; "
                    "remove it from scale_out.rules_on_shards",
                )
            )
    problems += _needed_elsewhere(rule_groups, set(listed) & {p.group for p in placed if p.runs == "shard"})
    if problems:
        raise config_module.refusal(config, problems)
    return set(listed)


def _needed_elsewhere(rule_groups: Mapping[str, Sequence[Group]], on_shards: set[str]) -> list[tuple[list, str]]:
    """A group on the shards reading records that the central ruler writes would find none of them: a shard
    evaluates from its own storage."""
    groups = [group for domain in rule_groups.values() for group in domain]
    producer = {rule.record: group.name for group in groups for rule in group.rules if isinstance(rule, Record)}
    problems = []
    for group in groups:
        if group.name not in on_shards:
            continue
        needed = sorted({producer[n] for rule in group.rules for n in names_read(rule) if n in producer} - on_shards)
        if needed:
            problems.append(
                (
                    ["scale_out", "rules_on_shards"],
                    f"group {group.name} reads records of {', '.join(needed)}, which the shards would not evaluate; "
                    "list them too, or remove it",
                )
            )
    return problems


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _keeping_firing(model: Model) -> list[str]:
    """The alerts that outlast their condition by keep_firing_for."""
    groups = (group for domain in model.rule_groups.values() for group in domain)
    return sorted(
        {rule.alert for group in groups for rule in group.rules if isinstance(rule, Alert) and rule.keep_firing_for}
    )


def _rule_files(model: Model, names: set[str], keeps_firing: bool = True) -> dict[str, str]:
    """Rule files, relative to the ruler's directory, holding each domain's groups among `names`; without
    keep_firing_for unless the ruler `keeps_firing`."""

    def group(g: Group) -> dict:
        document = g.to_dict(model.links)
        if not keeps_firing:
            document["rules"] = [
                {k: v for k, v in rule.items() if k != "keep_firing_for"} for rule in document["rules"]
            ]
        return document

    return {
        f"rules/{domain}.rules.yaml": yaml_text({"groups": [group(g) for g in groups if g.name in names]}, GENERATED)
        for domain, groups in model.rule_groups.items()
        if any(g.name in names for g in groups)
    }


def _collector(model: Model, shard: int | None, shard_rules: dict[str, str]) -> dict[str, str]:
    """One collector's files: its scrape jobs (those of out/prometheus/scrape/, kept to its nodes when `shard`
    is a number) remote-writing to the central store, in the form its collector reads."""
    config = model.config
    jobs = [scrape.scrape_config(config, job) for job in scrape.jobs(config)]
    if shard is not None:
        jobs = [{**job, "relabel_configs": job["relabel_configs"] + shard_relabel(config, shard)} for job in jobs]
    if config.get("scale_out", "collector") == "vmagent":
        scrape_yml = {"global": {"scrape_interval": config["scrape_interval"]}, "scrape_configs": jobs}
        return {
            "scrape.yml": yaml_text(scrape_yml, GENERATED),
            "vmagent.flags": f"-promscrape.config=scrape.yml\n-remoteWrite.url={remote_write_url(config)}\n",
        }
    prometheus: dict = {
        "global": {"scrape_interval": config["scrape_interval"]},
        "scrape_configs": jobs,
        "remote_write": [{"url": remote_write_url(config)}],
    }
    if shard_rules:
        prometheus["global"]["evaluation_interval"] = config["evaluation_interval"]
        prometheus["rule_files"] = list(shard_rules)
        prometheus["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(config.get("scrape", "alertmanagers"))}]}]
        }
    return {"prometheus.yml": yaml_text(prometheus, GENERATED), **shard_rules}


TARGET = Target(
    name="Scale-out collectors and central ruler",
    paths=(f"{SCALE_OUT_DIR}/",),
    files=files,
    checks=(
        Check(".rules.yaml", RULES_SCHEMA, "promtool check rules"),
        Check("prometheus.yml", "schemastore/prometheus.json", "promtool check config"),
        Check("scrape.yml", "schemastore/prometheus.json"),
        Check(".json", "schemastore/prometheus.json#file-sd"),
    ),
    diff="files",
    docs="scale-out.md#what-the-build-writes",
)
