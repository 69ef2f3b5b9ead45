"""Alertmanager: receivers and team routes from the config, grouping and inhibitions."""

from hpcobs.authoring.context import Context
from hpcobs.lang.escape import alertmanager_matcher, go_template_text

from .logs import XID_DRAIN_LOGGED

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
# Critical GPU alerts that take the GPU out of service: its warnings (thermal, link errors) are moot until repaired.
DRAIN_CAUSES = "GpuFellOffBus|GpuXidDrainClass|GpuRowRemapFailure|GpuUncorrectableEcc"
NODE_GONE = "ExporterNodeExporterDown|ExporterDcgmDown"


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


def config(ctx: Context) -> dict:
    settings = ctx.config["alertmanager"]
    cluster = ctx.cluster
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
            "routes": [_route(r) for r in settings["routes"]],
        },
        "receivers": [_receiver(r) for r in settings["receivers"]],
        "inhibit_rules": [
            # A node that stopped answering explains every other alert about that node.
            {
                "source_matchers": [f'alertname=~"{NODE_GONE}"'],
                "target_matchers": [f'alertname!~"{NODE_GONE}"'],
                "equal": [cluster, "node"],
            },
            # A GPU that fell off the bus explains every other alert about that GPU.
            {
                "source_matchers": ['alertname="GpuFellOffBus"'],
                "target_matchers": ['alertname!="GpuFellOffBus"'],
                "equal": [cluster, "node", "gpu"],
            },
            # A GPU that must be drained makes its warnings moot.
            {
                "source_matchers": [f'alertname=~"{DRAIN_CAUSES}"', 'severity="critical"'],
                "target_matchers": ['severity="warning"'],
                "equal": [cluster, "node", "gpu"],
            },
            # dcgm-exporter reports the drain-class Xid the kernel logs: the node already pages for its drain, and
            # the log line (read by Loki's ruler, which names the GPU by PCI address, not index) would page again.
            {
                "source_matchers": [f'alertname=~"{DRAIN_CAUSES}"', 'severity="critical"'],
                "target_matchers": [f'alertname="{XID_DRAIN_LOGGED}"'],
                "equal": [cluster, "node"],
            },
            # A job that just ended explains its training and idle-GPU alerts.
            {
                "source_matchers": ['alertname="SlurmJobEnded"'],
                "target_matchers": ['alertname!="SlurmJobEnded"'],
                "equal": [cluster, "hpc_job"],
            },
            # A GPU that fell off the bus stops reporting, so its node reports fewer GPUs.
            {
                "source_matchers": ['alertname="GpuFellOffBus"'],
                "target_matchers": ['alertname="GpuSeriesMissing"'],
                "equal": [cluster, "node"],
            },
            # A job holding idle GPUs explains each node where it holds them.
            {
                "source_matchers": ['alertname="SlurmJobHoldingIdleGpus"'],
                "target_matchers": ['alertname="GpuAllocatedIdle"'],
                "equal": [cluster, "hpc_job"],
            },
            # A port that is not ACTIVE is below its rate and discards what it sends (IB alerts are per node).
            {
                "source_matchers": ['alertname="IbPortNotActive"'],
                "target_matchers": ['alertname=~"IbLinkRateBelowNominal|IbTransmitDiscards"'],
                "equal": [cluster, "node"],
            },
            # A job stuck writing its checkpoint makes no step: the stalled filesystem explains the hang.
            {
                "source_matchers": ['alertname="StorageCheckpointWriteStalled"'],
                "target_matchers": ['alertname="TrainingHang"'],
                "equal": [cluster, "hpc_job"],
            },
        ],
    }
