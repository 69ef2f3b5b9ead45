"""Alertmanager inhibitions: which alert explains which others (hpcobs.targets.alertmanager writes them with the
receivers and routes of the config)."""

from collections.abc import Callable, Sequence

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.settings.names import Team

from .exporters import HOST_ROLES, down_alert
from .gpu import POWER_BRAKE_EVENT
from .logs import XID_DRAIN_LOGGED

# Critical GPU alerts that take the GPU out of service: its warnings (thermal, link errors) are moot until repaired.
DRAIN_CAUSES = "GpuFellOffBus|GpuXidDrainClass|GpuRowRemapFailure|GpuUncorrectableEcc"
# The GPU alerts that read what makes a GPU unhealthy in node:gpus_unhealthy:count (recording_rules/gpu.py: a
# drain-class Xid, 79 included, a failed row remap, an AMD GPU's health 0), each from the same series, so each fires
# as long as the node counts the GPU unhealthy: the page for the GPU says "drain the node" before Slurm's alert would.
UNHEALTHY_GPU_PAGES = "GpuFellOffBus|GpuXidDrainClass|GpuRowRemapFailure|GpuAmdUnhealthy"
# A GPU at its temperature limit is why the driver throttles it: its thermal violation time and thermal clock events
# are that fault's echo, one chat. The power supply's brake is another fault and still notifies.
THERMAL_CAUSE = "GpuTemperatureHigh"
# Symbol errors are the physical layer failing (bad lanes, cable, transceiver); the malformed packets the port then
# receives are their consequence, one repair (perfquery, reseat or swap).
IB_LINK_CAUSE, IB_LINK_EFFECTS = "IbSymbolErrors", "IbReceiveErrors"
# One double-bit ECC error, as the driver's Xid (48, "DBE", NVIDIA's Xid catalogue) and DCGM's memory health watch
# (DcgmHealthWatch's DCGM_FR_VOLATILE_DBE_DETECTED) report it beside the ECC counter GpuUncorrectableEcc reads.
DBE_XID = "48"
# A failed row remap, as the driver's Xid (64, "ECC page retirement or row remapping recording failure", NVIDIA's Xid
# catalogue) reports it beside the ROW_REMAP_FAILURE field GpuRowRemapFailure reads.
ROW_REMAP_XID = "64"
DBE_HEALTH = ('health_watch="MEM"', 'health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED"')
# The recovery actions DCGM's health watch also fails the DRIVER watch for, with DCGM_FR_GPU_RECOVERY_RESET, _REBOOT
# or _DRAIN_RESET (DcgmHealthWatch.cpp MonitorGpuRecoveryAction); the GpuRecovery* alert says what to do.
RECOVERY_FAILS_DRIVER = "GpuRecoveryResetRequired|GpuRecoveryRebootRequired|GpuRecoveryDrainAndReset"
RECOVERY_HEALTH = ('health_watch="DRIVER"', 'health_error_code=~"DCGM_FR_GPU_RECOVERY_.+"')
# The teams of the alerts about a job rather than the hardware or the site under it.
JOB_TEAMS = (Team.JOB_OWNER, Team.ML_PLATFORM, Team.STORAGE)
# Alerts about a job that say why it ended, not what its end leaves behind: a job killed by its own Xid still tells
# its owner why.
JOB_END_CAUSES = ("GpuXidApplicationClass",)
# Exporters running on every node, whose silence on a node leaves that node's alerts on their series without data.
NODE_EXPORTERS = ("dcgm", "amd", "node_exporter", "falco", "tetragon")
# The down alerts of the exporters on a host, which ExporterNodeDown stands for when all of them are down.
HOST_DOWN_ALERTS = "|".join(down_alert(role) for role in HOST_ROLES)


def inhibitions(ctx: Context, reading: Callable[[str], Sequence[Alert]]) -> list[dict]:
    """`reading(role)`: the built alerts that read that exporter's series only, directly or through records."""
    return [*_exporter_down(ctx, reading), *_one_gpu_fault(ctx.cluster), *_explained_by_another(ctx.cluster)]


