"""Exporters and plumbing (DESIGN.md §7, §10): scrape targets down, collectors failing, GPU exporters that
answer without GPUs, and broken job attribution (the prolog's mapping files and job-info series).

Every other alert is blind when its exporter is: these say so instead of staying silent.
Runbooks: docs/runbooks/exporters.md, one section per alert.
"""
from dataclasses import dataclass

from hpcobs import catalogue
from hpcobs.context import Context, either
from hpcobs.exporter_labels import EXPORTER_PORTS, SLURM_CONTROLLER
from hpcobs.promql import duration, duration_seconds, label_replace, one_of
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, Series, alert
from hpcobs.synthetic import dcgm, raw_value, series

from .gpu import gpu_series

DASHBOARD = "hpcobs-gpu-cluster"
# The host part of a target's `instance` (host:port), the node identity of DESIGN.md §6.
INSTANCE_HOST = "([^:]+)(?::[0-9]+)?"
# A GPU counts as busy when its utilisation rose above gpu_busy_ratio within this window (a
# checkpoint pauses a training job's kernels for a minute or two).
BUSY_WINDOW = "5m"


@dataclass(frozen=True)
class Target:
    role: str          # exporters.<role> in the config
    name: str          # CamelCase part of the alert name
    title: str         # what the summary calls it
    team: str
    blind: str         # what goes dark while it is down (description text)


TARGETS = (
    Target("dcgm", "Dcgm", "dcgm-exporter", "gpu-ops", "the GPU health, Xid and utilisation alerts of this node"),
    Target("amd", "Amd", "AMD Device Metrics Exporter", "gpu-ops", "the GPU health and utilisation alerts of this node"),
    Target("node_exporter", "NodeExporter", "node_exporter", "gpu-ops",
           "InfiniBand, filesystem, textfile (job-info, NCCL Inspector) and host metrics of this node"),
    Target("slurm", "Slurm", "Slurm exporter", "slurm-admins", "node states, queue depth and partition allocations"),
    Target("lustre", "Lustre", "Lustre exporter", "storage", "Lustre client or server statistics of this host"),
    Target("falco", "Falco", "Falco", "security", "Falco's runtime security detections on this node"),
    Target("tetragon", "Tetragon", "Tetragon", "security", "Tetragon's policy events and enforcement on this node"),
    Target("training", "Training", "training metrics", "ml-platform", "the training progress series of the jobs on this node"),
)
# Scenarios of hpcobs.simulate whose default data take a target down: exporter_down stops one
# dcgm-exporter; slurm_nodes_down powers a node off, so every per-node exporter on it stops answering.
FIRED_BY = {"dcgm": ("exporter_down", "slurm_nodes_down"), "node_exporter": ("slurm_nodes_down",),
            "lustre": ("slurm_nodes_down",), "falco": ("slurm_nodes_down",), "tetragon": ("slurm_nodes_down",)}
# Slurm's per-node count of allocated GPUs, by exporter profile: (signal, matchers, extra labels of a test series).
SLURM_NODE_GPUS = {
    "slurm_sckyzo": ("node_gres_used", {"gres_type": '=~"gpu(:.*)?"'},
                     {"gres_type": "gpu", "status": "allocated", "partition": "gpu"}),
    "slurm_native": ("node_gpus_alloc", {}, {}),
}



def groups(ctx: Context) -> list[Group]:
    rules = [*_targets_down(ctx), *_scrape_errors(ctx), *_gpu_exporter_without_gpus(ctx), *_attribution(ctx)]
    return [Group("hpcobs-exporter-alerts", domain="exporters", interval=ctx.scrape_interval, rules=rules)]


def up_name() -> str:
    """Prometheus writes `up` for every scrape target (1 answered, 0 failed): catalogue profile "prometheus"."""
    return catalogue.load()["prometheus"].metric("up").name


def _up(ctx: Context, role: str, values: str, host: str = "n1") -> Series:
    source = ctx.sources[role]
    port = EXPORTER_PORTS.get(source.exporter.id, EXPORTER_PORTS["node_exporter"])
    return Series(up_name(), {**source.scrape_labels(), ctx.cluster: ctx.config.get("cluster", "name"),
                              "instance": f"{host}:{port}"}, values)


