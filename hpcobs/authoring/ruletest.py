"""Rule test cases, turned into promtool test files (`promtool test rules`).

A Case is a few input series, an evaluation time and what must come out: samples of a recorded
series, or the labels of the alerts that fire (none for a silent case).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hpcobs.lang import promql
from hpcobs.lang.escape import promql_matcher
from hpcobs.lang.promql import duration, duration_seconds


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
    annotations: dict[str, str] = field(default_factory=dict)  # what an alert's lookups read (rules.Lookup)


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


@dataclass(frozen=True)
class Timeline:
    """Input series written in time, not in samples, so that a case means the same at any scrape interval.

    promtool's `axn` is n + 1 samples one `interval` apart: "0+3000x20" is a rate of 100/s over 10 minutes at a
    30 s scrape but 200/s over 5 minutes at 15 s. Cases say what happens for how long (`rising(100, "10m")`,
    `held(1, "30m")`) and evaluate when a rate over the rate window is whole (`settled`); the samples follow from
    the configured interval.
    """

    step: int  # seconds between two samples: the scrape interval
    window: int  # seconds of the rate()/increase() window the rules use
    evaluation: int  # seconds between two rule evaluations: a recorded series has a sample at each

    def samples(self, length: str | int) -> int:
        """The n of promtool's `axn` for a value lasting `length` (a duration or seconds): at least one step."""
        seconds = duration_seconds(length) if isinstance(length, str) else length
        return max(1, math.ceil(seconds / self.step))

    def held(self, value: float | str, length: str | int) -> str:
        """A gauge holding `value` for `length`."""
        return f"{_number(value)}x{self.samples(length)}"

    def rising(self, per_second: float, length: str | int, start: float = 0) -> str:
        """A counter from `start` growing by `per_second` every second for `length`."""
        return f"{_number(start)}+{_number(per_second * self.step)}x{self.samples(length)}"

    def pulse(self, value: float | str) -> str:
        """A value held for one rule evaluation: the shortest event a recorded series is sure to see (a single
        sample between two evaluations is read by none of them)."""
        return " ".join([_number(value)] * max(1, self.evaluation // self.step))

    def tick(self, seconds: int) -> int:
        """The first rule evaluation at or after `seconds` (promtool evaluates every `evaluation` from 0)."""
        return -(-seconds // self.evaluation) * self.evaluation

    def observed(self, seconds: int) -> int:
        """The last rule evaluation at or before `seconds`: what a recorded series holds then."""
        return seconds // self.evaluation * self.evaluation

    def absent(self, length: str | int) -> str:
        """No sample for `length` (a target not yet scraped); unlike `held`, what follows starts at `length`."""
        return f"_x{self.samples(length)}"

    def scrapes(self, count: int) -> str:
        """The time of the `count`-th scrape after the first: for cases about single samples (a first match)."""
        return duration(count * self.step)

    @property
    def settled_seconds(self) -> int:
        """When a rate over the window reads the steady value: the window is full and was full a window before,
        and never before five minutes (as the cases were first written at a 30 s scrape)."""
        return max(300, 2 * self.window)

    @property
    def settled(self) -> str:
        return duration(self.settled_seconds)

    @property
    def span(self) -> str:
        """How long steady series last: well past `settled`, so an evaluation there reads fresh samples."""
        return duration(2 * self.settled_seconds)


def _number(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else f"{value:.12g}"


# A spread's test: counters of SPREAD_RANKS nodes n0, n1, ... rising at 0, 1, ... (times a scale) per second.
SPREAD_RANKS = 5


def spread_case(
    description: str, rank_series: Callable[[str, str], Series], scale: float, timeline: Timeline, **labels: str
) -> Case:
    """The test of a spread (hpcobs.lang.promql.spread) of per-node rates: `rank_series(values, node)` makes a node's
    counter. Prometheus' quantile interpolates linearly between ranks, so quantile q is q x (SPREAD_RANKS - 1)."""
    return Case(
        description,
        at=timeline.settled,
        series=[rank_series(timeline.rising(rank * scale, timeline.span), f"n{rank}") for rank in range(SPREAD_RANKS)],
        expect=[sample(q * (SPREAD_RANKS - 1) * scale, **labels, quantile=f"{q:g}") for q in promql.SPREAD_QUANTILES],
    )
