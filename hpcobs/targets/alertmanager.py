"""out/alertmanager/alertmanager.yml: receivers and team routes from the config, the grouping, and the inhibition
rules the alerts' content passes in (alerts/alertmanager.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hpcobs.lang.escape import alertmanager_matcher, go_template_text
from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.settings.config import Config
from hpcobs.settings.names import INHIBIT_ONLY_RECEIVER, Team
from hpcobs.targets.base import Check, Model, Target

PATH = "alertmanager/alertmanager.yml"
# Alerts of Team.NONE exist only to inhibit others (SlurmJobEnded, one per ended job): the first route sends them to
# a receiver with no integration, whatever routes the site writes, so none reaches the default receiver.
INHIBIT_ONLY_ROUTE = {
    "receiver": INHIBIT_ONLY_RECEIVER,
    "matchers": [alertmanager_matcher("team", "=", Team.NONE.value)],
}
# Receiver settings in the config -> Alertmanager receiver blocks. Secrets are only ever file paths.
# Fields Alertmanager expands as Go templates (channel, to; smtp_from is every email's `from`) are escaped.
_TEMPLATED = {"slack_channel", "email_to"}
_RECEIVER_KINDS = {
    "slack_api_url_file": ("slack_configs", {"slack_api_url_file": "api_url_file", "slack_channel": "channel"}),
    "pagerduty_routing_key_file": ("pagerduty_configs", {"pagerduty_routing_key_file": "routing_key_file"}),
    # Alertmanager 0.25 has no url_file: the URL must carry no credentials; they go in a file.
    "webhook_url": ("webhook_configs", {"webhook_url": "url"}),
    "email_to": ("email_configs", {"email_to": "to"}),
}


def _receiver(settings: dict) -> dict:
    out = {"name": settings["name"]}
    for trigger, (block, fields) in _RECEIVER_KINDS.items():
        if trigger in settings:
            out[block] = [
                {
                    target: go_template_text(settings[key]) if key in _TEMPLATED else settings[key]
                    for key, target in fields.items()
                    if key in settings
                }
            ]
            out[block][0]["send_resolved"] = block != "email_configs"
            if "webhook_credentials_file" in settings and block == "webhook_configs":
                out[block][0]["http_config"] = {
                    "authorization": {"credentials_file": settings["webhook_credentials_file"]}
                }
    return out


def _route(route: dict) -> dict:
    entry = {
        "receiver": route["receiver"],
        "matchers": [alertmanager_matcher(k, "=", v) for k, v in sorted(route["match"].items())],
    }
    if "group_by" in route:
        entry["group_by"] = list(route["group_by"])
    if route.get("continue"):
        entry["continue"] = True
    return entry


def document(config: Config, inhibitions: Sequence[dict[str, Any]]) -> dict:
    settings = config["alertmanager"]
    cluster = config.get("cluster", "label")
    return {
        "global": {
            "resolve_timeout": settings["resolve_timeout"],
            **(
                {
                    "smtp_smarthost": settings["smtp_smarthost"],
                    "smtp_from": go_template_text(settings["smtp_from"]),
                    "smtp_require_tls": False,
                }
                if "smtp_smarthost" in settings
                else {}
            ),
        },
        "route": {
            "receiver": settings["default_receiver"],
            "group_by": [cluster, "alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [INHIBIT_ONLY_ROUTE, *(_route(r) for r in settings["routes"])],
        },
        "receivers": [*(_receiver(r) for r in settings["receivers"]), {"name": INHIBIT_ONLY_RECEIVER}],
        "inhibit_rules": list(inhibitions),
    }


def files(model: Model) -> dict[str, str]:
    return {PATH: yaml_text(document(model.config, model.inhibitions), GENERATED)}


TARGET = Target(
    name="Alertmanager",
    paths=(PATH,),
    files=files,
    checks=(Check(schema="schemastore/prometheus-alertmanager.json", tool="amtool check-config"),),
    diff="alertmanager",
    docs="output.md#alertmanager",
)
