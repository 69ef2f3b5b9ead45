"""The deployed exporters: the catalogue bound to the site config (versions, selectors, prefixes, overrides).

src = Sources(config)
src["dcgm"].select("xid", "4.6-4.8")   ->  DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

import promql_parser

from hpcobs import catalogue, escape, promregex
from hpcobs.catalogue import Exporter, Metric

if TYPE_CHECKING:  # config validation imports this module to check selectors
    from hpcobs.config import Config

# promql_parser's MatchOp is not hashable: looked up by equality.
_OPS = (
    (promql_parser.MatchOp.Equal, "="),
    (promql_parser.MatchOp.NotEqual, "!="),
    (promql_parser.MatchOp.Re, "=~"),
    (promql_parser.MatchOp.NotRe, "!~"),
)


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __str__(self) -> str:
        return escape.promql_matcher(self.label, self.op, self.value)


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """`a="x", b=~"y"` as matchers (values unescaped), read by a PromQL parser; ValueError ("problem; fix")
    for anything but one plain list of matchers. Label names, values and regexes are checked when the
    config is loaded (hpcobs.config_checks)."""
    try:
        parsed = promql_parser.parse("{" + text + "}")
    except ValueError as exc:
        # The parser checks regexes too (with Rust's dialect); say which one and why RE2 refuses it.
        pattern = str(exc).removeprefix("illegal regex for ")
        if pattern != str(exc):
            raise ValueError(promregex.problem(pattern) or f"the regex {pattern!r} is not valid; fix it") from None
        if "at least one non-empty matcher" in str(exc):
            raise ValueError(
                f"{text!r} matches every series (each of its matchers accepts a missing label); "
                'name the exporter\'s job, e.g. job="dcgm-exporter"'
            ) from None
        parsed = None
    if not isinstance(parsed, promql_parser.VectorSelector) or parsed.offset is not None or parsed.at is not None:
        raise ValueError(f'{text!r} is not a list of label matchers; write e.g. job="dcgm-exporter"')
    if parsed.matchers.or_matchers:
        raise ValueError(
            f"{text!r} joins matchers with `or`, which Prometheus 2 cannot read; "
            'write one list of matchers, with a regex for alternatives (job=~"a|b")'
        )
    return tuple(
        Matcher(m.name, next(text for op, text in _OPS if op == m.op), m.value) for m in parsed.matchers.matchers
    )


def scrape_labels(matchers: tuple[Matcher, ...]) -> dict[str, str]:
    """Labels a series must carry to match every matcher (for synthetic series); ValueError ("problem; fix")
    when no value can be invented for a label. A label left out is the empty value, which Prometheus
    matchers see for an absent label."""
    labels = {}
    for label in dict.fromkeys(m.label for m in matchers):
        on_label = [m for m in matchers if m.label == label]
        value = _invent(tuple(on_label))
        if value is None:
            wanted = ", ".join(map(str, on_label))
            raise ValueError(
                f"no label value can be invented that matches {wanted} (needed for the rule tests' "
                f'synthetic series); write the value itself ({label}="...") or an alternation of values '
                f'({label}=~"a|b")'
            )
        if value:
            labels[label] = value
    return labels


@cache
def _invent(matchers: tuple[Matcher, ...]) -> str | None:
    """A value of one label that satisfies all its matchers: the value an equality or a regex names, else none."""
    candidates = [m.value if m.op == "=" else promregex.example(m.value) for m in matchers if m.op in ("=", "=~")]
    for value in [c for c in candidates if c is not None] or ["", "synthetic"]:
        if all(_satisfies(m, value) for m in matchers):
            return value
    return None


def _satisfies(matcher: Matcher, value: str) -> bool:
    if matcher.op in ("=", "!="):
        return (value == matcher.value) == (matcher.op == "=")
    return promregex.fullmatch(matcher.value, value) == (matcher.op == "=~")


@dataclass(frozen=True)
class Source:
    """One exporter as deployed: which versions, which selector, which names."""

    exporter: Exporter
    enabled: bool
    versions: tuple[str | None, ...]
    matchers: tuple[Matcher, ...]
    prefix: str
    overrides: dict

    @property
    def id(self) -> str:
        return self.exporter.id

    def metric(self, signal: str, version: str | None = None) -> Metric | None:
        """The raw metric for a signal as this deployment exposes it (None if the version lacks it)."""
        metric = self.exporter.metric(signal, version)
        if metric is None:
            return None
        name = self.overrides.get(signal, self.prefix + metric.name)
        return replace(metric, name=name)

    def metrics(self) -> Iterator[Metric]:
        """Every raw metric this deployment exposes: each signal in each deployed version."""
        for signal in self.exporter.signals():
            for version in self.versions:
                metric = self.metric(signal, version)
                if metric is not None:
                    yield metric

    def name(self, signal: str, version: str | None = None) -> str:
        metric = self.metric(signal, version)
        if metric is None:
            raise KeyError(f"{self.id} {version} does not expose {signal}")
        return metric.name

    def selector(self, *extra: str) -> str:
        """The label matchers of this exporter, plus extra ones, as `{...}` text."""
        return "{" + ", ".join([*map(str, self.matchers), *extra]) + "}"

    def select(self, signal: str, version: str | None = None, *extra: str) -> str:
        return self.name(signal, version) + self.selector(*extra)

    def host_label(self, version: str | None = None) -> str:
        return self.exporter.host_label(version)

    def scrape_labels(self) -> dict[str, str]:
        """Labels a series of this exporter must carry to match the selector (for synthetic series)."""
        return scrape_labels(self.matchers)


class Sources:
    """All exporters of the catalogue, bound to the config; index by exporter id."""

    def __init__(self, config: Config):
        self.config = config
        self._sources: dict[str, Source] = {}
        exporters = catalogue.load()
        for exporter_id, settings in config["exporters"].items():
            exporter = self._catalogue_entry(exporters, exporter_id, settings)
            versions = tuple(settings.get("versions", ())) or (None,)
            prefix = settings.get(exporter.name_prefix_config, "") if exporter.name_prefix_config else ""
            overrides = dict(settings.get("metric_names", {}))
            # Loading the config has checked selectors and overrides (hpcobs.config_checks).
            matchers = parse_selector(settings["selector"])
            self._sources[exporter_id] = Source(exporter, settings["enabled"], versions, matchers, prefix, overrides)

    @staticmethod
    def _catalogue_entry(exporters: dict[str, Exporter], exporter_id: str, settings: dict) -> Exporter:
        """Config keys name a role; some roles have several catalogue profiles to choose from."""
        if exporter_id == "slurm":
            return exporters[f"slurm_{settings['flavour']}"]
        if exporter_id == "job_info" and settings["source"] == "jontk":
            return exporters["slurm_jontk"]
        return exporters[exporter_id]

    def __getitem__(self, exporter_id: str) -> Source:
        return self._sources[exporter_id]

    def __iter__(self):
        return iter(self._sources.values())

    def enabled(self) -> list[Source]:
        return [s for s in self._sources.values() if s.enabled]

    def metric_names(self) -> set[str]:
        """The raw metric names of every exporter of the config, enabled or not, in every deployed version."""
        return {metric.name for source in self for metric in source.metrics()}
