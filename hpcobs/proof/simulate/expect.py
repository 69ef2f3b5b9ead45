"""What a scenario must make visible, as PromQL a live test can run: non-empty result = the signal is there.

    Expectation("Xid 79 reported", query='DCGM_FI_DEV_XID_ERRORS{...} == 79', at=630, ...)

`at` is seconds from the simulation start (evaluate the query at start + at). Metric names and label
names come from the catalogue for the target's exporter version, values in the metric's own unit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hpcobs.authoring.ruletest import selector_text
from hpcobs.lang.promql import duration

_FUNCTIONS = {
    "value": "{sel}",
    "increase": "increase({sel}[{w}])",
    "rate": "rate({sel}[{w}])",
    "max_over_time": "max_over_time({sel}[{w}])",
    "min_over_time": "min_over_time({sel}[{w}])",
    "changes": "changes({sel}[{w}])",
    "age": "time() - {sel}",
    "absent": "absent_over_time({sel}[{w}])",
    "present": "present_over_time({sel}[{w}])",
}


@dataclass(frozen=True)
class Expectation:
    scenario: str
    description: str
    metric: str
    labels: dict[str, str]
    function: str  # a key of _FUNCTIONS, or "rate_ratio" (rate(metric) / rate(divisor))
    op: str | None  # ==, !=, >, <, >=, <= (None for absent/present)
    value: float | None
    at: int  # seconds from the simulation start
    window: int = 0  # seconds, for range functions
    divisor: str | None = None  # second metric of rate_ratio (same labels)
    extra: dict = field(default_factory=dict)

    @property
    def query(self) -> str:
        sel = selector_text(self.metric, self.labels)
        w = duration(self.window) if self.window else ""
        if self.function == "rate_ratio" and self.divisor is not None:
            expr = f"rate({sel}[{w}]) / rate({selector_text(self.divisor, self.labels)}[{w}])"
        else:
            expr = _FUNCTIONS[self.function].format(sel=sel, w=w)
        if self.op is None:
            return expr
        if self.value is None:
            raise ValueError(f"{self.scenario}: {self.description}: {self.op} needs a value")
        return f"{expr} {self.op} {_number(self.value)}"

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) + ((self.divisor,) if self.divisor else ())

    def to_dict(self) -> dict:
        out = asdict(self)
        out["query"] = self.query
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
