"""Every alert's cases sit at the boundary of each threshold it compares with: built with that one threshold moved
25% towards "harder to fire" (x1.25 where the alert fires above it, x0.8 where it fires below it), the alert's
own firing cases, as the default build wrote them, no longer all fire; and built with that threshold set to
another value a site may set, all its cases still pass: they are derived from the configured value.

A firing case no more than 20% past the threshold (at most 1.2 T above it, at least 0.8 T below it) stops firing
once the threshold moves 25% (to 1.25 T, or 0.8 T); a case far past it (a GPU at 92 C for an 85 C limit) proves
the alert fires, not where. Only the firing cases are run against the moved threshold: moving it towards "harder
to fire" can only silence alerts, so a silent case never fails there, and a direction read the wrong way round
(which would trip a silent case instead) cannot pass. docs/validation.md describes the test.

What is covered, and why the rest is not:

- **Numbers an expression compares with** (the `number`, `count`, `rate`, `limit`, `ratio`, `fraction` and
  `factor` kinds of hpcobs.settings.declare): every declared threshold of those kinds that a rule an alert
  loads compares with. The direction is read from the PromQL, not from a list: the build with the threshold
  moved up is parsed beside the default one, and the comparison holding the literal that changed says which
  way is harder (`x > T`, `x > T * baseline`: up; `x < T`, `x > 0 < T`: down; the right side of a `-`, a `/`
  or an `unless` turns it round). A threshold read through a recording rule (a record counting the ports
  below a rate) is moved in that rule, and the alerts loading it run their cases. A whole number moves by at
  least one (`> 0` becomes `> 1`): with whole-number data the boundary is one unit wide.
- **Durations** are not moved. A `for` is proven at its boundary by the case before it has elapsed (three
  scrapes before it ends, hpcobs.authoring.alert_cases) and by tests/test_rules.py's
  test_every_for_not_yet_elapsed_case_has_teeth; its firing case is evaluated well after it on purpose (10
  scrapes, so Prometheus 2 and 3, which differ on a rate window's edge, agree), and at a 30 s evaluation a
  1 m `for` cannot be bracketed within 20% anyway. A window has no single "harder" direction (a longer
  `max_over_time` window is harder to meet, a longer `increase` easier), and several only bound history (a
  1 d lookback, a 6 h baseline).
- **Regexes and name lists** select label values; they have no magnitude to move. Each alert reading one has
  cases that a listed value fires and an unlisted one stays silent.
- **A number read otherwise** (NOT_COMPARED below, each with its reason) is listed: any other numeric threshold
  that no comparison reads fails here until it is compared or listed. So is an alert whose firing case cannot
  come within 20% of its threshold (NEAREST_STEP).
"""

import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import promql_parser
import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import codegen, outdir, pipeline, tools
from hpcobs.lang.render import yaml_text
from hpcobs.settings.declare import Threshold
from hpcobs.targets import promtest
from tests.conftest import MEASUREMENT

TESTS = "prometheus/tests/"
UP, DOWN = 1.25, 0.8
NUMERIC = ("number", "integer")
# Numeric thresholds no PromQL comparison reads, and why their boundary is proven otherwise.
NOT_COMPARED = {
    "security_falco_critical_priority": "a Falco priority level: the alert selects the levels at or above it by a "
    'label matcher (priority=~"0|1|2"), an enumeration, not a magnitude; SecurityFalcoCritical\'s cases show '
    "a rule at the configured level firing and one at the level below it silent",
    "log_nccl_warn_lines": "read by a Loki rule (alerts/logs.py), which no ruler evaluates in the tests: "
    "tests/test_loki_rules.py proves its patterns on real log lines, not its counts",
    "dashboard_utilization_poor": "the dashboards' colour levels, read by no rule: tests/test_threshold_panels.py "
    "proves the panels move with it, tests/test_preview_checks.py and the live preview that a value is drawn in "
    "its step's colour",
    "dashboard_utilization_good": "as dashboard_utilization_poor",
}
# Alerts whose firing case cannot come within 20% of a threshold, because the value only takes steps the exporter
# cannot report between, and the case sits on the nearest step; by threshold and the alert's test file.
NEAREST_STEP = {
    ("ib_port_rate_bytes_per_second", "network/IbLinkRateBelowNominal.tests.yaml"): "a port's rate is its lane "
    "speed times its width (Linux drivers/infiniband/core/sysfs.c, rate_show(): 1X, 2X, 4X, 8X or 12X lanes at "
    "SDR ... NDR), so below NDR 400 Gb/s (4X) the next rates are 300 (12X EDR) and 200 Gb/s (2X NDR, 4X HDR); "
    "the fault case trains at half the nominal rate, the width lost to a bad lane, and the silent cases sit "
    "at the nominal rate itself",
}


