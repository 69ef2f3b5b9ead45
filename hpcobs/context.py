"""What content modules (recording_rules/, alerts/, dashboards/) receive: config, sources and helpers."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from . import promql
from .config import Config
from .sources import Sources

# Labels every per-GPU canonical series keeps (DESIGN.md §6).
GPU_KEY = ("node", "gpu")


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

    @property
    def thresholds(self) -> dict:
        return self.config["thresholds"]

    @property
    def scrape_interval(self) -> str:
        return self.config["scrape_interval"]

    @property
    def rate_window(self) -> str:
        """Shortest safe window for rate()/increase(): four scrape intervals."""
        return promql.duration(4 * promql.duration_seconds(self.scrape_interval))

    def gpu(self, signal: str, keep: tuple[str, ...] = (), over: Callable[[str], str] | None = None,
            op: str = "max") -> str:
        """One canonical per-GPU expression for a dcgm signal across every deployed exporter version.

        Each version family contributes a branch: its raw name (optionally wrapped by `over`, e.g. a
        range function), its host label copied to `node`, aggregated to (cluster, node, gpu, *keep) and
        scaled to SI units. Branches are joined with `or`, so a node scraped under two names is counted
        once. `max` also folds the copies dcgm-exporter emits for a GPU shared by several jobs.
        """
        source = self.sources["dcgm"]
        branches: dict[tuple[str, str], list[str]] = {}
        for version in source.versions:
            metric = source.metric(signal, version)
            if metric is not None:
                hosts = branches.setdefault((metric.name, metric.unit), [])
                if source.host_label(version) not in hosts:
                    hosts.append(source.host_label(version))
        parts = []
        for (name, unit), hosts in branches.items():
            expr = name + source.selector()
            expr = over(expr) if over else expr
            for host in hosts:
                expr = promql.label_replace(expr, "node", host, source.exporter.host_regex)
            parts.append(promql.to_si(promql.aggregate(op, (self.cluster, *GPU_KEY, *keep), expr), unit))
        if not parts:
            raise ValueError(f"no deployed dcgm-exporter version exposes {signal}")
        return " or ".join(parts)
