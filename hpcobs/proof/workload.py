"""What the live tests and the fleet benchmark ask of real servers: the raw series a build reads, its recording
rules as replayable layers, the same queries with every recording rule expanded to its expression, and the
dashboards' queries as Grafana sends them.

Grafana's side is replicated so that a measured load costs what a browser opening the dashboard costs:

- the interval of a panel is its time range over its maximum data points (the panel's width in pixels),
  rounded to a "nice" value by Grafana's `roundInterval` (packages/grafana-data/src/datetime/rangeutil.ts),
  and never below the data source's scrape interval; a range query's step is that interval, its start and
  end aligned down to a multiple of it (`alignRange` in the Prometheus data source);
- `$__rate_interval` is max(`$__interval` + scrape interval, 4 x scrape interval);
- a variable left at All takes its `allValue` when it has one, else every value it lists, regex-escaped
  (`prometheusSpecialRegexEscape`) and joined as `(a|b|...)` (`interpolateQueryExpr` of the Prometheus data
  source); a single value of a single-value variable is escaped with `prometheusRegularEscape`.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import promql_parser

from hpcobs.authoring.context import raw_matcher
from hpcobs.authoring.dashboard import every_panel, query_result_line, variable_options
from hpcobs.authoring.rules import Alert, Group, Record, layers
from hpcobs.exporters.sources import Sources
from hpcobs.lang import escape, lint
from hpcobs.lang.lint import GRAFANA_VARIABLE
from hpcobs.lang.promql import duration, duration_seconds
from hpcobs.lang.render import yaml_text
from hpcobs.settings.config import Config

MAX_DATA_POINTS = 1000  # a panel 1,000 pixels wide
# Grafana's roundInterval: (below this many milliseconds, round to this many), in order.
_NICE_INTERVALS_MS = (
    (10, 1),
    (15, 10),
    (35, 20),
    (75, 50),
    (150, 100),
    (350, 200),
    (750, 500),
    (1_500, 1_000),
    (3_500, 2_000),
    (7_500, 5_000),
    (12_500, 10_000),
    (17_500, 15_000),
    (25_000, 20_000),
    (45_000, 30_000),
    (90_000, 60_000),
    (210_000, 120_000),
    (450_000, 300_000),
    (750_000, 600_000),
    (1_050_000, 900_000),
    (1_500_000, 1_200_000),
    (2_700_000, 1_800_000),
    (5_400_000, 3_600_000),
    (9_000_000, 7_200_000),
    (16_200_000, 10_800_000),
    (32_400_000, 21_600_000),
    (86_400_000, 43_200_000),
    (604_800_000, 86_400_000),
    (1_814_400_000, 604_800_000),
    (3_628_800_000, 2_592_000_000),
)
_ONE_YEAR_MS = 31_536_000_000
_TEMPLATE = re.compile(r"\s*(?:label_values\((.*),\s*(\w+)|query_result\((.*))\)\s*", re.S)
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]+?.()|]")


class Queryable(Protocol):
    """What resolving variables needs of a server (hpcobs.proof.servers.Server)."""

    def query(self, expr: str, at: float) -> list: ...


# --------------------------------------------------------------------------------------------- rules


def raw_names_read(config: Config, groups: Iterable[Group]) -> set[str]:
    """Raw catalogue metric names that these rule groups read (what a simulation must emit for them)."""
    return {n for g in groups for r in g.rules for n in lint.metric_names(r.expr)} & Sources(config).metric_names()


def recording_layer_files(groups: Sequence[Group], folder: Path) -> list[list[Path]]:
    """One rule file per dependency layer, holding that layer's recording rules (for replay/backfill)."""
    files = []
    for index, layer in enumerate(layers(list(groups))):
        recording = [
            {"name": g.name, "interval": g.interval, "rules": [r.to_dict() for r in g.rules if isinstance(r, Record)]}
            for g in layer
            if any(isinstance(r, Record) for r in g.rules)
        ]
        if recording:
            path = folder / f"layer{index}.rules.yaml"
            path.write_text(yaml_text({"groups": recording}))
            files.append([path])
    return files


def replay_layers(groups: Sequence[Group], folder: Path) -> list[list[Path]]:
    """What a backfill of `groups` replays, layer after layer: the recording layers, then each alert's firing as
    ALERTS (firing_as_recorded), which the dashboards' firing-alerts panels read."""
    firing = firing_as_recorded(groups, folder)
    return [*recording_layer_files(groups, folder), *([firing] if firing else [])]


