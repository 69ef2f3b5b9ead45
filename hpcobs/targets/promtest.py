"""out/prometheus/tests/<domain>/<rule>.tests.yaml: the cases declared on records and alerts as promtool rule-test
files, one per rule name, each loading <rule>.rules.yaml beside it: that rule and every record it reads, in its
expression or in the queries of its annotations (copies of groups of out/prometheus/rules/)."""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from hpcobs.authoring.rules import Alert, Group, LinkBases, Record, layers, names_read, render_template
from hpcobs.authoring.ruletest import Case, selector_text
from hpcobs.lang.promql import duration, duration_seconds
from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_SCHEMA

TESTS_DIR = "prometheus/tests"


def _input(case: Case) -> list[dict]:
    return [{"series": s.text(), "values": s.values} for s in case.series]


def _record_test(record: Record, case: Case, interval: str, evaluation_interval: str) -> dict:
    return {
        "name": f"{record.record}: {case.name}",
        "interval": interval,
        "input_series": _input(case),
        "promql_expr_test": [
            {
                "expr": record.record,
                "eval_time": _observed_at(case.at, evaluation_interval),
                "exp_samples": [
                    {"labels": selector_text(record.record, s.labels), "value": s.value} for s in case.expect
                ],
            }
        ],
    }


def _observed_at(at: str, evaluation_interval: str) -> str:
    """When promtool can see a rule's output at `at`: its last evaluation at or before it. promtool evaluates every
    `evaluation_interval` and stops at the latest eval_time, so an alert checked between two evaluations is never
    checked; a recorded series or an alert's state between evaluations is the one the last evaluation left."""
    every = duration_seconds(evaluation_interval)
    return duration(duration_seconds(at) // every * every)


def _alert_test(alert: Alert, case: Case, interval: str, evaluation_interval: str, annotations: dict[str, str]) -> dict:
    expected = []
    for s in case.expect:
        labels = {**alert.all_labels(), **s.labels}
        expected.append(
            {
                "exp_labels": labels,
                "exp_annotations": {
                    k: s.annotations[k] if k in alert.lookups else render_template(v, labels)
                    for k, v in annotations.items()
                },
            }
        )
    return {
        "name": f"{alert.alert}: {case.name}",
        "interval": interval,
        "input_series": _input(case),
        "alert_rule_test": [
            {"alertname": alert.alert, "eval_time": _observed_at(case.at, evaluation_interval), "exp_alerts": expected}
        ],
    }


def test_file(
    rules: list[Record | Alert],
    rule_files: list[str],
    interval: str,
    evaluation_interval: str,
    links: LinkBases,
    group_order: Sequence[str] = (),
) -> dict:
    """One promtool test file covering every case of the given rules: input series `interval` apart (the scrape
    interval), rules evaluated every `evaluation_interval` as their groups are, the groups in `group_order` (promtool
    otherwise evaluates the groups of one instant in random order, so a rule reading a record of that instant, in
    its expression or its annotations, would read the one before at random)."""
    tests = []
    for rule in rules:
        if isinstance(rule, Record):
            tests += [_record_test(rule, case, interval, evaluation_interval) for case in rule.tests]
        else:
            annotations = rule.annotations(links)
            tests += [
                _alert_test(rule, case, interval, evaluation_interval, annotations)
                for case in rule.fires_on + rule.silent_on
            ]
    ordered = {"group_eval_order": list(group_order)} if len(group_order) > 1 else {}
    return {"rule_files": rule_files, "evaluation_interval": evaluation_interval, **ordered, "tests": tests}


def rules_by_name(groups: Sequence[Group]) -> dict[str, list[Record | Alert]]:
    """The rules of these groups by name, in file order: rules sharing a name (an alert's warning and critical
    levels) are tested together, as promtool reports every alert of a name at once."""
    by_name: dict[str, list[Record | Alert]] = defaultdict(list)
    for group in groups:
        for rule in group.rules:
            by_name[rule.record if isinstance(rule, Record) else rule.alert].append(rule)
    return dict(by_name)


def rules_read(groups: Mapping[str, Sequence[Group]], tested: list[Record | Alert]) -> list[Group]:
    """What a test of these rules loads: them and every recording rule they read, transitively, each in its own
    group (same name and interval, rules in file order) and the groups in dependency order. promtool evaluates
    every loaded rule at every step of every test, so nothing else is loaded; the rules loaded behave as in
    the full files, since everything they read is loaded with them."""
    producers: dict[str, list[Record]] = defaultdict(list)
    for group in (g for gs in groups.values() for g in gs):
        for rule in group.rules:
            if isinstance(rule, Record):
                producers[rule.record].append(rule)
    wanted = {id(rule) for rule in tested}
    todo = list(tested)
    while todo:
        for name in names_read(todo.pop()):
            for rule in producers.get(name, []):
                if id(rule) not in wanted:
                    wanted.add(id(rule))
                    todo.append(rule)
    loaded = [replace(g, rules=[r for r in g.rules if id(r) in wanted]) for gs in groups.values() for g in gs]
    return [g for layer in layers([g for g in loaded if g.rules]) for g in layer]


def files(model: Model) -> dict[str, str]:
    written = {}
    for domain, groups in model.rule_groups.items():
        for name, tested in rules_by_name(groups).items():
            stem = f"{TESTS_DIR}/{domain}/{name.replace(':', '.')}"
            loaded = [g.to_dict(model.links) for g in rules_read(model.rule_groups, tested)]
            written[f"{stem}.rules.yaml"] = yaml_text({"groups": loaded}, GENERATED)
            loading = [f"{posixpath.basename(stem)}.rules.yaml"]
            config = model.config
            order = [group["name"] for group in loaded]
            test = test_file(
                tested, loading, config["scrape_interval"], config["evaluation_interval"], model.links, order
            )
            written[f"{stem}.tests.yaml"] = yaml_text(test, GENERATED)
    return written


TARGET = Target(
    name="Prometheus rule tests",
    paths=(f"{TESTS_DIR}/",),
    files=files,
    checks=(
        Check(".rules.yaml", RULES_SCHEMA),
        Check(".tests.yaml", "schemastore/prometheus.rules.test.json", "promtool test rules"),
    ),
    diff="rule copies",
    docs="output.md#prometheus-rule-tests",
)
