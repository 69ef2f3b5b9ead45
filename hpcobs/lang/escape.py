"""One escaping function per target language, used wherever a config string is pasted into generated text.

The code fixes the structure of every expression, matcher and template; a config string only ever fills
in a literal, through the function for the language it lands in (docs/validation.md lists which
settings reach which). Strings that cannot be escaped (label names, durations, URLs, paths) are
validated when the config is loaded instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import quote_plus

# Prometheus' label-name grammar; config validation checks names against the same pattern.
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_MATCH_OPS = ("=", "!=", "=~", "!~")
_REGEX_META = frozenset(".^$*+?()[]{}|\\")  # the characters Go's regexp.QuoteMeta escapes


def promql_string(value: str) -> str:
    """A PromQL double-quoted string literal holding exactly `value`. PromQL unquotes with Go's rules,
    which accept every escape JSON writes (\\" \\\\ \\n \\t \\uXXXX ...)."""
    return json.dumps(value, ensure_ascii=False)


def traceql_string(value: str) -> str:
    """A TraceQL double-quoted string literal holding exactly `value`: Tempo's lexer unquotes strings with Go's
    rules (strconv.Unquote), which read every escape JSON writes, as PromQL's does."""
    return promql_string(value)


def label_replace_constant(value: str) -> str:
    """label_replace's replacement writing exactly `value`: `$1` and `${name}` would expand, `$$` writes one `$`."""
    return value.replace("$", "$$")


def regex_alternation(names: Iterable[object]) -> str:
    """An RE2 regex matching exactly these names (PromQL anchors regex matchers at both ends)."""
    return "|".join("".join("\\" + ch if ch in _REGEX_META else ch for ch in str(name)) for name in names)


def _checked(label: str, op: str) -> None:
    # Label names and operators are never escaped: they come from code or from validated config.
    if not LABEL_NAME.fullmatch(label) or op not in _MATCH_OPS:
        raise ValueError(f"not a label matcher: {label!r} {op!r}")


def promql_matcher(label: str, op: str, value: str) -> str:
    """`label op "value"` inside a PromQL selector."""
    _checked(label, op)
    return label + op + promql_string(value)


def alertmanager_matcher(label: str, op: str, value: str) -> str:
    """`label op "value"` as Alertmanager (0.25) parses a matcher: inside quotes it unescapes only
    \\\\, \\" and \\n, and a comma outside quotes would start another matcher."""
    _checked(label, op)
    body = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{label}{op}"{body}"'


def go_template_text(text: str) -> str:
    """Text that Go's text/template (Prometheus annotations, Alertmanager templated fields) prints as is:
    each `{` becomes an action printing it, so no `{{` of the text, or made with what follows it, opens
    an action."""
    return text.replace("{", '{{ "{" }}')


def url_query(value: str) -> str:
    """A URL query component exactly as Go's url.QueryEscape (the template function `urlquery`) writes it:
    everything but A-Z a-z 0-9 - _ . ~ percent-encoded as UTF-8, a space as +."""
    return quote_plus(value, safe="")


def grafana_provisioning(value: str) -> str:
    """A value of a Grafana provisioning file, which expands $NAME and ${NAME} from the environment;
    $$ is a literal $."""
    return value.replace("$", "$$")
