"""InfiniBand alerts, read from the per-node records of recording_rules/network.py.

The records sum a node's ports, so these alerts name the node; docs/runbooks/network.md says how to find
the port (ibstat, perfquery). Only the flap alert reads a raw counter: it needs the number of downs per
port, which no record keeps (one counter per port, the same selection node:ib_ports_flapped:count reads).
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hpcobs.authoring.alert_cases import Timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import series
from hpcobs.lang import promregex
from hpcobs.lang.escape import promql_string
from hpcobs.lang.promql import duration, duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

PORT = ("node", "device", "port")
# Faults start at this scrape in every case.
START = 10

THRESHOLDS = (
    declare.regex(
        "ib_compute_rail_devices",
        ".*",
        "RDMA devices (RE2 regex on node_exporter's `device`, anchored at both ends) whose ports are compute rails: "
        "IbPortNotActive, IbLinkRateBelowNominal and IbLinkFlapping judge only these. node_exporter reports every "
        "port of every device with no link-layer label, so name the rails (e.g. `mlx5_[0-7]`) when a node also has "
        "an Ethernet (RoCE) storage rail or a slower management HCA.",
    ),
    declare.number(
        "ib_port_rate_bytes_per_second",
        50_000_000_000,
        "Nominal InfiniBand port rate in bytes/s as node_exporter reports it (NDR 400 Gb/s = 5e10); a port that "
        "trained slower is counted as below nominal.",
        expected=None,
        whole=True,
        minimum=1,
    ),
    declare.duration(
        "ib_port_not_active_for",
        "5m",
        "How long an IB port may stay out of ACTIVE (link retraining, a subnet manager sweep) before IbPortNotActive "
        "pages.",
    ),
    declare.duration(
        "ib_link_flap_window", "1h", "Window over which IB link downs are counted per port (IbLinkFlapping)."
    ),
    declare.number(
        "ib_link_flaps",
        2,
        "Downs of one port within ib_link_flap_window that make it flapping (IbLinkFlapping; one down is a port that "
        "went down, IbPortNotActive's case, or a peer reboot).",
        expected="a whole number of link downs, at least 1",
        whole=True,
        minimum=1,
    ),
    declare.rate(
        "ib_symbol_errors_per_second",
        0.01,
        "Symbol errors per second on a node's IB ports above which IbSymbolErrors fires (~36 an hour; a healthy link "
        "counts none).",
    ),
    declare.rate(
        "ib_receive_errors_per_second",
        0.01,
        "Malformed packets received per second on a node's IB ports above which IbReceiveErrors fires.",
    ),
    declare.rate(
        "ib_transmit_discards_per_second",
        0.1,
        "Outbound packets discarded per second on a node's IB ports above which IbTransmitDiscards fires.",
    ),
    declare.duration(
        "ib_errors_for",
        "10m",
        "How long an IB error rate must stay above its threshold before IbSymbolErrors, IbReceiveErrors or "
        "IbTransmitDiscards (a reseat or a burst is not a trend).",
    ),
    declare.rate(
        "ib_transmit_wait_ticks_per_second",
        1_000_000,
        "port_xmit_wait ticks per second summed over a node's ports above which the fabric is congested "
        "(IbCongestion; a busy healthy node counts thousands, a congested one millions).",
    ),
    declare.duration(
        "ib_congestion_for", "10m", "How long congestion must last before IbCongestion (collective bursts are normal)."
    ),
    declare.duration(
        "ib_rate_below_nominal_for",
        "10m",
        "How long a port may run below ib_port_rate_bytes_per_second before IbLinkRateBelowNominal (link training "
        "after a reset).",
    ),
)


@dataclass(frozen=True)
class _ErrorRate:
    """A per-node error counter rate above a threshold for a while: one table row per alert."""

    alert: str
    record: str  # the per-node rate record
    threshold: Callable[[Thresholds], float]
    for_: Callable[[Thresholds], str]
    signal: str  # the node_exporter counter the test series write
    summary: str
    what: str  # what the description says happens
    action: str  # what the description says to do
    fired_by: tuple[str, ...]


ERROR_RATES = (
    _ErrorRate(
        "IbSymbolErrors",
        "node:ib_symbol_errors:rate",
        lambda thresholds: thresholds.ib_symbol_errors_per_second,
        lambda thresholds: thresholds.ib_errors_for,
        "ib_symbol_errors",
        "InfiniBand symbol errors keep rising.",
        "Symbol errors (bad lanes) keep counting up",
        "a cable, transceiver or port is failing; find the port with perfquery and plan a reseat or swap.",
        ("ib_symbol_errors",),
    ),
    _ErrorRate(
        "IbReceiveErrors",
        "node:ib_receive_errors:rate",
        lambda thresholds: thresholds.ib_receive_errors_per_second,
        lambda thresholds: thresholds.ib_errors_for,
        "ib_port_rcv_errors",
        "InfiniBand ports receive malformed packets.",
        "Packets received with errors keep counting up",
        "the link corrupts packets (cable, transceiver or the peer switch port); NCCL retries slow jobs down.",
        ("ib_symbol_errors",),
    ),
    _ErrorRate(
        "IbTransmitDiscards",
        "node:ib_transmit_discards:rate",
        lambda thresholds: thresholds.ib_transmit_discards_per_second,
        lambda thresholds: thresholds.ib_errors_for,
        "ib_port_xmit_discards",
        "InfiniBand ports discard outbound packets.",
        "Outbound packets keep being discarded",
        "the fabric is congested or a path is broken; check IbCongestion and the switch with ibdiagnet.",
        ("ib_congestion",),
    ),
    _ErrorRate(
        "IbCongestion",
        "node:ib_transmit_wait:rate",
        lambda thresholds: thresholds.ib_transmit_wait_ticks_per_second,
        lambda thresholds: thresholds.ib_congestion_for,
        "ib_port_xmit_wait",
        "InfiniBand ports wait for credits to send (congestion).",
        "The HCAs have data queued but no credit to send it (port_xmit_wait)",
        "the fabric is congested; see which jobs share the switches and check adaptive routing.",
        ("ib_congestion",),
    ),
)


def groups(ctx: Context) -> list[Group]:
    rules = [
        _port_not_active(ctx),
        _link_flapping(ctx),
        *(_error_rate(ctx, row) for row in ERROR_RATES),
        _rate_below_nominal(ctx),
    ]
    return [Group("hpcobs-network-alerts", domain="network", interval=ctx.evaluation_interval, rules=rules)]


def _node_alert(ctx: Context) -> partial[Alert]:
    return alerts_of("network", DashboardUid.NETWORK_STORAGE, ctx.cluster, "node", team=Team.NETWORK)


def _port(ctx: Context, signal: str, values: str, device: str = "mlx5_0", port: str = "1") -> Series:
    return series(ctx, "node_exporter", signal, values, node="n1", device=device, port=port)


def _on_node(ctx: Context, **labels: str) -> list:
    return [alert(**ctx.cluster_labels, node="n1", **labels)]


def _where(ctx: Context) -> str:
    return f"cluster {label(ctx.cluster)}"


def _error_rate(ctx: Context, row: _ErrorRate) -> Alert:
    threshold, for_ = row.threshold(ctx.thresholds), row.for_(ctx.thresholds)
    # The first increment shows in rate() one scrape after START.
    when = timing(ctx, for_, START + 1)
    scrapes = when.hold // when.step + 30

    def per_second(rate: float) -> Series:
        """A counter flat for START scrapes, then growing by `rate` per second."""
        return _port(ctx, row.signal, f"0x{START} 0+{rate * when.step:.12g}x{scrapes}")

    return _node_alert(ctx)(
        row.alert,
        severity="warning",
        expr=f"{row.record} > {threshold}",
        for_=for_,
        summary=row.summary,
        description=f"{row.what} on {label('node')} ({_where(ctx)}) for {for_}: {row.action}",
        fired_by=row.fired_by,
        **standard_cases(
            when,
            fault=f"just over the threshold for longer than {for_}",
            fault_series=[
                per_second(1.1 * threshold),
                _port(ctx, row.signal, f"0x{START + scrapes}", device="mlx5_1"),
            ],
            expect=_on_node(ctx),
            healthy="a clean port",
            healthy_series=[_port(ctx, row.signal, f"0x{START + scrapes}")],
            pending=f"above the threshold for less than {for_}",
            pending_series=[per_second(1.1 * threshold)],
            also_silent=[when.silent("just under the threshold", [per_second(0.9 * threshold)])],
        ),
    )


def _port_not_active(ctx: Context) -> Alert:
    for_ = ctx.thresholds.ib_port_not_active_for
    when = timing(ctx, for_, START + 1, settle=5 * duration_seconds(ctx.scrape_interval))
    length = when.hold // when.step
    down, active = f"4x{START} 1x{length + 20}", f"4x{START + length + 21}"
    # link_downed counts the port's link losses since boot: one more when it goes down.
    went_down = _port(ctx, "ib_link_downed", f"0x{START} 1x{length + 20}", device="mlx5_1")
    return _node_alert(ctx)(
        "IbPortNotActive",
        severity="critical",
        expr="node:ib_ports_not_active:count > 0",
        for_=for_,
        summary="An InfiniBand port is not ACTIVE.",
        description=f"{label('node')} ({_where(ctx)}) has had an InfiniBand compute-rail port out of the ACTIVE "
        f"state for {for_}; multi-node jobs on it lose that rail. Drain the node and check the port with ibstat.",
        fired_by=("ib_port_down",),
        **standard_cases(
            when,
            fault="a port DOWN while the others are ACTIVE",
            fault_series=[_port(ctx, "ib_state", down, device="mlx5_1"), went_down, _port(ctx, "ib_state", active)],
            expect=_on_node(ctx),
            healthy="every port ACTIVE",
            healthy_series=[_port(ctx, "ib_state", active), _port(ctx, "ib_state", active, device="mlx5_1")],
            pending=f"DOWN for less than {for_}",
            pending_series=[_port(ctx, "ib_state", down, device="mlx5_1"), went_down],
            also_silent=[
                when.silent(
                    "one scrape DOWN (a flap is IbLinkFlapping's)",
                    [_port(ctx, "ib_state", f"4x{START} 1 4x{length + 19}", device="mlx5_1"), went_down],
                ),
                when.silent(
                    "an unused HCA port: DOWN since boot, never had a link",
                    [
                        _port(ctx, "ib_state", active),
                        _port(ctx, "ib_state", f"1x{length + START + 20}", port="2"),
                        _port(ctx, "ib_link_downed", f"0x{length + START + 20}", port="2"),
                    ],
                ),
            ],
        ),
    )


def _link_flapping(ctx: Context) -> Alert:
    window, flaps = ctx.thresholds.ib_link_flap_window, ctx.thresholds.ib_link_flaps
    step, window_s = duration_seconds(ctx.scrape_interval), duration_seconds(ctx.thresholds.ib_link_flap_window)
    downs = ctx.select(
        "node_exporter",
        ["ib_link_downed"],
        PORT,
        op="sum",
        over=lambda e: f"increase({e}[{window}])",
        # The compute rails, as the port-health records of recording_rules/network.py select them.
        where={"device": "=~" + promql_string(ctx.thresholds.ib_compute_rail_devices)},
    )
    within = duration(min(window_s // 2, 50 * step))

    def flapping(scrapes: int, times: int = flaps) -> Series:
        """A port going down `times` times, one scrape apart from START on, then stable for `scrapes`."""
        values = f"0x{START} " + " ".join(str(i) for i in range(1, times)) + f" {times}x{scrapes}"
        return _port(ctx, "ib_link_downed", " ".join(values.split()), device="mlx5_2")

    return _node_alert(ctx)(
        "IbLinkFlapping",
        severity="warning",
        expr=f"{downs} >= {flaps}",
        for_=None,
        no_for_reason=f"the condition is already a count over {window}; a `for` would only delay it",
        summary="An InfiniBand link keeps going down.",
        description=f"Port {label('port')} of {label('device')} on {label('node')} ({_where(ctx)}) went down at "
        f"least {flaps} times in {window}: reseat or replace the cable or transceiver, then drain the "
        "node if it continues.",
        fired_by=("ib_link_flap",),
        fires_on=[
            Case(
                f"{flaps} downs within {window}",
                at=within,
                series=[flapping(window_s // step)],
                expect=_on_node(ctx, device="mlx5_2", port="1"),
            )
        ],
        silent_on=[
            Case("no down", at=within, series=[_port(ctx, "ib_link_downed", f"3x{window_s // step}")]),
            Case(
                f"{flaps - 1} downs, one short of flapping (by default a single down: a port that went down and "
                "stayed down, or a peer reboot)",
                at=within,
                series=[flapping(window_s // step, times=flaps - 1)],
            ),
            Case(
                f"{flaps} downs, but longer ago than {window}",
                at=duration(window_s + (START + flaps + 10) * step),
                series=[flapping(2 * window_s // step)],
            ),
        ],
    )


def _rate_below_nominal(ctx: Context) -> Alert:
    nominal, for_ = ctx.thresholds.ib_port_rate_bytes_per_second, ctx.thresholds.ib_rate_below_nominal_for
    when = timing(ctx, for_, START + 1, settle=5 * duration_seconds(ctx.scrape_interval))
    length = START + when.hold // when.step + 20
    slow = _port(ctx, "ib_rate", f"{nominal}x{START} {nominal // 2}x{length - START}", device="mlx5_1")

    def active(device: str, port: str = "1") -> Series:
        return _port(ctx, "ib_state", f"4x{length}", device=device, port=port)

    unused_port = [
        _port(ctx, "ib_state", f"1x{length}", port="2"),
        _port(ctx, "ib_rate", f"{nominal // 40}x{length}", port="2"),
    ]
    return _node_alert(ctx)(
        "IbLinkRateBelowNominal",
        severity="warning",
        expr="node:ib_ports_below_nominal_rate:count > 0",
        for_=for_,
        summary="An InfiniBand port trained below its nominal rate.",
        description=f"{label('node')} ({_where(ctx)}) has an ACTIVE InfiniBand compute-rail port running below "
        f"{nominal} bytes/s for {for_}: a degraded cable or a lane down; every job crossing it runs at the slower "
        "rate.",
        **standard_cases(
            when,
            fault="a port at half its nominal rate",
            fault_series=[_port(ctx, "ib_rate", f"{nominal}x{length}"), slow, active("mlx5_0"), active("mlx5_1")],
            expect=_on_node(ctx),
            healthy="every port at the nominal rate",
            healthy_series=[
                _port(ctx, "ib_rate", f"{nominal}x{length}"),
                _port(ctx, "ib_rate", f"{nominal}x{length}", device="mlx5_1"),
                active("mlx5_0"),
                active("mlx5_1"),
            ],
            pending=f"slow for less than {for_} (retraining after a reset)",
            pending_series=[slow, active("mlx5_1")],
            also_silent=[
                when.silent(
                    "an unused port without link, whatever rate the driver reports for it",
                    [_port(ctx, "ib_rate", f"{nominal}x{length}"), active("mlx5_0"), *unused_port],
                ),
                *_storage_rail_case(ctx, when, length),
            ],
        ),
    )


def _storage_rail_case(ctx: Context, when: Timing, length: int) -> list[Case]:
    """An ACTIVE Ethernet storage rail at 200 Gb/s, when the site names its compute rails so that it is not one."""
    storage, nominal = "mlx5_bond_0", ctx.thresholds.ib_port_rate_bytes_per_second
    if promregex.fullmatch(ctx.thresholds.ib_compute_rail_devices, storage):
        return []
    return [
        when.silent(
            "an Ethernet storage rail, slower than the compute rails by design",
            [
                _port(ctx, "ib_state", f"4x{length}", device=storage),
                _port(ctx, "ib_rate", f"{nominal // 2}x{length}", device=storage),
            ],
        )
    ]
