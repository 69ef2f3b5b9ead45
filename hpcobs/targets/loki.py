"""out/loki/rules/hpcobs.yaml: the Loki ruler's rule file, Prometheus' rule-file format holding LogQL (docs/loki.md),
with the log groups of alerts/logs.py. promtool cannot run LogQL: the file's shape is checked against the rule-file
schema, its expressions by tests/test_loki_rules.py with Grafana's LogQL grammar."""

from __future__ import annotations

from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_SCHEMA

RULES_FILE = "loki/rules/hpcobs.yaml"


def files(model: Model) -> dict[str, str]:
    groups = [log_group.group().to_dict(model.links) for log_group in model.log_groups]
    return {RULES_FILE: yaml_text({"groups": groups}, GENERATED)}


TARGET = Target(
    name="Loki rules",
    paths=(RULES_FILE,),
    files=files,
    checks=(Check(schema=RULES_SCHEMA),),
    diff="rules",
    docs="output.md#loki-rules",
)
