"""The standard proof of an alert with a `for`, derived from when its fault starts and from its `for`.

Every such alert is proven by the same three cases: it fires on a fault once `for` has elapsed, it stays silent
on healthy data, and it stays silent on the same fault before `for` has elapsed (before the fault's onset when a
site's `for` is too short to leave time after it, 0s included). Only the series differ from alert to alert; when
to evaluate each case follows from the fault's onset and the `for`, so it is computed here once instead of
retyped with its arithmetic in every alert. Cases that prove something specific (a value just under the
threshold, a sticky counter, a shared GPU) are written by hand beside these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from hpcobs.authoring.context import Context
from hpcobs.authoring.ruletest import Case, Sample, Series
from hpcobs.lang.promql import RATE_WINDOW_SCRAPES, duration, duration_seconds


class Proof(TypedDict):
    """The cases of an alert, unpacked into Alert(...) as its fires_on and silent_on."""

    fires_on: list[Case]
    silent_on: list[Case]


@dataclass(frozen=True)
class Timing:
    """When a fault's condition holds, in seconds from the start of the input series.

    `earliest` differs from `onset` when a rate() window may or may not include its left edge (Prometheus 2
    and 3 differ), so the condition starts to hold one scrape earlier on one of them.
    """

    step: int  # the scrape interval
    hold: int  # the alert's `for`
    onset: int  # from here on the condition holds, on every Prometheus version
    earliest: int | None = None  # from here on it may already hold
    settle: int | None = None  # how long after `for` has elapsed the firing case is evaluated (default 10 scrapes)
    evaluation: int | None = None  # the rule evaluation interval, when it is not the scrape interval

    @property
    def firing_seconds(self) -> int:
        """Past `for` by `settle`, and by at least two evaluations: the alert becomes pending at the first
        evaluation after the onset and fires at the first one after `for`, and promtool sees it at the
        evaluation before the case's time (hpcobs.targets.promtest)."""
        settle = 10 * self.step if self.settle is None else self.settle
        return self.onset + self.hold + max(settle, 2 * (self.evaluation or self.step))

    @property
    def pending_seconds(self) -> int | None:
        """When the fault holds but `for` has not elapsed: three scrapes before `for` ends (half the `for` when it
        is shorter), counted from the earliest onset; None when a site's short `for` (0s fires at once) ends
        before the condition holds on every Prometheus version."""
        during = self._earliest + self.hold - min(3 * self.step, self.hold // 2)
        return during if during > self.onset else None

    @property
    def _earliest(self) -> int:
        return self.onset if self.earliest is None else self.earliest

    @property
    def lasting(self) -> int:
        """How long a case's series last, in seconds: well past the firing evaluation."""
        return 2 * self.firing_seconds

    @property
    def samples(self) -> int:
        """The n of promtool's `axn` for a series lasting `lasting`."""
        return self.lasting // self.step

    @property
    def firing_at(self) -> str:
        """An evaluation time well after `for` has elapsed."""
        return duration(self.firing_seconds)

    def fires(self, name: str, series: list[Series], expect: list[Sample]) -> Case:
        """A further fault, evaluated when the standard one fires."""
        return Case(name, self.firing_at, series, expect)

    def silent(self, name: str, series: list[Series]) -> Case:
        """Further data the alert must not fire on (a borderline value), evaluated when the fault fires."""
        return Case(name, self.firing_at, series)

    def not_yet(self, name: str, fault_series: list[Series], pending_series: list[Series]) -> list[Case]:
        """The alert silent before `for` has elapsed: on `pending_series` after the onset or, when the `for` is
        too short to leave time after it, on the fault before its onset; nothing when the fault holds from the
        first scrape."""
        if self.pending_seconds is not None:
            return [Case(name, duration(self.pending_seconds), pending_series)]
        before_onset = self._earliest - self.step  # one scrape before the condition may hold
        if before_onset >= 0:
            name = f"the fault before its onset (a `for` of {duration(self.hold)} leaves no time after it)"
            return [Case(name, duration(before_onset), fault_series)]
        return []


def timing(
    ctx: Context, for_: str, onset_scrapes: int, *, earliest_scrapes: int | None = None, settle: int | None = None
) -> Timing:
    """The Timing of an alert whose `for` is `for_` and whose condition holds from scrape `onset_scrapes` on."""
    step = duration_seconds(ctx.scrape_interval)
    return Timing(
        step,
        duration_seconds(for_),
        onset_scrapes * step,
        earliest=None if earliest_scrapes is None else earliest_scrapes * step,
        settle=settle,
        evaluation=duration_seconds(ctx.evaluation_interval),
    )


def counter_timing(ctx: Context, for_: str, *, settle: int | None = None) -> Timing:
    """The Timing of an alert on a rate() of a counter that starts growing from its first sample: the rate may
    exceed a limit from the second sample on, and reads its full value once the rate window lies after the first
    sample (rate() divides by the whole window, so a window half full of samples reads half the rate)."""
    return timing(ctx, for_, RATE_WINDOW_SCRAPES + 1, earliest_scrapes=1, settle=settle)


def standard_cases(
    when: Timing,
    *,
    fault: str,
    fault_series: list[Series],
    expect: list[Sample],
    healthy: str,
    healthy_series: list[Series],
    pending: str,
    pending_series: list[Series] | None = None,
    also_fires: Sequence[Case] = (),
    also_silent: Sequence[Case] = (),
) -> Proof:
    """Fires on the fault after `for`; silent on healthy data, on `also_silent` and on the fault (or on
    `pending_series`) before `for` has elapsed."""
    return Proof(
        fires_on=[when.fires(fault, fault_series, expect), *also_fires],
        silent_on=[
            when.silent(healthy, healthy_series),
            *also_silent,
            *when.not_yet(pending, fault_series, fault_series if pending_series is None else pending_series),
        ],
    )
