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
    ({"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical"}, ["gpu-ops-pager", "gpu-ops"]),
    ({"alertname": "GpuThermalSlowdown", "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"]),
    ({"alertname": "GpuXidApplicationClass", "team": "job-owner", "severity": "warning", "hpc_job": "42"},
     ["job-owner"]),
    ({"alertname": "TrainingStraggler", "team": "job-owner", "severity": "warning", "hpc_job": "42"}, ["job-owner"]),
    ({"alertname": "TrainingNcclCollectiveSlow", "team": "ml-platform", "severity": "warning"}, ["ml-platform"]),
    ({"alertname": "IbPortNotActive", "team": "network", "severity": "critical"}, ["network"]),
    ({"alertname": "StorageFilesystemFillingUp", "team": "storage", "severity": "warning"}, ["storage"]),
    ({"alertname": "SecurityFalcoCritical", "team": "security", "severity": "critical"}, ["security"]),
    ({"alertname": "SlurmNodesDown", "team": "slurm-admins", "severity": "warning"}, ["slurm-admins"]),
    ({"alertname": "SlurmJobEnded", "team": "none", "severity": "info"}, ["blackhole"]),
    ({"alertname": "Unrouted", "team": "nobody", "severity": "info"}, ["default"]),
])
def test_routing_table(generated_tree, labels, receivers):
    result = tools.routes_test(generated_tree / AM, labels, receivers)
    assert result.ok, result.output


def test_job_alerts_are_grouped_by_job(generated):
    routes = {r["receiver"]: r for r in yaml.safe_load(generated[AM])["route"]["routes"]}
    assert routes["job-owner"]["group_by"] == ["cluster", "alertname", "hpc_job"]
    assert yaml.safe_load(generated[AM])["route"]["group_by"] == ["cluster", "alertname", "node"]


def test_routing_table_catches_a_wrong_expectation(generated_tree):
    result = tools.routes_test(generated_tree / AM, {"team": "gpu-ops", "severity": "critical"}, ["default"])
    assert not result.ok