def _numeric_thresholds() -> dict[str, Threshold]:
    """Every declared threshold whose value is a number, by name."""
    declared = [t for ts in codegen.declared().values() for t in ts]
    return {t.name: t for t in declared if t.schema["type"] in NUMERIC}


def _whole(threshold: Threshold) -> bool:
    return threshold.schema["type"] == "integer"


def _moved(value: float, whole: bool, factor: float) -> float:
    """The value moved by the factor; a whole number by at least one."""
    if not whole:
        return value * factor
    return max(math.ceil(value * factor), value + 1) if factor > 1 else min(math.floor(value * factor), value - 1)


def _rules(config, name: str | None = None, value: float | None = None) -> dict[tuple[str, str, int], dict]:
    """Every rule as built (with one threshold set to `value`), by group, name and occurrence in its group."""
    if name is not None:
        config = replace(config, data={**config.data, "thresholds": {**config["thresholds"], name: value}})
    rules = {}
    for groups in pipeline.built_rule_groups(Context(config)).values():
        for group in groups:
            seen: Counter[str] = Counter()
            for rule in group.rules:
                rule_name = rule.alert if isinstance(rule, Alert) else rule.record
                rules[(group.name, rule_name, seen[rule_name])] = {
                    "expr": rule.expr,
                    "for": getattr(rule, "for_", None),
                }
                seen[rule_name] += 1
    return rules


# What raising a value on one side of an operator does to its result: more (1), fewer or smaller (-1). A
# comparison filters: raising its right side lets fewer series through `>`, more through `<`.
_COMPARISONS = {">": (1, -1), ">=": (1, -1), "<": (-1, 1), "<=": (-1, 1)}
_INVERTING_RHS = {"-", "/", "unless"}  # arithmetic and set operators whose right side works against the result


def _children(node) -> list:
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, promql_parser.AggregateExpr):
        return [p for p in (node.param, node.expr) if p is not None]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    return []


def _directions(default: str, raised: str) -> set[float]:
    """Which way a threshold makes an expression harder to meet, from the literals that differ between its default
    build and one with the threshold raised: UP when raising it lets fewer series through (`x > T`), DOWN when
    more (`x < T`). Each changed literal is followed up the tree: arithmetic and `and`/`or`, aggregations and
    functions pass more on as more, the right side of `-`, `/` and `unless` turns it round, and a comparison
    turns a larger value into fewer or more series passing. Raises when a changed literal is not compared with,
    or only by an equality."""

    def effects(a, b) -> list[tuple[int, bool]]:
        """For each changed literal under this node: +1 if raising the threshold gives more (or larger) results
        here, -1 if fewer; and whether a comparison reads it."""
        if isinstance(a, promql_parser.NumberLiteral):
            return [] if a.val == b.val else [(1 if b.val > a.val else -1, False)]
        sides = [effects(x, y) for x, y in zip(_children(a), _children(b), strict=True)]
        if isinstance(a, promql_parser.UnaryExpr):
            return [(-sign, compared) for sign, compared in sides[0]]
        if not isinstance(a, promql_parser.BinaryExpr):
            return [effect for side in sides for effect in side]
        op = str(a.op)
        if op in ("==", "!="):
            return [(sign, False) for side in sides for sign, _ in side]  # an equality has no direction
        if op in _COMPARISONS:
            return [(sign * turn, True) for turn, side in zip(_COMPARISONS[op], sides, strict=True) for sign, _ in side]
        rhs_turn = -1 if op in _INVERTING_RHS else 1
        return [*sides[0], *((sign * rhs_turn, compared) for sign, compared in sides[1])]

    found = effects(promql_parser.parse(default), promql_parser.parse(raised))
    if not all(compared for _, compared in found):
        raise ValueError(f"a threshold is not compared with in {default}")
    # An alert fires on the series that come out: fewer of them when the threshold is raised means harder.
    return {UP if sign < 0 else DOWN for sign, _ in found}