def firing_as_recorded(groups: Sequence[Group], folder: Path) -> list[Path]:
    """A rule file that records each alert's firing as Prometheus' ALERTS series (alertname, alertstate "firing",
    the alert's labels, value 1), to load after every recording layer: a backfill (promtool, vmalert replay)
    records, it does not alert, and the dashboards' firing-alerts panels read ALERTS. An alert with `for` fires
    where its condition held at every evaluation of the `for` before (a subquery at the group's interval);
    `keep_firing_for` is left out: an alert stops with its condition."""
    recorded = [
        {
            "name": f"{group.name}-as-ALERTS",
            "interval": group.interval,
            "rules": [
                {
                    "record": "ALERTS",
                    "expr": f"({_held(alert, group.interval)}) * 0 + 1",  # ALERTS is 1; the metric name goes
                    "labels": {"alertname": alert.alert, "alertstate": "firing", **alert.all_labels()},
                }
                for alert in group.rules
                if isinstance(alert, Alert)
            ],
        }
        for group in groups
        if any(isinstance(rule, Alert) for rule in group.rules)
    ]
    if not recorded:
        return []
    path = folder / "alerts-as-series.rules.yaml"
    path.write_text(yaml_text({"groups": recorded}))
    return [path]


def _held(alert: Alert, interval: str) -> str:
    """The alert's condition where it held at every evaluation from `for` ago to now (Prometheus fires once
    `for` has passed since the first true evaluation: for / interval + 1 evaluations)."""
    if not alert.for_:
        return alert.expr
    held, step = duration_seconds(alert.for_), duration_seconds(interval)
    return f"count_over_time(({alert.expr})[{duration(held + step)}:{interval}]) >= {held // step + 1}"


