"""Writers: OpenMetrics (for `promtool tsdb create-blocks-from openmetrics`), VictoriaMetrics JSON lines
(/api/v1/import) and promtool `input_series` in the expanding notation. All stream series by series.

Labels with an empty value are dropped: Prometheus treats them as absent, and ingestion would not keep them.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

from hpcobs.authoring.ruletest import Series, selector_text
from hpcobs.proof.simulate.core import Family, Values, Window

VM_POINTS_PER_LINE = 720  # one JSON line holds at most this many points (bounded line length)
FORMATS = ("openmetrics", "vm", "promtool")


@dataclass
class Stats:
    families: int = 0
    series: int = 0
    samples: int = 0


Progress = Callable[[Stats], None]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()) if v != "")


def _openmetrics_header(name: str, kind: str, help_text: str) -> str:
    """OpenMetrics names a counter family without `_total` and an info family without `_info`; metrics
    that do not follow the suffix rules (dcgm counters, info gauges) are declared unknown/gauge."""
    if kind == "counter" and name.endswith("_total"):
        family, om_type = name[: -len("_total")], "counter"
    elif kind == "info" and name.endswith("_info"):
        family, om_type = name[: -len("_info")], "info"
    else:
        family, om_type = name, {"counter": "unknown", "untyped": "unknown", "info": "gauge"}.get(kind, kind)
    help_text = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# TYPE {family} {om_type}\n# HELP {family} {help_text}\n"


def _series(
    families: Iterable[Family], stats: Stats, progress: Progress | None
) -> Iterator[tuple[Family, dict, Values, bool]]:
    """(family, labels, values, first series of its family) for every series with at least one sample."""
    for family in families:
        first = True
        for labels, values in family.series:
            count = len(values) - values.count(None)
            if not count:
                continue
            stats.series += 1
            stats.samples += count
            if first:
                stats.families += 1
            yield family, labels, values, first
            first = False
        if progress:
            progress(stats)


def _sampled(values: Values) -> Iterator[int]:
    """The scrapes with a sample, found without a Python step per scrape: a job's series over a week is mostly
    None."""
    return itertools.compress(range(len(values)), map(operator.is_not, values, itertools.repeat(None)))


def write_openmetrics(
    families: Iterable[Family], out: TextIO, window: Window, progress: Progress | None = None
) -> Stats:
    stats = Stats()
    stamps = [f" {window.time(i)}\n" for i in range(window.steps)]
    for family, labels, values, first in _series(families, stats, progress):
        if first:
            out.write(_openmetrics_header(family.name, family.type, family.help))
        prefix = f"{family.name}{{{_labels_text(labels)}}} "
        out.write("".join([prefix + str(values[i]) + stamps[i] for i in _sampled(values)]))
    out.write("# EOF\n")
    return stats


def write_vm(families: Iterable[Family], out: TextIO, window: Window, progress: Progress | None = None) -> Stats:
    stats = Stats()
    stamps = [str(window.time(i) * 1000) for i in range(window.steps)]
    for family, labels, values, _ in _series(families, stats, progress):
        metric = {"__name__": family.name, **{k: v for k, v in sorted(labels.items()) if v != ""}}
        head = '{"metric":' + json.dumps(metric, separators=(",", ":"), ensure_ascii=False) + ',"values":['
        points = [(str(values[i]), stamps[i]) for i in _sampled(values)]
        for start in range(0, len(points), VM_POINTS_PER_LINE):
            chunk = points[start : start + VM_POINTS_PER_LINE]
            out.write(
                head + ",".join(v for v, _ in chunk) + '],"timestamps":[' + ",".join(t for _, t in chunk) + "]}\n"
            )
    return stats


# -- promtool expanding notation -------------------------------------------------------------------


def _number(value) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def compress(values: Values) -> str:
    """Values in promtool's expanding notation, lossless: 'a+bxN' (N+1 values, accumulated by repeated
    addition exactly as promtool does), '_xN' (N missing), 'stale' where a series disappears."""
    tokens: list[str] = []
    i, n = 0, len(values)
    while i < n:
        v = values[i]
        if v is None:
            j = i
            while j < n and values[j] is None:
                j += 1
            if i > 0:  # the series was there and is gone: Prometheus marks it stale
                if j == n:
                    tokens.append("stale")
                    break
                tokens.append("stale")
                i += 1
            gap = j - i
            if gap:
                tokens.append("_" if gap == 1 else f"_x{gap}")
            i = j
            continue
        a = float(v)
        run = 0
        if i + 1 < n and values[i + 1] is not None:
            b = float(values[i + 1]) - a  # repr() round-trips, so promtool parses exactly this b
            x = a
            while i + run + 1 < n and values[i + run + 1] is not None and x + b == float(values[i + run + 1]):
                x += b
                run += 1
        if run == 0:
            tokens.append(_number(a))
            i += 1
        else:
            step = _number(b)
            if float(step) == 0:
                tokens.append(f"{_number(a)}x{run}")
            else:
                tokens.append(f"{_number(a)}{'' if step.startswith('-') else '+'}{step}x{run}")
            i += run + 1
    return " ".join(tokens)


def expand(text: str) -> Values:
    """Inverse of compress (the subset it writes), for tests: 'stale' reads back as None."""
    out: Values = []
    for token in text.split():
        if token == "stale" or token == "_":
            out.append(None)
        elif token.startswith("_x"):
            out += [None] * int(token[2:])
        elif "x" in token:
            head, count = token.rsplit("x", 1)
            k = 1
            while k < len(head) and head[k] not in "+-":
                k += 1
            if k < len(head) and head[k - 1] in "eE":  # an exponent sign, look further
                k = k + 1
                while k < len(head) and head[k] not in "+-":
                    k += 1
            a = float(head[:k])
            b = float(head[k:]) if k < len(head) else 0.0
            x = a
            out.append(x)
            for _ in range(int(count)):
                x += b
                out.append(x)
        else:
            out.append(float(token))
    return out


def promtool_series(
    families: Iterable[Family], progress: Progress | None = None, stats: Stats | None = None
) -> Iterator[Series]:
    stats = stats or Stats()
    for family, labels, values, _ in _series(families, stats, progress):
        yield Series(family.name, {k: v for k, v in labels.items() if v != ""}, compress(values))


def write_promtool(families: Iterable[Family], out: TextIO, window: Window, progress: Progress | None = None) -> Stats:
    stats = Stats()
    out.write(
        f"# hpcobs simulate: promtool test input_series, one sample every {window.step}s from the test's time 0\n"
    )
    out.write(f"interval: {window.step}s\ninput_series:\n")
    for series in promtool_series(families, progress, stats):
        text = selector_text(series.name, series.labels).replace("'", "''")
        out.write(f"  - series: '{text}'\n    values: '{series.values}'\n")
    return stats


WRITERS = {"openmetrics": write_openmetrics, "vm": write_vm, "promtool": write_promtool}
