"""InfiniBand per node (docs/recording-rules.md). Ports are summed per node: a fabric of 8 HCAs per node would make
per-port recorded series the largest group, and the one-node drill-down reads the raw ports instead.

Link downs in the last hour compare the counter with its value an hour ago rather than increase(): for
a counter that starts inside the window, VictoriaMetrics counts a small starting value (link_downed is
usually 1-3 since boot) as an increase, so every node_exporter restart would look like a flap for an
hour. A port seen for less than an hour, or whose counter reset, is not judged until it has an hour.

Port health reads only compute-rail ports (thresholds.ib_compute_rail_devices): node_exporter's infiniband
collector emits every port of every RDMA device with no link-layer label (docs/exporters.md), so an Ethernet
storage rail or a 200G management HCA would otherwise count as a slow compute port forever. A port that is not
ACTIVE counts only once it has had a link since boot (link_downed above zero): the unused second port of an
HCA sits DOWN from boot with a zero counter and is no fault. The rate of a port is judged only while it is
ACTIVE: a port without link reports whatever rate the driver keeps for it.

Ports whose physical link is down (physical state other than LinkUp: Polling with no signal from the peer,
Disabled) are counted apart from those not ACTIVE: a port that is physically up but not ACTIVE (INIT, ARMED) is
waiting for the subnet manager, a different fault with a different fix (alerts/network.py)."""

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Group, Record
from hpcobs.authoring.ruletest import Case, Sample, Series, sample, spread_case
from hpcobs.authoring.synthetic import series
from hpcobs.lang import promregex
from hpcobs.lang.escape import promql_string
from hpcobs.lang.promql import ABOVE_ZERO, aggregate, spread

PORT = ("node", "device", "port")
ACTIVE = 4  # node_infiniband_state_id: 4 = ACTIVE (node_exporter infiniband_linux.go)
DOWN = 1  # node_infiniband_state_id: 1 = DOWN
INIT = 2  # node_infiniband_state_id: 2 = INIT, the physical link is up, the subnet manager has not activated the port
LINK_UP = 5  # node_infiniband_physical_state_id: 5 = LinkUp (node_exporter infiniband_linux.go)
POLLING = 2  # node_infiniband_physical_state_id: 2 = Polling, no signal from the peer (cable, transceiver, peer port)
DISABLED = 3  # node_infiniband_physical_state_id: 3 = Disabled


# Per-node rates of a port counter: record, node_exporter signal, test description, expected rate on n1.
RATES = (
    ("node:ib_transmit_bytes:rate", "ib_port_xmit_bytes", "bytes per second sent over every port of the node", 150e6),
    ("node:ib_receive_bytes:rate", "ib_port_rcv_bytes", "bytes per second received", 20e6),
    ("node:ib_symbol_errors:rate", "ib_symbol_errors", "symbol errors per second; a flat counter adds nothing", 0.1),
    ("node:ib_receive_errors:rate", "ib_port_rcv_errors", "malformed packets received per second", 0.2),
    ("node:ib_transmit_discards:rate", "ib_port_xmit_discards", "packets discarded on send per second", 1),
    (
        "node:ib_transmit_wait:rate",
        "ib_port_xmit_wait",
        "ticks with data queued but no credit to send (congestion)",
        10000,
    ),
)
# Cluster sums of a per-node record: record, per-node record, test description, expected value.
CLUSTER_SUMS = (
    ("cluster:ib_transmit_bytes:rate", "node:ib_transmit_bytes:rate", "fabric-wide bytes per second sent", 150e6),
    ("cluster:ib_ports_not_active:count", "node:ib_ports_not_active:count", "ports not ACTIVE in the cluster", 2),
)
# Spreads across nodes of a per-node record (what the fleet panels draw over time): record, per-node record,
# node_exporter signal of the test's five nodes.
SPREADS = (
    ("cluster:ib_transmit_bytes_per_node:quantile", "node:ib_transmit_bytes:rate", "ib_port_xmit_bytes"),
    ("cluster:ib_receive_bytes_per_node:quantile", "node:ib_receive_bytes:rate", "ib_port_rcv_bytes"),
    ("cluster:ib_transmit_wait_per_node:quantile", "node:ib_transmit_wait:rate", "ib_port_xmit_wait"),
)


