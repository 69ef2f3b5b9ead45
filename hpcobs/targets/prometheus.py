"""out/prometheus/rules/<domain>.rules.yaml: the recording and alerting groups of each domain, as Prometheus,
Thanos Ruler and vmalert load them (`rule_files`, `-rule=`)."""

from __future__ import annotations

from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets.base import Check, Model, Target

RULES_DIR = "prometheus/rules"
RULES_SCHEMA = "schemastore/prometheus.rules.json"


def files(model: Model) -> dict[str, str]:
    return {
        f"{RULES_DIR}/{domain}.rules.yaml": yaml_text({"groups": [g.to_dict(model.links) for g in groups]}, GENERATED)
        for domain, groups in model.rule_groups.items()
    }


TARGET = Target(
    name="Prometheus rule files",
    paths=(f"{RULES_DIR}/",),
    files=files,
    checks=(Check(schema=RULES_SCHEMA, tool="promtool check rules"),),
    diff="rules",
    docs="output.md#prometheus-rule-files",
)
