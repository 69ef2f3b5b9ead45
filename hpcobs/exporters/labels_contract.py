"""The label contract between the collection side and the rules (docs/collection.md): for each enabled exporter,
the scrape job its series come from, where it runs, and which of the labels the rules read the scrape adds and
which the exporter writes. hpcobs.targets.scrape writes the scrape jobs from it; a check of a running Prometheus can
hold its series to the same table.

The scrape adds `job` (the exporter's selector names it), `instance` (`<node>:<port>`, the node as Slurm names it)
and the cluster label (config `cluster.label`, value `cluster.name`). The node every rule groups by is read from
the label the catalogue names for the exporter (`host`, or `node_from` for dcgm-exporter): the exporter writes it
(dcgm-exporter's hostname, the Slurm exporters' and the training contract's `node`), or it is the host part of
`instance`. The scrape never writes `node`: with honor_labels off (Prometheus' default), a scrape label would
rename the exporter's own `node` to `exported_node`, and a job could forge `job` in the files it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hpcobs.exporters.sources import Source, Sources

# Exporters that run once for the cluster, beside slurmctld or slurmrestd, not on every node: the Slurm
# exporters (SckyzO/slurm_exporter and jontk/slurm-exporter query the controller; Slurm's own OpenMetrics is
# served by slurmctld).
ON_CONTROLLER = frozenset({"slurm_sckyzo", "slurm_native", "slurm_jontk"})
# Exporters whose series another exporter's process serves, on its port: the prolog's job-info files are read by
# the node's main node_exporter, NCCL Inspector's dumps by the node_exporter of the jobs' own directories
# (docs/contracts.md).
SERVED_BY = {"job_info": "node_exporter", "nccl_inspector": "training"}


@dataclass(frozen=True)
class Carried:
    """What one enabled exporter's series carry, and who adds it."""

    role: str  # the key under config `exporters:`
    exporter: str  # the catalogue entry
    job: str | None  # the scrape job: the selector's job="..." value, None when the selector is no single one
    runs_on: Literal["node", "controller"]
    served_by: str  # the catalogue entry whose process and port serve these series
    node_label: str  # the label the rules read the node from
    node_regex: str  # the part of it that is the node


def job_name(source: Source) -> str | None:
    """The scrape job a selector reads, when a scrape job alone produces what it selects: one job="..." matcher,
    and any other matcher accepting a series without its label (`env!~"test.*"`); a regex on job, or a label no
    scrape job writes, is for the site's own scrape config."""
    named = [matcher.value for matcher in source.matchers if matcher.label == "job" and matcher.op == "="]
    if len(named) == 1 and source.scrape_labels() == {"job": named[0]}:
        return named[0]
    return None


def carried(role: str, source: Source) -> Carried:
    node = source.canonical_labels(source.versions[0])["node"]
    label, regex = (node, "(.+)") if isinstance(node, str) else (node["label"], node["regex"])
    return Carried(
        role=role,
        exporter=source.id,
        job=job_name(source),
        runs_on="controller" if source.id in ON_CONTROLLER else "node",
        served_by=SERVED_BY.get(source.id, source.id),
        node_label=label,
        node_regex=regex,
    )


def contract(config_exporters: dict, sources: Sources) -> list[Carried]:
    """Every enabled exporter's contract, in config order."""
    return [carried(role, sources[role]) for role, settings in config_exporters.items() if settings["enabled"]]
