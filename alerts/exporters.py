"""Exporters and plumbing: scrape targets down, collectors failing, GPU exporters that answer without GPUs, and
broken job attribution (the prolog's mapping files and job-info series, docs/exporters.md).

Every other alert is blind when its exporter is: these say so instead of staying silent.
Runbooks: docs/runbooks/exporters.md, one section per alert.
"""

from dataclasses import dataclass

from hpcobs.authoring.alert_cases import standard_cases, timing
from hpcobs.authoring.context import Context, either
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Series, alert
from hpcobs.authoring.synthetic import (
    REMOTE_HOSTENGINE,
    SLURM_CONTROLLER,
    dcgm,
    gpu_utilization,
    job_info,
    raw_value,
    series,
    up_series,
)
from hpcobs.lang.promql import label_replace, one_of
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team

# The host part of a target's `instance` (host:port): a node is named by its host, whatever the exporter's port.
INSTANCE_HOST = "([^:]+)(?::[0-9]+)?"
# How long one node name may carry several scrape targets' GPUs before ExporterGpuNodeNameShared: a
# misconfiguration, steady from the exporters' start, so a short wait only rides over a target replaced in place.
NODE_NAME_SHARED_FOR = "10m"
# A GPU counts as busy when its utilisation rose above gpu_busy_ratio within this window (a
# checkpoint pauses a training job's kernels for a minute or two).
BUSY_WINDOW = "5m"

THRESHOLDS = (
    declare.duration(
        "exporter_down_for",
        "5m",
        "How long a scrape target may fail (up == 0) before Exporter*Down (a restart takes a scrape or two).",
    ),
    declare.ratio(
        "gpu_busy_ratio",
        0.1,
        "Utilisation above which a GPU counts as in use (ExporterJobMappingMissing: busy GPUs without a job label).",
    ),
    declare.duration(
        "exporter_job_mapping_for",
        "15m",
        "How long busy GPUs on a node Slurm allocates may lack the hpc_job label before ExporterJobMappingMissing.",
    ),
    declare.duration(
        "exporter_job_info_for",
        "10m",
        "How long a job seen on GPUs may lack its job-info series before ExporterJobInfoMissing.",
    ),
    declare.names(
        "exporter_node_collectors",
        ["infiniband", "filesystem", "textfile"],
        "node_exporter collectors every GPU node must run successfully (ExporterCollectorFailed): the ones hpcobs "
        "reads (IB ports, filesystems, the prolog's job-info textfiles). node_exporter reports 0 for a collector that "
        "finds nothing to read, so list only collectors that always have data on a GPU node.",
        item={
            "type": "string",
            "pattern": "^[a-z0-9_]+$",
            "x-expected": "a node_exporter collector name such as infiniband (lower case, digits, _)",
        },
        expected="a list of node_exporter collector names such as [infiniband, textfile]",
    ),
)


@dataclass(frozen=True)
class Target:
    role: str  # exporters.<role> in the config
    name: str  # CamelCase part of the alert name
    title: str  # what the summary calls it
    team: Team
    blind: str  # what goes dark while it is down (description text)
    feeds: DashboardUid  # the dashboard of what it feeds: where its down alert links if it serves the whole cluster


