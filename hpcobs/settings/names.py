"""Names that alerts, dashboards and the Alertmanager configuration must spell the same way, defined once.

A typo in one of these is an AttributeError at import or a type error under mypy, not a broken link or an
alert routed nowhere.
"""

from __future__ import annotations

from enum import StrEnum


class DashboardUid(StrEnum):
    """Grafana dashboard uids: alerts link to them (dashboard_url), dashboards link to each other."""

    GPU_CLUSTER = "hpcobs-gpu-cluster"
    NETWORK_STORAGE = "hpcobs-network-storage"
    TRAINING = "hpcobs-training"
    SECURITY = "hpcobs-security"
    SLURM_JOBS = "hpcobs-slurm-jobs"
    NODE = "hpcobs-node"


class Team(StrEnum):
    """The `team` label of an alert: the Alertmanager routes of the config match on it."""

    GPU_OPS = "gpu-ops"
    NETWORK = "network"
    STORAGE = "storage"
    ML_PLATFORM = "ml-platform"
    SLURM_ADMINS = "slurm-admins"
    SECURITY = "security"
    JOB_OWNER = "job-owner"
    # Informational alerts that only exist to inhibit others (SlurmJobEnded): routed to INHIBIT_ONLY_RECEIVER.
    NONE = "none"


# The receiver, without integrations, that the generated Alertmanager config routes Team.NONE alerts to (they only
# inhibit others): reserved, a site cannot define it.
INHIBIT_ONLY_RECEIVER = "hpcobs-inhibit-only"
