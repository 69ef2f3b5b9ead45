"""Alertmanager: receivers and team routes from the config, grouping and inhibitions (DESIGN.md §10)."""
from hpcobs.context import Context

# Receiver settings in the config -> Alertmanager receiver blocks. Secrets are only ever file paths.
_RECEIVER_KINDS = {
    "slack_api_url_file": ("slack_configs", {"slack_api_url_file": "api_url_file", "slack_channel": "channel"}),
    "pagerduty_routing_key_file": ("pagerduty_configs", {"pagerduty_routing_key_file": "routing_key_file"}),
    "webhook_url_file": ("webhook_configs", {"webhook_url_file": "url_file"}),
    "email_to": ("email_configs", {"email_to": "to"}),
}


def _receiver(settings: dict) -> dict:
    out = {"name": settings["name"]}
    for trigger, (block, fields) in _RECEIVER_KINDS.items():
        if trigger in settings:
            out[block] = [{target: settings[key] for key, target in fields.items() if key in settings}]
            if block == "slack_configs":
                out[block][0]["send_resolved"] = True
    return out


def config(ctx: Context) -> dict:
    am = ctx.config["alertmanager"]
    c = ctx.cluster
    routes = []
    for route in am["routes"]:
        entry = {"receiver": route["receiver"],
                 "matchers": [f'{k}="{v}"' for k, v in sorted(route["match"].items())]}
        if route.get("continue"):
            entry["continue"] = True
        routes.append(entry)
    return {
        "global": {"resolve_timeout": am["resolve_timeout"]},
        "route": {
            "receiver": am["default_receiver"],
            "group_by": [c, "alertname", "node"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "receivers": [_receiver(r) for r in am["receivers"]],
        "inhibit_rules": [
            # A GPU that fell off the bus explains every other alert about that GPU.
            {"source_matchers": ['alertname="GpuFellOffBus"'],
             "target_matchers": ['alertname!="GpuFellOffBus"'],
             "equal": [c, "node", "gpu"]},
        ],
    }
