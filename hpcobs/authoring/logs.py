"""Loki ruler rules: LogQL alerts and recording rules over the nodes' and the Slurm jobs' logs.

A rule reads one kind of log line, a LogPattern: a literal every such line contains (Loki's cheap substring
filter) and an RE2 regex that decides and whose named groups become labels. A LogQuery narrows the lines with
label filters and says what the result is counted by; a LogMetric turns it into a range aggregation over a window,
with the labels renamed to the canonical ones of the metrics (`node`, `hpc_job`) and the cluster label added, so
the records, the alerts' routes and the dashboards' links read the same labels as everywhere else.

The rules are the ordinary Alert and Record objects of hpcobs.authoring.rules, rendered by the same code (runbook and
dashboard links, severity and team labels). promtool cannot run LogQL, so their proof is not a promtool test:
each case (LogCase) names real log lines (tests/data/log_lines.yaml) the metric is computed on in Python with RE2
by tests/test_loki_rules.py, which also parses every expression with Grafana's LogQL grammar.

The rule file they are written to is hpcobs.targets.loki; streams, labels and how the rules are loaded into Loki's
ruler: docs/loki.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hpcobs.authoring.rules import Alert, Group, Record
from hpcobs.authoring.ruletest import Case, Series
from hpcobs.lang import escape, promql, promregex
from hpcobs.lang.selectors import Matcher, parse_selector
from hpcobs.settings.config import Config

# Loki's ruler scans every line of a rule's window at each evaluation: once a minute (its default evaluation
# interval), not at the scrape interval.
INTERVAL = "1m"
# The window of the recording rules' rates, named in them (`:rate5m`).
RATE_WINDOW = "5m"
NODE, JOB = "node", "job"
STREAMS = (NODE, JOB)
LABEL_FILTER_OPS = ("=", "!=", "=~", "!~")


@dataclass(frozen=True)
class LogPattern:
    """One kind of log line of one stream (NODE: kernel and system journal; JOB: Slurm jobs' output)."""

    name: str
    stream: str
    literal: str  # a substring of every matching line, filtered first because substring search is cheap
    regex: str  # RE2, unanchored as Loki's line filters and regexp parser apply it; named groups become labels
    renames: tuple[tuple[str, str], ...] = ()  # (canonical label, extracted group) for groups naming a canonical

    def __post_init__(self) -> None:
        problem = promregex.problem(self.regex)
        if problem:
            raise ValueError(f"log pattern {self.name}: {problem}")
        if self.stream not in STREAMS:
            raise ValueError(f"log pattern {self.name}: stream must be one of {STREAMS}")
        # LogQL's raw strings cannot hold a backtick; RE2 spells one \x60.
        if "`" in self.literal + self.regex:
            raise ValueError(f"log pattern {self.name}: write a backtick as \\x60")
        for group in self.groups:
            if not escape.LABEL_NAME.fullmatch(group) or group.startswith("__"):
                raise ValueError(f"log pattern {self.name}: group {group!r} is not a label name Loki accepts")

    @property
    def groups(self) -> tuple[str, ...]:
        # groupindex is ordered by name; Loki does not care, the order only has to be stable.
        return tuple(promregex.compile(self.regex).groupindex)

    def logql(self, selector: str) -> str:
        """The log query: stream, substring filter, regex filter, and the regexp parser when there are groups.
        The regex filter keeps exactly the matching lines: Loki's regexp parser passes a line it cannot match
        through, without labels."""
        query = f"{selector} |= `{self.literal}` |~ `{self.regex}`"
        return query + (f" | regexp `{self.regex}`" if self.groups else "")


@dataclass(frozen=True)
class LabelFilter:
    """A LogQL label filter after the parser (`| err_code=~"48|79"`): regexes are fully anchored, like PromQL's."""

    label: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if self.op not in LABEL_FILTER_OPS:
            raise ValueError(f"label filter on {self.label}: op must be one of {LABEL_FILTER_OPS}")

    def logql(self) -> str:
        return f"| {escape.promql_matcher(self.label, self.op, self.value)}"

    def accepts(self, labels: dict[str, str]) -> bool:
        """What Loki decides for a line with these labels (a missing label is the empty value)."""
        value = labels.get(self.label, "")
        if self.op in ("=", "!="):
            return (value == self.value) == (self.op == "=")
        return promregex.fullmatch(self.value, value) == (self.op == "=~")


@dataclass(frozen=True)
class LogQuery:
    """The lines of a pattern that pass the filters, counted by some labels (canonical or extracted), or, with
    `distinct`, how many distinct values of a label they carry (ranks of a job, not lines per rank)."""

    pattern: LogPattern
    by: tuple[str, ...]
    where: tuple[LabelFilter, ...] = ()
    distinct: str | None = None


@dataclass(frozen=True)
class LogStreams:
    """The streams of the config's `loki` section: matchers and the raw label behind each canonical one."""

    matchers: dict[str, tuple[Matcher, ...]]
    canonical: dict[str, dict[str, str]]  # stream -> {canonical label: raw stream label}
    cluster: str  # the cluster label
    cluster_name: str

    @classmethod
    def of(cls, config: Config) -> LogStreams:
        # Loading the config has checked the selectors and label names (config/schema.json formats).
        node, job = config.get("loki", "node_logs"), config.get("loki", "job_logs")
        return cls(
            matchers={NODE: parse_selector(node["selector"]), JOB: parse_selector(job["selector"])},
            canonical={NODE: {"node": node["node_label"]}, JOB: {"hpc_job": job["job_label"]}},
            cluster=config.get("cluster", "label"),
            cluster_name=config.get("cluster", "name"),
        )

    def selector(self, stream: str) -> str:
        """`{...}`: every matcher rewritten by escape.promql_matcher (LogQL reads matchers as PromQL does)."""
        return "{" + ", ".join(map(str, self.matchers[stream])) + "}"

    def renames(self, pattern: LogPattern) -> dict[str, str]:
        """Canonical label -> the stream or extracted label it is read from."""
        return {**self.canonical[pattern.stream], **dict(pattern.renames)}


@dataclass(frozen=True)
class LogMetric:
    """A LogQuery aggregated over a window by `function` (count_over_time or rate), keeping the cluster label
    and the query's `by` labels; an alert compares it with `above`."""

    query: LogQuery
    window: str
    function: str = "count_over_time"
    above: float | None = None

    def __post_init__(self) -> None:
        if self.function not in ("count_over_time", "rate"):
            raise ValueError(f"{self.function} is not a range aggregation hpcobs' Loki rules use")
        promql.duration_seconds(self.window)

    def expr(self, streams: LogStreams) -> str:
        query, pattern = self.query, self.query.pattern
        lines = " ".join([pattern.logql(streams.selector(pattern.stream)), *(f.logql() for f in query.where)])
        series = f"{self.function}({lines} [{self.window}])"
        for canonical, raw in streams.renames(pattern).items():
            if canonical != raw and canonical in (*query.by, query.distinct):
                series = promql.label_replace(series, canonical, raw, "(.*)")
        series = promql.label_replace(
            series, streams.cluster, "", "", escape.label_replace_constant(streams.cluster_name)
        )
        kept = (streams.cluster, *query.by)
        if query.distinct is None:
            aggregated = promql.aggregate("sum", kept, series)
        else:
            aggregated = promql.aggregate("count", kept, promql.aggregate("sum", (*kept, query.distinct), series))
        return aggregated if self.above is None else f"{aggregated} > {self.above:g}"


@dataclass
class LogCase(Case):
    """A rule case on real log lines (ids of tests/data/log_lines.yaml), each logged `times` times at time 0 by one
    node or job of its stream, the rule evaluated at `at` (a minute later unless said): the alerts expected, or
    the samples of a record. Log cases have no metric input series."""

    at: str = "1m"
    series: list[Series] = field(default_factory=list)
    lines: tuple[str, ...] = ()
    times: int = 1


@dataclass(frozen=True)
class LogRule:
    """An Alert or a Record of hpcobs.authoring.rules and the metric its expression is written from."""

    rule: Alert | Record
    metric: LogMetric


@dataclass
class LogGroup:
    name: str
    rules: Sequence[LogRule]

    def group(self) -> Group:
        return Group(self.name, domain="logs", interval=INTERVAL, rules=[r.rule for r in self.rules])