def test_the_direction_is_read_from_the_comparison():
    def direction(expr: str) -> set[float]:
        return _directions(expr.replace("T", "1"), expr.replace("T", "2"))

    assert direction("x > T") == direction("x >= T") == direction("x > T * y") == direction("T < x") == {UP}
    assert direction("x < T") == direction("x > 0 < T") == direction("x > 1 / T") == direction("x > -T") == {DOWN}
    assert direction("count(a unless b > T) > 0") == {DOWN}
    assert direction("(a > T) and on (n) b > 0") == {UP}
    with pytest.raises(ValueError, match="not compared"):
        direction("clamp_max(x, T)")
    with pytest.raises(ValueError, match="not compared"):
        direction("x == T")


@pytest.fixture(scope="module")
def alert_tests(generated) -> dict[str, tuple[dict, dict]]:
    """Each alert's promtool test file of the default build, by path, with the rules it loads."""
    tests = {}
    for path, text in generated.items():
        if path.startswith(TESTS) and path.endswith(".tests.yaml"):
            spec = yaml.safe_load(text)
            if any("alert_rule_test" in test for test in spec["tests"]):
                tests[path] = (spec, yaml.safe_load(generated[path.replace(".tests.yaml", ".rules.yaml")]))
    return tests


def _with_rules(loaded: dict, rules: dict[tuple[str, str, int], dict]) -> dict:
    """A test's loaded rule file with each rule's expression and `for` taken from `rules` (annotations kept, so
    that a description quoting the threshold does not fail every case on its own)."""
    groups = []
    for group in loaded["groups"]:
        seen: Counter[str] = Counter()
        kept = []
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            built = rules[(group["name"], name, seen[name])]
            seen[name] += 1
            rule = {**rule, "expr": built["expr"]}
            if built["for"]:
                rule["for"] = built["for"]
            kept.append(rule)
        groups.append({**group, "rules": kept})
    return {"groups": groups}


def _firing_only(spec: dict) -> dict:
    return {**spec, "tests": [t for t in spec["tests"] if any(a["exp_alerts"] for a in t["alert_rule_test"])]}


@pytest.fixture(scope="module")
def readers(config, alert_tests) -> dict[str, tuple[set[float], list[str]]]:
    """For each numeric threshold: the directions the rules compare with it in, and the test files of the alerts
    whose loaded rules read it."""
    default = _rules(config)
    found = {}
    for name, threshold in _numeric_thresholds().items():
        raised = _rules(config, name, _moved(config["thresholds"][name], _whole(threshold), UP))
        changed = [key for key in default if default[key] != raised[key]]
        directions = {d for key in changed for d in _directions(default[key]["expr"], raised[key]["expr"])}
        paths = [path for path, (_, loaded) in alert_tests.items() if _with_rules(loaded, raised) != loaded]
        found[name] = (directions, paths)
    return found


def _compared(readers) -> dict[str, tuple[float, list[str]]]:
    """The thresholds compared with in one direction, with it and the test files of the alerts reading them."""
    return {name: (*directions, paths) for name, (directions, paths) in readers.items() if len(directions) == 1}