class Expander:
    """Queries with every recorded series replaced by the expression that records it, recursively: what a
    panel costs without recording rules.

    A recorded series read over a range becomes a subquery at its group's interval (the resolution the
    record offers); one read with `offset` becomes the last point of such a subquery. Matchers on a record
    are pushed into the raw selectors whose series carry the label (the cluster label, an exporter's own
    label, a canonical label through the exporter's raw label and regex), as a query written on raw series
    would select; where some selector does not carry it, the result is also kept to the values the matcher
    names (`and on (label)`, `unless on (label)` for a negative one). `=~".*"` (a variable at All) selects
    everything and is dropped.
    """

    def __init__(self, config: Config, groups: Iterable[Group]):
        self.sources = Sources(config)
        self.cluster = config.get("cluster", "label")
        producers: dict[str, list[tuple[Record, str]]] = defaultdict(list)
        for group in groups:
            for rule in group.rules:
                if isinstance(rule, Record):
                    producers[rule.record].append((rule, group.interval))
        self.producers = dict(producers)
        self._raw: dict[str, str] = {}
        # Raw metric name -> the deployed exporter, catalogue entry and version that expose it.
        self._native = {
            metric.name: (source, metric, version)
            for source in self.sources
            for version in source.versions
            for signal in source.exporter.signals()
            if (metric := source.metric(signal, version)) is not None
        }

    def expand(self, expr: str) -> str:
        """The expression with no recorded series left in it."""
        tree = promql_parser.parse(expr)
        return str(promql_parser.transform(tree, pre_visit=self._replace))

    def _replace(self, node: promql_parser.Expr) -> promql_parser.Expr | None:
        if isinstance(node, promql_parser.MatrixSelector) and node.vector_selector.name in self.producers:
            selector = node.vector_selector
            inner = self._filtered(selector)
            step = self._interval(selector.name or "")
            offset = f" offset {promql_parser.display_duration(selector.offset)}" if selector.offset else ""
            return promql_parser.parse(f"({inner})[{promql_parser.display_duration(node.range)}:{step}]{offset}")
        if isinstance(node, promql_parser.VectorSelector) and node.name in self.producers:
            inner = self._filtered(node)
            if node.offset:
                step = self._interval(node.name)
                offset = promql_parser.display_duration(node.offset)
                return promql_parser.parse(f"last_over_time(({inner})[{step}:{step}] offset {offset})")
            return promql_parser.parse(f"({inner})")
        return None

    def _interval(self, record: str) -> str:
        return min((interval for _, interval in self.producers[record]), key=duration_seconds)

    def _expanded_record(self, record: str) -> str:
        """A record's expression(s), expanded, with the rule's static labels; several rules joined by `or`."""
        if record not in self._raw:
            parts = []
            for rule, _ in self.producers[record]:
                text = self.expand(rule.expr)
                for name, value in sorted(rule.labels.items()):
                    text = f'label_replace({text}, "{name}", "{value}", "", "")'
                parts.append(f"({text})")
            self._raw[record] = " or ".join(parts)
        return self._raw[record]

    def _filtered(self, selector: promql_parser.VectorSelector) -> str:
        """The record's expansion restricted to the selector's matchers: each pushed into the raw selectors
        that carry its label; where some do not, the result is also kept to the values it names."""
        if selector.matchers.or_matchers:
            raise ValueError(f"cannot expand {selector}: `or` matchers on records are not supported")
        text = self._expanded_record(selector.name or "")
        for matcher in selector.matchers.matchers:
            if matcher.name == "__name__" or (matcher.op == promql_parser.MatchOp.Re and matcher.value == ".*"):
                continue
            missed: list[str] = []
            text = str(promql_parser.transform(promql_parser.parse(text), pre_visit=self._pusher(matcher, missed)))
            if not missed:
                continue
            values = _literal_values(matcher)
            if values is None:
                raise ValueError(f"cannot expand {selector}: {missed} have no {matcher.name} to match a pattern on")
            keep = " or ".join(
                f'label_replace(vector(1), "{matcher.name}", {escape.promql_string(v)}, "", "")' for v in values
            )
            negated = matcher.op in (promql_parser.MatchOp.NotEqual, promql_parser.MatchOp.NotRe)
            text = f"({text}) {'unless' if negated else 'and'} on ({matcher.name}) ({keep})"
        return text

    def _pusher(
        self, matcher: promql_parser.Matcher, missed: list[str]
    ) -> Callable[[promql_parser.Expr], promql_parser.Expr | None]:
        """Adds the matcher to each raw selector whose series carry its label; lists the others in `missed`."""

        def push(node: promql_parser.Expr) -> promql_parser.Expr | None:
            if not isinstance(node, promql_parser.VectorSelector):
                return None
            name = node.name or ""
            raw = self._raw_matcher(name, matcher) if name in self._native else None
            if raw is None:
                missed.append(name or str(node))
                return None
            # A selector prints as name{matchers}, then its offset: ours go inside the braces.
            head, brace, tail = str(node).partition("}")
            joiner = "" if head.endswith("{") else ", "
            return promql_parser.parse(f"{head}{joiner}{raw}{brace}{tail}")

        return push

    def _raw_matcher(self, name: str, matcher: promql_parser.Matcher) -> str | None:
        """The matcher written on a raw metric's own label, or None if its series do not carry the label (or
        carry it inside another label, which only = and =~ can select through)."""
        source, metric, version = self._native[name]
        op = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}[
            str(matcher.op)
        ]
        label, condition = matcher.name, op + escape.promql_string(matcher.value)
        if label == self.cluster or label in source.scrape_labels() or label in metric.labels:
            return label + condition
        raw = source.canonical_labels(version).get(label)
        if isinstance(raw, str):
            return raw + condition
        if isinstance(raw, dict) and op in ("=", "=~"):
            return raw_matcher(raw, condition)
        return None


def _literal_values(matcher: promql_parser.Matcher) -> list[str] | None:
    """The values a matcher names: its value, or each branch of a regex made of plain alternatives."""
    if matcher.op in (promql_parser.MatchOp.Equal, promql_parser.MatchOp.NotEqual):
        return [matcher.value]
    branches = matcher.value.split("|")
    if any(re.search(r"[\\^$.*+?()\[\]{}]", branch) for branch in branches):
        return None
    return branches


# --------------------------------------------------------------------------------------------- Grafana


def round_interval(milliseconds: float) -> int:
    """Grafana's roundInterval: an interval rounded to a nice value, in milliseconds."""
    return next((nice for below, nice in _NICE_INTERVALS_MS if milliseconds < below), _ONE_YEAR_MS)