def _up_labels(ctx: Context, role: str, host: str = "n1") -> dict[str, str]:
    return {**_up(ctx, role, "1", host).labels, "node": host}


def _targets_down(ctx: Context) -> list[Alert]:
    """One alert per enabled exporter role; roles scraped by the same job (job_info, nccl_inspector ride on
    node_exporter's textfile collector) share its `up` and are not repeated."""
    c = ctx.cluster
    down_for = ctx.thresholds["exporter_down_for"]
    down_s = duration_seconds(down_for)
    seen, out = set(), []
    for target in TARGETS:
        source = ctx.sources[target.role]
        selector = source.selector()
        if not source.enabled or selector in seen:
            continue
        seen.add(selector)
        host = SLURM_CONTROLLER if target.role == "slurm" else "n1"
        out.append(Alert(
            f"Exporter{target.name}Down", severity="warning", team=target.team,
            expr=label_replace(f"{up_name()}{selector} == 0", "node", "instance", INSTANCE_HOST),
            for_=down_for,
            summary=f"A {target.title} scrape target does not answer.",
            description=f"Prometheus cannot scrape {label('instance')} ({label('job')}, cluster {label(c)}) for {down_for}: "
                        f"{target.blind} are blind. Check the exporter's service on {label('node')} and whether the "
                        "host is up.",
            runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fired_by=FIRED_BY.get(target.role, ()),
            fires_on=[Case("the target stops answering", at=duration(down_s + 180),
                           series=[_up(ctx, target.role, "1 1 0x40", host)],
                           expect=[alert(**_up_labels(ctx, target.role, host))])],
            silent_on=[Case("the target answers", at=duration(down_s + 180), series=[_up(ctx, target.role, "1x40", host)]),
                       Case("a restart shorter than the for: duration", at=duration(down_s),
                            series=[_up(ctx, target.role, "1x4 0x40", host)])],
        ))
    return out


def _scrape_errors(ctx: Context) -> list[Alert]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    out = []
    has_gpus = ctx.sources["dcgm"].enabled or ctx.sources["amd"].enabled

    def node(signal, values, **labels):
        return series(ctx, "node_exporter", signal, values, node="n1", **labels)

    if ctx.sources["node_exporter"].enabled:
        out.append(
            Alert(
                "ExporterTextfileScrapeError", severity="warning", team="gpu-ops",
                expr=f'{ctx.select("node_exporter", ["textfile_scrape_error"])} == 1',
                for_="5m",
                summary="node_exporter cannot read a file of its textfile directory.",
                description=f"node_exporter on {label('node')} (cluster {label(c)}) fails to open or parse a .prom file "
                            "of its textfile directory: the job-info series of our prolog and NCCL Inspector "
                            "metrics may be stale or missing there.",
                runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
                fires_on=[Case("a malformed .prom file", at="10m", series=[node("textfile_scrape_error", "0 0 1x30")],
                               expect=[alert(**cl, node="n1")])],
                silent_on=[Case("every file reads", at="10m", series=[node("textfile_scrape_error", "0x30")]),
                           Case("an error for less than the for: duration", at="3m",
                                series=[node("textfile_scrape_error", "0 0 1x30")])],
            ))
    if ctx.sources["node_exporter"].enabled and has_gpus:
        collectors = ctx.thresholds["exporter_node_collectors"]
        failing = ctx.select("node_exporter", ["collector_success"], ("node", "collector"), op="min",
                             where={"collector": one_of(collectors)})
        gpu_node = [gpu_series(ctx, "utilization", "90x60", gpu="0")]
        out.append(
            Alert(
                "ExporterCollectorFailed", severity="warning", team="gpu-ops",
                expr=f"({failing} == 0) and on ({c}, node) node:gpus:count",
                for_="15m",
                summary="A node_exporter collector that hpcobs reads fails on a GPU node.",
                description=f"node_exporter's {label('collector')} collector fails on GPU node {label('node')} (cluster "
                            f"{label(c)}): the metrics it reads (and the alerts on them) are missing on this node.",
                runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
                fires_on=[Case(f"the {collectors[0]} collector fails", at="20m",
                               series=[*gpu_node, node("collector_success", "1 1 0x60", collector=collectors[0])],
                               expect=[alert(**cl, node="n1", collector=collectors[0])])],
                silent_on=[Case("every collector works", at="20m",
                                series=[*gpu_node, node("collector_success", "1x60", collector=collectors[0])]),
                           Case("a collector hpcobs does not read, with nothing to read on this node", at="20m",
                                series=[*gpu_node, node("collector_success", "0x60", collector="zfs")]),
                           Case("a node without GPUs (login node without an HCA)", at="20m",
                                series=[node("collector_success", "0x60", collector=collectors[0])]),
                           Case("failing for less than the for: duration", at="10m",
                                series=[*gpu_node, node("collector_success", "1 1 0x60", collector=collectors[0])])],
            ))
    slurm = ctx.sources["slurm"]
    if slurm.enabled and "collector_success" in slurm.exporter.signals():
        def collector(values):
            return series(ctx, "slurm", "collector_success", values, node=SLURM_CONTROLLER, collector="partition")

        out.append(Alert(
            "ExporterSlurmCollectorFailed", severity="warning", team="slurm-admins",
            expr=f'{ctx.select("slurm", ["collector_success"], ("collector",), op="min")} == 0',
            for_="10m",
            summary="A collector of the Slurm exporter fails.",
            description=f"The Slurm exporter's {label('collector')} collector fails (cluster {label(c)}): the Slurm "
                        "command it runs (sinfo, squeue, sdiag, sshare) errors or times out, so its series "
                        "and the Slurm alerts on them are missing.",
            runbook="exporters", dashboard="hpcobs-slurm-jobs", dashboard_vars=(c,),
            fires_on=[Case("sinfo fails", at="15m", series=[collector("1 1 0x40")],
                           expect=[alert(**cl, collector="partition")])],
            silent_on=[Case("every collector works", at="15m", series=[collector("1x40")]),
                       Case("one slow sinfo, shorter than the for: duration", at="8m", series=[collector("1 1 0x40")])],
        ))
    return out


