"""How content declares a threshold: once, in the module of the alert, record or panel that reads it.

A content module lists its thresholds in a module-level tuple THRESHOLDS:

    THRESHOLDS = (
        declare.duration("gpu_fell_off_bus_for", "1m", "How long Xid 79 must be seen before GpuFellOffBus pages."),
    )

and reads the value a site set through the context (`ctx.thresholds.gpu_fell_off_bus_for`). Everything else about
the threshold is generated from the declaration by `python -m hpcobs.build.codegen`: its entry in
config/schema.json, its default with the doc as comment in config/default.yaml, its row in docs/configuration.md
and its typed field in hpcobs/settings/thresholds.py (tests/test_thresholds.py fails while one of them is stale).

The doc is one paragraph for the reader of config/default.yaml and docs/configuration.md: what the value means,
which alerts it decides, why the default is what it is. `expected` completes a refusal ("0 is not <expected>").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Threshold:
    name: str
    default: Any
    doc: str
    schema: dict[str, Any]  # the JSON schema of its value

    @property
    def python_type(self) -> str:
        return _python_type(self.schema)


def _python_type(schema: dict[str, Any]) -> str:
    if schema["type"] == "array":
        return f"tuple[{_python_type(schema['items'])}, ...]"
    if schema["type"] == "string":
        return {"duration": "Duration", "re2": "Regex"}.get(schema.get("format", ""), "str")
    return {"number": "float", "integer": "int"}[schema["type"]]


def _expecting(schema: dict[str, Any], expected: str | None) -> dict[str, Any]:
    return schema if expected is None else {**schema, "x-expected": expected}


def duration(name: str, default: str, doc: str) -> Threshold:
    """A Prometheus duration (5m, 1h30m); one named *_window, *_lookback or *_horizon must hold two scrapes."""
    return Threshold(name, default, doc, {"type": "string", "format": "duration"})


def regex(name: str, default: str, doc: str) -> Threshold:
    """An RE2 regular expression, anchored at both ends where PromQL uses it."""
    return Threshold(name, default, doc, {"type": "string", "format": "re2"})


def number(
    name: str,
    default: float,
    doc: str,
    *,
    expected: str | None,
    whole: bool = False,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> Threshold:
    """A number within bounds (`above` excludes its bound); `whole` for a count."""
    bounds = {"minimum": minimum, "exclusiveMinimum": above, "maximum": maximum}
    schema = {"type": "integer" if whole else "number", **{key: v for key, v in bounds.items() if v is not None}}
    return Threshold(name, default, doc, _expecting(schema, expected))


def count(name: str, default: int, doc: str) -> Threshold:
    """A number of things (nodes, jobs) that may be in a state before an alert fires; 0 tolerates none."""
    return number(name, default, doc, expected="a non-negative whole number", whole=True, minimum=0)


def rate(name: str, default: float, doc: str) -> Threshold:
    """Events or bytes per second above which an alert fires."""
    return number(name, default, doc, expected="a positive number per second", above=0)


def limit(name: str, default: float, doc: str) -> Threshold:
    """A limit a measured value may reach before an alert fires, 0 included."""
    return number(name, default, doc, expected="a non-negative number", minimum=0)


def ratio(name: str, default: float, doc: str) -> Threshold:
    """A share of a whole (time, utilisation), from 0 to 1."""
    return number(name, default, doc, expected="a ratio between 0 and 1 such as 0.1", minimum=0, maximum=1)


def fraction(name: str, default: float, doc: str) -> Threshold:
    """A share of a whole that only means something above 0 (used space, a job's own level)."""
    return number(name, default, doc, expected="a ratio above 0 and at most 1, such as 0.8", above=0, maximum=1)


def factor(name: str, default: float, doc: str) -> Threshold:
    """A multiple of a job's own baseline above which it is slower than itself."""
    return number(name, default, doc, expected="a number greater than 1", above=1)


def names(
    name: str,
    default: list[str],
    doc: str,
    *,
    item: dict[str, Any] | None = None,
    expected: str = "a non-empty list of names",
) -> Threshold:
    """A non-empty list of names (Falco rules, policies, collectors); each one line of text unless `item` says."""
    items = item or {"type": "string", "format": "text"}
    return Threshold(name, default, doc, {"type": "array", "minItems": 1, "items": items, "x-expected": expected})