@dataclass(frozen=True)
class Load:
    """One dashboard load: its time range (unix seconds), the data source's scrape interval, the panels' width."""

    start: float
    end: float
    scrape_seconds: float
    max_data_points: int = MAX_DATA_POINTS

    @property
    def interval_seconds(self) -> float:
        nice = round_interval((self.end - self.start) * 1000 / self.max_data_points) / 1000
        return max(nice, self.scrape_seconds)

    @property
    def rate_interval_seconds(self) -> float:
        return max(self.interval_seconds + self.scrape_seconds, 4 * self.scrape_seconds)

    def durations(self) -> dict[str, str]:
        """Grafana's built-in interval and range variables."""
        span = self.end - self.start
        return {
            "__interval": duration(int(self.interval_seconds)),
            "__interval_ms": str(int(self.interval_seconds * 1000)),
            "__rate_interval": duration(int(self.rate_interval_seconds)),
            "__range": duration(int(span)),
            "__range_s": str(int(span)),
            "__range_ms": str(int(span * 1000)),
        }

    def aligned(self) -> tuple[float, float]:
        """A range query's start and end, aligned down to the step as Grafana sends them."""
        step = self.interval_seconds
        return math.floor(self.start / step) * step, math.floor(self.end / step) * step


@dataclass(frozen=True)
class Target:
    """One Prometheus query of a panel; `instant` for stat, gauge, bar gauge and table panels that ask so."""

    dashboard: str
    panel: str
    ref: str
    expr: str
    instant: bool


def targets(dashboard: dict) -> list[Target]:
    """Every Prometheus query of a dashboard (Loki and others left out), in panel order; panels of a
    collapsed row included. Works for current dashboards and for legacy ones whose data source is a string
    naming a data source variable."""
    kinds = {
        v["name"]: v.get("query") for v in dashboard.get("templating", {}).get("list", []) if v["type"] == "datasource"
    }

    def kind(datasource: dict | str | None) -> str:
        if isinstance(datasource, dict):
            return str(datasource.get("type", "prometheus"))
        if isinstance(datasource, str):
            name = datasource.strip("${}")
            return str(kinds.get(name, "prometheus"))
        return "prometheus"

    out = []
    for panel in every_panel(dashboard):
        for target in panel.get("targets", []):
            if kind(target.get("datasource", panel.get("datasource"))) != "prometheus" or not target.get("expr"):
                continue
            out.append(
                Target(
                    dashboard["uid"],
                    panel.get("title", ""),
                    target.get("refId", "A"),
                    target["expr"],
                    bool(target.get("instant")) and not target.get("range"),
                )
            )
    return out


def substitute(expr: str, values: dict[str, str], durations: dict[str, str], default: str = ".*") -> str:
    """Grafana variables replaced: built-in durations, then the values given, else `default`."""

    def value(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        return durations.get(name, values.get(name, default))

    return GRAFANA_VARIABLE.sub(value, expr)


def regex_escape(value: str) -> str:
    """Grafana's prometheusSpecialRegexEscape (classic behaviour)."""
    return _REGEX_SPECIAL.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def variable_values(
    dashboard: dict, server: Queryable, at: float, durations: dict[str, str], preferred: dict[str, str] | None = None
) -> dict[str, str]:
    """Each query variable's value as Grafana interpolates it: All for a variable that has it (its allValue,
    or every listed value as one regex); for a single-value variable, the preferred value when the variable
    lists it, else the first. Textbox variables keep their default. Variables are resolved in order, each on
    the values of the ones before it."""
    preferred = preferred or {}
    values: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "textbox":
            values[variable["name"]] = variable.get("query", "")
        if variable["type"] != "query":
            continue
        match = _TEMPLATE.fullmatch(
            variable["query"] if isinstance(variable["query"], str) else variable["query"]["query"]
        )
        if match is None:
            raise ValueError(f"{dashboard['uid']}: variable {variable['name']}: not a label_values() or query_result()")
        selector, label, result_of = match.groups()
        if result_of is not None:
            results = server.query(substitute(result_of, values, durations), at)
            seen = variable_options(variable, (query_result_line(s.labels, s.value, at) for s in results))
        else:
            found = server.query(substitute(selector, values, durations), at)
            seen = variable_options(variable, {s.labels[label] for s in found if label in s.labels})
        if variable.get("includeAll"):
            all_value = variable.get("allValue")
            escaped = [regex_escape(v) for v in seen]
            values[variable["name"]] = all_value or (escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})")
        else:
            wanted = preferred.get(variable["name"], "")
            chosen = wanted if wanted in seen else (seen[0] if seen else "")
            values[variable["name"]] = regex_escape(chosen) if variable.get("multi") else chosen.replace("\\", "\\\\")
    return values