TARGETS = (
    Target(
        "dcgm",
        "Dcgm",
        "dcgm-exporter",
        Team.GPU_OPS,
        "the GPU health, Xid and utilisation alerts of this node",
        DashboardUid.GPU_CLUSTER,
    ),
    Target(
        "amd",
        "Amd",
        "AMD Device Metrics Exporter",
        Team.GPU_OPS,
        "the GPU health and utilisation alerts of this node",
        DashboardUid.GPU_CLUSTER,
    ),
    Target(
        "node_exporter",
        "NodeExporter",
        "node_exporter",
        Team.GPU_OPS,
        "InfiniBand, filesystem, job-info (textfile) and host metrics of this node",
        DashboardUid.GPU_CLUSTER,
    ),
    Target(
        "slurm",
        "Slurm",
        "Slurm exporter",
        Team.SLURM_ADMINS,
        "node states, queue depth and partition allocations",
        DashboardUid.SLURM_JOBS,
    ),
    # Roles that usually share another's scrape job (then that role's alert covers it): they keep their scrape job
    # watched when the role it rides with is disabled (exporters.<role>.enabled, docs/configuration.md).
    Target(
        "job_info",
        "JobInfo",
        "job-info",
        Team.SLURM_ADMINS,
        "the job attribution of this node's GPUs (job-info series)",
        DashboardUid.SLURM_JOBS,
    ),
    Target(
        "lustre",
        "Lustre",
        "Lustre exporter",
        Team.STORAGE,
        "Lustre client or server statistics of this host",
        DashboardUid.NETWORK_STORAGE,
    ),
    Target(
        "falco",
        "Falco",
        "Falco",
        Team.SECURITY,
        "Falco's runtime security detections on this node",
        DashboardUid.SECURITY,
    ),
    Target(
        "tetragon",
        "Tetragon",
        "Tetragon",
        Team.SECURITY,
        "Tetragon's policy events and enforcement on this node",
        DashboardUid.SECURITY,
    ),
    Target(
        "training",
        "Training",
        "training metrics",
        Team.ML_PLATFORM,
        "the training progress and NCCL Inspector series of the jobs on this node",
        DashboardUid.TRAINING,
    ),
    Target(
        "nccl_inspector",
        "NcclInspector",
        "NCCL Inspector",
        Team.ML_PLATFORM,
        "the NCCL Inspector series of the jobs on this node",
        DashboardUid.TRAINING,
    ),
)
# Scenarios of hpcobs.proof.simulate whose default data take a target down: exporter_down stops one
# dcgm-exporter; slurm_nodes_down powers a node off, so every per-node exporter on it stops answering.
FIRED_BY = {
    "dcgm": ("exporter_down", "slurm_nodes_down"),
    "node_exporter": ("slurm_nodes_down",),
    "lustre": ("slurm_nodes_down",),
    "falco": ("slurm_nodes_down",),
    "tetragon": ("slurm_nodes_down",),
}
# The roles whose scrape targets run on every node (or every Lustre client): when all of a node's answer no more, the
# host is down, not an exporter (ExporterNodeDown). job_info rides on node_exporter's scrape job with our prolog, and
# watches it when node_exporter is disabled (ExporterJobInfoDown).
HOST_ROLES = ("dcgm", "amd", "node_exporter", "job_info", "lustre", "falco", "tetragon")
# The roles scraped on one host serving the whole cluster (the Slurm controller): their down alert is about what they
# feed, not about that host.
CLUSTER_ROLES = ("slurm",)
# Slurm's per-node count of allocated GPUs, by exporter profile: (signal, matchers, extra labels of a test series).
SLURM_NODE_GPUS = {
    "slurm_sckyzo": (
        "node_gres_used",
        {"gres_type": '=~"gpu(:.*)?"'},
        {"gres_type": "gpu", "status": "allocated", "partition": "gpu"},
    ),
    "slurm_native": ("node_gpus_alloc", {}, {}),
}


def groups(ctx: Context) -> list[Group]:
    rules = [
        *_targets_down(ctx),
        *_node_down(ctx),
        *_textfile_scrape_error(ctx),
        *_collector_failed(ctx),
        *_slurm_collector_failed(ctx),
        *_gpu_exporter_without_gpus(ctx),
        *_gpu_node_name_shared(ctx),
        *_job_mapping_missing(ctx),
        *_job_info_missing(ctx),
    ]
    return [Group("hpcobs-exporter-alerts", domain="exporters", interval=ctx.evaluation_interval, rules=rules)]


def _up_labels(ctx: Context, role: str, host: str = "n1") -> dict[str, str]:
    return {**up_series(ctx, role, "1", host).labels, "node": host}


