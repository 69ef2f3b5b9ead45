"""What content modules (recording_rules/, alerts/, dashboards/) receive: config, sources and helpers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from hpcobs.authoring.ruletest import Timeline
from hpcobs.exporters import catalogue
from hpcobs.exporters.sources import GPU_ROLES, Sources
from hpcobs.lang import escape, promql
from hpcobs.settings.config import Config
from hpcobs.settings.thresholds import Thresholds

# Labels every per-GPU canonical series keeps: a GPU is its node and its index there, whatever the exporter calls them.
GPU_KEY = ("node", "gpu")


def raw_matcher(raw: str | dict, condition: str) -> str:
    """A `where` matcher on a canonical label, written on the exporter's raw label. A label carried inside
    another (node in node_exporter's instance "host:port") is matched through the mapping's regex, with
    the wanted value in place of its first capture group."""
    if isinstance(raw, str):
        return f"{raw}{condition}"
    match = re.fullmatch(r'(=~?)("(?:[^"\\]|\\.)*")', condition)
    if match is None:
        raise ValueError(f"only = and =~ can select on {raw['label']} through its regex, got {condition!r}")
    # Conditions are literals from escape.promql_string (JSON escapes) or hand-written: JSON reads both.
    wanted = json.loads(match.group(2))
    pattern = re.sub(r"\((?!\?)[^)]*\)", lambda _: f"({wanted})", raw["regex"], count=1)
    return escape.promql_matcher(raw["label"], "=~", pattern)


def either(parts: list[str]) -> str:
    """`a or b`, parenthesised so that a comparison or product applied to it covers every branch."""
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


@dataclass
class Context:
    config: Config

    @cached_property
    def sources(self) -> Sources:
        return Sources(self.config)

    @property
    def cluster(self) -> str:
        """The label carrying the cluster identity."""
        return self.config.get("cluster", "label")

    def up(self, role: str) -> str:
        """`up` of the role's scrape targets: its selector on the series Prometheus writes for every target."""
        return f"{catalogue.up_name()}{self.sources[role].selector()}"

    @cached_property
    def thresholds(self) -> Thresholds:
        return Thresholds.from_config(self.config["thresholds"])

    @property
    def scrape_interval(self) -> str:
        return self.config["scrape_interval"]

    @property
    def evaluation_interval(self) -> str:
        """How often the rule groups are evaluated: the scrape interval unless the site sets its own."""
        return self.config["evaluation_interval"]

    @property
    def timeline(self) -> Timeline:
        """Rule-test input series written in time, sampled at this site's scrape interval."""
        return Timeline(
            promql.duration_seconds(self.scrape_interval),
            promql.duration_seconds(self.rate_window),
            promql.duration_seconds(self.evaluation_interval),
        )

    @property
    def cluster_labels(self) -> dict[str, str]:
        """The cluster label with this cluster's name, as rule test samples carry it."""
        return {self.cluster: self.config.get("cluster", "name")}

    @property
    def rate_window(self) -> str:
        """Shortest safe window for rate()/increase(): RATE_WINDOW_SCRAPES scrape intervals."""
        return promql.duration(promql.RATE_WINDOW_SCRAPES * promql.duration_seconds(self.scrape_interval))

    def select(
        self,
        exporter_id: str,
        signals: list[str] | tuple[str, ...],
        by: tuple[str, ...] = ("node",),
        *,
        over: Callable[[str], str] | None = None,
        op: str = "max",
        where: dict[str, str] | None = None,
        when: tuple[str, float] | None = None,
    ) -> str:
        """One canonical expression for some signals of an exporter, across its deployed versions.

        Each distinct raw spelling contributes a branch: the raw name with the exporter's selector and
        `where` matchers (canonical label -> `op"value"`), optionally wrapped by `over` (e.g. a range
        function), kept only where it meets `when` (a comparison with a threshold in SI units, scaled to the
        raw unit: a condition that holds for few series drops the others before any relabelling or
        aggregation, which keeps per-GPU alerts cheap on a large fleet), raw labels copied to their canonical
        names (host label -> node, job label -> hpc_job, gpu_id -> gpu), aggregated `op by (cluster, *by)`
        and scaled to SI units. Branches are joined with `or`, so a target scraped under two spellings during
        an upgrade is counted once.
        """
        source = self.sources[exporter_id]
        branches: dict[tuple[str, str], list[dict[str, str | dict]]] = {}
        for version in source.versions:
            for signal in signals:
                metric = source.metric(signal, version)
                if metric is None:
                    continue
                mapping = source.canonical_labels(version)
                variants = branches.setdefault((metric.name, metric.unit), [])
                if mapping not in variants:
                    variants.append(mapping)
        parts = []
        for (name, unit), variants in branches.items():
            raw_where = [raw_matcher(variants[0].get(label, label), cond) for label, cond in (where or {}).items()]
            expr = name + source.selector(*raw_where)
            expr = over(expr) if over else expr
            expr = promql.compare_raw(expr, when, unit) if when else expr
            for mapping in variants:
                for label in by:
                    raw = mapping.get(label, label)
                    if isinstance(raw, dict):
                        expr = promql.label_replace(expr, label, raw["label"], raw["regex"])
                    elif raw != label:
                        expr = promql.label_replace(expr, label, raw, "(.+)")
            aggregated = promql.aggregate(op, (self.cluster, *by), expr)
            parts.append(aggregated if op in ("group", "count") else promql.to_si(aggregated, unit))
        if not parts:
            raise ValueError(f"no deployed {exporter_id} version exposes {list(signals)}")
        return either(parts)

    def gpu(
        self,
        canonical: str,
        keep: tuple[str, ...] = (),
        over: Callable[[str], str] | None = None,
        op: str = "max",
        where: dict[str, str] | None = None,
        when: tuple[str, float] | None = None,
    ) -> str:
        """A canonical per-GPU quantity (catalogue `canonical:`) over every enabled GPU exporter.

        `max` by default also folds the copies dcgm-exporter emits for a GPU shared by several jobs.
        """
        parts = []
        for exporter_id in GPU_ROLES:
            source = self.sources[exporter_id]
            signals = source.exporter.signals_for(canonical)
            if source.enabled and signals and any(source.metric(s, v) for s in signals for v in source.versions):
                parts.append(
                    self.select(exporter_id, signals, (*GPU_KEY, *keep), over=over, op=op, where=where, when=when)
                )
        if not parts:
            raise ValueError(f"no enabled GPU exporter measures {canonical}")
        return either(parts)

    def xids_reported(
        self, codes: Sequence[int], keep: tuple[str, ...] = (), over: Callable[[str], str] | None = None
    ) -> str:
        """GPUs that reported one of these Xid codes, by GPU and `keep` (`err_code` for the code).

        dcgm-exporter's Xid field is the *last* code (one series, `err_code` following the value): a drain-class
        Xid followed within one scrape by its follow-on (45, 43, 13, 63, 94) is never exported, and the follow-on
        replaces it in the next scrape. Where the site's CSV enables the Xid count collector
        (DCGM_EXP_XID_ERRORS_COUNT, one series per code DCGM recorded in the exporter's window), a code it counted
        is reported too, for as long as it stays in that window; a GPU whose last code already is one of these is
        reported once, by it. Without the collector only the last code is seen (docs/exporters.md, "Xid").
        """
        last = self.gpu("xid", keep=keep, over=over, where={"err_code": promql.one_of(codes)})
        if not self.sources["dcgm"].enabled:
            return last
        per_gpu = (*GPU_KEY, *(label for label in keep if label != "err_code"))
        counted = self.select(
            "dcgm",
            ["xid_count"],
            (*per_gpu, "xid"),
            over=over,
            where={"xid": promql.one_of(codes)},
            when=promql.ABOVE_ZERO,
        )
        as_err_code = promql.aggregate(
            "max", (self.cluster, *GPU_KEY, *keep), promql.label_replace(counted, "err_code", "xid", "(.+)")
        )
        return f"({last} or ({as_err_code} unless on ({self.cluster}, {', '.join(GPU_KEY)}) {last}))"
