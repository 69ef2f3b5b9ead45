"""The rule manager's alert state machine (hpcobs.proof.alerting), on small cases and against promtool's own rule
evaluation: `promtool test rules` runs Prometheus's rule manager, so its firing alerts at every evaluation must be
the ones the state machine says are firing."""

import subprocess

import pytest
import yaml

from hpcobs.build import tools
from hpcobs.proof.alerting import RESOLVED_RETENTION, Episode, Post, Rule, evaluate

STEP = 60.0


def run(rule: Rule, presence: str, resend_delay: float = STEP):
    """`presence`: one character an evaluation, '1' where the expression returns the series {node="a"}."""
    results = [(n * STEP, [{"__name__": "x", "node": "a"}] if c == "1" else []) for n, c in enumerate(presence)]
    return evaluate(rule, results, resend_delay)


def test_an_alert_fires_once_its_for_has_passed_and_resolves_when_its_series_goes():
    [timeline] = run(Rule("X", "x > 0", STEP, hold=2 * STEP, labels={"severity": "page"}), "0111100")
    assert timeline.labels == {"node": "a", "severity": "page", "alertname": "X"}
    assert timeline.episodes == [Episode(active_at=60, fired_at=180, resolved_at=300)]


def test_a_pending_alert_that_goes_away_never_fires_and_starts_over():
    [timeline] = run(Rule("X", "x > 0", STEP, hold=2 * STEP), "110111")
    assert timeline.episodes == [Episode(0, None, 120), Episode(180, 300, None)]
    assert [p.at for p in timeline.posts] == [300]


def test_an_alert_without_for_fires_at_its_first_evaluation():
    [timeline] = run(Rule("X", "x > 0", STEP), "01")
    assert timeline.episodes == [Episode(60, 60, None)]


def test_sends_repeat_after_the_resend_delay_and_resolved_ones_for_fifteen_minutes():
    evaluations = 40
    [timeline] = run(Rule("X", "x > 0", STEP), "1111" + "0" * (evaluations - 4), resend_delay=STEP)
    valid = 4 * STEP
    firing = [Post(0, 0, valid), Post(120, 0, 120 + valid)]  # resent once its last send is strictly older than 1m
    resolved = [Post(t, 0, 240) for t in range(240, 240 + int(RESOLVED_RETENTION) + 1, 120)]
    assert timeline.posts == firing + resolved


def test_keep_firing_for_holds_an_absent_alert_firing_then_resolves_it():
    [timeline] = run(Rule("X", "x > 0", STEP, keep_firing_for=2 * STEP), "1101000")
    # Absent at 120 (held, back at 180), then from 240: held while less than 2m absent, resolved at 360.
    assert timeline.episodes == [Episode(0, 0, 360)]


# A Prometheus restart: down from 1200 s for 90 s, so the evaluations at 1200 and 1260 do not happen and the state
# is lost; back at 1320, the `for` state is restored after the second evaluation (1380), from the ALERTS_FOR_STATE
# sample written at 1140 (rules/manager.go RestoreForState, v2.42.0).
DOWN = (1200.0, 1290.0)


@pytest.mark.parametrize(
    "hold, first, episodes",
    [
        # `for` under the grace period (10m): not restored, the whole `for` again from the first evaluation back.
        (300, 0, [Episode(0, 300, 1200), Episode(1320, 1620, None)]),
        (0, 0, [Episode(0, 0, 1200), Episode(1320, 1320, None)]),
        # Fired before the restart: ActiveAt restored, it fires at the evaluation after the restore.
        (900, 0, [Episode(0, 900, 1200), Episode(0, 1440, None)]),
        # Pending with less than the grace period left (900 - 660 s): fires a grace period after the restore.
        (900, 480, [Episode(480, None, 1200), Episode(1080, 1980, None)]),
        # Pending with more left (1800 - 300 s): its ActiveAt moves by the downtime (1380 - 1140 s).
        (1800, 840, [Episode(840, None, 1200), Episode(1080, 2880, None)]),
    ],
)
def test_a_restart_loses_the_state_and_restores_for_state_as_prometheus_does(hold, first, episodes):
    results = [(t, [{"node": "a"}] if t >= first else []) for t in range(0, 3600, int(STEP))]
    [timeline] = evaluate(Rule("X", "x > 0", STEP, hold=hold), results, STEP, restarts=[DOWN])
    assert timeline.episodes == episodes
    assert not [p for p in timeline.posts if DOWN[0] <= p.at < 1320]


