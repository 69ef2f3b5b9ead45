"""InfiniBand per node (docs/recording-rules.md). Ports are summed per node: a fabric of 8 HCAs per node would make
per-port recorded series the largest group, and the one-node drill-down reads the raw ports instead.

Link downs in the last hour compare the counter with its value an hour ago rather than increase(): for
a counter that starts inside the window, VictoriaMetrics counts a small starting value (link_downed is
usually 1-3 since boot) as an increase, so every node_exporter restart would look like a flap for an
hour. A port seen for less than an hour, or whose counter reset, is not judged until it has an hour."""

from hpcobs.context import Context
from hpcobs.promql import aggregate
from hpcobs.rules import Group, Record
from hpcobs.ruletest import Case, sample
from hpcobs.synthetic import series

PORT = ("node", "device", "port")
ACTIVE = 4  # node_infiniband_state_id: 4 = ACTIVE (node_exporter infiniband_linux.go)


def groups(ctx: Context) -> list[Group]:
    cluster = ctx.cluster
    cluster_labels = ctx.cluster_labels
    window = ctx.rate_window
    nominal = ctx.thresholds.ib_port_rate_bytes_per_second

    def per_node(op: str, signal: str, over) -> str:
        return aggregate(op, (cluster, "node"), ctx.select("node_exporter", [signal], PORT, over=over, op="sum"))

    def rate(signal: str) -> str:
        return per_node("sum", signal, lambda e: f"rate({e}[{window}])")

    def port(signal, values, node="n1", device="mlx5_0"):
        return series(ctx, "node_exporter", signal, values, node=node, device=device, port="1")

    fabric = [
        port("ib_port_xmit_bytes", "0+3000000000x20"),
        port("ib_port_xmit_bytes", "0+1500000000x20", device="mlx5_1"),
        port("ib_port_rcv_bytes", "0+600000000x20"),
        port("ib_symbol_errors", "0+3x20"),
        port("ib_symbol_errors", "7x20", device="mlx5_1"),
        port("ib_port_rcv_errors", "0+6x20"),
        port("ib_port_xmit_discards", "0+30x20"),
        port("ib_port_xmit_wait", "0+300000x20"),
        port("ib_link_downed", "0x60 1x60 2x60", node="n2"),
        port("ib_state", "4x20"),
        port("ib_state", "1x20", device="mlx5_1"),
        port("ib_rate", f"{nominal}x20"),
        port("ib_rate", f"{nominal // 2}x20", device="mlx5_1"),
    ]
    n1 = dict(**cluster_labels, node="n1")

    return [
        Group(
            "hpcobs-network",
            domain="network",
            interval=ctx.scrape_interval,
            rules=[
                Record(
                    "node:ib_transmit_bytes:rate",
                    rate("ib_port_xmit_bytes"),
                    tests=[
                        Case(
                            "bytes per second sent over every port of the node",
                            at="5m",
                            series=fabric,
                            expect=[sample(150e6, **n1)],
                        )
                    ],
                ),
                Record(
                    "node:ib_receive_bytes:rate",
                    rate("ib_port_rcv_bytes"),
                    tests=[Case("bytes per second received", at="5m", series=fabric, expect=[sample(20e6, **n1)])],
                ),
                Record(
                    "node:ib_symbol_errors:rate",
                    rate("ib_symbol_errors"),
                    tests=[
                        Case(
                            "symbol errors per second; a flat counter adds nothing",
                            at="5m",
                            series=fabric,
                            expect=[sample(0.1, **n1)],
                        )
                    ],
                ),
                Record(
                    "node:ib_receive_errors:rate",
                    rate("ib_port_rcv_errors"),
                    tests=[
                        Case(
                            "malformed packets received per second", at="5m", series=fabric, expect=[sample(0.2, **n1)]
                        )
                    ],
                ),
                Record(
                    "node:ib_transmit_discards:rate",
                    rate("ib_port_xmit_discards"),
                    tests=[
                        Case("packets discarded on send per second", at="5m", series=fabric, expect=[sample(1, **n1)])
                    ],
                ),
                Record(
                    "node:ib_transmit_wait:rate",
                    rate("ib_port_xmit_wait"),
                    tests=[
                        Case(
                            "ticks with data queued but no credit to send (congestion)",
                            at="5m",
                            series=fabric,
                            expect=[sample(10000, **n1)],
                        )
                    ],
                ),
                Record(
                    "node:ib_ports_flapped:count",
                    aggregate(
                        "count",
                        (cluster, "node"),
                        ctx.select("node_exporter", ["ib_link_downed"], PORT, over=lambda e: f"{e} - {e} offset 1h")
                        + " > 0",
                    ),
                    tests=[
                        Case(
                            "ports whose link went down in the last hour",
                            at="65m",
                            series=fabric,
                            expect=[sample(1, **cluster_labels, node="n2")],
                        ),
                        Case(
                            "a port seen for less than an hour is not judged, whatever its count since boot",
                            at="50m",
                            series=[port("ib_link_downed", "_x20 5x80", node="n3")],
                            expect=[],
                        ),
                    ],
                ),
                Record(
                    "node:ib_ports_not_active:count",
                    aggregate(
                        "count", (cluster, "node"), ctx.select("node_exporter", ["ib_state"], PORT) + f" != {ACTIVE}"
                    ),
                    tests=[
                        Case(
                            "ports whose logical state is not ACTIVE", at="5m", series=fabric, expect=[sample(1, **n1)]
                        )
                    ],
                ),
                Record(
                    "node:ib_ports_below_nominal_rate:count",
                    aggregate(
                        "count", (cluster, "node"), ctx.select("node_exporter", ["ib_rate"], PORT) + f" < {nominal}"
                    ),
                    tests=[
                        Case(
                            "ports that trained below the nominal link rate",
                            at="5m",
                            series=fabric,
                            expect=[sample(1, **n1)],
                        )
                    ],
                ),
            ],
        ),
        Group(
            "hpcobs-network-cluster",
            domain="network",
            interval=ctx.scrape_interval,
            rules=[
                Record(
                    "cluster:ib_transmit_bytes:rate",
                    aggregate("sum", (cluster,), "node:ib_transmit_bytes:rate"),
                    tests=[
                        Case(
                            "fabric-wide bytes per second sent",
                            at="5m",
                            series=fabric,
                            expect=[sample(150e6, **cluster_labels)],
                        )
                    ],
                ),
                Record(
                    "cluster:ib_ports_not_active:count",
                    aggregate("sum", (cluster,), "node:ib_ports_not_active:count"),
                    tests=[
                        Case(
                            "ports not ACTIVE in the cluster",
                            at="5m",
                            series=fabric,
                            expect=[sample(1, **cluster_labels)],
                        )
                    ],
                ),
            ],
        ),
    ]