# An alert about one host's exporter: its link opens the node's view (Alert.view).
_host_alert = alerts_of("exporters", DashboardUid.GPU_CLUSTER)


def _node_series(ctx: Context, signal: str, values: str, **labels: str) -> Series:
    return series(ctx, "node_exporter", signal, values, node="n1", **labels)


def _targets_down(ctx: Context) -> list[Alert]:
    """One alert per enabled exporter role; roles scraped by the same job share its `up` and are not repeated
    (job_info rides on node_exporter's textfile collector, nccl_inspector on the jobs' own node_exporter, scraped
    with the training metrics)."""
    down_for = ctx.thresholds.exporter_down_for
    return [_target_down(ctx, target, down_for) for target in _watched(ctx)]


def _watched(ctx: Context) -> list[Target]:
    """The enabled targets, the first of each scrape selector (the roles riding on another's job share its `up`)."""
    first_by_selector: dict[str, Target] = {}
    for target in TARGETS:
        if ctx.sources[target.role].enabled:
            first_by_selector.setdefault(ctx.sources[target.role].selector(), target)
    return list(first_by_selector.values())


def down_alert(role: str) -> str:
    """The name of the alert on a role's scrape target that stopped answering."""
    return f"Exporter{next(target.name for target in TARGETS if target.role == role)}Down"


def _target_down(ctx: Context, target: Target, down_for: str) -> Alert:
    serves_cluster = target.role in CLUSTER_ROLES
    host = SLURM_CONTROLLER if serves_cluster else "n1"
    when = timing(ctx, down_for, 2)
    return alerts_of("exporters", target.feeds, server_host=serves_cluster)(
        down_alert(target.role),
        severity="warning",
        team=target.team,
        expr=label_replace(f"{ctx.up(target.role)} == 0", "node", "instance", INSTANCE_HOST),
        for_=down_for,
        summary=f"A {target.title} scrape target does not answer.",
        description=f"Prometheus cannot scrape {label('instance')} ({label('job')}, cluster {label(ctx.cluster)}) "
        f"for {down_for}: {target.blind} are blind. Check the exporter's service on {label('node')} "
        "and whether the host is up.",
        fired_by=FIRED_BY.get(target.role, ()),
        **standard_cases(
            when,
            fault="the target stops answering",
            fault_series=[up_series(ctx, target.role, f"1 1 0x{when.samples}", host)],
            expect=[alert(**_up_labels(ctx, target.role, host))],
            healthy="the target answers",
            healthy_series=[up_series(ctx, target.role, f"1x{when.samples}", host)],
            pending="a restart shorter than the for: duration",
        ),
    )


def _node_down(ctx: Context) -> list[Alert]:
    """Every exporter target of a node down at once: the host is down (power, kernel panic, network), one fault that
    would otherwise be one Exporter*Down per exporter, each its own group and team (alerts/alertmanager.py inhibits
    them by this one). A host with one target left is that exporter's alert alone."""
    down_for, cluster = ctx.thresholds.exporter_down_for, ctx.cluster
    roles = [target.role for target in _watched(ctx) if target.role in HOST_ROLES]
    if len(roles) < 2:
        return []
    targets = " or ".join(label_replace(ctx.up(role), "node", "instance", INSTANCE_HOST) for role in roles)
    when = timing(ctx, down_for, 2)
    n = when.samples

    def ups(values: str, *down: str, host: str = "n1") -> list[Series]:
        return [up_series(ctx, role, values if role in down else f"1x{n}", host) for role in roles]

    return [
        _host_alert(
            "ExporterNodeDown",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"max by ({cluster}, node) ({targets}) == 0 and on ({cluster}, node) "
            f"count by ({cluster}, node) ({targets}) > 1",
            for_=down_for,
            summary="No exporter of a node answers: the node is down.",
            description=f"None of the exporters of {label('node')} (cluster {label(cluster)}) has answered for "
            f"{down_for}: the host is down or unreachable (power, kernel panic, network), and every alert of the "
            "node is blind. Slurm's view: sinfo -n; then the BMC.",
            fired_by=("slurm_nodes_down",),
            **standard_cases(
                when,
                fault="every target of the node stops answering",
                fault_series=ups(f"1 1 0x{n}", *roles),
                expect=[alert(**ctx.cluster_labels, node="n1")],
                healthy="every target answers",
                healthy_series=ups(f"1x{n}"),
                pending="a reboot shorter than the for: duration",
                also_silent=[
                    when.silent(
                        f"one exporter down, the others answering ({down_alert(roles[0])}'s case)",
                        ups(f"1 1 0x{n}", roles[0]),
                    ),
                    when.silent(
                        "every exporter but one down: the host answers",
                        ups(f"1 1 0x{n}", *roles[1:]),
                    ),
                    when.silent(
                        "a host with one exporter target, down (that exporter's alert alone)",
                        [up_series(ctx, roles[0], f"1 1 0x{n}", "n2")],
                    ),
                ],
            ),
        )
    ]


