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


def datasources(config: Config) -> dict:
    """The datasources; Grafana expands $ENV in provisioning values, so config strings are escaped."""
    ds = {
        kind: {key: grafana_provisioning(value) for key, value in settings.items()}
        for kind, settings in config.get("grafana", "datasources").items()
    }
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "type": "prometheus",
                "uid": ds["prometheus"]["uid"],
                "access": "proxy",
                "url": ds["prometheus"]["url"],
                "isDefault": True,
                "jsonData": {"timeInterval": config["scrape_interval"], "httpMethod": "POST"},
            },
            {"name": "Loki", "type": "loki", "uid": ds["loki"]["uid"], "access": "proxy", "url": ds["loki"]["url"]},
            {
                "name": "Tempo",
                "type": "tempo",
                "uid": ds["tempo"]["uid"],
                "access": "proxy",
                "url": ds["tempo"]["url"],
                "jsonData": {"tracesToLogsV2": {"datasourceUid": ds["loki"]["uid"]}},
            },
            {
                "name": "Alertmanager",
                "type": "alertmanager",
                "uid": ds["alertmanager"]["uid"],
                "access": "proxy",
                "url": ds["alertmanager"]["url"],
                "jsonData": {"implementation": "prometheus"},
            },
        ],
    }


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