def _exporter_down(ctx: Context, reading: Callable[[str], Sequence[Alert]]) -> list[dict]:
    cluster = ctx.cluster
    return [
        # An exporter that stopped answering on a node explains the alerts on that node that read its series only
        # (GpuSeriesMissing counts fewer GPUs), and no other: a log alert (GpuXidDrainClassLogged), another
        # exporter's (IbPortNotActive while dcgm-exporter is down) or one that another exporter can also raise
        # (SecurityCheckpointForeignRead, seen by Falco or Tetragon) is independent evidence and still pages.
        *(
            {
                "source_matchers": [f'alertname="{down_alert(role)}"'],
                "target_matchers": [f'alertname=~"{"|".join(sorted(names))}"'],
                "equal": [cluster, "node"],
            }
            for role in NODE_EXPORTERS
            if (names := {alert.alert for alert in reading(role) if "node" in alert.labels_carried()})
        ),
        # A host down is one fault: ExporterNodeDown says so once, not each exporter to its own team.
        {
            "source_matchers": ['alertname="ExporterNodeDown"'],
            "target_matchers": [f'alertname=~"{HOST_DOWN_ALERTS}"'],
            "equal": [cluster, "node"],
        },
        # A node Slurm holds out of service on purpose (drained, maintenance, reboot, powered down) is expected to
        # go quiet: sinfo shows it and its reason, so its exporters' silence notifies no one.
        {
            "source_matchers": ['alertname="SlurmNodeOutOfService"'],
            "target_matchers": [f'alertname=~"ExporterNodeDown|{HOST_DOWN_ALERTS}"'],
            "equal": [cluster, "node"],
        },
    ]


def _one_gpu_fault(cluster: str) -> list[dict]:
    """One fault of a GPU is one page: the alert that says what to do about it; its echoes wait."""
    return [
        # A GPU that fell off the bus explains every other alert about that GPU.
        {
            "source_matchers": ['alertname="GpuFellOffBus"'],
            "target_matchers": ['alertname!="GpuFellOffBus"'],
            "equal": [cluster, "node", "gpu"],
        },
        # One double-bit ECC error is one page: GpuUncorrectableEcc, whose runbook is the ECC procedure; the Xid and
        # the health watch the same error raises on the same GPU are its echoes (another Xid, or a health failure of
        # another watch, still pages).
        {
            "source_matchers": ['alertname="GpuUncorrectableEcc"'],
            "target_matchers": ['alertname="GpuXidDrainClass"', f'err_code="{DBE_XID}"'],
            "equal": [cluster, "node", "gpu"],
        },
        {
            "source_matchers": ['alertname="GpuUncorrectableEcc"'],
            "target_matchers": ['alertname="GpuHealthFail"', *DBE_HEALTH],
            "equal": [cluster, "node", "gpu"],
        },
        # The ECC counter's window ends (an hour) before the GPU is reset; the Xid and the health watch then still
        # report that error until the reset, and the Xid, which says to drain, stands for both.
        {
            "source_matchers": ['alertname="GpuXidDrainClass"', f'err_code="{DBE_XID}"'],
            "target_matchers": ['alertname="GpuHealthFail"', *DBE_HEALTH],
            "equal": [cluster, "node", "gpu"],
        },
        # One failed row remap is one page: GpuRowRemapFailure, whose runbook is the RMA; its Xid is the echo.
        {
            "source_matchers": ['alertname="GpuRowRemapFailure"'],
            "target_matchers": ['alertname="GpuXidDrainClass"', f'err_code="{ROW_REMAP_XID}"'],
            "equal": [cluster, "node", "gpu"],
        },
        # A recovery action is one page: the alert naming the action; DCGM's DRIVER health failure is its echo.
        {
            "source_matchers": [f'alertname=~"{RECOVERY_FAILS_DRIVER}"'],
            "target_matchers": ['alertname="GpuHealthFail"', *RECOVERY_HEALTH],
            "equal": [cluster, "node", "gpu"],
        },
        # A GPU that must be drained makes its warnings moot.
        {
            "source_matchers": [f'alertname=~"{DRAIN_CAUSES}"', 'severity="critical"'],
            "target_matchers": ['severity="warning"'],
            "equal": [cluster, "node", "gpu"],
        },
        # The node Slurm still schedules with that GPU is the same incident seen from Slurm: the GPU's page already says
        # to drain the node, and stays open while the node counts the GPU unhealthy (UNHEALTHY_GPU_PAGES), so
        # SlurmNodeScheduledWithUnhealthyGpu pages only when no GPU page explains it (docs/runbooks/slurm.md).
        {
            "source_matchers": [f'alertname=~"{UNHEALTHY_GPU_PAGES}"', 'severity="critical"'],
            "target_matchers": ['alertname="SlurmNodeScheduledWithUnhealthyGpu"'],
            "equal": [cluster, "node"],
        },
        # A GPU too hot throttles: the temperature is the cause to fix (cooling), the throttling its echo.
        {
            "source_matchers": [f'alertname="{THERMAL_CAUSE}"'],
            "target_matchers": ['alertname="GpuThermalViolation"'],
            "equal": [cluster, "node", "gpu"],
        },
        {
            "source_matchers": [f'alertname="{THERMAL_CAUSE}"'],
            "target_matchers": ['alertname="GpuThermalSlowdown"', f'clock_event!="{POWER_BRAKE_EVENT}"'],
            "equal": [cluster, "node", "gpu"],
        },
        # dcgm-exporter reports the drain-class Xid the kernel logs: the node already pages for its drain, and
        # the log line (read by Loki's ruler, which names the GPU by PCI address, not index) would page again.
        {
            "source_matchers": [f'alertname=~"{DRAIN_CAUSES}"', 'severity="critical"'],
            "target_matchers": [f'alertname="{XID_DRAIN_LOGGED}"'],
            "equal": [cluster, "node"],
        },
    ]


