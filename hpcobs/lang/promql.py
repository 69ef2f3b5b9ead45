"""Small PromQL builders, so content reads as intent rather than string plumbing."""

from __future__ import annotations

import re
from decimal import Decimal

from hpcobs.lang import escape
from hpcobs.lang.units import UNITS

# Factor that turns a value in the given unit into the canonical SI unit of its dimension.
_TO_SI = {
    "percent": ("ratio", 0.01),
    "mebibytes": ("bytes", 1048576),
    "kibibytes": ("bytes", 1024),
    "megahertz": ("hertz", 1e6),
    "millijoules": ("joules", 1e-3),
    "microjoules": ("joules", 1e-6),
    "milliseconds": ("seconds", 1e-3),
    "microseconds": ("seconds", 1e-6),
    "nanoseconds": ("seconds", 1e-9),
    # DCGM derives MB/s by dividing a KiB/s sample by 1,000 (DCGM field 449 reference).
    "megabytes_per_second": ("bytes_per_second", 1024000),
    "megabits_per_second": ("bytes_per_second", 125000),
    "gigabytes_per_second": ("bytes_per_second", 1e9),
}
assert set(_TO_SI) <= set(UNITS)


def si_unit(unit: str) -> str:
    return _TO_SI.get(unit, (unit, 1))[0]


def si_factor(unit: str) -> float:
    return _TO_SI.get(unit, (unit, 1))[1]


def to_si(expr: str, unit: str) -> str:
    """Scale an expression from its unit to the SI unit of the same dimension."""
    factor = si_factor(unit)
    if factor == 1:
        return expr
    if factor < 1:
        # Dividing by the exact inverse keeps results correctly rounded (50 / 100 is 0.5; 70 * 0.01 is not 0.7).
        return f"({expr} / {_number(round(1 / factor))})"
    return f"({expr} * {_number(factor)})"


COMPARISONS = ("==", "!=", ">", "<", ">=", "<=")
ABOVE_ZERO = (">", 0)  # a flag set, a counter that moved: Context.select's `when`


def compare_raw(expr: str, comparison: tuple[str, float], unit: str) -> str:
    """Keep the samples of `expr` (in `unit`) that meet a comparison against a threshold given in SI units:
    the threshold is scaled to `unit`, so a filter can run on the raw series before they are aggregated."""
    op, threshold = comparison
    if op not in COMPARISONS:
        raise ValueError(f"{op!r} is not a PromQL comparison; use one of {', '.join(COMPARISONS)}")
    factor = si_factor(unit)
    # In decimal, so that 0.85 in percent is 85, not 85.00000000000001.
    exact = Decimal(repr(threshold))
    raw = exact * round(1 / factor) if factor < 1 else exact / Decimal(repr(factor))
    return f"{expr} {op} {_number(float(raw))}"


def _number(value: float) -> str:
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def by(*labels: str) -> str:
    return f"by ({', '.join(labels)})"


def aggregate(op: str, labels: tuple[str, ...] | list[str], expr: str) -> str:
    return f"{op} {by(*labels)} ({expr})"


def label_replace(expr: str, dst: str, src: str, regex: str, replacement: str = "$1") -> str:
    args = ", ".join(map(escape.promql_string, (dst, replacement, src, regex)))
    return f"label_replace({expr}, {args})"


# The quantiles a fleet-wide spread records: the least busy node, the 10th percentile, the median, the 90th
# percentile and the busiest node. A handful of series per cluster, whatever its size.
SPREAD_QUANTILES = (0, 0.1, 0.5, 0.9, 1)


def spread(labels: tuple[str, ...], expr: str) -> str:
    """The distribution of `expr` across its series (per node, per GPU) as SPREAD_QUANTILES, each labelled
    `quantile`: what a panel draws over time in place of one line per node."""
    return " or ".join(
        label_replace(aggregate("quantile", labels, f"{q:g}, {expr}"), "quantile", "", "", f"{q:g}")
        for q in SPREAD_QUANTILES
    )


# Scrapes a rate()/increase() window spans (Context.rate_window): two samples even when a scrape or two is missed.
RATE_WINDOW_SCRAPES = 4


def rise_within(counter: str, window: str) -> str:
    """How much an event counter rose within the window, counting the whole value of a series that
    appeared within it: event counters (Falco, Tetragon) appear with their first match already at 1 or
    more, which rate() and increase() never see. A counter reset counts nothing for one window."""
    return f"(clamp_min({counter} - {counter} offset {window}, 0) or {counter})"


# Prometheus' duration grammar (prometheus/common model.ParseDuration): units largest first, each at most once.
_DURATION = re.compile(
    r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?(?:([0-9]+)ms)?"
)
_DURATION_UNIT_MS = (31536000000, 604800000, 86400000, 3600000, 60000, 1000, 1)
_DURATION_LOOSE = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
# Prometheus holds a duration as a Go time.Duration, int64 nanoseconds: about 292 years.
MAX_DURATION_MS = (2**63 - 1) // 1_000_000


def duration_ms(text: str) -> int:
    """Prometheus duration text (e.g. 1h30m) to milliseconds; ValueError ("problem; fix") when Prometheus refuses it."""
    match = _DURATION.fullmatch(text) if text else None
    if match is None:
        if _DURATION_LOOSE.fullmatch(text):
            raise ValueError(
                f"{text!r} repeats a unit or does not put its units largest first; write each unit "
                f"once, in the order y, w, d, h, m, s, ms ({_reordered(text)})"
            )
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 1h30m")
    numbers = [int(n) if len(n) <= 20 else MAX_DURATION_MS + 1 for n in match.groups(default="0")]
    total = sum(n * unit for n, unit in zip(numbers, _DURATION_UNIT_MS))
    if total > MAX_DURATION_MS:
        raise ValueError(
            f"{text!r} is beyond the longest duration Prometheus can hold (about 292y); write a shorter one"
        )
    return total


def _reordered(text: str) -> str:
    """The same length written in Prometheus' order, when it is short enough to say so."""
    sizes = dict(zip(("y", "w", "d", "h", "m", "s", "ms"), _DURATION_UNIT_MS))
    parts = re.findall(r"([0-9]{1,20})(ms|s|m|h|d|w|y)", text)
    ms = sum(int(n) * sizes[unit] for n, unit in parts)
    if ms > MAX_DURATION_MS:
        return "and keep it under about 292y"
    whole = duration(ms // 1000) if ms >= 1000 else ""
    return "e.g. " + (whole + (f"{ms % 1000}ms" if ms % 1000 else "") or "0s")


def duration_seconds(text: str) -> int:
    """Prometheus duration text (e.g. 1m30s) to whole seconds; ValueError for anything else."""
    ms = duration_ms(text)
    if ms % 1000:
        raise ValueError(f"{text!r} is not a whole number of seconds; write whole seconds (e.g. 1s, 90s)")
    return ms // 1000


def duration(seconds: int) -> str:
    """Seconds to the shortest Prometheus duration text."""
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


def one_of(names) -> str:
    """A matcher (=~"...") for exactly these names (or numbers, e.g. Xid codes)."""
    return "=~" + escape.promql_string(escape.regex_alternation(names))