def _gpu_exporter_without_gpus(ctx: Context) -> list[Alert]:
    """A GPU exporter that answers but exposes no GPU at all (driver not loaded, DCGM host engine down)."""
    c = ctx.cluster
    roles = [role for role in ("dcgm", "amd") if ctx.sources[role].enabled]
    if not roles:
        return []
    answering = either([label_replace(f"{up_name()}{ctx.sources[role].selector()} == 1", "node", "instance", INSTANCE_HOST)
                        for role in roles])
    role = roles[0]

    return [Alert(
        "ExporterGpuSeriesAbsent", severity="warning", team="gpu-ops",
        expr=f"{answering} unless on ({c}, node) node:gpus:count",
        for_="10m",
        summary="A GPU exporter answers but reports no GPU.",
        description=f"{label('instance')} ({label('job')}, cluster {label(c)}) answers its scrapes but exposes no GPU series "
                    f"for {label('node')}: the GPU driver is not loaded, the DCGM host engine (or AMD's gpuagent) is "
                    "down, or every GPU fell off the bus.",
        runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
        fires_on=[Case("the exporter answers with its own metrics only", at="15m", series=[_up(ctx, role, "1x40")],
                       expect=[alert(**_up_labels(ctx, role))])],
        silent_on=[Case("the exporter reports its GPUs", at="15m",
                        series=[_up(ctx, role, "1x40"), *(gpu_series(ctx, "utilization", "90x40", gpu=g) for g in "01")]),
                   Case("the exporter is down (ExporterDcgmDown's case)", at="15m", series=[_up(ctx, role, "0x40")]),
                   Case("GPUs missing for less than the for: duration (exporter start-up)", at="8m",
                        series=[_up(ctx, role, "1x40")])],
    )]


