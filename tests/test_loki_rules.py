"""The Loki rules (alerts/logs.py, written to out/loki/rules/hpcobs.yaml by hpcobs.authoring.logs).

promtool cannot run LogQL, so the proof is built here from its parts: every pattern is run with RE2 (the engine of
Loki's line filters and regexp parser) on real published log lines (tests/data/log_lines.yaml) in both directions;
every rule's cases are computed on those lines the way its LogQL aggregates them; every expression is parsed by
Grafana's LogQL grammar (tests/test_logql.py's parser); the file has the rule-file shape, every alert a runbook
section and a route to its team. No Loki runs here (docs/loki.md says how to load the rules into one).
"""

from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
import re2
import yaml
from hpcobs.alerts import logs

from hpcobs.authoring.context import Context
from hpcobs.authoring.logs import NODE, STREAMS, LogCase, LogMetric, LogQuery, LogRule, LogStreams
from hpcobs.authoring.rules import Alert, Record
from hpcobs.build import tools, validate
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import config as config_module
from hpcobs.targets.loki import RULES_FILE
from hpcobs.targets.prometheus import RULES_SCHEMA
from tests.conftest import ROOT
from tests.test_logql import parse
from tests.test_runbooks import anchors

LINES = yaml.safe_load((Path(__file__).parent / "data" / "log_lines.yaml").read_text(encoding="utf-8"))["lines"]
PATTERNS = {pattern.name: pattern for pattern in logs.PATTERNS}
STREAMS_OF_DEFAULT = LogStreams.of(config_module.load())
RULES = [rule for group in logs.loki_groups(Context(config_module.load())) for rule in group.rules]
AM = "alertmanager/alertmanager.yml"


def name(rule: LogRule) -> str:
    return rule.rule.alert if isinstance(rule.rule, Alert) else rule.rule.record


def extracted(pattern_name: str, line: str) -> dict[str, str] | None:
    """The labels a pattern's LogQL extracts from a line, None when its filters drop the line."""
    pattern = PATTERNS[pattern_name]
    found = re2.search(pattern.regex, line) if pattern.literal in line else None
    return None if found is None else {k: v for k, v in found.groupdict().items() if v is not None}


@pytest.mark.parametrize("line_id", LINES)
def test_every_pattern_on_every_line(line_id):
    """A line matches exactly the patterns it lists, with exactly the labels it lists; its neighbours match none."""
    entry = LINES[line_id]
    got = {name: labels for name in PATTERNS if (labels := extracted(name, entry["line"])) is not None}
    assert got == entry["matches"], entry["line"]


def test_the_data_is_well_formed():
    for line_id, entry in LINES.items():
        assert entry["stream"] in STREAMS and entry["source"].strip() and entry["line"], line_id
        assert set(entry["matches"]) <= set(PATTERNS), line_id
        # A pattern reads one stream: a line listed as matching it comes from that stream.
        assert all(PATTERNS[name].stream == entry["stream"] for name in entry["matches"]), line_id


@pytest.mark.parametrize("pattern_name", PATTERNS)
def test_every_pattern_has_real_lines_both_ways(pattern_name):
    """At least two published lines it must match, and at least three of its stream it must leave alone."""
    stream = PATTERNS[pattern_name].stream
    of_stream = [entry for entry in LINES.values() if entry["stream"] == stream]
    matching = [entry for entry in of_stream if pattern_name in entry["matches"]]
    assert len(matching) >= 2 and len(of_stream) - len(matching) >= 3, pattern_name


@pytest.mark.parametrize("pattern_name", PATTERNS)
def test_the_substring_filter_never_hides_a_match(pattern_name):
    """Loki filters on the literal first: every line the regex matches must contain it."""
    pattern = PATTERNS[pattern_name]
    for entry in LINES.values():
        if re2.search(pattern.regex, entry["line"]):
            assert pattern.literal in entry["line"], (pattern_name, entry["line"])


