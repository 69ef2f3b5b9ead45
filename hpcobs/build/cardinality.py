"""Cardinality budget: how many series each rule group reads and records on a reference cluster.

An estimate from label sets, not a measurement: a recorded series' class comes from the labels of its
expected samples (gpu -> one per GPU, hpc_job -> one per job, ...); a raw metric's from its catalogue
labels. A count of things matching a condition (ports not ACTIVE, idle GPUs...) only has series where
something matches, and a record of sparse raw series (catalogue `sparse: true`: Falco rule matches,
Tetragon events, drain reasons) only where something happened; those are counted for the `faulty`
fraction of the fleet. The live tests check the classes against series counted on a simulated cluster, and
tests/test_cardinality.py asserts the budget (docs/recording-rules.md#budget) on these numbers.

The budget is a gate: a config whose estimate is over `cardinality.budget_percent` does not build
(hpcobs.build.pipeline.model), and the one line says which groups grew beyond the default config's estimate,
so the site sees what its change cost and can raise the key knowingly.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from hpcobs.authoring.rules import Group, Record
from hpcobs.exporters.catalogue import Metric
from hpcobs.exporters.sources import Sources
from hpcobs.lang import lint

REFERENCE = {
    "nodes": 2048,
    "gpus_per_node": 8,
    "jobs": 300,
    "ranks": 16384,
    "shared_gpus": 0.02,  # fraction of GPUs that two jobs share (dcgm-exporter exports them twice)
    "accounts": 30,
    "partitions": 4,
    "ib_ports_per_node": 8,
    "mounts_per_node": 4,
    "filesystems": 2,
    "lustre_targets": 64,
    "collectives": 5,
    "message_sizes": 8,
    # (collective, message-size bucket, communicator shape) groups a job's NCCL records keep: a 3D-parallel job has
    # ~10-15 (gradient, activation and shard buckets on its NVLink-only and network communicators), a 1-node job a few.
    "nccl_groups": 10,
    "phases": 6,  # phases a rank times: the training helper's PHASES (a job's own names replace some of them)
    "node_states": 6,
    "falco_rules": 20,
    "falco_priorities": 3,
    "tetragon_policies": 5,
    "faulty": 0.05,  # fraction of nodes or jobs a condition-count reports at a given time
}
# Labels that add no series because another label of the set determines them.
DEPENDENT = {"user", "account", "partition", "uuid", "model", "driver", "rank", "qos", "job_name"}


def _gpus(r: dict) -> float:
    return r["nodes"] * r["gpus_per_node"]


def recorded_per(labels: set[str], r: dict = REFERENCE) -> tuple[str, float]:
    """(class, series count) of a recorded series with these labels (cluster excluded)."""
    keyed = labels - DEPENDENT if "hpc_job" in labels or "gpu" in labels else labels
    if "gpu" in keyed:
        return ("gpu", _gpus(r) * (1 + r["shared_gpus"]) if "hpc_job" in keyed else _gpus(r))
    if "hpc_job" in keyed:
        per_job = r["nccl_groups"] if "message_size" in keyed else r["collectives"] if "collective" in keyed else 1
        return ("job", r["jobs"] * per_job * (r["phases"] if "phase" in keyed else 1))
    if "target" in keyed:  # a Lustre target, on the host serving it
        return ("fs", r["lustre_targets"])
    if "node" in keyed:
        factor = prod(
            f
            for label, f in (
                ("mountpoint", r["mounts_per_node"]),
                ("rule_name", r["falco_rules"]),
                ("priority", r["falco_priorities"]),
                ("policy", r["tetragon_policies"]),
            )
            if label in keyed
        )
        return ("node", r["nodes"] * factor)
    for label, key in (("account", "accounts"), ("partition", "partitions"), ("fs", "filesystems")):
        if label in keyed:
            return (label, r[key] * (r["node_states"] if "state" in keyed else 1))
    if "rule_name" in keyed:
        return ("cluster", r["falco_rules"] * r["falco_priorities"])
    if "policy" in keyed:
        return ("cluster", r["tetragon_policies"])
    return ("cluster", 1)


def raw_series(metric: Metric, r: dict = REFERENCE) -> float:
    """Series of one raw metric on the reference cluster."""
    labels = set(metric.labels)
    if labels & {"gpu", "gpu_id"}:
        per_gpu = _gpus(r) * (1 + r["shared_gpus"])
        return per_gpu * (r["collectives"] * r["message_sizes"] if "collective" in labels else 1)
    if "rank" in labels:
        return r["ranks"] * (r["phases"] if "phase" in labels else 1)
    if "port" in labels:
        return r["nodes"] * r["ib_ports_per_node"]
    if "mountpoint" in labels:
        return r["nodes"] * r["mounts_per_node"]
    if "jobid" in labels:
        return r["jobs"] * r["lustre_targets"]
    if "target" in labels:
        return r["lustre_targets"]
    if "rule_name" in labels:
        return r["nodes"] * r["falco_rules"]
    if "partition" in labels:
        return r["partitions"]
    if labels & {"node", "hpc_job"}:
        return r["nodes"]
    return r["nodes"] if metric.exporter in ("node_exporter", "falco", "tetragon", "job_info") else 1


@dataclass(frozen=True)
class GroupCost:
    group: str
    raw_read: float
    recorded: float
    per: dict[str, float]  # recorded series by class


def record_labels(record: Record, cluster_label: str) -> set[str]:
    return {label for case in record.tests for s in case.expect for label in s.labels} - {cluster_label}


def costs(groups: list[Group], sources: Sources, cluster_label: str) -> list[GroupCost]:
    """Raw series read and recorded series produced by each group with recording rules (of a build, which holds
    no record of a disabled exporter: hpcobs.build.enabled)."""
    by_name = {metric.name: metric for source in sources.enabled() for metric in source.metrics()}
    out = []
    for group in groups:
        records = [r for r in group.rules if isinstance(r, Record)]
        if not records:
            continue
        read = {name for r in records for name in lint.metric_names(r.expr) if name in by_name}
        per: dict[str, float] = {}
        for record in records:
            kind, count = recorded_per(record_labels(record, cluster_label))
            raw = [by_name[n] for n in lint.metric_names(record.expr) if n in by_name]
            sparse = bool(raw) and all(m.sparse for m in raw)
            count *= REFERENCE["faulty"] if sparse or lint.counts_a_condition(record.expr) else 1
            per[kind] = per.get(kind, 0) + count
        out.append(GroupCost(group.name, sum(raw_series(by_name[n]) for n in read), sum(per.values()), per))
    return out


def gpu_exporter_series(sources: Sources, r: dict = REFERENCE) -> float:
    """Raw series the GPU exporters emit by default on the reference cluster (the budget's yardstick)."""
    dcgm = sources["dcgm"]
    per_gpu = min(dcgm.exporter.raw["default_series_per_gpu"][v] for v in dcgm.versions)
    return per_gpu * _gpus(r) * (1 + r["shared_gpus"])


@dataclass(frozen=True)
class Estimate:
    """What one config's recording rules cost on the reference cluster, against the budget's yardstick."""

    groups: list[GroupCost]
    yardstick: float  # raw series the GPU exporters emit by default (gpu_exporter_series)

    @property
    def total(self) -> float:
        return sum(cost.recorded for cost in self.groups)

    @property
    def percent(self) -> float:
        return 100 * self.total / self.yardstick


def estimate(groups: list[Group], sources: Sources, cluster_label: str) -> Estimate:
    return Estimate(costs(groups, sources, cluster_label), gpu_exporter_series(sources))


# The config key of the budget, named by the report and by the refusal.
BUDGET_KEY = "cardinality.budget_percent"


def overrun(site: Estimate, default: Estimate, budget_percent: float, site_file: str) -> str:
    """The one line refusing a config over budget: how far over, the groups that grew beyond the default
    config's estimate (largest growth first), and the value of the key that accepts this estimate."""
    before = {cost.group: cost.recorded for cost in default.groups}
    grown = sorted(
        ((cost.recorded - before.get(cost.group, 0), cost) for cost in site.groups),
        key=lambda pair: -pair[0],
    )
    growth = [
        f"{cost.group} +{delta:,.0f} ({before.get(cost.group, 0):,.0f} -> {cost.recorded:,.0f})"
        for delta, cost in grown
        if delta >= 0.5
    ]
    why = (
        f"grown beyond the default config's estimate: {', '.join(growth)}"
        if growth
        else f"no group grew beyond the default config's estimate ({default.percent:.1f}%)"
    )
    return (
        f"build error: {site_file}: {BUDGET_KEY}: the recording rules record {site.total:,.0f} series on the "
        f"reference cluster, {site.percent:.1f}% of the {site.yardstick:,.0f} the GPU exporters emit, over the "
        f"budget of {budget_percent:g}%; {why}; set {BUDGET_KEY}: {ceil(site.percent * 10) / 10:g} to accept "
        f"it{', or turn back what grew' if growth else ''}"
    )


def report(site: Estimate, budget_percent: float) -> list[str]:
    """Lines printed by `python build.py`."""
    r = REFERENCE
    lines = [
        f"cardinality on the reference cluster ({r['nodes']} nodes x {r['gpus_per_node']} GPUs, "
        f"{r['jobs']} jobs, {r['ranks']} ranks):",
        f"  {'group':34} {'raw read':>10} {'recorded':>9}  by class",
    ]
    for cost in site.groups:
        classes = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(cost.per.items()))
        lines.append(f"  {cost.group:34} {cost.raw_read:>10,.0f} {cost.recorded:>9,.0f}  {classes}")
    lines.append(
        f"  all recorded series: {site.total:,.0f} = {site.percent:.1f}% of the {site.yardstick:,.0f} "
        f"series the GPU exporters emit by default (budget {budget_percent:g}%, {BUDGET_KEY})"
    )
    return lines
