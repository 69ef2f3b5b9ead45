"""GPU cluster: the fleet at a glance, then per node (DESIGN.md §11). Reads recorded series only."""
from hpcobs.context import Context
from hpcobs.dashboard import DashboardSpec, Row, Variable, stat, timeseries

UID = "hpcobs-gpu-cluster"


def dashboard(ctx: Context) -> DashboardSpec:
    c = ctx.cluster
    in_cluster = f'{c}="${c}"'
    return DashboardSpec(
        uid=UID,
        title="GPU cluster",
        description="Fleet utilisation of the GPU cluster, from hpcobs recording rules.",
        tags=("hpcobs", "gpu"),
        variables=(
            Variable(c, "Cluster", f"label_values(cluster:gpu_utilization:avg, {c})"),
            Variable("node", "Node", f"label_values(node:gpu_utilization:avg{{{in_cluster}}}, node)", multi=True, include_all=True),
        ),
        rows=(
            Row("Fleet", [
                stat("Mean GPU utilisation", f"cluster:gpu_utilization:avg{{{in_cluster}}}", unit="percentunit",
                     description="Mean of nvidia-smi utilisation over every GPU of the cluster (0-1).",
                     thresholds=((None, "red"), (0.25, "orange"), (0.6, "green"))),
                timeseries("GPU utilisation by node", f'node:gpu_utilization:avg{{{in_cluster}, node=~"$node"}}',
                           legend="{{node}}", unit="percentunit", width=18,
                           description="Mean GPU utilisation of each node's GPUs."),
            ]),
        ),
    )
