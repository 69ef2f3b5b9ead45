"""Offline checks on PromQL text (a pint-like subset): which metrics an expression reads.

Not a full parser: strings, label matchers, grouping clauses and durations are removed, and what
is left that is neither a function, a keyword nor a number is a metric name. promtool parses for real.
"""
from __future__ import annotations

import re

FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "days_in_month", "delta", "deriv", "exp", "floor",
    "histogram_quantile", "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "max_over_time", "min_over_time", "minute", "month",
    "predict_linear", "present_over_time", "quantile_over_time", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "time", "timestamp",
    "vector", "year", "label_values", "query_result",
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
                "topk", "quantile"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset", "inf", "nan"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_TOKEN = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$", re.S)
_GRAFANA_VAR = re.compile(r"\$\{?\w+(?::\w+)?\}?|\[\[\w+\]\]")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects."""
    text = _LABEL_VALUES.sub(r"\1", expr)
    text = _GRAFANA_VAR.sub("1", text)
    text = _STRING.sub('""', text)
    text = _MATCHERS.sub("", text)
    text = _CLAUSE.sub("", text)
    text = _RANGE.sub("", text)
    names = set()
    for match in _TOKEN.finditer(text):
        token = match.group(1)
        following = text[match.end():].lstrip()
        if token in FUNCTIONS | AGGREGATIONS | KEYWORDS:
            continue
        if re.fullmatch(r"[0-9a-fA-Fx.e+-]+", token) or following.startswith("("):
            continue
        names.add(token)
    return names
