"""Regular expressions as Prometheus runs them: RE2 syntax, fully anchored.

compile("dcgm.*")   -> an RE2 regex that must match a whole label value
problem("a(?=b)")   -> "the regex 'a(?=b)' is not valid RE2 (invalid perl operator: (?=); fix it ..."
example("dcgm.*")   -> "dcgm", a value it matches (None when none can be invented)
"""

from __future__ import annotations

import re
import warnings
from functools import cache

# Python's own regex parser gives a syntax tree to walk; its public alias sre_parse is deprecated, and
# typeshed describes neither private module.
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern to stderr


@cache
def compile(pattern: str):
    """The pattern as Prometheus compiles a label matcher's regex; ValueError saying why it is not RE2."""
    try:
        # Compiled alone first: `a)|(b` is only valid once wrapped, and would change what the wrapper anchors.
        re2.compile(pattern, _OPTIONS)
        return re2.compile(f"^(?:{pattern})$", _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(reason) from None


def problem(pattern: str) -> str | None:
    """Why Prometheus would refuse the pattern, with the fix ("problem; fix"), or None."""
    try:
        compile(pattern)
    except ValueError as exc:
        return (
            f"the regex {pattern!r} is not valid RE2 ({exc}); fix it (Prometheus uses Go's RE2: no lookaround, "
            "no backreferences)"
        )
    return None


def fullmatch(pattern: str, value: str) -> bool:
    return compile(pattern).match(value) is not None


@cache
def example(pattern: str) -> str | None:
    """A short value the pattern fully matches, or None when this conservative generator cannot make one.

    Walks Python's parse of the pattern (literals, classes, groups, alternations, repeats at their minimum)
    and keeps the result only if RE2 agrees, so syntax the two dialects read differently is never trusted.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" for POSIX classes; RE2 has the last word
            tree = sre_parse.parse(pattern)
        value = _generate(tree)
    except (sre.error, _Unsupported, RecursionError, OverflowError):
        return None
    try:
        return value if fullmatch(pattern, value) else None
    except ValueError:
        return None


class _Unsupported(Exception):
    """A construct the generator does not invent values for (backreferences, lookaround...)."""


# Characters tried for `.`, classes and negated classes, most readable first.
_CANDIDATES = "a0x_-. "
# RE2's \d \w \s are ASCII, like these Python classes under re.ASCII.
_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
}


def _generate(tree) -> str:
    return "".join(_item(op, arg) for op, arg in tree)


def _item(op, arg) -> str:
    if op is sre.LITERAL:
        return chr(arg)
    if op is sre.AT:
        return ""
    if op is sre.ANY:
        return _CANDIDATES[0]
    if op is sre.NOT_LITERAL:
        return _first_char(lambda char: ord(char) != arg)
    if op is sre.IN and arg and arg[0][0] is sre.NEGATE:
        return _first_char(lambda char: not any(_member(char, *item) for item in arg[1:]))
    if op is sre.IN:
        return _item(*arg[0])
    if op is sre.RANGE:
        return chr(arg[0])
    if op is sre.CATEGORY:
        return _first_char(lambda char: _member(char, op, arg))
    if op is sre.SUBPATTERN:
        return _generate(arg[-1])
    if op is sre.BRANCH:
        return _generate(arg[1][0])
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
        low, _, body = arg
        return _generate(body) * low
    raise _Unsupported(op)


def _first_char(accepts) -> str:
    for char in _CANDIDATES:
        if accepts(char):
            return char
    raise _Unsupported("no candidate character fits")


def _member(char: str, op, arg) -> bool:
    """Whether a character belongs to one item of a class ([a-z], [x], [\\d])."""
    if op is sre.LITERAL:
        return ord(char) == arg
    if op is sre.RANGE:
        return arg[0] <= ord(char) <= arg[1]
    if op is sre.CATEGORY and arg in _CATEGORIES:
        return re.fullmatch(_CATEGORIES[arg], char, re.ASCII) is not None
    raise _Unsupported(op)