def groups(ctx: Context) -> list[Group]:
    fabric = _fabric(ctx)
    return [
        Group(
            "hpcobs-network",
            domain="network",
            interval=ctx.evaluation_interval,
            rules=[*_rates(ctx, fabric), *_port_states(ctx, fabric)],
        ),
        Group(
            "hpcobs-network-cluster",
            domain="network",
            interval=ctx.evaluation_interval,
            rules=[
                Record(
                    record,
                    aggregate("sum", (ctx.cluster,), per_node),
                    tests=[
                        Case(
                            description,
                            at=ctx.timeline.settled,
                            series=fabric,
                            expect=[sample(value, **ctx.cluster_labels)],
                        )
                    ],
                )
                for record, per_node, description, value in CLUSTER_SUMS
            ]
            + [_spread(ctx, record, per_node, signal) for record, per_node, signal in SPREADS],
        ),
    ]


def compute_rails(ctx: Context) -> dict[str, str]:
    """The `where` of Context.select keeping the ports of compute-rail devices (IbLinkFlapping selects the same)."""
    return {"device": "=~" + promql_string(ctx.thresholds.ib_compute_rail_devices)}


def _spread(ctx: Context, record: str, per_node: str, signal: str) -> Record:
    def node_counter(values: str, node: str) -> Series:
        return _port(ctx, signal, values, node=node)

    description = "least busy node, 10th percentile, median, 90th percentile and busiest node"
    return Record(
        record,
        spread((ctx.cluster,), per_node),
        tests=[spread_case(description, node_counter, 1e7, ctx.timeline, **ctx.cluster_labels)],
    )


def _port(ctx: Context, signal: str, values: str, node: str = "n1", device: str = "mlx5_0", port: str = "1") -> Series:
    return series(ctx, "node_exporter", signal, values, node=node, device=device, port=port)


