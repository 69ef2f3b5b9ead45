"""GPU health alerts (DESIGN.md §10). Xid classes: shared/reference/gpu-exporters.md §2.2."""
from hpcobs.context import Context
from hpcobs.rules import Alert, Group
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import dcgm


def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cluster = ctx.config.get("cluster", "name")
    th = ctx.thresholds
    (fell_off_bus,) = ctx.sources["dcgm"].exporter.xids("fell_off_bus")
    # The Xid value is sticky and the GPU's series may vanish right after Xid 79: look back over a
    # window so the alert survives the series going stale.
    last_xid = ctx.gpu("xid", keep=("hpc_job",), over=lambda raw: f"last_over_time({raw}[5m])")

    return [
        Group("hpcobs-gpu-alerts", domain="gpu", interval=ctx.scrape_interval, rules=[
            Alert(
                "GpuFellOffBus", severity="critical", team="gpu-ops",
                expr=f"({last_xid}) == {fell_off_bus}",
                for_=th["gpu_fell_off_bus_for"],
                summary="A GPU has fallen off the bus.",
                description="GPU {{ $labels.gpu }} on {{ $labels.node }} (cluster {{ $labels.%s }}, job {{ $labels.hpc_job }}) "
                            "reported Xid 79 and stopped answering; drain the node and reboot it." % c,
                runbook="gpu", dashboard="hpcobs-gpu-cluster", dashboard_vars=(c, "node"), fired_by=("xid79",),
                fires_on=[
                    Case("Xid 79 on a GPU running a job", at="5m",
                         series=[dcgm(ctx, "xid", "0 0 79x10", node="n1", gpu="3", hpc_job="4242", err_code="79",
                                      err_msg="GPU has fallen off the bus")],
                         expect=[alert(**{c: cluster, "node": "n1", "gpu": "3", "hpc_job": "4242"})]),
                    Case("Xid 79 then the GPU's series vanish", at="4m",
                         series=[dcgm(ctx, "xid", "79x3", node="n1", gpu="5", err_code="79",
                                      err_msg="GPU has fallen off the bus")],
                         expect=[alert(**{c: cluster, "node": "n1", "gpu": "5"})]),
                ],
                silent_on=[
                    Case("healthy GPU", at="10m", series=[dcgm(ctx, "xid", "0x20", node="n1", gpu="3")]),
                    Case("application-class Xid 13 is the job owner's problem", at="10m",
                         series=[dcgm(ctx, "xid", "13x20", node="n1", gpu="3", err_code="13",
                                      err_msg="Graphics Engine Exception")]),
                    Case("Xid 79 seen for less than the for: duration", at="1m30s",
                         series=[dcgm(ctx, "xid", "0 0 79x10", node="n1", gpu="3", err_code="79",
                                      err_msg="GPU has fallen off the bus")]),
                ],
            ),
        ]),
    ]
