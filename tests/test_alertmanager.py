"""Alertmanager config: SchemaStore shape, amtool check-config, a routing table through amtool, and inhibitions
that name real alerts and labels they carry (tests/live/test_alertmanager_live.py proves them in Alertmanager)."""

import re

import pytest
import yaml
from hpcobs.alerts import logs, security

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import outdir, pipeline, tools, validate
from hpcobs.errors import UserError
from hpcobs.settings import config as config_module
from hpcobs.settings.names import INHIBIT_ONLY_RECEIVER, Team

AM = "alertmanager/alertmanager.yml"


def test_matches_the_schemastore_schema(generated):
    assert validate.schema_errors(AM, generated[AM]) == []


def test_amtool_check_config(generated_tree):
    result = tools.check_config(generated_tree / AM)
    assert result.ok, result.output


def test_no_inline_secrets(generated):
    config = yaml.safe_load(generated[AM])
    for receiver in config["receivers"]:
        for block in receiver.values():
            for entry in block if isinstance(block, list) else []:
                for key in entry:
                    assert not key.endswith(("api_url", "routing_key", "service_key", "auth_password")), key


@pytest.mark.parametrize(
    "labels, receivers",
    [
        ({"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical"}, ["gpu-ops-pager", "gpu-ops"]),
        ({"alertname": "GpuThermalSlowdown", "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"]),
        (
            {"alertname": "GpuXidApplicationClass", "team": "job-owner", "severity": "warning", "hpc_job": "42"},
            ["job-owner"],
        ),
        (
            {"alertname": "TrainingStraggler", "team": "job-owner", "severity": "warning", "hpc_job": "42"},
            ["job-owner"],
        ),
        ({"alertname": "TrainingNcclCollectiveSlow", "team": "ml-platform", "severity": "warning"}, ["ml-platform"]),
        ({"alertname": "IbPortNotActive", "team": "network", "severity": "critical"}, ["network"]),
        ({"alertname": "StorageFilesystemFillingUp", "team": "storage", "severity": "warning"}, ["storage"]),
        (
            {"alertname": "SecurityFalcoCritical", "team": "security", "severity": "critical"},
            ["security-pager", "security"],
        ),
        ({"alertname": "SecurityUnexpectedOutbound", "team": "security", "severity": "warning"}, ["security"]),
        ({"alertname": "SlurmNodesDown", "team": "slurm-admins", "severity": "warning"}, ["slurm-admins"]),
        ({"alertname": "SlurmJobEnded", "team": "none", "severity": "info"}, [INHIBIT_ONLY_RECEIVER]),
        ({"alertname": "Unrouted", "team": "nobody", "severity": "info"}, ["default"]),
    ],
)
def test_routing_table(generated_tree, labels, receivers):
    result = tools.routes_test(generated_tree / AM, labels, receivers)
    assert result.ok, result.output


def security_alerts(config) -> list[Alert]:
    return [rule for group in security.groups(Context(config)) for rule in group.rules if isinstance(rule, Alert)]


def test_only_critical_security_alerts_page(generated_tree, config):
    """The security team's pager gets the alerts that need a response now; every other security alert (a Notice or
    Warning Falco rule, an enforcement, a blind sensor) reaches its queue only: Alertmanager routes each as built."""
    for built in security_alerts(config):
        expected = ["security-pager", "security"] if built.severity == "critical" else ["security"]
        result = tools.routes_test(generated_tree / AM, {"alertname": built.alert, **built.all_labels()}, expected)
        assert result.ok, (built.alert, result.output)


@pytest.mark.parametrize(
    "critical_priority, severities",
    [
        # Falco's levels: the shipped outbound rule is Notice (5), the checkpoint rule Warning (4).
        (2, {"SecurityUnexpectedOutbound": "warning", "SecurityCheckpointForeignRead": "warning"}),
        (4, {"SecurityUnexpectedOutbound": "warning", "SecurityCheckpointForeignRead": "critical"}),
        (5, {"SecurityUnexpectedOutbound": "critical", "SecurityCheckpointForeignRead": "critical"}),
    ],
)
def test_a_falco_rules_alert_pages_only_at_the_priorities_that_page(tmp_path, critical_priority, severities):
    site = tmp_path / "site.yaml"
    site.write_text(f"thresholds: {{security_falco_critical_priority: {critical_priority}}}\n")
    built = {rule.alert: rule.severity for rule in security_alerts(config_module.load(site))}
    assert {name: built[name] for name in severities} == severities


