"""The deployed exporters: the catalogue bound to the site config (versions, selectors, prefixes, overrides).

src = Sources(config)
src["dcgm"].select("xid", "4.6-4.8")   ->  DCGM_FI_DEV_XID_ERRORS{job="dcgm-exporter"}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hpcobs.exporters import catalogue
from hpcobs.exporters.catalogue import Exporter, Metric
from hpcobs.lang.selectors import Matcher, parse_selector, scrape_labels


@dataclass(frozen=True)
class Source:
    """One exporter as deployed: which versions, which selector, which names."""

    exporter: Exporter
    enabled: bool
    versions: tuple[str | None, ...]
    matchers: tuple[Matcher, ...]
    prefix: str
    overrides: dict
    # The label the node is read from (catalogue.Exporter.node_from_choices; exporters.<role>.node_from).
    node_from: str = catalogue.HOST_LABEL

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
        """The label the exporter writes its own host name in (not necessarily where the node is read from)."""
        return self.exporter.host_label(version)

    @property
    def node_from_host_label(self) -> bool:
        """Whether the node is read from the label the exporter writes its own host name in (the default)."""
        return self.node_from == catalogue.HOST_LABEL

    def canonical_labels(self, version: str | None = None) -> dict[str, str | dict]:
        """The exporter's raw label for each canonical label, the node read as this site chose (node_from)."""
        return self.exporter.canonical_labels(version, self.node_from)

    def scrape_labels(self) -> dict[str, str]:
        """Labels a series of this exporter must carry to match the selector (for synthetic series)."""
        return scrape_labels(self.matchers)


# The config roles that measure GPUs, each a vendor's exporter: a site enables at least one
# (hpcobs.settings.config_checks), and per-GPU quantities read every one enabled (Context.gpu).
GPU_ROLES = ("dcgm", "amd")

# Config roles that one of several catalogue profiles can serve: the key of the role that picks one, and the
# catalogue entry each of its values reads (config/schema.json's enum of that key is generated from here).
PROFILES: dict[str, tuple[str, dict[str, str]]] = {
    "slurm": ("flavour", {"sckyzo": "slurm_sckyzo", "native": "slurm_native"}),
    "job_info": ("source", {"prolog": "job_info", "jontk": "slurm_jontk"}),
}


class SiteConfig(Protocol):
    """What Sources reads of a loaded config (hpcobs.settings.config.Config): its sections by name."""

    def __getitem__(self, key: str) -> Any: ...


class Sources:
    """All exporters of the catalogue, bound to the config; index by exporter id."""

    def __init__(self, config: SiteConfig):
        self._sources: dict[str, Source] = {}
        exporters = catalogue.load()
        for exporter_id, settings in config["exporters"].items():
            exporter = self._catalogue_entry(exporters, exporter_id, settings)
            versions = tuple(settings.get("versions", ())) or (None,)
            prefix = settings.get(exporter.name_prefix_config, "") if exporter.name_prefix_config else ""
            overrides = dict(settings.get("metric_names", {}))
            # Loading the config has checked selectors and overrides (hpcobs.settings.config_checks).
            matchers = parse_selector(settings["selector"])
            node_from = settings.get("node_from", catalogue.HOST_LABEL)
            self._sources[exporter_id] = Source(
                exporter, settings["enabled"], versions, matchers, prefix, overrides, node_from
            )

    @staticmethod
    def _catalogue_entry(exporters: dict[str, Exporter], exporter_id: str, settings: dict) -> Exporter:
        """Config keys name a role; some roles have several catalogue profiles to choose from (PROFILES)."""
        if exporter_id in PROFILES:
            key, profiles = PROFILES[exporter_id]
            return exporters[profiles[settings[key]]]
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
