"""Alertmanager config: SchemaStore shape, amtool check-config, and a routing table through amtool."""
import pytest
import yaml

from hpcobs import tools, validate

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


@pytest.mark.parametrize("labels, receivers", [
    ({"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical"}, ["gpu-ops-pager"]),
    ({"alertname": "GpuSomething", "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"]),
    ({"alertname": "Unrouted", "team": "nobody", "severity": "info"}, ["default"]),
])
def test_routing_table(generated_tree, labels, receivers):
    result = tools.routes_test(generated_tree / AM, labels, receivers)
    assert result.ok, result.output


def test_routing_table_catches_a_wrong_expectation(generated_tree):
    result = tools.routes_test(generated_tree / AM, {"team": "gpu-ops", "severity": "critical"}, ["default"])
    assert not result.ok