def _textfile_scrape_error(ctx: Context) -> list[Alert]:
    if not ctx.sources["node_exporter"].enabled:
        return []
    when = timing(ctx, "5m", 2)
    return [
        _host_alert(
            "ExporterTextfileScrapeError",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"{ctx.select('node_exporter', ['textfile_scrape_error'])} == 1",
            for_="5m",
            summary="node_exporter cannot read a file of its textfile directory.",
            description=f"node_exporter on {label('node')} (cluster {label(ctx.cluster)}) fails to open or parse a "
            ".prom file of its textfile directory: the job-info series of our prolog may be stale or missing.",
            **standard_cases(
                when,
                fault="a malformed .prom file",
                fault_series=[_node_series(ctx, "textfile_scrape_error", f"0 0 1x{when.samples}")],
                expect=[alert(**ctx.cluster_labels, node="n1")],
                healthy="every file reads",
                healthy_series=[_node_series(ctx, "textfile_scrape_error", f"0x{when.samples}")],
                pending="an error for less than the for: duration",
            ),
        )
    ]


def _collector_failed(ctx: Context) -> list[Alert]:
    if not ctx.sources["node_exporter"].enabled or not (ctx.sources["dcgm"].enabled or ctx.sources["amd"].enabled):
        return []
    collectors = ctx.thresholds.exporter_node_collectors
    failing = ctx.select(
        "node_exporter", ["collector_success"], ("node", "collector"), op="min", where={"collector": one_of(collectors)}
    )
    when = timing(ctx, "15m", 2)
    n = when.samples
    gpu_node = [gpu_utilization(ctx, f"0.9x{n}", node="n1", gpu="0")]

    def success(values: str, collector: str = collectors[0]) -> Series:
        return _node_series(ctx, "collector_success", values, collector=collector)

    return [
        _host_alert(
            "ExporterCollectorFailed",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"({failing} == 0) and on ({ctx.cluster}, node) node:gpus:count",
            for_="15m",
            summary="A node_exporter collector that hpcobs reads fails on a GPU node.",
            description=f"node_exporter's {label('collector')} collector fails on GPU node {label('node')} (cluster "
            f"{label(ctx.cluster)}): the metrics it reads (and the alerts on them) are missing on this node.",
            **standard_cases(
                when,
                fault=f"the {collectors[0]} collector fails",
                fault_series=[*gpu_node, success(f"1 1 0x{n}")],
                expect=[alert(**ctx.cluster_labels, node="n1", collector=collectors[0])],
                healthy="every collector works",
                healthy_series=[*gpu_node, success(f"1x{n}")],
                pending="failing for less than the for: duration",
                also_silent=[
                    when.silent(
                        "a collector hpcobs does not read, with nothing to read on this node",
                        [*gpu_node, success(f"0x{n}", collector="zfs")],
                    ),
                    when.silent("a node without GPUs (login node without an HCA)", [success(f"0x{n}")]),
                ],
            ),
        )
    ]