def _fabric(ctx: Context) -> list[Series]:
    """Shared by every test: three HCAs on n1 (one healthy, one gone down, physically too, that still reports a rate,
    one ACTIVE but slow), a flapping port and a port left in INIT with its physical link up on n2; n3 has the ports
    node_exporter reports beside the compute rails and that are no fault: the unused second port of an HCA (DOWN
    and Disabled since boot) and, when the site names its rails, an Ethernet storage rail at 200 Gb/s."""
    nominal = ctx.thresholds.ib_port_rate_bytes_per_second
    t = ctx.timeline
    return [
        *_ports_beside_the_rails(ctx),
        _port(ctx, "ib_port_xmit_bytes", t.rising(100e6, t.span)),
        _port(ctx, "ib_port_xmit_bytes", t.rising(50e6, t.span), device="mlx5_1"),
        _port(ctx, "ib_port_rcv_bytes", t.rising(20e6, t.span)),
        _port(ctx, "ib_symbol_errors", t.rising(0.1, t.span)),
        _port(ctx, "ib_symbol_errors", t.held(7, t.span), device="mlx5_1"),
        _port(ctx, "ib_port_rcv_errors", t.rising(0.2, t.span)),
        _port(ctx, "ib_port_xmit_discards", t.rising(1, t.span)),
        _port(ctx, "ib_port_xmit_wait", t.rising(10000, t.span)),
        _port(ctx, "ib_link_downed", f"{t.held(0, '30m')} {t.held(1, '30m')} {t.held(2, '30m')}", node="n2"),
        _port(ctx, "ib_state", t.held(ACTIVE, t.span)),
        _port(ctx, "ib_physical_state", t.held(LINK_UP, t.span)),
        _port(ctx, "ib_state", t.held(1, t.span), device="mlx5_1"),
        _port(ctx, "ib_physical_state", t.held(POLLING, t.span), device="mlx5_1"),
        _port(ctx, "ib_link_downed", t.held(1, t.span), device="mlx5_1"),
        _port(ctx, "ib_state", t.held(INIT, t.span), node="n2", device="mlx5_3"),
        _port(ctx, "ib_physical_state", t.held(LINK_UP, t.span), node="n2", device="mlx5_3"),
        _port(ctx, "ib_link_downed", t.held(1, t.span), node="n2", device="mlx5_3"),
        _port(ctx, "ib_rate", t.held(nominal, t.span)),
        _port(ctx, "ib_rate", t.held(nominal // 2, t.span), device="mlx5_1"),
        _port(ctx, "ib_state", t.held(ACTIVE, t.span), device="mlx5_2"),
        _port(ctx, "ib_rate", t.held(nominal // 2, t.span), device="mlx5_2"),
    ]


def _ports_beside_the_rails(ctx: Context) -> list[Series]:
    t, nominal = ctx.timeline, ctx.thresholds.ib_port_rate_bytes_per_second
    unused = [
        _port(ctx, "ib_state", t.held(1, t.span), node="n3", port="2"),
        _port(ctx, "ib_physical_state", t.held(DISABLED, t.span), node="n3", port="2"),
        _port(ctx, "ib_link_downed", t.held(0, t.span), node="n3", port="2"),
        _port(ctx, "ib_rate", t.held(nominal // 40, t.span), node="n3", port="2"),
    ]
    storage = "mlx5_bond_0"
    if promregex.fullmatch(ctx.thresholds.ib_compute_rail_devices, storage):
        return unused
    return unused + [
        _port(ctx, "ib_state", t.held(ACTIVE, t.span), node="n3", device=storage),
        _port(ctx, "ib_rate", t.held(nominal // 2, t.span), node="n3", device=storage),
    ]


def _rates(ctx: Context, fabric: list[Series]) -> list[Record]:
    window = ctx.rate_window
    return [
        Record(
            record,
            aggregate(
                "sum",
                (ctx.cluster, "node"),
                ctx.select("node_exporter", [signal], PORT, over=lambda e: f"rate({e}[{window}])", op="sum"),
            ),
            tests=[
                Case(
                    description,
                    at=ctx.timeline.settled,
                    series=fabric,
                    expect=[sample(value, **ctx.cluster_labels, node="n1")],
                )
            ],
        )
        for record, signal, description, value in RATES
    ]


def _port_states(ctx: Context, fabric: list[Series]) -> list[Record]:
    """Ports per node that flapped, are not ACTIVE or not LinkUp, or trained below the nominal rate."""
    n1 = dict(**ctx.cluster_labels, node="n1")
    return [
        _ports_flapped(ctx, fabric),
        _linked_ports_not_in(
            ctx,
            fabric,
            "node:ib_ports_not_active:count",
            ("ib_state", ACTIVE),
            "compute-rail ports not ACTIVE that have had a link since boot, whatever their physical state; an unused "
            "port is left out",
            [sample(1, **n1), sample(1, **ctx.cluster_labels, node="n2")],
        ),
        _linked_ports_not_in(
            ctx,
            fabric,
            "node:ib_ports_link_down:count",
            ("ib_physical_state", LINK_UP),
            "compute-rail ports whose physical link is not LinkUp and that have had a link since boot; a port in INIT "
            "with its link up and an unused port are left out",
            [sample(1, **n1)],
        ),
        _ports_below_nominal(ctx, fabric),
        *_ports_not_active(ctx, fabric),
    ]


def _ports_flapped(ctx: Context, fabric: list[Series]) -> Record:
    cluster_labels, t = ctx.cluster_labels, ctx.timeline
    return Record(
        "node:ib_ports_flapped:count",
        aggregate(
            "count",
            (ctx.cluster, "node"),
            ctx.select(
                "node_exporter",
                ["ib_link_downed"],
                PORT,
                over=lambda e: f"{e} - {e} offset 1h",
                where=compute_rails(ctx),
                when=ABOVE_ZERO,
            ),
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
                series=[_port(ctx, "ib_link_downed", f"{t.absent('10m')} {t.held(5, '40m')}", node="n3")],
                expect=[],
            ),
        ],
    )


def _linked(ctx: Context, ports: str) -> str:
    """The compute-rail ports of `ports` that have had a link since boot (an unused HCA port never has)."""
    on_port = ", ".join((ctx.cluster, *PORT))
    linked = ctx.select("node_exporter", ["ib_link_downed"], PORT, where=compute_rails(ctx), when=ABOVE_ZERO)
    return f"{ports} and on ({on_port}) {linked}"


def _port_signal(ctx: Context, signal: str) -> str:
    return ctx.select("node_exporter", [signal], PORT, where=compute_rails(ctx))


def _linked_ports_not_in(
    ctx: Context, fabric: list[Series], record: str, state: tuple[str, int], case: str, expect: list[Sample]
) -> Record:
    """Compute-rail ports whose `state` signal is not the healthy value, among those that have had a link since
    boot."""
    signal, healthy = state
    return Record(
        record,
        aggregate("count", (ctx.cluster, "node"), _linked(ctx, f"{_port_signal(ctx, signal)} != {healthy}")),
        tests=[Case(case, at=ctx.timeline.settled, series=fabric, expect=expect)],
    )


def _ports_not_active(ctx: Context, fabric: list[Series]) -> list[Record]:
    """The ports node:ib_ports_not_active:count counts, one series each, valued by their logical and physical state:
    the port table of the on-call row names the port and says DOWN or INIT, Polling or LinkUp. Only ports in trouble
    have a series, a handful on a fabric of thousands."""
    n1 = dict(**ctx.cluster_labels, node="n1", device="mlx5_1", port="1")
    n2 = dict(**ctx.cluster_labels, node="n2", device="mlx5_3", port="1")
    not_active, on_port = f"{_port_signal(ctx, 'ib_state')} != {ACTIVE}", ", ".join((ctx.cluster, *PORT))
    return [
        Record(
            record,
            _linked(ctx, selection),
            tests=[Case(case, at=ctx.timeline.settled, series=fabric, expect=expect)],
        )
        for record, selection, case, expect in (
            (
                "port:ib_not_active:state",
                not_active,
                "the logical state of each port not ACTIVE that has had a link: DOWN on n1, INIT on n2; the unused "
                "port is left out",
                [sample(DOWN, **n1), sample(INIT, **n2)],
            ),
            (
                "port:ib_not_active:physical_state",
                f"{_port_signal(ctx, 'ib_physical_state')} and on ({on_port}) {not_active}",
                "the physical state of the same ports: Polling without signal on n1, LinkUp while in INIT on n2",
                [sample(POLLING, **n1), sample(LINK_UP, **n2)],
            ),
        )
    ]


def _ports_below_nominal(ctx: Context, fabric: list[Series]) -> Record:
    rails, on_port = compute_rails(ctx), ", ".join((ctx.cluster, *PORT))
    return Record(
        "node:ib_ports_below_nominal_rate:count",
        aggregate(
            "count",
            (ctx.cluster, "node"),
            f"{ctx.select('node_exporter', ['ib_rate'], PORT, where=rails)} < "
            f"{ctx.thresholds.ib_port_rate_bytes_per_second} and on ({on_port}) "
            f"{ctx.select('node_exporter', ['ib_state'], PORT, where=rails)} == {ACTIVE}",
        ),
        tests=[
            Case(
                "ACTIVE compute-rail ports that trained below the nominal rate; a storage rail is left out",
                at=ctx.timeline.settled,
                series=fabric,
                expect=[sample(1, **ctx.cluster_labels, node="n1")],
            )
        ],
    )
