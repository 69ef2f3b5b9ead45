"""out/grafana/provisioning/: Grafana's file provisioning, the dashboard provider and the datasources with stable
uids (mounted at /etc/grafana/provisioning/)."""

from __future__ import annotations

from hpcobs.lang.escape import grafana_provisioning
from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.settings.config import Config
from hpcobs.targets.base import Model, Target

PROVISIONING_DIR = "grafana/provisioning"
PROVIDERS_DIR = f"{PROVISIONING_DIR}/dashboards"
DATASOURCES_DIR = f"{PROVISIONING_DIR}/datasources"
DATASOURCES_FILE = f"{DATASOURCES_DIR}/hpcobs.yaml"
DASHBOARDS_MOUNT = "/var/lib/grafana/dashboards/hpcobs"


def dashboards_provider() -> dict:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "hpcobs",
                "orgId": 1,
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                # out/grafana/dashboards/<folder>/<uid>.json: the folder comes from the directory name.
                "options": {"path": DASHBOARDS_MOUNT, "foldersFromFilesStructure": True},
            }
        ],
    }


def enabled_datasources(config: Config) -> dict[str, dict]:
    """The settings of the datasources provisioned, by kind (prometheus, loki, tempo, alertmanager): those the site
    did not disable (`grafana.datasources.<kind>.enabled`)."""
    return {kind: settings for kind, settings in config.get("grafana", "datasources").items() if settings["enabled"]}


def _json_data(kind: str, config: Config, provisioned: dict[str, dict]) -> dict:
    """What Grafana needs to know of each kind: the scrape interval for Prometheus' step, the implementation of
    Alertmanager, and for Tempo the Loki datasource a trace's logs open in (none without Loki)."""
    if kind == "prometheus":
        return {"timeInterval": config["scrape_interval"], "httpMethod": "POST"}
    if kind == "tempo" and "loki" in provisioned:
        return {"tracesToLogsV2": {"datasourceUid": grafana_provisioning(provisioned["loki"]["uid"])}}
    if kind == "alertmanager":
        return {"implementation": "prometheus"}
    return {}


def datasources(config: Config) -> dict:
    """The datasources enabled; Grafana expands $ENV in provisioning values, so config strings are escaped."""
    provisioned = enabled_datasources(config)
    listed = []
    for kind, settings in provisioned.items():
        datasource = {
            "name": grafana_provisioning(settings["name"]),
            "type": kind,
            "uid": grafana_provisioning(settings["uid"]),
            "access": "proxy",
            "url": grafana_provisioning(settings["url"]),
            "isDefault": settings["is_default"],
        }
        json_data = _json_data(kind, config, provisioned)
        listed.append({**datasource, "jsonData": json_data} if json_data else datasource)
    return {"apiVersion": 1, "datasources": listed}


def files(model: Model) -> dict[str, str]:
    return {
        f"{PROVIDERS_DIR}/hpcobs.yaml": yaml_text(dashboards_provider(), GENERATED),
        DATASOURCES_FILE: yaml_text(datasources(model.config), GENERATED),
    }


TARGET = Target(
    name="Grafana provisioning",
    paths=(f"{PROVISIONING_DIR}/",),
    files=files,
    checks=(),
    diff="provisioning",
    docs="output.md#grafana-provisioning",
)
