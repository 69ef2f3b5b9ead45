"""The week benchmark's CI smoke check (benchmarks/week.py --smoke): it judges the scorecard's direction, not its
values, and fails on a placed fault that was missed or a pager or chat page without a cause."""

import importlib.util

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def week(monkeypatch_module):
    monkeypatch_module.syspath_prepend(str(ROOT / "benchmarks"))  # week.py imports week_workload beside it
    spec = importlib.util.spec_from_file_location("week", ROOT / "benchmarks" / "week.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _card(detected: int = 2, cause: dict | None = None) -> dict:
    page = {"at": 600, "receiver": "gpu-ops-pager", "alerts": [{"alertname": "A"}], "cause": cause}
    return {
        "classes": [
            # A signal class's `injected` counts the placed faults only: 2 placed, 1 more unplaced.
            {"class": "faulty GPU", "signal": True, "injected": 2, "unplaced": 1, "detected": detected},
            {"class": "silent data corruption", "signal": False, "injected": 1, "unplaced": 0, "detected": 0},
        ],
        "false_pages": {"pager": {"per_day": 1.0, "pages": [page]}, "chat": {"per_day": 0.0, "pages": []}},
    }


def test_every_placed_fault_detected_and_every_page_caused_holds(week):
    assert week.direction(_card(cause={"event": "drain", "entity": "gpu001", "why": "maintenance"})) == []


def test_a_missed_fault_or_a_page_without_a_cause_fails(week):
    assert week.direction(_card(detected=1, cause={"event": "drain", "entity": "n", "why": "w"})) == [
        "faulty GPU: 1 of 2 placed faults detected"
    ]
    assert week.direction(_card()) == ["pager page at 600 to gpu-ops-pager without a cause"]


def test_a_day_without_a_placed_fault_checks_nothing_and_fails(week):
    card = _card(cause={"event": "drain", "entity": "n", "why": "w"})
    card["classes"][0].update(injected=0, unplaced=3, detected=0)
    assert week.direction(card) == ["no fault with a signal was placed: nothing was checked"]


def test_a_day_with_as_many_unplaced_as_placed_faults_is_checked(week):
    card = _card(cause={"event": "drain", "entity": "n", "why": "w"})
    card["classes"][0].update(injected=1, unplaced=1, detected=0)
    assert week.direction(card) == ["faulty GPU: 0 of 1 placed faults detected"]
