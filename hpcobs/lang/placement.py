"""Whether a PromQL expression's answer for one value of a label depends only on the series that carry that value,
from promql-parser's syntax tree (docs/scale-out.md#where-each-rule-group-runs).

With `node`, this is what lets a rule run on a collection shard that sees only some nodes: every aggregation keeps
the label, every match between two vectors matches on it, nothing collapses series into one (absent(), vector(),
scalar()), and every series it reads is itself split that way (a record computed the same way, or a raw series
scraped from the node). With `cluster`, it is what lets one ruler evaluate the rules of several clusters in one
store without mixing them (docs/scale-out.md#several-clusters-in-one-store).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import promql_parser

from hpcobs.lang.lint import syntax_tree

# Functions whose answer is one series (or a scalar) made from every series they are given, or from none.
_COLLAPSING = {"absent", "absent_over_time", "scalar", "vector"}

# The reason a selector is not split by the label, None when it is (the caller knows where series come from).
SelectorCheck = Callable[[promql_parser.VectorSelector], "str | None"]


@dataclass(frozen=True)
class _Shape:
    series: bool  # a vector (or matrix), as opposed to a number or a string
    reason: str | None = None  # why its answer for one value of the label needs series of other values


_NUMBER = _Shape(series=False)
_SPLIT = _Shape(series=True)


def mixes(expr: str, label: str, selector: SelectorCheck) -> str | None:
    """Why the expression's answer for one value of `label` reads series of other values; None when it never does.
    `selector` judges each vector selector (what reads a record the label does not split, or a series from
    elsewhere)."""
    return _shape(syntax_tree(expr), label, selector).reason


def _shape(node: promql_parser.Expr, label: str, selector: SelectorCheck) -> _Shape:
    def inner(child: promql_parser.Expr) -> _Shape:
        return _shape(child, label, selector)

    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return _NUMBER
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        return inner(node.expr)
    if isinstance(node, promql_parser.MatrixSelector):
        return inner(node.vector_selector)
    if isinstance(node, promql_parser.VectorSelector):
        return _Shape(series=True, reason=selector(node))
    if isinstance(node, promql_parser.AggregateExpr):
        return _aggregation(node, label, inner)
    if isinstance(node, promql_parser.BinaryExpr):
        return _binary(node, label, inner)
    if isinstance(node, promql_parser.Call):
        return _call(node, inner)
    raise ValueError(f"no placement for a {type(node).__name__}: {node.prettify()}")


def _first_reason(shapes: list[_Shape]) -> str | None:
    return next((shape.reason for shape in shapes if shape.reason), None)


def _aggregation(node: promql_parser.AggregateExpr, label: str, inner: Callable) -> _Shape:
    within = _first_reason([inner(node.expr), *([inner(node.param)] if node.param is not None else [])])
    if within:
        return _Shape(series=True, reason=within)
    modifier = node.modifier
    keeps = modifier is not None and (
        label in modifier.labels if modifier.type == promql_parser.AggModifierType.By else label not in modifier.labels
    )
    if keeps:
        return _SPLIT
    grouping = f" {modifier}" if modifier else ""
    return _Shape(series=True, reason=f"`{node.op}{grouping}` combines series of every {label}")


def _binary(node: promql_parser.BinaryExpr, label: str, inner: Callable) -> _Shape:
    lhs, rhs = inner(node.lhs), inner(node.rhs)
    within = _first_reason([lhs, rhs])
    if within or not (lhs.series and rhs.series):
        return _Shape(series=lhs.series or rhs.series, reason=within)
    matching = node.modifier.matching if node.modifier is not None else None
    if matching is None:  # matched on every label, this one included
        return _SPLIT
    if matching.type == promql_parser.LabelModifierType.Include:
        keeps, written = label in matching.labels, "on"
    else:
        keeps, written = label not in matching.labels, "ignoring"
    if keeps:
        return _SPLIT
    return _Shape(
        series=True,
        reason=f"`{node.op} {written} ({', '.join(matching.labels)})` matches series across {label}s",
    )


def _call(node: promql_parser.Call, inner: Callable) -> _Shape:
    arguments = [inner(argument) for argument in node.args]
    within = _first_reason(arguments)
    if within:
        return _Shape(series=True, reason=within)
    if node.func.name in _COLLAPSING:
        return _Shape(series=True, reason=f"`{node.func.name}()` answers for every series at once")
    # A function keeps one output series per input series (rate, label_replace, clamp_min...); time() and pi()
    # take none and give a number.
    return _Shape(series=any(shape.series for shape in arguments))
