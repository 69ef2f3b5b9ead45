"""out/grafana/dashboards/<folder>/<uid>.json: each dashboard as Grafana 11.6's model, in the directory Grafana's
file provider turns into the folder `grafana.folder` (foldersFromFilesStructure)."""

from __future__ import annotations

from hpcobs.authoring import dashboard
from hpcobs.lang.render import json_text
from hpcobs.settings.config import Config
from hpcobs.targets.base import Check, Model, Target
from hpcobs.targets.provisioning import enabled_datasources

DASHBOARDS_DIR = "grafana/dashboards"


def folder_dir(config: Config) -> str:
    """Where the dashboards of the configured folder are written: `grafana/dashboards/<folder>/`."""
    return f"{DASHBOARDS_DIR}/{config.get('grafana', 'folder')}/"


def files(model: Model) -> dict[str, str]:
    folder = folder_dir(model.config)
    datasources = {
        kind: dashboard.Provisioned(settings["name"], settings["uid"])
        for kind, settings in enabled_datasources(model.config).items()
    }
    return {f"{folder}{spec.uid}.json": json_text(dashboard.build(spec, datasources)) for spec in model.dashboards}


TARGET = Target(
    name="Grafana dashboards",
    paths=(f"{DASHBOARDS_DIR}/",),
    files=files,
    checks=(Check(schema="grafana-v11.6/dashboard.jsonschema.json#any-override-value"),),
    diff="dashboards",
    docs="output.md#grafana-dashboards",
)