def _slurm_collector_failed(ctx: Context) -> list[Alert]:
    slurm = ctx.sources["slurm"]
    if not slurm.enabled or "collector_success" not in slurm.exporter.signals():
        return []

    def collector(values: str) -> Series:
        return series(ctx, "slurm", "collector_success", values, node=SLURM_CONTROLLER, collector="partition")

    when = timing(ctx, "10m", 2)

    return [
        Alert(
            "ExporterSlurmCollectorFailed",
            severity="warning",
            team=Team.SLURM_ADMINS,
            expr=f"{ctx.select('slurm', ['collector_success'], ('collector',), op='min')} == 0",
            for_="10m",
            summary="A collector of the Slurm exporter fails.",
            description=f"The Slurm exporter's {label('collector')} collector fails (cluster {label(ctx.cluster)}): "
            "the Slurm command it runs (sinfo, squeue, sdiag, sshare) errors or times out, so its series "
            "and the Slurm alerts on them are missing.",
            runbook="exporters",
            dashboard=DashboardUid.SLURM_JOBS,
            **standard_cases(
                when,
                fault="sinfo fails",
                fault_series=[collector(f"1 1 0x{when.samples}")],
                expect=[alert(**ctx.cluster_labels, collector="partition")],
                healthy="every collector works",
                healthy_series=[collector(f"1x{when.samples}")],
                pending="one slow sinfo, shorter than the for: duration",
            ),
        )
    ]


def _gpu_exporter_without_gpus(ctx: Context) -> list[Alert]:
    """A GPU exporter that answers but exposes no GPU at all (driver not loaded, DCGM host engine down)."""
    roles = [role for role in ("dcgm", "amd") if ctx.sources[role].enabled]
    if not roles:
        return []
    answering = either([label_replace(f"{ctx.up(role)} == 1", "node", "instance", INSTANCE_HOST) for role in roles])
    role, when = roles[0], timing(ctx, "10m", 0)
    n = when.samples
    return [
        _host_alert(
            "ExporterGpuSeriesAbsent",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"{answering} unless on ({ctx.cluster}, node) node:gpus:count",
            for_="10m",
            summary="A GPU exporter answers but reports no GPU.",
            description=f"{label('instance')} ({label('job')}, cluster {label(ctx.cluster)}) answers its scrapes but "
            f"exposes no GPU series for {label('node')}: the GPU driver is not loaded, the DCGM host engine "
            "(or AMD's gpuagent) is down, or every GPU fell off the bus.",
            **standard_cases(
                when,
                fault="the exporter answers with its own metrics only",
                fault_series=[up_series(ctx, role, f"1x{n}")],
                expect=[alert(**_up_labels(ctx, role))],
                healthy="the exporter reports its GPUs",
                healthy_series=[
                    up_series(ctx, role, f"1x{n}"),
                    *(gpu_utilization(ctx, f"0.9x{n}", node="n1", gpu=gpu) for gpu in "01"),
                ],
                pending="GPUs missing for less than the for: duration (exporter start-up)",
                also_silent=[
                    when.silent("the exporter is down (ExporterDcgmDown's case)", [up_series(ctx, role, f"0x{n}")])
                ],
            ),
        )
    ]


