"""The week benchmark end to end on a small slice (benchmarks/week.py): 4 hours of 2 nodes x 4 GPUs with faults
drawn at 4,000 x the real rate (seed 1: an IB switch port down on a leaf, a GPU off the bus, an NVLink Xid 74),
replayed through Prometheus and a real Alertmanager at k = 1440 (10 s). It checks the scorecard's direction, not its
values: every placed fault with a signal is detected, and no page to a pager or chat lacks a cause."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    out = tmp_path_factory.mktemp("week") / "week.json"
    args = ["--nodes", "2", "--gpus-per-node", "4", "--days", f"{4 / 24}", "--rate", "4000x", "--seed", "1"]
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "week.py"), *args, "--k", "1440", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    return json.loads(out.read_text())


def test_every_placed_fault_with_a_signal_is_detected(card):
    placed = [c for c in card["classes"] if c["signal"] and c["injected"]]
    assert sum(c["injected"] for c in placed) >= 3
    assert [(c["class"], c["detected"]) for c in placed] == [(c["class"], c["injected"]) for c in placed]


def test_no_page_to_a_pager_or_chat_is_without_a_cause(card):
    assert all(p["cause"] for found in card["false_pages"].values() for p in found["pages"])
    assert any(i["pages"]["pager"] for i in card["incidents"])  # and pages do arrive