def test_job_alerts_are_grouped_by_job(generated):
    routes = {r["receiver"]: r for r in yaml.safe_load(generated[AM])["route"]["routes"]}
    assert routes["job-owner"]["group_by"] == ["cluster", "alertname", "hpc_job"]
    assert yaml.safe_load(generated[AM])["route"]["group_by"] == ["cluster", "alertname", "node"]


def test_alerts_that_only_inhibit_never_notify_whatever_routes_the_site_writes(tmp_path):
    """A site routing each team and nothing else (no catch for SlurmJobEnded) still gets no notification per ended
    job: the build's own first route takes every team="none" alert to a receiver without integrations."""
    site = tmp_path / "site.yaml"
    teams = [team.value for team in Team if team is not Team.NONE]
    site.write_text(
        yaml.safe_dump(
            {
                "alertmanager": {
                    "default_receiver": "default",
                    "receivers": [{"name": "default", "email_to": "ops@example.org"}],
                    "routes": [{"receiver": "default", "match": {"team": team}} for team in teams],
                }
            }
        )
    )
    files = pipeline.generate(config_module.load(site))
    outdir.write_tree(tmp_path / "out", files)
    am = tmp_path / "out" / AM
    ended = {"alertname": "SlurmJobEnded", "team": Team.NONE.value, "severity": "info", "hpc_job": "42"}
    assert tools.routes_test(am, ended, [INHIBIT_ONLY_RECEIVER]).ok
    receiver = next(r for r in yaml.safe_load(files[AM])["receivers"] if r["name"] == INHIBIT_ONLY_RECEIVER)
    assert receiver == {"name": INHIBIT_ONLY_RECEIVER}


def test_a_site_cannot_define_the_inhibit_only_receiver(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(f"alertmanager:\n  receivers: [{{name: default}}, {{name: {INHIBIT_ONLY_RECEIVER}}}]\n")
    with pytest.raises(UserError, match="reserved"):
        pipeline.generate(config_module.load(site))


def test_routing_table_catches_a_wrong_expectation(generated_tree):
    result = tools.routes_test(generated_tree / AM, {"team": "gpu-ops", "severity": "critical"}, ["default"])
    assert not result.ok


def alert_labels(generated, config) -> dict[str, set[str]]:
    """Alert name -> the label names it carries in every firing case of the generated promtool tests, and of the
    Loki alerts' cases on real log lines (their rule and case labels)."""
    carried: dict[str, set[str]] = {}

    def carries(name: str, labels: set[str]) -> None:
        carried[name] = carried.get(name, labels) & labels

    for path, text in generated.items():
        if path.startswith("prometheus/tests/") and path.endswith(".tests.yaml"):
            for test in yaml.safe_load(text)["tests"]:
                for case in test.get("alert_rule_test", []):
                    for fired in case["exp_alerts"]:
                        carries(case["alertname"], set(fired["exp_labels"]))
    for group in logs.loki_groups(Context(config)):
        for log_rule in group.rules:
            if isinstance(log_rule.rule, Alert):
                fixed = {"severity", "team", *log_rule.rule.labels}
                for case in log_rule.rule.fires_on:
                    for fired in case.expect:
                        carries(log_rule.rule.alert, fixed | set(fired.labels))
    return carried


def alert_names(matchers: list[str]) -> tuple[list[str], bool]:
    """The alert names the alertname matcher of `matchers` mentions, and whether it selects them (= or =~)."""
    for matcher in matchers:
        parsed = re.fullmatch(r'(\w+)(=~|!~|!=|=)"(.*)"', matcher)
        assert parsed is not None, matcher
        name, op, value = parsed.groups()
        if name == "alertname":
            return value.split("|"), op in ("=", "=~")
    return [], False


def test_inhibitions_name_real_alerts_that_carry_the_equal_labels(generated, config):
    """A renamed alert never matches; an `equal` label an alert lacks never matches either, or, absent from both
    sides (Alertmanager then counts it as equal), claims a scope the rule does not have."""
    carried = alert_labels(generated, config)
    for rule in yaml.safe_load(generated[AM])["inhibit_rules"]:
        sources, _ = alert_names(rule["source_matchers"])
        targets, selected = alert_names(rule["target_matchers"])
        for name in sources + targets:
            assert name in carried, f"{name} in {rule} is not a generated alert"
        for name in sources + (targets if selected else []):
            assert set(rule["equal"]) <= carried[name], f"{name} lacks {set(rule['equal']) - carried[name]} of {rule}"