def evaluate(metric: LogMetric, case: LogCase, streams: LogStreams) -> dict[frozenset, float]:
    """The metric's samples at `case.at` for the case's lines, logged at time 0 by node n1 or job 4242 of their
    stream: what the LogQL computes (range aggregation over the window, label filters, label_replace to the
    canonical labels, sum or count of distinct values, the cluster label), written out in Python."""
    query, pattern = metric.query, metric.query.pattern
    window = duration_seconds(metric.window)
    if not duration_seconds(case.at) < window:  # the lines left the range (at - window, at]
        return {}
    stream_labels = {NODE: {streams.canonical[NODE]["node"]: logs.CASE_NODE}}
    stream_labels["job"] = {streams.canonical["job"]["hpc_job"]: logs.CASE_JOB}
    counted: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for line_id in case.lines:
        entry = LINES[line_id]
        labels = extracted(pattern.name, entry["line"])
        if entry["stream"] != pattern.stream or labels is None:
            continue
        labels = {**stream_labels[pattern.stream], **labels}
        if not all(f.accepts(labels) for f in query.where):
            continue
        for canonical, raw in streams.renames(pattern).items():
            labels[canonical] = labels.get(raw, "")
        key = tuple(labels.get(label, "") for label in query.by)
        counted[key] += [labels.get(query.distinct, "") if query.distinct else line_id] * case.times
    seconds = window if metric.function == "rate" else 1
    samples = {}
    for key, seen in counted.items():
        value = (len(set(seen)) if query.distinct else len(seen)) / seconds
        if metric.above is None or value > metric.above:
            labels = {streams.cluster: streams.cluster_name, **{k: v for k, v in zip(query.by, key) if v}}
            samples[frozenset(labels.items())] = value
    return samples


CASES = [
    (rule, case, kind)
    for rule in RULES
    for kind, cases in (
        [("fires", rule.rule.fires_on), ("silent", rule.rule.silent_on)]
        if isinstance(rule.rule, Alert)
        else [("record", rule.rule.tests)]
    )
    for case in cases
]


@pytest.mark.parametrize("rule, case, kind", CASES, ids=[f"{name(r)}: {c.name}" for r, c, _ in CASES])
def test_rule_cases_on_real_lines(rule, case, kind):
    assert isinstance(case, LogCase) and case.lines and set(case.lines) <= set(LINES), case.lines
    samples = evaluate(rule.metric, case, STREAMS_OF_DEFAULT)
    if kind == "record":
        assert samples == {frozenset(s.labels.items()): pytest.approx(s.value) for s in case.expect}
    else:
        assert (kind == "fires") == bool(case.expect), "fires_on cases expect alerts, silent_on cases none"
        assert set(samples) == {frozenset(s.labels.items()) for s in case.expect}


def test_every_rule_is_proven_both_ways():
    for rule in RULES:
        if isinstance(rule.rule, Alert):
            assert rule.rule.fires_on and rule.rule.silent_on, name(rule)
        else:
            assert rule.rule.tests, name(rule)


def test_a_case_catches_a_dropped_label_filter():
    """The cases have teeth: without its class filter, the drain-class Xid alert fires on application Xids."""
    (drain,) = [rule for rule in RULES if name(rule) == "GpuXidDrainClassLogged"]
    loose = LogMetric(
        LogQuery(drain.metric.query.pattern, drain.metric.query.by),
        drain.metric.window,
        above=drain.metric.above,
    )
    application = next(c for c in drain.rule.silent_on if "application" in c.name)
    assert evaluate(drain.metric, application, STREAMS_OF_DEFAULT) == {}
    assert evaluate(loose, application, STREAMS_OF_DEFAULT) != {}


def test_the_watchdog_alert_counts_ranks_not_lines():
    """Each rank logs its timeout twice (the log line and the exception): the alert's value is the ranks."""
    (watchdog,) = [rule for rule in RULES if name(rule) == "TrainingNcclWatchdogTimeout"]
    case = next(c for c in watchdog.rule.fires_on if "two ranks" in c.name)
    assert len(case.lines) == 4
    assert list(evaluate(watchdog.metric, case, STREAMS_OF_DEFAULT).values()) == [2]


def expressions(rules: list[LogRule], streams: LogStreams) -> list[str]:
    return [rule.metric.expr(streams) for rule in rules]