def test_a_restart_longer_than_the_outage_tolerance_restores_nothing():
    results = [(t, [{"node": "a"}]) for t in range(0, 7200, int(STEP))]
    [timeline] = evaluate(Rule("X", "x > 0", STEP, hold=900), results, STEP, restarts=[(1200.0, 5000.0)])
    assert timeline.episodes == [Episode(0, 900, 1200), Episode(5040, 5940, None)]


# ------------------------------------------------------------------------------------ against promtool

VALUES = {"a": "0 1 1 1 0 1 1 0 0 1 1 1 1 1 0 0 0 0 1 0", "b": "1 1 0 1 1 1 1 1 0 1 0 0 0 0 1 1 1 1 1 1"}
RULES = [
    Rule("Held", "x > 0", STEP, hold=2 * STEP, labels={"severity": "page"}),
    Rule("Kept", "x > 0", STEP, hold=STEP, keep_firing_for=2 * STEP),
]


def firing_at(rules: list[Rule]) -> dict[int, dict[str, list[dict]]]:
    """{evaluation: {alertname: labels of its firing instances}} by the state machine."""
    out: dict[int, dict[str, list[dict]]] = {}
    for rule in rules:
        results = [
            (n * STEP, [{"__name__": "x", "node": node} for node, v in VALUES.items() if v.split()[n] != "0"])
            for n in range(len(VALUES["a"].split()))
        ]
        for timeline in evaluate(rule, results):
            for episode in timeline.episodes:
                for n in range(len(results)):
                    t = n * STEP
                    if episode.fired_at is not None and episode.fired_at <= t < (episode.resolved_at or float("inf")):
                        out.setdefault(n, {}).setdefault(rule.name, []).append(timeline.labels)
    return out


def promtool_agrees(tmp_path, rules: list[Rule], expected: dict[int, dict[str, list[dict]]]) -> bool:
    """Whether `promtool test rules` finds exactly `expected` firing at every evaluation of the input."""
    group = {
        "name": "g",
        "interval": "1m",
        "rules": [
            {
                "alert": r.name,
                "expr": r.expr,
                "for": f"{r.hold:g}s",
                "keep_firing_for": f"{r.keep_firing_for:g}s",
                "labels": r.labels,
            }
            for r in RULES
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    tests = [
        {
            "eval_time": f"{n}m",
            "alertname": r.name,
            "exp_alerts": [
                {"exp_labels": {k: v for k, v in labels.items() if k != "alertname"}}
                for labels in expected.get(n, {}).get(r.name, [])
            ],
        }
        for n in range(len(VALUES["a"].split()))
        for r in rules
    ]
    series = [{"series": f'x{{node="{node}"}}', "values": values} for node, values in VALUES.items()]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}],
    }
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(test))
    done = subprocess.run(
        [tools.find(tools.PROMTOOL), "test", "rules", "rules.test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    return done.returncode == 0


def test_promtool_fires_what_the_state_machine_fires(tmp_path):
    expected = firing_at(RULES)
    assert sum(len(v) for at in expected.values() for v in at.values()) > 10  # the input exercises the rules
    assert promtool_agrees(tmp_path, RULES, expected)


@pytest.mark.parametrize(
    "changed",
    [
        {"hold": 0.0},  # `for` ignored
        {"hold": 3 * STEP},  # `for` off by one evaluation
        {"keep_firing_for": 0.0},  # keep_firing_for ignored
        {"keep_firing_for": 3 * STEP},
    ],
)
def test_promtool_tells_a_wrong_state_machine(tmp_path, changed):
    wrong = [Rule(**{**r.__dict__, **changed}) for r in RULES]
    assert promtool_agrees(tmp_path, RULES, firing_at(RULES))
    assert not promtool_agrees(tmp_path, RULES, firing_at(wrong))
