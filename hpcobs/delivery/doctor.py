"""`build.py doctor --prometheus URL`: what a running Prometheus lacks for the rules this config builds, exporter by
exporter, each problem with its fix (docs/doctor.md).

One `Check` per thing that can be wrong: which exporters it looks at, what holds when it passes, and a function that
asks Prometheus and returns the problem (with its fix) or None. Every query aggregates in Prometheus (`count`,
`group`, `topk(3, ...)` for examples), so a fleet of thousands of nodes returns a few numbers and names, never its
series. Selectors, label names and metric names come from the config and the catalogue through the context, as the
rules read them.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from hpcobs.authoring.context import Context
from hpcobs.build import pipeline
from hpcobs.delivery import prometheus_api
from hpcobs.errors import UserError
from hpcobs.exporters import catalogue
from hpcobs.exporters.catalogue import Metric
from hpcobs.exporters.sources import GPU_ROLES, Source
from hpcobs.lang import escape, lint, promql
from hpcobs.settings import config as config_module

TIMEOUT = 10  # seconds per query: every query is an aggregation, which a healthy Prometheus answers in well under it
EXAMPLES = 3  # names shown with a problem (topk in Prometheus, not a list pulled into Python)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus' root URL, e.g. http://prometheus:9090"
    )
    parser.add_argument(
        "--time",
        metavar="RFC3339",
        help="look at the series as of this instant (e.g. 2026-03-01T12:00:00Z) instead of now",
    )


class Prometheus:
    """Instant queries against Prometheus' HTTP API; every failure to get an answer is one line, exit 2."""

    def __init__(self, url: str, at: float | None):
        self.url, self.at = prometheus_api.root_url(url, "doctor"), at

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        params = {"query": expr, **({"time": str(self.at)} if self.at is not None else {})}
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(address, timeout=TIMEOUT) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            refused = prometheus_api.api_error(exc)
            raise UserError(
                f"doctor error: Prometheus at {self.url} refused a query ({refused}): {expr}"
                if refused
                else f"doctor error: {self.url} answered HTTP {exc.code} to /api/v1/query: no Prometheus API at that "
                "URL; pass Prometheus' root URL (with its path prefix, if it has one)"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(
                f"doctor error: cannot reach Prometheus at {self.url}: {reason}; check --prometheus and that it runs"
            ) from None
        return [(sample["metric"], float(sample["value"][1])) for sample in body["data"]["result"]]

    def count(self, expr: str) -> int:
        return int(sum(value for _, value in self.query(f"count ({expr})")))

    def examples(self, expr: str, label: str, *beside: str) -> str:
        """A few values of `label` among the series of `expr`, each with its `beside` labels, for the problem's
        line: "gpu001 (instance gpu001.example.org:9400)"."""
        values = sorted(
            " ".join([labels.get(label, ""), *(f"({other} {labels.get(other, '')})" for other in beside)])
            for labels, _ in self.query(f"topk({EXAMPLES}, {expr})")
        )
        return ", ".join(dict.fromkeys(values))


@dataclass(frozen=True)
class Check:
    """One thing that can be wrong with an exporter's series as the rules read them."""

    name: str
    holds: str  # what the ok line says
    applies: Callable[[Context, str], bool]  # given the exporter's role (its key under exporters:)
    problem: Callable[[Prometheus, Context, str], str | None]  # "what is wrong; fix: what to do", or None
    # Its problem leaves nothing else of the exporter to check (no target scraped): the rest would only repeat it.
    blocking: bool = False


def _every(ctx: Context, role: str) -> bool:
    return True


@dataclass(frozen=True)
class Offenders:
    """A check that counts what is wrong: the offending series (an expression), the label naming each in the
    problem's line (and labels shown beside it), and the problem given their number and a few names."""

    expr: str
    problem: Callable[[int, str], str]
    label: str
    beside: tuple[str, ...] = ()


def counted(find: Callable[[Context, str], Offenders]) -> Callable[[Prometheus, Context, str], str | None]:
    """A check's problem function from the offenders it counts: none, no problem."""

    def problem(prometheus: Prometheus, ctx: Context, role: str) -> str | None:
        offenders = find(ctx, role)
        if not (count := prometheus.count(offenders.expr)):
            return None
        return offenders.problem(count, prometheus.examples(offenders.expr, offenders.label, *offenders.beside))

    return problem


# --- every exporter ---------------------------------------------------------------------------------------------


def _scraped(prometheus: Prometheus, ctx: Context, role: str) -> str | None:
    source = ctx.sources[role]
    if prometheus.count(ctx.up(role)):
        return None
    return (
        f"no `up` series matches {source.selector()}: Prometheus scrapes no target of this exporter, or under "
        f"another job name; fix: add its scrape job (docs/collection.md), or set exporters.{role}.selector "
        "to the labels its targets carry"
    )


def _targets_down(ctx: Context, role: str) -> Offenders:
    return Offenders(
        f"{ctx.up(role)} == 0",
        lambda count, examples: (
            f"{count} targets down (e.g. {examples}); fix: start the exporter on those hosts, or "
            "open its port to Prometheus (Prometheus' Targets page shows the scrape error)"
        ),
        "instance",
    )


def _without_cluster_label(ctx: Context, role: str) -> Offenders:
    source, label = ctx.sources[role], ctx.cluster
    names = [catalogue.up_name(), *sorted({metric.name for metric in source.metrics()})]
    return Offenders(
        source.selector(
            escape.promql_matcher("__name__", "=~", escape.regex_alternation(names)),
            escape.promql_matcher(label, "=", ""),
        ),
        lambda count, examples: (
            f"{count} series carry no `{label}` label (e.g. {examples}): every record "
            f"aggregates by it; fix: add {label}: <cluster name> as a target label of this scrape job "
            "(docs/collection.md), or set cluster.label to the label your scrape config writes"
        ),
        "__name__",
    )


def _mandatory_read(ctx: Context, source: Source) -> dict[str, list[Metric]]:
    """The signals of this exporter the built rules read, each with its names in every deployed version; optional
    (a flag or collector the site may not run) and sparse ones (only after an event) may rightly be absent."""
    read = {
        name
        for groups in pipeline.built_rule_groups(ctx).values()
        for g in groups
        for r in g.rules
        for name in lint.metric_names(r.expr)
    }
    signals: dict[str, list[Metric]] = {}
    for metric in source.metrics():
        if metric.name in read and not (metric.optional or metric.sparse):
            signals.setdefault(metric.signal, []).append(metric)
    return signals


def _metrics(prometheus: Prometheus, ctx: Context, role: str) -> str | None:
    source = ctx.sources[role]
    signals = _mandatory_read(ctx, source)
    names = sorted({metric.name for metrics in signals.values() for metric in metrics})
    if not names:
        return None
    named = source.selector(escape.promql_matcher("__name__", "=~", escape.regex_alternation(names)))
    present = {labels["__name__"] for labels, _ in prometheus.query(f"group by (__name__) ({named})")}
    absent = sorted(
        " or ".join(sorted({m.name for m in metrics}))
        for metrics in signals.values()
        if not present & {m.name for m in metrics}
    )
    if not absent:
        return None
    # The keys that say how this exporter names its metrics, where it has them.
    naming = [f"exporters.{role}.{key}" for key in ("versions", "metric_names") if key in ctx.config["exporters"][role]]
    return (
        f"the rules read {'; '.join(absent)}, which no series of this exporter has; fix: make the exporter export "
        "it (dcgm-exporter: the field in its collector CSV; node_exporter: its collector flag; the prolog: "
        "node_exporter's textfile directory; docs/exporters.md)"
        + (f", or, where the release you run names it otherwise, set {' or '.join(naming)}" if naming else "")
    )


# --- dcgm-exporter's node names ---------------------------------------------------------------------------------


def _gpu_targets(ctx: Context, role: str) -> str:
    """One series per GPU exporter target and the node name it reports: (cluster, node, instance)."""
    signals = ctx.sources[role].exporter.signals_for("utilization")
    return ctx.select(role, signals, ("node", "instance"), op="group")


def _shared(series: str, cluster: str) -> str:
    """Node names that several scrape targets report, among series labelled with node and instance: the number of
    targets for each."""
    return f"count by ({cluster}, node) (group by ({cluster}, node, instance) ({series})) > 1"


def _names_host_label(ctx: Context, role: str) -> bool:
    return ctx.sources[role].node_from_host_label


def _node_names_shared(ctx: Context, role: str) -> Offenders:
    return Offenders(
        _shared(_gpu_targets(ctx, role), ctx.cluster),
        lambda count, examples: (
            f"{count} node name(s) each reported by several targets (e.g. {examples}): "
            "dcgm-exporter runs with -r against a standalone nv-hostengine and names every node after that address, so "
            "their GPUs merge under one node; fix: set exporters.dcgm.node_from: instance (docs/exporters.md, "
            '"The node name")'
        ),
        "node",
    )


def _node_not_instance(ctx: Context, role: str) -> Offenders:
    source = ctx.sources[role]
    targets, cluster = _gpu_targets(ctx, role), ctx.cluster
    from_instance = source.exporter.canonical_labels(source.versions[0], "instance")["node"]
    assert isinstance(from_instance, dict)
    by_instance = promql.label_replace(targets, "node", from_instance["label"], from_instance["regex"])
    # Shared names are _node_names_shared's problem; the rest name a node other than their instance's host.
    other = f"({targets} unless on ({cluster}, node, instance) {by_instance})"
    hosts = "/".join(sorted({source.host_label(v) for v in source.versions}))
    return Offenders(
        f"{other} unless on ({cluster}, node) ({_shared(targets, cluster)})",
        lambda count, examples: (
            f"{count} targets report a {hosts} that is not their instance's host (e.g. {examples}): "
            "ExporterGpuSeriesAbsent compares the two; fix: scrape each node with instance <host>:<port>, the host as "
            "dcgm-exporter reports it (docs/collection.md), or set exporters.dcgm.node_from: instance"
        ),
        "node",
        ("instance",),
    )


# --- Slurm and the job attribution ------------------------------------------------------------------------------


def _gpu_nodes(ctx: Context) -> str:
    """Nodes with GPUs, except names several targets share (_node_names_shared reports those)."""
    targets = ctx.gpu("utilization", keep=("instance",), op="group")
    return (
        f"group by ({ctx.cluster}, node) ({targets}) unless on ({ctx.cluster}, node) ({_shared(targets, ctx.cluster)})"
    )


def _with_gpus(ctx: Context, role: str) -> bool:
    return any(ctx.sources[role].enabled for role in GPU_ROLES)


def _gpu_nodes_unknown_to_slurm(ctx: Context, role: str) -> Offenders:
    source = ctx.sources[role]
    host = source.host_label()
    per_node = next(
        m.signal for m in source.exporter.all_metrics() if host in m.labels and not (m.optional or m.sparse)
    )
    listed = ctx.select(role, [per_node], ("node",), op="group")
    return Offenders(
        f"{_gpu_nodes(ctx)} unless on ({ctx.cluster}, node) {listed}",
        lambda count, examples: (
            f"{count} GPU nodes are not Slurm node names (e.g. {examples}): the GPU exporters "
            "name nodes otherwise than Slurm (a domain suffix, another host name), and ExporterJobMappingMissing joins "
            "on the name; fix: name each node as slurm.conf's NodeName in the GPU exporters' node label "
            '(docs/collection.md; docs/exporters.md, "The node name")'
        ),
        "node",
    )


def _on_dcgm(ctx: Context, role: str) -> bool:
    """dcgm-exporter alone labels GPUs with the Slurm job (its --hpc-job-mapping-dir)."""
    return ctx.sources["dcgm"].enabled


def _job_labelled(ctx: Context, by: tuple[str, ...]) -> str:
    source = ctx.sources["dcgm"]
    signals = source.exporter.signals_for("utilization")
    return ctx.select("dcgm", signals, by, op="group", where={"hpc_job": '!=""'})


def _busy_gpus_unmapped(ctx: Context, role: str) -> Offenders:
    source = ctx.sources[role]
    signals = source.exporter.signals_for("utilization")
    busy = ctx.select("dcgm", signals, ("node", "gpu"), when=(">", ctx.thresholds.gpu_busy_ratio))
    mapped = _job_labelled(ctx, ("node", "gpu"))
    return Offenders(
        f"count by ({ctx.cluster}, node) ({busy} unless on ({ctx.cluster}, node, gpu) {mapped})",
        lambda count, examples: (
            f"busy GPUs carry no hpc_job on {count} nodes (e.g. {examples}): the GPU-to-job mapping is not written "
            "there, so per-job views miss their jobs; fix: install slurm/prolog and slurm/epilog on those nodes "
            "(docs/slurm.md) and run dcgm-exporter with --hpc-job-mapping-dir on the prolog's directory"
        ),
        "node",
    )


def _jobs_without_info(ctx: Context, role: str) -> Offenders:
    info = ctx.select(role, ["job_info"], ("hpc_job",), op="group")
    return Offenders(
        f"{_job_labelled(ctx, ('hpc_job',))} unless on ({ctx.cluster}, hpc_job) {info}",
        lambda count, examples: (
            f"{count} jobs on GPUs have no job-info series (e.g. {examples}): their user, "
            "account and partition are unknown; fix: install slurm/prolog on every GPU node and let node_exporter's "
            f"textfile collector read its directory (docs/slurm.md), or the exporter exporters.{role}.source names"
        ),
        "hpc_job",
    )


GENERIC = (
    Check("scraped", "Prometheus scrapes it", _every, _scraped, blocking=True),
    Check("targets up", "every target answers", _every, counted(_targets_down)),
    Check("cluster label", "every series carries the cluster label", _every, counted(_without_cluster_label)),
    Check("metrics", "every metric the rules read is there", _every, _metrics),
)
BY_ROLE: dict[str, tuple[Check, ...]] = {
    "dcgm": (
        Check("node names", "one node name per target", _names_host_label, counted(_node_names_shared)),
        Check(
            "node = instance", "each node name is its instance's host", _names_host_label, counted(_node_not_instance)
        ),
        Check("job mapping", "busy GPUs carry their job (hpc_job)", _every, counted(_busy_gpus_unmapped)),
    ),
    "slurm": (
        Check("node names", "the GPU nodes are Slurm's node names", _with_gpus, counted(_gpu_nodes_unknown_to_slurm)),
    ),
    "job_info": (
        Check("job info", "every job on GPUs has its job-info series", _on_dcgm, counted(_jobs_without_info)),
    ),
}


Result = tuple[Check, str | None]


def findings(prometheus: Prometheus, ctx: Context) -> list[tuple[str, Source, list[Result]]]:
    """Per enabled exporter, each check that applies, in order, with its problem (None: ok), up to a blocking
    problem."""
    found = []
    for role, source in ((role, ctx.sources[role]) for role in ctx.config["exporters"]):
        if not source.enabled:
            continue
        results: list[Result] = []
        for check in (*GENERIC, *BY_ROLE.get(role, ())):
            if check.applies(ctx, role):
                results.append((check, problem := check.problem(prometheus, ctx, role)))
                if problem and check.blocking:
                    break
        found.append((role, source, results))
    return found


def run(args: argparse.Namespace) -> int:
    config = config_module.load(args.config)
    at = _instant(args.time) if args.time else None
    prometheus = Prometheus(args.prometheus, at)
    found = findings(prometheus, Context(config))
    for role, source, results in found:
        print(f"{role} ({source.exporter.title}, {source.selector()})")
        for check, problem in results:
            print(f"  {'problem' if problem else 'ok':8} {check.name}: {problem or check.holds}")
    problems = sum(1 for _, _, results in found for _, problem in results if problem)
    print(f"{problems} problem(s)" if problems else "no problem found")
    return 1 if problems else 0


def _instant(text: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UserError(
            f"doctor error: --time {text!r} is not an RFC 3339 instant; write e.g. 2026-03-01T12:00:00Z"
        ) from None
