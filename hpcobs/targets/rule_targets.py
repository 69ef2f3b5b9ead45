"""The groups of out/prometheus/rules/ for two more rulers (docs/output.md#more-rule-targets): a Kubernetes
PrometheusRule, which the Prometheus Operator turns into rule files of the Prometheus servers selecting it, and
a Mimir / Cortex ruler namespace file as `mimirtool rules load` reads it. Both hold every group of every domain,
the same dicts as the rule files, in the same order."""

from __future__ import annotations

from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.settings.config import Config
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.prometheus import RULES_SCHEMA

PROMETHEUS_RULE = "kubernetes/prometheusrule.yaml"
MIMIR_DIR = "mimir"
# The API server silently prunes fields the CRD's structural schema does not know; closed, the schema refuses them.
PROMETHEUS_RULE_SCHEMA = "prometheus-operator/prometheusrule.v1.openapi.json#closed"
# The Mimir ruler's namespace file: a Prometheus rule file naming, beside its groups, the namespace they load into.
MIMIR_SCHEMA = f"{RULES_SCHEMA}#mimir-namespace"


def mimir_path(config: Config) -> str:
    return f"{MIMIR_DIR}/{config.get('rule_targets', 'mimir_namespace')}.yaml"


def prometheus_rule(config: Config, groups: list[dict]) -> dict:
    settings = config.get("rule_targets", "prometheus_rule")
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": settings["name"], "namespace": settings["namespace"], "labels": settings["labels"]},
        "spec": {"groups": groups},
    }


def mimir_namespace(config: Config, groups: list[dict]) -> dict:
    return {"namespace": config.get("rule_targets", "mimir_namespace"), "groups": groups}


def kubernetes_files(model: Model) -> dict[str, str]:
    return {PROMETHEUS_RULE: yaml_text(prometheus_rule(model.config, model.every_group), GENERATED)}


def mimir_files(model: Model) -> dict[str, str]:
    return {mimir_path(model.config): yaml_text(mimir_namespace(model.config, model.every_group), GENERATED)}


KUBERNETES = Target(
    name="Kubernetes PrometheusRule",
    paths=(PROMETHEUS_RULE,),
    files=kubernetes_files,
    checks=(Check(schema=PROMETHEUS_RULE_SCHEMA, tool="promtool check rules"),),
    diff="files",
    docs="output.md#more-rule-targets",
    rule_groups_at=("spec", "groups"),
)
MIMIR = Target(
    name="Mimir ruler namespace",
    paths=(f"{MIMIR_DIR}/",),
    files=mimir_files,
    checks=(Check(".yaml", MIMIR_SCHEMA, "promtool check rules"),),
    diff="files",
    docs="output.md#more-rule-targets",
    rule_groups_at=("groups",),
)
