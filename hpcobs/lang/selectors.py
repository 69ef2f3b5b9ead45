"""Label selectors as a site writes them in its config (`job="dcgm-exporter"`): parsed by a real PromQL parser into
matchers, and the labels a synthetic series needs to match them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import promql_parser

from hpcobs.lang import escape, promregex

# promql_parser's MatchOp is not hashable: looked up by equality.
_OPS = (
    (promql_parser.MatchOp.Equal, "="),
    (promql_parser.MatchOp.NotEqual, "!="),
    (promql_parser.MatchOp.Re, "=~"),
    (promql_parser.MatchOp.NotRe, "!~"),
)


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def __str__(self) -> str:
        return escape.promql_matcher(self.label, self.op, self.value)


def parse_selector(text: str) -> tuple[Matcher, ...]:
    """`a="x", b=~"y"` as matchers (values unescaped), read by a PromQL parser; ValueError ("problem; fix")
    for anything but one plain list of matchers. Label names, values and regexes are checked when the
    config is loaded (hpcobs.settings.config_checks)."""
    try:
        parsed = promql_parser.parse("{" + text + "}")
    except ValueError as exc:
        # The parser checks regexes too (with Rust's dialect); say which one and why RE2 refuses it.
        pattern = str(exc).removeprefix("illegal regex for ")
        if pattern != str(exc):
            raise ValueError(promregex.problem(pattern) or f"the regex {pattern!r} is not valid; fix it") from None
        if "at least one non-empty matcher" in str(exc):
            raise ValueError(
                f"{text!r} matches every series (each of its matchers accepts a missing label); "
                'name the exporter\'s job, e.g. job="dcgm-exporter"'
            ) from None
        parsed = None
    if not isinstance(parsed, promql_parser.VectorSelector) or parsed.offset is not None or parsed.at is not None:
        raise ValueError(f'{text!r} is not a list of label matchers; write e.g. job="dcgm-exporter"')
    if parsed.matchers.or_matchers:
        raise ValueError(
            f"{text!r} joins matchers with `or`, which Prometheus 2 cannot read; "
            'write one list of matchers, with a regex for alternatives (job=~"a|b")'
        )
    return tuple(
        Matcher(m.name, next(text for op, text in _OPS if op == m.op), m.value) for m in parsed.matchers.matchers
    )


# An Alertmanager matcher may accept a missing label (severity!="info"), which PromQL refuses as a whole selector:
# it is read beside one that cannot, then that one is dropped.
_ANCHOR = Matcher("hpcobs_anchor", "=", "1")


@cache
def alertmanager_matchers(text: str) -> tuple[Matcher, ...]:
    """Alertmanager matchers (`node=~"gpu0[0-4].*"`, as hpcobs.lang.escape.alertmanager_matcher writes one), read as
    PromQL reads a selector's."""
    try:
        return parse_selector(f"{_ANCHOR}, {text}")[1:]
    except ValueError as exc:
        raise ValueError(str(exc).replace(f"{_ANCHOR}, ", "")) from None


def satisfies(matcher: Matcher, value: str) -> bool:
    """The label value (empty when missing) is selected by the matcher (regexes anchored, RE2)."""
    if matcher.op in ("=", "!="):
        return (value == matcher.value) == (matcher.op == "=")
    return promregex.fullmatch(matcher.value, value) == (matcher.op == "=~")


def scrape_labels(matchers: tuple[Matcher, ...]) -> dict[str, str]:
    """Labels a series must carry to match every matcher (for synthetic series); ValueError ("problem; fix")
    when no value can be invented for a label. A label left out is the empty value, which Prometheus
    matchers see for an absent label."""
    labels = {}
    for label in dict.fromkeys(m.label for m in matchers):
        on_label = [m for m in matchers if m.label == label]
        value = _invent(tuple(on_label))
        if value is None:
            wanted = ", ".join(map(str, on_label))
            raise ValueError(
                f"no label value can be invented that matches {wanted} (needed for the rule tests' "
                f'synthetic series); write the value itself ({label}="...") or an alternation of values '
                f'({label}=~"a|b")'
            )
        if value:
            labels[label] = value
    return labels


@cache
def _invent(matchers: tuple[Matcher, ...]) -> str | None:
    """A value of one label that satisfies all its matchers: the value an equality or a regex names, else none."""
    candidates = [m.value if m.op == "=" else promregex.example(m.value) for m in matchers if m.op in ("=", "=~")]
    for value in [c for c in candidates if c is not None] or ["", "synthetic"]:
        if all(satisfies(m, value) for m in matchers):
            return value
    return None
