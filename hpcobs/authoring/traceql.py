"""TraceQL span selectors for links into Tempo (dashboard.explore_url): the one place they are written.

A condition's value is a literal, escaped for TraceQL, or a Grafana variable. A variable is pasted into the link's
URL, not into a query Tempo's datasource interpolates: Grafana writes a value into a dashboard link as it is and
into a data link URI-encoded (link_srv getDataLinkUIModel, VariableFormatID.UriEncode, which leaves & # + as they
are), so the selector names the `percentencode` format, which both apply and Explore decodes once when it reads
its panes. What stays is the string literal: a value holding `"` or `\\` would end or escape it; the job
variable's values never hold `"` (its regex), the rank variable's are digits, the helper's job ids neither.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from hpcobs.lang import escape

# TraceQL's `name` intrinsic: the span's name, unscoped.
NAME = "name"


@dataclass(frozen=True)
class GrafanaVariable:
    """A dashboard variable, or a data link's row value (`__data.fields.<label>`)."""

    name: str


Value = str | bool | GrafanaVariable


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, GrafanaVariable):
        return f'"${{{value.name}:percentencode}}"'
    return escape.traceql_string(value)


def spans(conditions: Sequence[tuple[str, Value]]) -> str:
    """`{ attribute = value && ... }`: the spans that meet every condition (an attribute is scoped,
    `resource.hpc_job`, `span.hpcobs.slow`, or the `name` intrinsic)."""
    return "{ " + " && ".join(f"{attribute} = {_literal(value)}" for attribute, value in conditions) + " }"
