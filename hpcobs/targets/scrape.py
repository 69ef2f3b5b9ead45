"""out/prometheus/scrape/: the collection side the rules read (docs/collection.md). One scrape job per enabled
exporter, named after its selector's job="..." (exporters sharing a job share it), each with a file_sd target file
of its nodes, or of the controller for the Slurm exporters, and the relabelling that adds the cluster label;
`instance` is `<node>:<port>`, the node as Slurm names it. scrape_configs.yml is what a site merges into its own
prometheus.yml; prometheus.yml is a complete minimal one, loading the rules too, which the build checks with
`promtool check config`. The label contract itself is hpcobs.exporters.labels_contract.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from hpcobs.errors import UserError
from hpcobs.exporters.labels_contract import Carried, contract
from hpcobs.exporters.sources import Sources
from hpcobs.lang import escape, hostlist
from hpcobs.lang.render import GENERATED, json_text, yaml_text
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config
from hpcobs.settings.config_checks import host_name
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_DIR

SCRAPE_DIR = "prometheus/scrape"
SCRAPE_CONFIGS = f"{SCRAPE_DIR}/scrape_configs.yml"
PROMETHEUS_YML = f"{SCRAPE_DIR}/prometheus.yml"
# file_sd paths are relative to the file that names them: keep targets/ beside the prometheus.yml that loads them.
TARGETS_DIR = "targets"
MERGE_HINT = (
    "# Merge these jobs into the scrape_configs: of your prometheus.yml (Prometheus 2.42 reads scrape jobs from that\n"
    "# file only) and copy targets/ beside it; docs/collection.md.\n"
)
# `scontrol show nodes` (one record per node, one line each with -o): the fields naming a node and its address.
_SCONTROL_FIELD = re.compile(r"(?:^|\s)(NodeName|NodeAddr)=(\S*)")


@dataclass(frozen=True)
class Node:
    name: str  # as Slurm names it: the host part of `instance`, the Slurm exporter's `node`
    address: str  # where Prometheus reaches it


@dataclass(frozen=True)
class Place:
    """Where a scrape job finds one exporter process: on each node or on the controller, at its port."""

    served_by: str  # the catalogue entry of the process scraped, which names its target file
    runs_on: str  # "node" or "controller" (labels_contract.Carried.runs_on)
    port: int

    @property
    def targets_file(self) -> str:
        return f"{TARGETS_DIR}/{self.served_by}.json"


@dataclass(frozen=True)
class Job:
    name: str
    roles: tuple[str, ...]  # the config's exporters whose series it scrapes
    places: tuple[Place, ...]  # one per process serving them: node_exporter on each node, jontk's on the controller


def jobs(config: Config) -> list[Job]:
    """The scrape jobs of the enabled exporters; refused, as a config error naming the selector, where a selector
    is no single job="..." (files() asks only when the site set up its scrape side or every selector names one)."""
    ports = config.get("scrape", "ports")
    by_name: dict[str, list[Carried]] = {}
    problems = []
    for carried in contract(config["exporters"], Sources(config)):
        if carried.job is None:
            selector = config.get("exporters", carried.role, "selector")
            problems.append(
                (
                    ["exporters", carried.role, "selector"],
                    f'{selector!r} names no single job="...", so no scrape job of out/prometheus/scrape/ produces '
                    'the series it selects; write job="<its scrape job>", or set scrape.enabled: false and scrape '
                    "it yourself",
                )
            )
        else:
            by_name.setdefault(carried.job, []).append(carried)
    if problems:
        raise config_module.refusal(config, problems)
    return [
        Job(
            name,
            tuple(member.role for member in members),
            tuple(dict.fromkeys(Place(m.served_by, m.runs_on, ports[m.served_by]) for m in members)),
        )
        for name, members in by_name.items()
    ]


def _every_selector_names_a_job(config: Config) -> bool:
    return all(carried.job is not None for carried in contract(config["exporters"], Sources(config)))


def parse_nodes(text: str) -> list[Node]:
    """The nodes of a node list: `scontrol show nodes` output (NodeName, and NodeAddr where it differs), or one
    name or hostlist expression per line or separated by spaces, `#` starting a comment. ValueError naming the
    line for a name that is no host name."""
    if "NodeName=" in text:
        return _scontrol_nodes(text)
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for expression in line.split("#", 1)[0].split():
            try:
                names = hostlist.expand(expression)
                for name in names:
                    host_name(name)
            except ValueError as exc:
                raise ValueError(f"line {number}: {exc}") from None
            out += [Node(name, name) for name in names]
    return out


def _scontrol_nodes(text: str) -> list[Node]:
    fields: list[dict[str, str]] = []
    for found in _SCONTROL_FIELD.finditer(text):
        key, value = found.groups()
        if key == "NodeName":
            fields.append({"line": str(text.count("\n", 0, found.start(2)) + 1)})
        if fields:
            fields[-1][key] = value
    out = []
    for node in fields:
        name, address = node["NodeName"], node.get("NodeAddr") or node["NodeName"]
        try:
            host_name(name)
            _address(address)
        except ValueError as exc:
            raise ValueError(f"line {node['line']}: {exc}") from None
        out.append(Node(name, address))
    return out


def _address(text: str) -> None:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        host_name(text)


def nodes(config: Config) -> list[Node]:
    """scrape.nodes, then the nodes of scrape.nodes_file; a node listed twice keeps its first entry."""
    listed = [Node(name, name) for expression in config.get("scrape", "nodes") for name in hostlist.expand(expression)]
    if "nodes_file" in config["scrape"]:
        listed += _nodes_file(config)
    first: dict[str, Node] = {}
    for node in listed:
        first.setdefault(node.name, node)
    return list(first.values())


def _nodes_file(config: Config) -> list[Node]:
    """The node list file, relative to the config file that names it; its problems as config errors of that file."""
    by_site = config.site_sets("scrape", "nodes_file")
    setter = Path(config.origin[-1] if by_site else config.origin[0])
    base = setter.parent if by_site else config_module.DEFAULT_CONFIG.parent
    path = base / config.get("scrape", "nodes_file")
    where = f"config error: {setter}: scrape.nodes_file: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UserError(f"{where}: cannot read ({reason}); name an existing node list, relative to {setter}") from None
    try:
        return parse_nodes(text)
    except ValueError as exc:
        raise UserError(f"{where}: {exc}") from None


def _target(address: str, port: int) -> str:
    is_ipv6 = ":" in address  # an IPv6 address: host names and IPv4 addresses hold no colon
    return f"[{address}]:{port}" if is_ipv6 else f"{address}:{port}"


def target_groups(hosts: list[Node], port: int) -> list[dict]:
    """file_sd groups: the nodes reached by their name in one group; each node reached at another address in a group
    of its own, whose `instance` still names the node (Prometheus sets instance from the address only when no label
    of the target gives it)."""
    by_name = [node for node in hosts if node.address == node.name]
    groups: list[dict] = [{"targets": [_target(node.name, port) for node in by_name]}] if by_name else []
    return groups + [
        {"targets": [_target(node.address, port)], "labels": {"instance": f"{node.name}:{port}"}}
        for node in hosts
        if node.address != node.name
    ]


def scrape_config(config: Config, job: Job) -> dict:
    return {
        "job_name": job.name,
        # The rules' rate windows are four scrape intervals: a site pasting the job keeps the interval they assume.
        "scrape_interval": config["scrape_interval"],
        "file_sd_configs": [{"files": [place.targets_file for place in job.places]}],
        # A relabel replacement expands $1 and ${name} like label_replace's: the cluster name is written as is.
        "relabel_configs": [
            {
                "target_label": config.get("cluster", "label"),
                "replacement": escape.label_replace_constant(config.get("cluster", "name")),
            }
        ],
    }


def files(model: Model) -> dict[str, str]:
    config = model.config
    if not config.get("scrape", "enabled") or not (config.site_sets("scrape") or _every_selector_names_a_job(config)):
        # A site that selects its exporters by regex scrapes them its own way: without a scrape: block of its own it
        # has asked for no scrape side, so none is generated rather than its build refused.
        return {}
    scrape_jobs = jobs(config)
    places = dict.fromkeys(place for job in scrape_jobs for place in job.places)
    listed = nodes(config)
    controller = config["scrape"].get("controller")
    on_controller = [Node(controller, controller)] if controller else []
    configs = [scrape_config(config, job) for job in scrape_jobs]
    prometheus = {
        "global": {"scrape_interval": config["scrape_interval"], "evaluation_interval": config["evaluation_interval"]},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": list(config.get("scrape", "alertmanagers"))}]}]},
        "rule_files": [posixpath.join(posixpath.relpath(RULES_DIR, SCRAPE_DIR), "*.rules.yaml")],
        "scrape_configs": configs,
    }
    return {
        SCRAPE_CONFIGS: yaml_text({"scrape_configs": configs}, GENERATED + MERGE_HINT),
        PROMETHEUS_YML: yaml_text(prometheus, GENERATED),
        **{
            f"{SCRAPE_DIR}/{place.targets_file}": json_text(
                target_groups(listed if place.runs_on == "node" else on_controller, place.port)
            )
            for place in places
        },
    }


TARGET = Target(
    name="Prometheus scrape config",
    paths=(f"{SCRAPE_DIR}/",),
    files=files,
    checks=(
        Check(".yml", "schemastore/prometheus.json", "promtool check config"),
        Check(".json", "schemastore/prometheus.json#file-sd"),
    ),
    diff="files",
    docs="output.md#prometheus-scrape-config",
)