def _gpu_node_name_shared(ctx: Context) -> list[Alert]:
    """Several dcgm-exporter targets name their node alike: each runs against a standalone nv-hostengine (-r
    host:port) and writes that address's host as its hostname (docs/exporters.md#the-node-name)."""
    source = ctx.sources["dcgm"]
    if not (source.enabled and source.node_from_host_label):
        return []  # a node read from instance is one per scrape target whatever the exporter's hostname says
    cluster, version = ctx.cluster, source.versions[0]
    # Each GPU once per scrape target and node name; `group` folds the copies of a GPU shared by several jobs.
    gpus = ctx.select("dcgm", source.exporter.signals_for("utilization"), ("node", "gpu", "instance"), op="group")
    when = timing(ctx, NODE_NAME_SHARED_FOR, 0)
    n = when.samples

    def gpus_of(target: str, hostname: str, count: int = 2) -> list[Series]:
        """A node's GPUs as its dcgm-exporter writes them: scraped at target:port, labelled with `hostname`."""
        host = {source.host_label(version): hostname}
        return [
            gpu_utilization(ctx, f"0.5x{n}", node=target, gpu=str(gpu), vendor="dcgm", **host) for gpu in range(count)
        ]

    remote = REMOTE_HOSTENGINE.rpartition(":")[0]
    return [
        _host_alert(
            "ExporterGpuNodeNameShared",
            severity="critical",
            team=Team.GPU_OPS,
            expr=f"count by ({cluster}, node) ({gpus}) > on ({cluster}) group_left () "
            f"max by ({cluster}) (count by ({cluster}, instance) ({gpus}))",
            for_=NODE_NAME_SHARED_FOR,
            summary="Several dcgm-exporters report the same node name: their GPUs are merged under it.",
            description=f"More GPUs report node {label('node')} (cluster {label(cluster)}) than any one "
            "dcgm-exporter target exposes: the exporters run with -r host:port against a standalone "
            "nv-hostengine and name every node after that address. Every per-node GPU view and alert merges "
            "those nodes and ExporterGpuSeriesAbsent fires on each; set exporters.dcgm.node_from: instance.",
            **standard_cases(
                when,
                fault=f"two nodes' exporters both connected to -r {REMOTE_HOSTENGINE}",
                fault_series=[*gpus_of("n1", remote), *gpus_of("n2", remote)],
                expect=[alert(**ctx.cluster_labels, node=remote)],
                healthy="each exporter names its own node",
                healthy_series=[*gpus_of("n1", "n1"), *gpus_of("n2", "n2")],
                pending="the names shared for less than the for: duration (a target replaced in place)",
                also_silent=[
                    when.silent(
                        "one node alone against its hostengine: a name of its own, nothing merged",
                        [*gpus_of("n1", remote), *gpus_of("n2", "n2")],
                    ),
                    when.silent(
                        "a node with more GPUs than another: the largest target is the yardstick",
                        [*gpus_of("n1", "n1", 4), *gpus_of("n2", "n2")],
                    ),
                ],
            ),
        )
    ]


def _busy_gpu(ctx: Context, ratio: float, samples: int, gpu: str = "0", **labels: str) -> Series:
    """A dcgm-exporter GPU of n1 at a constant utilisation (a ratio), as its first deployed version writes it."""
    version = ctx.sources["dcgm"].versions[0]
    return dcgm(
        ctx,
        "gpu_utilization",
        f"{raw_value(ctx, 'gpu_utilization', version, ratio)}x{samples}",
        node="n1",
        gpu=gpu,
        **labels,
    )


