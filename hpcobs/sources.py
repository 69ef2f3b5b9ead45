"""The deployed exporters: the catalogue bound to the site config (versions, selectors, prefixes, overrides).

    src = Sources(config)
    src["dcgm"].select("xid", "4.6-4.8")   ->  DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"}
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import catalogue
from .catalogue import Exporter, Metric
from .config import Config
from .errors import UserError

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __str__(self) -> str:
        return f'{self.label}{self.op}"{self.value}"'


def parse_selector(text: str, where: str) -> tuple[Matcher, ...]:
    """Parse `a="x", b=~"y"` into matchers; `where` names the config key for the error."""
    matchers, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _MATCHER.match(text, pos)
        if not match or match.end() == pos:
            raise UserError(f"config error: {where}: {text!r} is not a list of label matchers; write e.g. job=\"dcgm-exporter\"")
        matchers.append(Matcher(*match.groups()))
        pos = match.end()
    return tuple(matchers)


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
        labels = {}
        for matcher in self.matchers:
            if matcher.op == "=":
                labels[matcher.label] = matcher.value
            elif matcher.op == "=~" and re.fullmatch(r"[\w.-]+(\|[\w.-]+)*", matcher.value):
                labels[matcher.label] = matcher.value.split("|")[0]
            elif matcher.op in ("=~",):
                raise UserError(f"cannot synthesise a series matching {matcher}; use = or a plain a|b alternation")
        return labels


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
            unknown = sorted(set(overrides) - set(exporter.signals()))
            if unknown:
                raise UserError(f"config error: exporters.{exporter_id}.metric_names: unknown signal(s) {unknown}; "
                                f"known: {exporter.signals()}")
            matchers = parse_selector(settings["selector"], f"exporters.{exporter_id}.selector")
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
