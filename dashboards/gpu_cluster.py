"""GPU cluster: the fleet at a glance, then one node's GPUs (DESIGN.md §11).

Cluster-level panels read recorded series only; the node drill-down row reads the raw per-GPU series of
ONE node ($node), through the catalogue (ctx.gpu), never typed raw names.
"""
from hpcobs.context import Context
from hpcobs.dashboard import Column, DashboardSpec, Query, Row, Variable, heatmap, stat, table, timeseries

from . import common

UID = common.GPU_CLUSTER
NVLINK_ERRORS = (("nvlink_crc_flit_errors", "CRC flit"), ("nvlink_crc_data_errors", "CRC data"),
                 ("nvlink_replay_errors", "replay"), ("nvlink_recovery_errors", "recovery"))
UTILISATION = ((None, "red"), (0.25, "orange"), (0.6, "green"))
UTILISATION_PERCENT = tuple((None if v is None else v * 100, color) for v, color in UTILISATION)
XID_FAULTS = ("xid79", "xid48", "xid13", "dbe", "row_remap_failure")


def dashboard(ctx: Context) -> DashboardSpec:
    c = ctx.cluster
    cl = common.in_cluster(ctx)
    one_node = {c: f'="${c}"', "node": '="$node"', "gpu": '=~"$gpu"'}
    owned = f'{cl}, partition=~"$partition", account=~"$account", user=~"$user", hpc_job=~"$hpc_job"'

    nvidia = ctx.sources["dcgm"].enabled

    def or_zero(condition_count: str) -> str:
        return common.or_zero(f"{condition_count}{{{cl}}}", f"node:gpus:count{{{cl}}}")

    def per_gpu(canonical: str) -> str:
        return ctx.gpu(canonical, where=one_node)

    fleet = Row("Fleet", [
        stat("GPUs", f"sum(cluster:gpus:count{{{cl}}})", unit="none", width=4,
             description="GPUs reporting to the GPU exporters."),
        stat("Allocated", f"sum(cluster:gpus_allocated:count{{{cl}}})", unit="none", width=4,
             description="GPUs held by at least one Slurm job (from the exporter's job mapping)."),
        stat("Allocated but idle", f"sum(node:gpus_allocated_idle:count{{{cl}}}) or vector(0)", unit="none", width=4,
             thresholds=((None, "green"), (1, "orange")),
             description=f"GPUs held by the same job for {ctx.thresholds['gpu_idle_window']} with every "
                         "utilisation sample at 0."),
        stat("Unhealthy", f"sum(cluster:gpus_unhealthy:count{{{cl}}}) or vector(0)", unit="none", width=4,
             thresholds=((None, "green"), (1, "red")),
             description="GPUs with a drain-class Xid or a failed row remap: drain the node."),
        stat("Mean utilisation", f"cluster:gpu_utilization:avg{{{cl}}}", unit="percentunit", width=4,
             thresholds=UTILISATION, min=0, max=1,
             description="Mean utilisation over every GPU of the cluster."),
        stat("Mean SM active", f"avg(node:gpu_sm_active:avg{{{cl}}})", unit="percentunit", width=4,
             thresholds=UTILISATION, min=0, max=1,
             description="Mean over nodes of the fraction of time SMs had a warp resident (DCGM profiling)."),
        stat("GPU power", f"sum(node:gpu_power:watts{{{cl}}})", unit="watt", width=4,
             description="Board power of every GPU, summed."),
        stat("GPU energy today", f"sum({common.over_range(ctx, f'node:gpu_power:watts{{{cl}}}')}) / 3600",
             unit="watth", width=4, time_from="now/d",
             description="GPU energy since midnight: the recorded power integrated over the rule evaluation "
                         f"interval ({ctx.scrape_interval})."),
        timeseries("GPUs allocated and idle", [
            Query(f"sum(cluster:gpus:count{{{cl}}})", "total"),
            Query(f"sum(cluster:gpus_allocated:count{{{cl}}})", "allocated"),
            Query(f"sum(node:gpus_allocated_idle:count{{{cl}}}) or vector(0)", "allocated but idle"),
        ], unit="none", width=16, description="GPUs in the fleet, held by jobs, and held but idle."),
    ])

    usage = Row("Utilisation by partition and account", [
        timeseries("Utilisation by partition", f'partition:gpu_utilization:avg{{{cl}, partition=~"$partition"}}',
                   legend="{{partition}}", unit="percentunit", min=0, max=1,
                   description="Mean utilisation of the GPUs that jobs of each partition hold."),
        timeseries("Utilisation by account", f'account:gpu_utilization:avg{{{cl}, account=~"$account"}}',
                   legend="{{account}}", unit="percentunit", min=0, max=1,
                   description="Mean utilisation of the GPUs that jobs of each account hold."),
        timeseries("GPUs allocated by account", f'account:gpus_allocated:count{{{cl}, account=~"$account"}}',
                   legend="{{account}}", unit="none", stack=True,
                   description="GPUs held by each account's jobs (jobs without Slurm info have no account)."),
        table("Top jobs by GPU-hours", [
            Column(f"topk(10, {common.over_range(ctx, f'job:gpus_allocated:count{{{owned}}}')} / 3600)",
                   "GPU-hours"),
        ], labels=["hpc_job", "user", "account", "partition"], width=12, links=(common.training_link(ctx),),
            description="GPU-hours held over the dashboard's range (recorded GPU count x evaluation interval); "
                        "click a job for its training view."),
    ])

    # dcgm-exporter fields the AMD exporter has no equivalent of: Xid, row remap, NVLink, clock events.
    xid = [
        timeseries("GPUs by last Xid", f"cluster:gpus_by_xid:count{{{cl}}}", legend="Xid {{err_code}} ({{xid_class}})",
                   unit="none", width=8, stack=True, shows=XID_FAULTS,
                   description="GPUs by the code of their last Xid error and its class (NVIDIA's Xid catalogue: "
                               "fell_off_bus and drain take the node out of service, application is the job's, "
                               "warning needs a reset soon)."),
        table("Nodes with Xid errors", [
            Column(f"node:gpus_by_xid:count{{{cl}}}", "GPUs", ((None, "orange"),), cell="color-text"),
        ], labels=["node", "err_code", "xid_class"], width=8, links=(common.node_link(ctx),), shows=XID_FAULTS,
            description="Per node, Xid code and class: GPUs whose last Xid is that code; click a node for its GPUs."),
    ] if nvidia else []
    nvidia_faults = [
        timeseries("Row remapping", f"node:gpus_row_remap:count{{{cl}}}", legend="{{node}} {{state}}", unit="none",
                   width=6, shows=("row_remap_failure", "row_remap_pending", "dbe"),
                   description="GPUs per node whose row remapping failed (no spare rows: RMA) or is pending "
                               "(a GPU reset applies it)."),
        timeseries("Throttled GPUs by node", f"node:gpus_throttled:count{{{cl}}} > 0", legend="{{node}}",
                   unit="none", width=6, shows=("thermal",),
                   description="GPUs per node in a hardware, thermal or power-brake clock slowdown."),
        timeseries("NVLink errors by node", f"node:gpu_nvlink_errors:rate{{{cl}}} > 0", legend="{{node}}",
                   unit="eps", width=6, shows=("nvlink_errors",),
                   description="NVLink CRC, replay and recovery errors per second over each node's GPUs (fields "
                               "commented out in dcgm-exporter's default CSV: docs/exporters.md)."),
    ] if nvidia else []
    throttled_column = [
        Column(or_zero("node:gpus_throttled:count"), "Throttled", ((None, "green"), (1, "orange")), cell="color-text"),
    ] if nvidia else []
    nvidia_gpu = [
        timeseries("Last Xid", per_gpu("xid"), legend="GPU {{gpu}}", unit="none", width=8, shows=XID_FAULTS,
                   description="The last Xid error code each GPU reported (0 or no series: none; dcgm-exporter "
                               "4.5.3-4.8.2 only export it after the first Xid); see NVIDIA's Xid catalogue."),
        timeseries("NVLink errors", [
            Query(ctx.select("dcgm", [signal], ("node", "gpu"), op="sum", where=one_node,
                             over=lambda e: f"rate({e}[$__rate_interval])"), f"GPU {{{{gpu}}}} {name}")
            for signal, name in NVLINK_ERRORS
        ], unit="eps", width=8, description="NVLink CRC, replay and recovery errors per second on each GPU (raw DCGM)."),
        timeseries("Throttle reasons",
                   ctx.select("dcgm", ["clock_events"], ("node", "gpu", "clock_event"), where=one_node),
                   legend="GPU {{gpu}} {{clock_event}}", unit="none", width=8,
                   description="Clock events per GPU in the exporter's window: hardware and thermal slowdowns, power "
                               "brake and power cap (raw DCGM)."),
    ] if nvidia else []

    health = Row("Health", [
        timeseries("Unhealthy GPUs by node", f"node:gpus_unhealthy:count{{{cl}}} > 0", legend="{{node}}",
                   unit="none", width=8, thresholds=((None, "green"), (1, "red")), shows=XID_FAULTS,
                   description="GPUs per node to take out of service: a drain-class Xid or a failed row remap "
                               "(NVIDIA), a health check not OK (AMD)."),
        *xid,
        timeseries("GPUs with uncorrectable ECC errors (1h)", f"node:gpus_ecc_uncorrectable:count{{{cl}}} > 0",
                   legend="{{node}}", unit="none", width=6, shows=("dbe",),
                   description="GPUs per node whose uncorrectable (double-bit) ECC counter rose in the last hour."),
        *nvidia_faults,
        heatmap("GPU utilisation by node", f"node:gpu_utilization:avg{{{cl}}}", legend="{{node}}",
                unit="percentunit", min=0, max=1,
                description="Mean GPU utilisation of each node over time (one row per node)."),
        table("Nodes", [
            Column(f"node:gpus:count{{{cl}}}", "GPUs"),
            Column(f"node:gpus_allocated:count{{{cl}}}", "Allocated"),
            Column(f"node:gpu_utilization:avg{{{cl}}} * 100", "Utilisation (%)", UTILISATION_PERCENT,
                   cell="color-text"),
            Column(f"node:gpu_power:watts{{{cl}}}", "Power (W)"),
            Column(or_zero("node:gpus_unhealthy:count"), "Unhealthy", ((None, "green"), (1, "red")),
                   cell="color-background"),
            *throttled_column,
        ], labels=["node"], links=(common.node_link(ctx),),
            description="Per node: GPUs, allocation, utilisation, power and health; click a node for its GPUs."),
    ])

    node = Row("Node $node: GPUs", [
        timeseries("GPU utilisation", f'gpu:utilization:ratio{{{cl}, node="$node", gpu=~"$gpu"}}',
                   legend="GPU {{gpu}}", unit="percentunit", width=8, min=0, max=1,
                   description="Utilisation of each GPU of the node."),
        timeseries("SM active", per_gpu("sm_active"), legend="GPU {{gpu}}", unit="percentunit", width=8,
                   min=0, max=1, description="Fraction of time each GPU's SMs had a warp resident (raw exporter series)."),
        timeseries("Memory used", per_gpu("memory_used"), legend="GPU {{gpu}}", unit="bytes", width=8,
                   description="Framebuffer memory used on each GPU (raw exporter series)."),
        timeseries("Power", per_gpu("power"), legend="GPU {{gpu}}", unit="watt", width=8,
                   description="Board power of each GPU (raw exporter series)."),
        timeseries("Temperature", per_gpu("temperature"), legend="GPU {{gpu}}", unit="celsius", width=8,
                   thresholds=((None, "green"), (85, "red")),
                   description="GPU core temperature (raw exporter series)."),
        *nvidia_gpu,
        table("Jobs on the node's GPUs", [
            Column(f'gpu:job:info{{{cl}, node="$node", gpu=~"$gpu", hpc_job=~"$hpc_job"}}', "Held"),
        ], labels=["gpu", "hpc_job"], width=24, height=6, links=(common.training_link(ctx),),
            description="Which job holds each GPU of the node; click a job for its training view."),
    ])

    return DashboardSpec(
        uid=UID,
        title=common.TITLES[UID],
        description="Fleet utilisation, health and allocation of the GPU cluster, and one node's GPUs "
                    "(hpcobs recording rules).",
        tags=("hpcobs", "gpu"),
        variables=(
            common.cluster_variable(ctx),
            *common.owner_variables(ctx, ("partition", "account", "user", "hpc_job")),
            Variable("node", "Node", f"label_values(node:gpus:count{{{cl}}}, node)",
                     description="Node of the drill-down row."),
            Variable("gpu", "GPU", f'label_values(gpu:utilization:ratio{{{cl}, node="$node"}}, gpu)',
                     multi=True, include_all=True),
        ),
        rows=(fleet, usage, health, node),
        links=common.others(UID),
        alerts=common.alerts(ctx, "Gpu", "Node", "Exporter"),
    )
