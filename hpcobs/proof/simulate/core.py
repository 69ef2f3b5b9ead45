"""Building blocks shared by every emitter: the time grid, seeded randomness, families, value lists.

Values are lists with one entry per scrape (None = no sample at that scrape). An emitter computes one
series at a time, so memory holds one series, never the whole output.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

from hpcobs.exporters import catalogue
from hpcobs.lang.promql import si_factor

Values = list  # list[int | float | None], one entry per scrape
# Scrape-index windows [start, end), ascending and disjoint: when a series exists, as spans rather than a mask, so
# that a job's series over a week costs its own length, not the window's (a GPU runs tens of jobs in a week).
Runs = list[tuple[int, int]]


UP = catalogue.up_name()
SeriesItem = tuple[dict[str, str], Values]

# Decimal places kept per unit once converted from SI; 0 means an integer, as the exporters print them
# (dcgm-exporter renders integer fields as integers; byte and tick counters are integers everywhere).
_DIGITS = {
    "percent": 0,
    "mebibytes": 0,
    "kibibytes": 0,
    "bytes": 0,
    "megahertz": 0,
    "hertz": 0,
    "millijoules": 0,
    "microjoules": 0,
    "nanoseconds": 0,
    "celsius": 0,
    "state": 0,
    "info": 0,
    "megabits_per_second": 0,
    "bytes_per_second": 0,
    "microseconds": 3,
    "milliseconds": 3,
    "seconds": 3,
    "ratio": 3,
    "watts": 3,
    "joules": 3,
    "megabytes_per_second": 3,
    "gigabytes_per_second": 3,
}


def seeded(*parts: object) -> random.Random:
    """A Random seeded by a stable hash of `parts` (Python's hash() is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


@dataclass(frozen=True)
class Window:
    """The scrape grid: `steps` samples, `step` seconds apart, the first at unix time `start`."""

    start: int
    step: int
    steps: int

    @property
    def duration(self) -> int:
        return self.step * self.steps

    def index(self, offset: int | float) -> int:
        """First scrape at or after `offset` seconds from the start, clipped to [0, steps]."""
        return min(self.steps, max(0, -(-int(offset) // self.step)))

    def offset(self, index: int) -> int:
        return index * self.step

    def time(self, index: int) -> int:
        return self.start + index * self.step


@dataclass
class Family:
    """One metric name: its catalogue type and help, and a lazy iterator of (labels, values)."""

    name: str
    type: str
    help: str
    series: Iterable[SeriesItem]


# -- value lists -------------------------------------------------------------------------------


def window_mask(n: int, windows: Iterable[tuple[int, int]]) -> list[bool]:
    """True at the scrapes inside any [start, end) window (scrape indices)."""
    mask = [False] * n
    for start, end in windows:
        start, end = max(0, start), min(n, end)
        if end > start:
            mask[start:end] = [True] * (end - start)
    return mask


def complement(windows: Iterable[tuple[int, int]], n: int) -> Runs:
    """The scrapes of [0, n) inside none of `windows` (which may overlap or reach past the grid), as runs."""
    out, at = [], 0
    for start, end in sorted(windows):
        start, end = max(0, min(start, n)), max(0, min(end, n))
        if end <= start:
            continue
        if start > at:
            out.append((at, start))
        at = max(at, end)
    if at < n:
        out.append((at, n))
    return out


def between(runs: Runs, first: int, last: int) -> Runs:
    """The runs cut to the scrapes [first, last)."""
    return [(max(start, first), min(end, last)) for start, end in runs if min(end, last) > max(start, first)]


def placed(n: int, first: int, on_span: Values, runs: Runs) -> Values:
    """Values computed for the scrapes [first, first + len(on_span)) (a job's span) put on the window of n scrapes,
    kept inside `runs` only (which lie within the span)."""
    out: Values = [None] * n
    for start, end in runs:
        out[start:end] = on_span[start - first : end - first]
    return out


def within(values: Values, runs: Runs) -> Values:
    """values inside the runs, None elsewhere (slices: no per-scrape work outside them)."""
    out: Values = [None] * len(values)
    for start, end in runs:
        out[start:end] = values[start:end]
    return out


def blank(values: Values, windows: Iterable[tuple[int, int]]) -> Values:
    """values with None inside the windows (clipped to the grid)."""
    out = list(values)
    for start, end in windows:
        start, end = max(0, start), min(len(out), end)
        if end > start:
            out[start:end] = [None] * (end - start)
    return out


def where(mask: list[bool], values: Values, other: Values | None = None) -> Values:
    """values where mask is true, else other (None when not given)."""
    if other is None:
        return [v if m else None for m, v in zip(mask, values)]
    return [v if m else o for m, v, o in zip(mask, values, other)]


def accumulate(increments: Iterable[float], initial: float = 0.0, resets: Iterable[int] = ()) -> Values:
    """A counter: running sum of increments from `initial`; at each reset index it restarts from zero."""
    reset_at = set(resets)
    out, total = [], initial
    for i, inc in enumerate(increments):
        total = inc if i in reset_at else total + inc
        out.append(total)
    return out


def to_unit(values_si: Values, metric) -> Values:
    """Convert SI values to the unit a catalogue metric is exposed in, rounded as the exporter prints it
    (counted things are integers in a counter, plain numbers such as a loss in a gauge)."""
    unit = metric.unit
    factor = si_factor(unit)
    digits = (0 if metric.type == "counter" else 4) if unit == "count" else _DIGITS.get(unit, 3)
    if digits == 0:
        return [None if v is None else int(round(v / factor)) for v in values_si]
    return [None if v is None else round(v / factor, digits) for v in values_si]


def trailing_count(mask: list[bool], width: int) -> Values:
    """For each scrape, how many of the last `width` scrapes (itself included) had mask set."""
    sums = list(itertools.accumulate(map(int, mask), initial=0))
    return [sums[i + 1] - sums[max(0, i + 1 - width)] for i in range(len(mask))]
