"""The groups of out/prometheus/rules/ for two more rulers (docs/output.md#more-rule-targets): a Kubernetes
PrometheusRule, which the Prometheus Operator turns into rule files of the Prometheus servers selecting it, and
a Mimir / Cortex ruler namespace file as `mimirtool rules load` reads it. Both hold every group of every domain,
the same dicts as the rule files, in the same order."""

from __future__ import annotations

from typing import Any

from hpcobs.lang.render import GENERATED, load_yaml, yaml_text
from hpcobs.settings.config import Config

PROMETHEUS_RULE = "kubernetes/prometheusrule.yaml"
MIMIR_DIR = "mimir"


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


def files(config: Config, groups: list[dict]) -> dict[str, str]:
    """Both files, by path relative to out/, from the rule groups as the rule files render them."""
    return {
        PROMETHEUS_RULE: yaml_text(prometheus_rule(config, groups), GENERATED),
        mimir_path(config): yaml_text(mimir_namespace(config, groups), GENERATED),
    }


def is_target(path: str) -> bool:
    return path == PROMETHEUS_RULE or path.startswith(f"{MIMIR_DIR}/")


def groups_only(path: str, text: str) -> str | None:
    """The groups of a rule target file as a Prometheus rule file, which promtool checks; None when the file
    holds no list of groups where its format puts them (its schema check reports that)."""
    data: Any = load_yaml(text)
    holder = data.get("spec") if path == PROMETHEUS_RULE and isinstance(data, dict) else data
    groups = holder.get("groups") if isinstance(holder, dict) else None
    return yaml_text({"groups": groups}, GENERATED) if isinstance(groups, list) else None