def _job_mapping_missing(ctx: Context) -> list[Alert]:
    """Job attribution broken: GPUs Slurm gave to a job carry no hpc_job (docs/exporters.md, the prolog)."""
    slurm = ctx.sources["slurm"]
    if not (slurm.enabled and ctx.sources["dcgm"].enabled and slurm.exporter.id in SLURM_NODE_GPUS):
        return []
    signal, where, test_labels = SLURM_NODE_GPUS[slurm.exporter.id]
    allocated = ctx.select("slurm", [signal], ("node",), where=where)
    mapping_for, busy, cluster = (
        ctx.thresholds.exporter_job_mapping_for,
        ctx.thresholds.gpu_busy_ratio,
        ctx.cluster,
    )
    when = timing(ctx, mapping_for, 0)
    samples = when.samples

    def slurm_gpus(count: int) -> Series:
        return series(ctx, "slurm", signal, f"{count}x{samples}", node="n1", **test_labels)

    barely_busy = 1.1 * busy  # the fault just over the busy threshold, so that the cases pin it

    return [
        _host_alert(
            "ExporterJobMappingMissing",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"count by ({cluster}, node) ((max_over_time(gpu:utilization:ratio[{BUSY_WINDOW}]) > {busy}) "
            f"unless on ({cluster}, node, gpu) gpu:job:info) and on ({cluster}, node) ({allocated} > 0)",
            for_=mapping_for,
            summary="Busy GPUs on a node Slurm has allocated carry no job label.",
            description=f"GPUs on {label('node')} (cluster {label(cluster)}) are busy and Slurm has allocated GPUs "
            "there, but dcgm-exporter labels none of them with hpc_job: the prolog is not writing the GPU "
            "mapping files (or dcgm-exporter runs without --hpc-job-mapping-dir), so per-job GPU "
            "views and job-owner alerts miss these jobs.",
            fired_by=("prolog_not_writing",),
            **standard_cases(
                when,
                fault="two GPUs just over the busy threshold without hpc_job on a node running a job",
                fault_series=[
                    _busy_gpu(ctx, barely_busy, samples, "0"),
                    _busy_gpu(ctx, barely_busy, samples, "1"),
                    slurm_gpus(2),
                ],
                expect=[alert(**ctx.cluster_labels, node="n1")],
                healthy="busy GPUs labelled with their job",
                healthy_series=[_busy_gpu(ctx, 0.9, samples, hpc_job="7"), slurm_gpus(1)],
                pending="unlabelled for less than the for: duration",
                pending_series=[_busy_gpu(ctx, 0.9, samples), slurm_gpus(1)],
                also_silent=[
                    when.silent(
                        "busy GPUs Slurm did not allocate: not a prolog problem",
                        [_busy_gpu(ctx, 0.9, samples), slurm_gpus(0)],
                    ),
                    when.silent(
                        "unlabelled GPUs just under the busy threshold",
                        [_busy_gpu(ctx, busy * 0.8, samples), slurm_gpus(1)],
                    ),
                ],
            ),
        )
    ]


def _job_info_missing(ctx: Context) -> list[Alert]:
    """Job attribution broken: a job on GPUs has no job-info series (its owner is unknown)."""
    if not (ctx.sources["job_info"].enabled and ctx.sources["dcgm"].enabled):
        return []
    info_for, cluster = ctx.thresholds.exporter_job_info_for, ctx.cluster
    when = timing(ctx, info_for, 0)
    samples = when.samples
    on_gpu = _busy_gpu(ctx, 0.9, samples, hpc_job="7")

    return [
        Alert(
            "ExporterJobInfoMissing",
            severity="warning",
            team=Team.GPU_OPS,
            expr=f"group by ({cluster}, hpc_job) (gpu:job:info) unless on ({cluster}, hpc_job) job:slurm_job_info:max",
            for_=info_for,
            summary="A job running on GPUs has no job-info series.",
            description=f"Job {label('hpc_job')} (cluster {label(cluster)}) holds GPUs but has had no job-info series "
            f"for {info_for}: its user, account and partition are unknown, so it is missing from "
            "account and partition views; check the prolog (or the job-info exporter).",
            runbook="exporters",
            dashboard=DashboardUid.GPU_CLUSTER,
            **standard_cases(
                when,
                fault="a job on a GPU without job info",
                fault_series=[on_gpu],
                expect=[alert(**ctx.cluster_labels, hpc_job="7")],
                healthy="the job has its info",
                healthy_series=[on_gpu, job_info(ctx, "7", f"1x{samples}")],
                pending="missing for less than the for: duration",
                also_silent=[
                    when.silent(
                        "the info arrives two minutes late (slow prolog)",
                        [on_gpu, job_info(ctx, "7", f"_x4 1x{samples}")],
                    )
                ],
            ),
        )
    ]
