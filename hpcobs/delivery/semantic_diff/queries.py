"""Queries in the form `build.py diff` compares them (docs/review.md): PromQL as promql-parser renders it, so that
spacing, parentheses of grouping clauses or `by` before or after the aggregation are not a change; LogQL and
anything the parser refuses with the whitespace between tokens collapsed.

Dashboard queries hold Grafana variables ($cluster, ${node:regex}, [$__rate_interval]) and template functions
(label_values(expr, label)) that are not PromQL. Before parsing, each variable outside a string literal is replaced
by a placeholder of the kind its position needs (a duration in a range or after `offset`, a number elsewhere) and
each string literal by a plain one; the rendered text gets the originals back. String literals are kept as written
because the parser renders a string's value without escaping it again (`"a\\\\.b"` would come out as `"a\\.b"`).
"""

from __future__ import annotations

import re
from functools import cache

import promql_parser

from hpcobs.lang.lint import GRAFANA_VARIABLE

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_TEMPLATE = re.compile(r"\s*(label_values|query_result)\((.*)\)\s*", re.S)
_LABEL_ARGUMENT = re.compile(r"(.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*", re.S)
_BEFORE_DURATION = re.compile(r"(\[[^\]]*|\boffset\s*-?\s*)\Z")
# Placeholders the parser renders as they are written, and that no real query contains.
_STRING_PLACEHOLDER = '"__hpcobs_diff_{}__"'
_DURATION_PLACEHOLDER = "{}y"
_NUMBER_PLACEHOLDER = "{}"
_FIRST_DURATION, _FIRST_NUMBER = 9000, 9_000_000_000
_INSIDE_BRACKETS = re.compile(r"([(\[]) | ([)\]])")
_PLACEHOLDER = re.compile(r'"?__hpcobs_diff_(\d+)__"?|(?<![\w.])(9\d{3})y(?!\w)|(?<![\w.])(9\d{9})(?![\w.])')


def promql(expr: str, pretty: bool = False) -> str:
    """The expression as the parser renders it: on one line, or indented by nesting when pretty; Grafana's template
    functions around it kept; text the parser refuses collapsed (collapsed())."""
    template = _TEMPLATE.fullmatch(expr)
    if template:
        function, inner = template.groups()
        argument = _LABEL_ARGUMENT.fullmatch(inner) if function == "label_values" else None
        if argument:
            return f"{function}({_rendered(argument.group(1).strip(), pretty)}, {argument.group(2)})"
        if function == "query_result":
            return f"{function}({_rendered(inner.strip(), pretty)})"
        return collapsed(expr)  # label_values(label) reads no series
    return _rendered(expr, pretty)


@cache
def _rendered(expr: str, pretty: bool) -> str:
    originals: list[str] = []

    def literal(match: re.Match) -> str:
        originals.append(match.group())
        return _STRING_PLACEHOLDER.format(len(originals) - 1)

    code = _STRING.sub(literal, expr)
    variables: dict[str, str] = {}

    def variable(match: re.Match) -> str:
        in_range = _BEFORE_DURATION.search(code, 0, match.start())
        placeholder = (
            _DURATION_PLACEHOLDER.format(_FIRST_DURATION + len(variables))
            if in_range
            else _NUMBER_PLACEHOLDER.format(_FIRST_NUMBER + len(variables))
        )
        variables[placeholder.removesuffix("y")] = match.group()
        return placeholder

    masked = GRAFANA_VARIABLE.sub(variable, code)
    try:
        tree = promql_parser.parse(masked)
    except (ValueError, OverflowError):
        return collapsed(expr)
    # The indented form is the parser's canonical one (matchers sorted, `sum by (a) (x)`); on one line, its
    # indentation is collapsed and no space is left inside brackets.
    text = tree.prettify()
    if not pretty:
        text = _INSIDE_BRACKETS.sub(lambda space: space.group(1) or space.group(2), " ".join(text.split()))

    def original(match: re.Match) -> str:
        string, duration, number = match.groups()
        if string is not None:
            written = originals[int(string)]
            # A `__name__` matcher is rendered as a bare metric name, without quotes.
            return written if match.group().startswith('"') else written[1:-1]
        return variables.get(duration or number, match.group())

    return _PLACEHOLDER.sub(original, text)


def collapsed(text: str) -> str:
    """Each run of whitespace outside string literals as one space, the ends trimmed (LogQL, and what the PromQL
    parser refuses)."""
    parts, end = [], 0
    for literal in _STRING.finditer(text):
        parts += [re.sub(r"\s+", " ", text[end : literal.start()]), literal.group()]
        end = literal.end()
    parts.append(re.sub(r"\s+", " ", text[end:]))
    return "".join(parts).strip()