def _attribution(ctx: Context) -> list[Alert]:
    """Job attribution (DESIGN.md §7) broken: GPUs Slurm gave to a job carry no hpc_job, or a job has no info."""
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    out = []
    version = ctx.sources["dcgm"].versions[0]

    def util(ratio, samples, gpu="0", **kw):
        return dcgm(ctx, "gpu_utilization", f"{raw_value(ctx, 'gpu_utilization', version, ratio)}x{samples}",
                    node="n1", gpu=gpu, **kw)

    slurm = ctx.sources["slurm"]
    if slurm.enabled and ctx.sources["dcgm"].enabled and slurm.exporter.id in SLURM_NODE_GPUS:
        signal, where, test_labels = SLURM_NODE_GPUS[slurm.exporter.id]
        allocated = ctx.select("slurm", [signal], ("node",), where=where)
        mapping_for = th["exporter_job_mapping_for"]
        mapping_s = duration_seconds(mapping_for)
        at = duration(mapping_s + 300)
        samples = (mapping_s + 900) // 30
        busy = th["gpu_busy_ratio"]

        def slurm_gpus(count):
            return series(ctx, "slurm", signal, f"{count}x{samples}", node="n1", **test_labels)

        out.append(Alert(
            "ExporterJobMappingMissing", severity="warning", team="gpu-ops",
            expr=f"count by ({c}, node) ((max_over_time(gpu:utilization:ratio[{BUSY_WINDOW}]) > {busy}) "
                 f"unless on ({c}, node, gpu) gpu:job:info) and on ({c}, node) ({allocated} > 0)",
            for_=mapping_for,
            summary="Busy GPUs on a node Slurm has allocated carry no job label.",
            description=f"GPUs on {label('node')} (cluster {label(c)}) are busy and Slurm has allocated GPUs there, but "
                        "dcgm-exporter labels none of them with hpc_job: the prolog is not writing the GPU "
                        "mapping files (or dcgm-exporter runs without --hpc-job-mapping-dir), so per-job GPU "
                        "views and job-owner alerts miss these jobs.",
            runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fired_by=("prolog_not_writing",),
            fires_on=[Case("two busy GPUs without hpc_job on a node running a job", at=at,
                           series=[util(0.9, samples, "0"), util(0.9, samples, "1"), slurm_gpus(2)],
                           expect=[alert(**cl, node="n1")])],
            silent_on=[Case("busy GPUs labelled with their job", at=at,
                            series=[util(0.9, samples, "0", hpc_job="7"), slurm_gpus(1)]),
                       Case("busy GPUs Slurm did not allocate: not a prolog problem", at=at,
                            series=[util(0.9, samples, "0"), slurm_gpus(0)]),
                       Case("unlabelled GPUs just under the busy threshold", at=at,
                            series=[util(busy * 0.8, samples, "0"), slurm_gpus(1)]),
                       Case("unlabelled for less than the for: duration", at=duration(mapping_s - 60),
                            series=[util(0.9, samples, "0"), slurm_gpus(1)])],
        ))
    if ctx.sources["job_info"].enabled and ctx.sources["dcgm"].enabled:
        info_for = th["exporter_job_info_for"]
        info_s = duration_seconds(info_for)
        at = duration(info_s + 300)
        samples = (info_s + 900) // 30

        def info(values):
            return series(ctx, "job_info", "job_info", values, node="n1", hpc_job="7", user="alice", account="llm",
                          partition="gpu", job_name="train", qos="normal")

        out.append(Alert(
            "ExporterJobInfoMissing", severity="warning", team="gpu-ops",
            expr=f"group by ({c}, hpc_job) (gpu:job:info) unless on ({c}, hpc_job) job:slurm_job_info:max",
            for_=info_for,
            summary="A job running on GPUs has no job-info series.",
            description=f"Job {label('hpc_job')} (cluster {label(c)}) holds GPUs but has had no job-info series for "
                        f"{info_for}: its user, account and partition are unknown, so it is missing from "
                        "account and partition views; check the prolog (or the job-info exporter).",
            runbook="exporters", dashboard=DASHBOARD, dashboard_vars=(c,),
            fires_on=[Case("a job on a GPU without job info", at=at, series=[util(0.9, samples, hpc_job="7")],
                           expect=[alert(**cl, hpc_job="7")])],
            silent_on=[Case("the job has its info", at=at,
                            series=[util(0.9, samples, hpc_job="7"), info(f"1x{samples}")]),
                       Case("the info arrives two minutes late (slow prolog)", at=at,
                            series=[util(0.9, samples, hpc_job="7"), info(f"_x4 1x{samples}")]),
                       Case("missing for less than the for: duration", at=duration(info_s - 60),
                            series=[util(0.9, samples, hpc_job="7")])],
        ))
    return out