def _promtool(root: Path, files: dict[tuple[str, str], dict[str, str]]) -> dict[tuple[str, str], tools.Result]:
    """Each (threshold, test file) key's files written under root/<threshold>/ and its test file run."""
    for (name, _), written in files.items():
        outdir.write_tree(root / name, written)
    with tools.pool() as pool:
        futures = {(name, path): pool.submit(tools.test_rules, root / name / path) for name, path in files}
        return {key: future.result() for key, future in futures.items()}


@pytest.fixture(scope="module")
def moved_thresholds(config, readers, alert_tests, tmp_path_factory) -> dict[tuple[str, str], tools.Result]:
    """The promtool result of each alert's firing cases against its rules built with one threshold it reads moved
    25% the hard way, by threshold and test file."""
    files = {}
    for name, (direction, paths) in _compared(readers).items():
        whole = _whole(_numeric_thresholds()[name])
        moved = _rules(config, name, _moved(config["thresholds"][name], whole, direction))
        for path in paths:
            spec, loaded = alert_tests[path]
            rules = yaml_text(_with_rules(loaded, moved))
            files[(name, path)] = {path: yaml_text(_firing_only(spec)), path.replace(".tests", ".rules"): rules}
    return _promtool(tmp_path_factory.mktemp("moved"), files)


def test_every_numeric_threshold_is_compared_or_listed(readers):
    """Each numeric threshold is compared with, in one direction, by the rules some alert loads, or listed with
    the reason its boundary is proven otherwise."""
    compared = {name for name, (_, paths) in _compared(readers).items() if paths}
    assert {name: sorted(found) for name, (found, _) in readers.items() if name not in compared} == dict.fromkeys(
        NOT_COMPARED, []
    )


def test_moving_a_threshold_25_percent_silences_a_firing_case(moved_thresholds, record_property):
    """Against each alert's rules built with one threshold moved 25% the hard way, some firing case of the
    alert no longer fires: its cases sit within 20% of the threshold."""
    record_property(MEASUREMENT, f"threshold boundaries: {len(moved_thresholds)} alerts run with a threshold moved")
    still_firing = {(name, path.removeprefix(TESTS)) for (name, path), result in moved_thresholds.items() if result.ok}
    assert still_firing == set(NEAREST_STEP)
    # Failed as a case does (an expected alert not got), not because the files did not load.
    assert all("exp:[" in result.output for result in moved_thresholds.values() if not result.ok)


def _site_value(threshold: Threshold, value: float, harder: float) -> float:
    """Another value a site may set: moved 25% the easy way, or the hard way where that leaves the bounds."""
    schema = threshold.schema
    for factor in (1 / harder, harder):
        moved = _moved(value, _whole(threshold), factor)
        if (
            moved >= schema.get("minimum", -math.inf)
            and moved > schema.get("exclusiveMinimum", -math.inf)
            and moved <= schema.get("maximum", math.inf)
        ):
            return moved
    raise ValueError(f"no site value of {threshold.name} within its bounds")


@pytest.fixture(scope="module")
def other_sites(config, readers, tmp_path_factory) -> dict[tuple[str, str], tools.Result]:
    """The promtool result of each alert's cases built, like its rules, with one threshold it reads set to another
    value, by threshold and test file."""
    files = {}
    for name, (direction, paths) in _compared(readers).items():
        value = _site_value(_numeric_thresholds()[name], config["thresholds"][name], direction)
        site = replace(config, data={**config.data, "thresholds": {**config["thresholds"], name: value}})
        built = promtest.files(pipeline.model(site))
        for path in paths:
            rules = path.replace(".tests", ".rules")
            files[(name, path)] = {path: built[path], rules: built[rules]}
    return _promtool(tmp_path_factory.mktemp("sites"), files)


def test_the_cases_follow_the_configured_threshold(other_sites):
    """Each alert's cases, firing and silent, still pass at a site that sets a threshold the alert reads to another
    value: they are derived from the configured threshold, not written as literals near its default."""
    assert {key: result.output for key, result in other_sites.items() if not result.ok} == {}
