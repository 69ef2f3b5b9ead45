"""Turn the cases declared on records and alerts into promtool rule-test files."""

from __future__ import annotations

from hpcobs.authoring.rules import Alert, LinkBases, Record, render_template
from hpcobs.authoring.ruletest import Case, selector_text


def _input(case: Case) -> list[dict]:
    return [{"series": s.text(), "values": s.values} for s in case.series]


def _record_test(record: Record, case: Case, interval: str) -> dict:
    return {
        "name": f"{record.record}: {case.name}",
        "interval": interval,
        "input_series": _input(case),
        "promql_expr_test": [
            {
                "expr": record.record,
                "eval_time": case.at,
                "exp_samples": [
                    {"labels": selector_text(record.record, s.labels), "value": s.value} for s in case.expect
                ],
            }
        ],
    }


def _alert_test(alert: Alert, case: Case, interval: str, annotations: dict[str, str]) -> dict:
    expected = []
    for s in case.expect:
        labels = {**alert.all_labels(), **s.labels}
        expected.append(
            {
                "exp_labels": labels,
                "exp_annotations": {k: render_template(v, labels) for k, v in annotations.items()},
            }
        )
    return {
        "name": f"{alert.alert}: {case.name}",
        "interval": interval,
        "input_series": _input(case),
        "alert_rule_test": [{"alertname": alert.alert, "eval_time": case.at, "exp_alerts": expected}],
    }


def test_file(rules: list[Record | Alert], rule_files: list[str], interval: str, links: LinkBases) -> dict:
    """One promtool test file covering every case of the given rules."""
    tests = []
    for rule in rules:
        if isinstance(rule, Record):
            tests += [_record_test(rule, case, interval) for case in rule.tests]
        else:
            annotations = rule.annotations(links)
            tests += [_alert_test(rule, case, interval, annotations) for case in rule.fires_on + rule.silent_on]
    return {"rule_files": rule_files, "evaluation_interval": interval, "tests": tests}
