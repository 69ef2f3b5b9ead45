"""What a PromQL expression reads and does, from promql-parser's syntax tree: the metrics it selects, and
whether it counts things matching a condition (the cardinality budget's sparse records).

Dashboard expressions may hold Grafana variables and be template queries (`label_values(expr, label)`,
`query_result(expr)`): the PromQL inside is taken and the variables replaced by values of their kind
before parsing.
"""

from __future__ import annotations

import re
from functools import cache

import promql_parser

from hpcobs.lang.promql import COMPARISONS

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_TEMPLATE_QUERY = re.compile(r"\s*(label_values|query_result)\((.*)\)\s*", re.S)
_LABEL_VALUES_ARGUMENTS = re.compile(r"(?:(.*),)?\s*[a-zA-Z_][a-zA-Z0-9_]*\s*", re.S)
_BEFORE_DURATION = re.compile(r"(\[[^\]]*|\boffset\s*-?\s*)\Z")

# A Grafana template variable in a query: $name, ${name}, ${name:format} or the deprecated [[name]].
GRAFANA_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: selector names and `__name__="..."` matchers."""
    return set(_metric_names(expr))


def syntax_tree(expr: str) -> promql_parser.Expr:
    try:
        return promql_parser.parse(_plain_regexes(expr))
    except ValueError as exc:
        raise ValueError(f"not PromQL ({exc}): {expr}") from None


@cache
def _metric_names(expr: str) -> frozenset[str]:
    promql = promql_text(expr)
    if promql is None:
        return frozenset()
    tree = syntax_tree(promql)
    names = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            matchers = node.matchers
            names.update(
                m.value
                for group in (matchers.matchers, *matchers.or_matchers)
                for m in group
                if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal
            )

    promql_parser.walk(tree, visit)
    return frozenset(names)


_EXCLUDING = (promql_parser.MatchOp.NotEqual, promql_parser.MatchOp.NotRe)


def counts_a_condition(expr: str) -> bool:
    """`count by (...) (x > 0)` or `count by (...) (x{state!="ACTIVE"})`, possibly relabelled (label_replace) or
    several joined with `or`, or a selection kept by a comparison (`x != 4 and on (...) y`): its series exist only
    where something matches the condition (a comparison that filters, not `bool`, or a matcher that excludes), so
    a healthy fleet records few of them."""
    return _counts_a_condition(syntax_tree(expr))


def _counts_a_condition(node: promql_parser.Expr) -> bool:
    if isinstance(node, promql_parser.ParenExpr):
        return _counts_a_condition(node.expr)
    if isinstance(node, promql_parser.Call) and node.func.name == "label_replace":
        return _counts_a_condition(node.args[0])
    if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "or":
        return _counts_a_condition(node.lhs) and _counts_a_condition(node.rhs)
    if isinstance(node, promql_parser.BinaryExpr) and str(node.op) == "and":
        return _filters(node)
    if not (isinstance(node, promql_parser.AggregateExpr) and str(node.op) == "count"):
        return False
    conditions = []

    def visit(inner) -> None:
        if isinstance(inner, promql_parser.BinaryExpr) and str(inner.op) in COMPARISONS:
            conditions.append(not (inner.modifier and inner.modifier.return_bool))
        elif isinstance(inner, promql_parser.VectorSelector):
            conditions.extend(m.op in _EXCLUDING for m in inner.matchers.matchers)

    promql_parser.walk(node.expr, visit)
    return any(conditions)


def _filters(node: promql_parser.Expr) -> bool:
    """`x != 4 and on (...) y`: the series that meet a comparison (not `bool`), on either side of an `and`."""
    if isinstance(node, promql_parser.ParenExpr):
        return _filters(node.expr)
    if not isinstance(node, promql_parser.BinaryExpr):
        return False
    if str(node.op) == "and":
        return _filters(node.lhs) or _filters(node.rhs)
    return str(node.op) in COMPARISONS and not (node.modifier and node.modifier.return_bool)


def compared_after_aggregating(expr: str) -> set[str]:
    """Raw metrics (no `:` in the name) that are aggregated and only then compared with a number, with no
    comparison or regex matcher (a chosen set of values, such as Xid codes) before the aggregation:
    `max by (gpu) (label_replace(x, ...)) > 85`. Every series is relabelled and aggregated at each evaluation
    to keep the few that pass; comparing first (`max by (gpu) (label_replace(x > 85, ...))`) gives the same
    result and leaves almost nothing to aggregate on a healthy fleet."""
    found: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.BinaryExpr) and str(node.op) in COMPARISONS:
            for side, other in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
                aggregation = _unscaled(side)
                if isinstance(other, promql_parser.NumberLiteral) and isinstance(
                    aggregation, promql_parser.AggregateExpr
                ):
                    found.update(_raw_read_unfiltered(aggregation.expr))

    promql_parser.walk(syntax_tree(expr), visit)
    return found


def _unscaled(node: promql_parser.Expr) -> promql_parser.Expr:
    """The expression under parentheses, label_replace and a scaling by a number (a unit conversion)."""
    while True:
        if isinstance(node, promql_parser.ParenExpr):
            node = node.expr
        elif isinstance(node, promql_parser.Call) and node.func.name == "label_replace":
            node = node.args[0]
        elif (
            isinstance(node, promql_parser.BinaryExpr)
            and str(node.op) in ("*", "/")
            and isinstance(node.rhs, promql_parser.NumberLiteral)
        ):
            node = node.lhs
        else:
            return node


def _raw_read_unfiltered(node: promql_parser.Expr) -> set[str]:
    names: set[str] = set()
    filtered = []

    def visit(inner) -> None:
        if isinstance(inner, promql_parser.BinaryExpr) and str(inner.op) in COMPARISONS:
            filtered.append(True)
        elif isinstance(inner, promql_parser.VectorSelector) and inner.name and ":" not in inner.name:
            names.add(inner.name)
            filtered.extend(m.op == promql_parser.MatchOp.Re for m in inner.matchers.matchers)

    promql_parser.walk(node, visit)
    return set() if any(filtered) else names


def _plain_regexes(promql: str) -> str:
    """Regex matcher values replaced by a plain one: they name no metric, and the parser compiles them with
    Rust's regex crate, which refuses some patterns that Prometheus' RE2 accepts (`{{a}}`)."""

    def plain(string: re.Match) -> str:
        return '"x"' if promql[: string.start()].rstrip().endswith(("=~", "!~")) else string.group()

    return _STRING.sub(plain, promql)


def promql_text(expr: str) -> str | None:
    """The PromQL of a dashboard expression, Grafana variables outside string literals replaced by a duration
    in a range or after `offset`, by a number elsewhere; None for `label_values(label)`, which reads no series."""
    query = _TEMPLATE_QUERY.fullmatch(expr)
    if query:
        kind, expr = query.groups()
        if kind == "label_values":
            arguments = _LABEL_VALUES_ARGUMENTS.fullmatch(expr)
            if arguments is None:
                raise ValueError(f"label_values takes (expr, label) or (label): {query.group()}")
            expr = arguments.group(1)
            if expr is None:
                return None
    code = _STRING.sub(lambda string: " " * len(string.group()), expr)  # same offsets, strings blanked

    def value(variable: re.Match) -> str:
        if code[variable.start()] == " ":  # inside a string literal: text, left as it is
            return variable.group()
        return "1m" if _BEFORE_DURATION.search(code, 0, variable.start()) else "1"

    return GRAFANA_VARIABLE.sub(value, expr)


TOP_SETS = {"topk", "bottomk", "limitk"}


def top_sets_per_step(expr: str) -> list[str]:
    """The topk/bottomk/limitk of an expression that pick their set again at every evaluation: in a range query each
    step keeps its own top 10, and the graph draws far more than 10 lines. A top set whose every selector is pinned
    with `@` (`@ end()`: the top 10 of the whole range, once) is fixed."""
    promql = promql_text(expr)
    if promql is None:
        return []
    found: list[str] = []

    def visit(node) -> None:
        if isinstance(node, promql_parser.AggregateExpr) and str(node.op) in TOP_SETS:
            selectors: list = []
            promql_parser.walk(node.expr, lambda inner: selectors.append(inner) if _selector(inner) else None)
            if not selectors or any(_at(selector) is None for selector in selectors):
                found.append(node.prettify())

    promql_parser.walk(syntax_tree(promql), visit)
    return found


def _selector(node) -> bool:
    return isinstance(node, promql_parser.VectorSelector | promql_parser.MatrixSelector)


def _at(selector):
    return (selector.vector_selector if isinstance(selector, promql_parser.MatrixSelector) else selector).at
