"""Rule test cases, turned into promtool test files (`promtool test rules`).

A Case is a few input series, an evaluation time and what must come out: samples of a recorded
series, or the labels of the alerts that fire (none for a silent case).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hpcobs.lang import promql
from hpcobs.lang.escape import promql_matcher


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    values: str  # promtool expanding notation, e.g. "0+1x10" or "1 1 _ stale"

    def text(self) -> str:
        return selector_text(self.name, self.labels)


def selector_text(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(promql_matcher(k, "=", v) for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float | None = None  # None for alerts


@dataclass
class Case:
    name: str
    at: str  # evaluation time, from the start of the input series
    series: list[Series]
    expect: list[Sample] = field(default_factory=list)


def alert(**labels: str) -> Sample:
    return Sample(labels)


def sample(value: float, **labels: str) -> Sample:
    """An expected sample. promtool compares exactly: write values as Prometheus computes them (30 / 100)."""
    return Sample(labels, value)


# A spread's test: counters of SPREAD_RANKS nodes n0, n1, ... rising at 0, 1, ... (times a scale) per second.
SPREAD_RANKS = 5


def spread_case(
    description: str, rank_series: Callable[[str, str], Series], scale: float, scrape_seconds: float, **labels: str
) -> Case:
    """The test of a spread (hpcobs.lang.promql.spread) of per-node rates: `rank_series(values, node)` makes a node's
    counter. Prometheus' quantile interpolates linearly between ranks, so quantile q is q x (SPREAD_RANKS - 1)."""
    return Case(
        description,
        at="5m",
        series=[rank_series(f"0+{rank * scale * scrape_seconds:.0f}x20", f"n{rank}") for rank in range(SPREAD_RANKS)],
        expect=[sample(q * (SPREAD_RANKS - 1) * scale, **labels, quantile=f"{q:g}") for q in promql.SPREAD_QUANTILES],
    )