def _explained_by_another(cluster: str) -> list[dict]:
    return [
        # A job that just ended explains the alerts about the job itself (training, idle GPUs, its checkpoint), but
        # not the application Xid that ended it. Hardware alerts carry no job (alerts/gpu.py), and a security alert
        # that carries its id is never about the job's team: a GPU that failed under the job is still broken.
        {
            "source_matchers": ['alertname="SlurmJobEnded"'],
            "target_matchers": [f'team=~"{"|".join(JOB_TEAMS)}"', f'alertname!~"{"|".join(JOB_END_CAUSES)}"'],
            "equal": [cluster, "hpc_job"],
        },
        # Every dcgm-exporter naming its node after one standalone hostengine (localhost) explains why each node's
        # answering exporter seems to report no GPU of its own: one page for the cluster, not one per node.
        {
            "source_matchers": ['alertname="ExporterGpuNodeNameShared"'],
            "target_matchers": ['alertname="ExporterGpuSeriesAbsent"'],
            "equal": [cluster],
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
        # A port that is not ACTIVE, physically down or not, is below its rate and discards what it sends (IB
        # alerts are per node).
        {
            "source_matchers": ['alertname=~"IbPortLinkDown|IbPortNotActive"'],
            "target_matchers": ['alertname=~"IbLinkRateBelowNominal|IbTransmitDiscards"'],
            "equal": [cluster, "node"],
        },
        # Bad lanes corrupt what the port receives: one link fault (IB alerts are per node).
        {
            "source_matchers": [f'alertname="{IB_LINK_CAUSE}"'],
            "target_matchers": [f'alertname="{IB_LINK_EFFECTS}"'],
            "equal": [cluster, "node"],
        },
        # A job stuck writing its checkpoint makes no step: the stalled filesystem explains the hang.
        {
            "source_matchers": ['alertname="StorageCheckpointWriteStalled"'],
            "target_matchers": ['alertname="TrainingHang"'],
            "equal": [cluster, "hpc_job"],
        },
    ]
