"""Alertmanager inhibitions: which alert explains which others (hpcobs.targets.alertmanager writes them with the
receivers and routes of the config)."""

from hpcobs.authoring.context import Context

from .logs import XID_DRAIN_LOGGED

# Critical GPU alerts that take the GPU out of service: its warnings (thermal, link errors) are moot until repaired.
DRAIN_CAUSES = "GpuFellOffBus|GpuXidDrainClass|GpuRowRemapFailure|GpuUncorrectableEcc"
NODE_GONE = "ExporterNodeExporterDown|ExporterDcgmDown"


def inhibitions(ctx: Context) -> list[dict]:
    cluster = ctx.cluster
    return [
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
    ]
