"""Small PromQL builders, so content reads as intent rather than string plumbing."""
from __future__ import annotations

import re

from .catalogue import UNITS

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


def _number(value: float) -> str:
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def by(*labels: str) -> str:
    return f"by ({', '.join(labels)})"


def aggregate(op: str, labels: tuple[str, ...] | list[str], expr: str) -> str:
    return f"{op} {by(*labels)} ({expr})"


def label_replace(expr: str, dst: str, src: str, regex: str, replacement: str = "$1") -> str:
    return f'label_replace({expr}, "{dst}", "{replacement}", "{src}", "{regex}")'


def rise_within(counter: str, window: str) -> str:
    """How much an event counter rose within the window, counting the whole value of a series that
    appeared within it: event counters (Falco, Tetragon) appear with their first match already at 1 or
    more, which rate() and increase() never see. A counter reset counts nothing for one window."""
    return f"(clamp_min({counter} - {counter} offset {window}, 0) or {counter})"


def duration_seconds(text: str) -> int:
    """Prometheus duration text (e.g. 1m30s) to seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return int(sum(int(n) * units[u] for n, u in parts))


def duration(seconds: int) -> str:
    """Seconds to the shortest Prometheus duration text."""
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


_REGEX_SPECIAL = set(".^$*+?()[]{}|\\")


def one_of(names) -> str:
    """A matcher (=~"...") for exactly these names (or numbers, e.g. Xid codes): regex metacharacters
    escaped, then the string literal's backslashes and quotes."""
    def literal(name: str) -> str:
        regex = "".join("\\" + ch if ch in _REGEX_SPECIAL else ch for ch in name)
        return regex.replace("\\", "\\\\").replace('"', '\\"')
    return '=~"' + "|".join(literal(str(n)) for n in names) + '"'