def test_the_rules_are_written_from_their_metrics(generated):
    doc = yaml.safe_load(generated[RULES_FILE])
    written = [rule["expr"] for group in doc["groups"] for rule in group["rules"]]
    assert written == expressions(RULES, STREAMS_OF_DEFAULT)


@cache
def hostile_streams() -> LogStreams:
    """Legitimate but awkward values for every config string that reaches the LogQL."""
    return LogStreams.of(config_module.load(ROOT / "tests" / "data" / "loki_site.yaml"))


def test_every_expression_parses_with_grafanas_grammar():
    exprs = expressions(RULES, STREAMS_OF_DEFAULT) + expressions(RULES, hostile_streams())
    verdicts = parse(exprs)
    errors = [f"{expr}\n    {error}" for expr, error in zip(exprs, verdicts) if error]
    assert not errors, "LogQL that Grafana cannot parse:\n" + "\n".join(errors)


def test_config_strings_land_as_literals():
    """Each config string reaches the LogQL through one escaping point and stays a literal there."""
    expr = RULES[0].metric.expr(hostile_streams())
    assert '{job="node \\"journal\\"", env=~"prod|gpu"}' in expr  # matchers rewritten by escape.promql_matcher
    assert '"node", "$1", "hostname", "(.*)"' in expr  # the node label, a validated label name
    # label_replace expands $1 in its replacement: the cluster name's `$` is doubled.
    assert '"cluster", "gpu $$1 \\"prod\\"", "", ""' in expr


def test_the_rule_file_has_the_ruler_shape(generated):
    assert validate.schema_for(RULES_FILE) == RULES_SCHEMA
    assert validate.schema_errors(RULES_FILE, generated[RULES_FILE]) == []
    doc = yaml.safe_load(generated[RULES_FILE])
    assert [g["name"] for g in doc["groups"]] == ["hpcobs-log-records", "hpcobs-log-alerts"]
    for group in doc["groups"]:
        assert group["interval"] == "1m"
        for rule in group["rules"]:
            if "alert" in rule:
                assert set(rule["labels"]) == {"severity", "team"}, rule["alert"]


def test_promtool_never_reads_the_loki_rules(generated, tmp_path):
    alone = {RULES_FILE: generated[RULES_FILE]}
    assert validate._tool_runs(tmp_path, alone) == {} and validate._groups_only_runs(tmp_path, alone) == {}


def test_every_alert_has_a_runbook_section(generated, config):
    base = config.get("runbooks", "base_url")
    page = ROOT / "docs" / "runbooks" / "logs.md"
    sections = anchors(page.read_text(encoding="utf-8"))
    doc = yaml.safe_load(generated[RULES_FILE])
    alerts = [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]
    assert alerts
    for rule in alerts:
        assert rule["annotations"]["runbook_url"] == f"{base}/logs.md#{rule['alert'].lower()}"
        assert rule["alert"].lower() in sections, rule["alert"]


# The receivers of the default config's routes for each team and severity the log alerts carry.
RECEIVERS = {
    ("gpu-ops", "critical"): ["gpu-ops-pager", "gpu-ops"],
    ("gpu-ops", "info"): ["gpu-ops"],
    ("slurm-admins", "warning"): ["slurm-admins"],
    ("ml-platform", "warning"): ["ml-platform"],
    ("job-owner", "warning"): ["job-owner"],
}


@pytest.mark.parametrize("rule", [r for r in RULES if isinstance(r.rule, Alert)], ids=name)
def test_every_alert_reaches_its_teams_receiver(generated_tree, rule):
    alert: Alert = rule.rule
    labels = {"alertname": alert.alert, **alert.all_labels(), "node": "n1", "hpc_job": "4242"}
    result = tools.routes_test(generated_tree / AM, labels, RECEIVERS[str(alert.team), alert.severity])
    assert result.ok, result.output


def test_records_follow_the_level_metric_operations_names():
    records = [rule.rule for rule in RULES if isinstance(rule.rule, Record)]
    assert {r.record.split(":")[0] for r in records} == {"node", "job"}
    assert all(r.record.endswith(":rate5m") and r.record.split(":")[1].startswith("log_") for r in records)
