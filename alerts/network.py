"""InfiniBand alerts, read from the per-node records of recording_rules/network.py.

The records sum a node's ports, so these alerts name the node; docs/runbooks/network.md says how to find
the port (ibstat, perfquery). The link event alerts (IbLinkFlapping, IbLinkErrorRecovery, IbLinkIntegrityErrors)
read a raw counter: they need the number of events per port, which no record keeps (one counter per compute-rail
port, the selection node:ib_ports_flapped:count reads).

A port out of service is one page, for its cause: IbPortLinkDown when its physical link is down (cable,
transceiver, the switch port: hands in the data centre), IbPortNotActive when the link is up but the port was
never made ACTIVE (INIT or ARMED: the subnet manager's job). The logical state of a port whose physical link is
down is DOWN too, so IbPortNotActive reads the ports not ACTIVE whose physical link is up, port by port (raw: a
comparison of the two per-node counts would go false for an evaluation whenever they are recorded a scrape
apart, and restart its `for`). A port with its link up is cabled and in use, so no "linked since boot" test is
needed there: a rail port left in INIT since boot (no subnet manager then) pages too.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hpcobs.recording_rules.network import ACTIVE, DISABLED, DOWN, INIT, LINK_UP, POLLING, compute_rails

from hpcobs.authoring.alert_cases import Timing, standard_cases, timing
from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert, Group, alerts_of, label
from hpcobs.authoring.ruletest import Case, Series, alert
from hpcobs.authoring.synthetic import series
from hpcobs.lang import promregex
from hpcobs.lang.promql import duration, duration_seconds
from hpcobs.settings import declare
from hpcobs.settings.names import DashboardUid, Team
from hpcobs.settings.thresholds import Thresholds

PORT = ("node", "device", "port")
# Faults start at this scrape in every case.
START = 10
# (logical, physical) states of a port as node_exporter writes them (state_id, physical_state_id).
UP = (ACTIVE, LINK_UP)
NOT_ACTIVATED = (INIT, LINK_UP)  # the link is up, the subnet manager has not activated the port
NO_SIGNAL = (DOWN, POLLING)  # a pulled cable, a dead transceiver or a peer port down
UNUSED = (DOWN, DISABLED)
STORAGE_RAIL = "mlx5_bond_0"  # a RoCE storage rail as node_exporter names it

THRESHOLDS = (
    declare.regex(
        "ib_compute_rail_devices",
        ".*",
        "RDMA devices (RE2 regex on node_exporter's `device`, anchored at both ends) whose ports are compute rails: "
        "the port state, rate and link event alerts (IbPortNotActive, IbPortLinkDown, IbLinkRateBelowNominal, "
        "IbLinkFlapping, IbLinkErrorRecovery, IbLinkIntegrityErrors) judge only these. node_exporter reports every "
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
        "or, with its physical link down, IbPortLinkDown pages.",
    ),
    declare.duration(
        "ib_link_flap_window",
        "1h",
        "Window over which IB link events are counted per port: downs (IbLinkFlapping), error recoveries "
        "(IbLinkErrorRecovery) and link integrity errors (IbLinkIntegrityErrors).",
    ),
    declare.number(
        "ib_link_flaps",
        2,
        "Downs of one port within ib_link_flap_window that make it flapping (IbLinkFlapping; one down is a port that "
        "went down, IbPortLinkDown's case, or a peer reboot).",
        expected="a whole number of link downs, at least 1",
        whole=True,
        minimum=1,
    ),
    declare.number(
        "ib_link_error_recoveries",
        5,
        "Successful link error recoveries of one port within ib_link_flap_window that make it marginal "
        "(IbLinkErrorRecovery). Each one is the port's training state machine retraining the link without losing it "
        "(IBTA LinkErrorRecoveryCounter, node_exporter's link_error_recovery_total), which stalls its traffic; a "
        "healthy link counts none, one is a transient, five an hour is a cable or transceiver on its way to link "
        "downs. NVIDIA's NVSentinel link-counter design treats recoveries as degradation, not failure (its limit, "
        "5 a minute, is for a 5 s poll): a ticket here, not a page.",
        expected="a whole number of recoveries, at least 1",
        whole=True,
        minimum=1,
    ),
    declare.number(
        "ib_link_integrity_errors",
        1,
        "Local link integrity errors of one port within ib_link_flap_window above which IbLinkIntegrityErrors "
        "fires. Each count is already a threshold crossing: the port's physical errors exceeded the LocalPhyErrors "
        "limit of its PortInfo (IBTA; node_exporter's HELP), so one means the link runs outside its specification "
        "(NVIDIA's NVSentinel link-counter design counts any as fatal).",
        expected="a whole number of errors, at least 1",
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


@dataclass(frozen=True)
class _LinkEvent:
    """Events of a per-port counter within ib_link_flap_window at or above a count: one table row per alert."""

    alert: str
    signal: str  # the node_exporter counter
    threshold: Callable[[Thresholds], int]
    summary: str
    what: str  # what the description says the port did
    action: str  # what the description says to do
    fired_by: tuple[str, ...]


LINK_EVENTS = (
    _LinkEvent(
        "IbLinkErrorRecovery",
        "ib_link_error_recovery",
        lambda thresholds: thresholds.ib_link_error_recoveries,
        "An InfiniBand link keeps retraining after errors.",
        "recovered from link errors (the link retrained without going down)",
        "each recovery stalls the port's traffic and NCCL collectives with it; a marginal cable or transceiver, "
        "plan a reseat or swap before it starts going down (IbLinkFlapping).",
        ("ib_link_errors",),
    ),
    _LinkEvent(
        "IbLinkIntegrityErrors",
        "ib_local_link_integrity_errors",
        lambda thresholds: thresholds.ib_link_integrity_errors,
        "An InfiniBand port's physical errors exceed its limit.",
        "counted local link integrity errors (its physical errors crossed the port's LocalPhyErrors limit)",
        "the link runs outside its specification; replace the cable or transceiver, and drain the node if it "
        "keeps counting.",
        ("ib_link_errors",),
    ),
)


def groups(ctx: Context) -> list[Group]:
    rules = [
        _port_link_down(ctx),
        _port_not_active(ctx),
        _link_flapping(ctx),
        *(_link_event(ctx, row) for row in LINK_EVENTS),
        *(_error_rate(ctx, row) for row in ERROR_RATES),
        _rate_below_nominal(ctx),
    ]
    return [Group("hpcobs-network-alerts", domain="network", interval=ctx.evaluation_interval, rules=rules)]


def _node_alert(ctx: Context) -> partial[Alert]:
    return alerts_of("network", DashboardUid.NETWORK_STORAGE, Team.NETWORK)


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


def _port_out_of_service(ctx: Context) -> tuple[Timing, int]:
    """The timing of the port state alerts, and how many scrapes their `for` spans."""
    settle = 5 * duration_seconds(ctx.scrape_interval)
    when = timing(ctx, ctx.thresholds.ib_port_not_active_for, START + 1, settle=settle)
    return when, when.hold // when.step


def _states(ctx: Context, runs: list[tuple[tuple[int, int], int]], **port: str) -> list[Series]:
    """A port's logical and physical state series, as runs of ((logical, physical), scrapes after the first)."""
    return [
        _port(ctx, signal, " ".join(f"{state[index]}x{scrapes}" for state, scrapes in runs), **port)
        for index, signal in enumerate(("ib_state", "ib_physical_state"))
    ]


def _out_of_service(ctx: Context, state: tuple[int, int], scrapes: int, device: str) -> list[Series]:
    """A port up until START, then in `state` for `scrapes` more, its link_downed counting the link it lost."""
    return _states(ctx, [(UP, START), (state, scrapes)], device=device) + [
        _port(ctx, "ib_link_downed", f"0x{START} 1x{scrapes}", device=device)
    ]


def _unused_port(ctx: Context, scrapes: int) -> list[Series]:
    """The unused second port of an HCA: DOWN and Disabled since boot, never had a link."""
    return _states(ctx, [(UNUSED, scrapes)], port="2") + [_port(ctx, "ib_link_downed", f"0x{scrapes}", port="2")]


def _port_link_down(ctx: Context) -> Alert:
    for_ = ctx.thresholds.ib_port_not_active_for
    when, length = _port_out_of_service(ctx)
    total = START + length + 21
    polling = _out_of_service(ctx, NO_SIGNAL, length + 20, "mlx5_1")
    return _node_alert(ctx)(
        "IbPortLinkDown",
        severity="critical",
        expr="node:ib_ports_link_down:count > 0",
        for_=for_,
        summary="An InfiniBand port lost its physical link.",
        description=f"{label('node')} ({_where(ctx)}) has had an InfiniBand compute-rail port without a physical "
        f"link (not LinkUp) for {for_}: the cable, the transceiver or the switch port; multi-node jobs on it lose "
        "that rail. Drain the node, then check the port with ibstat and its cable.",
        fired_by=("ib_port_down",),
        **standard_cases(
            when,
            fault="a port Polling (no signal from the peer) while the others are LinkUp",
            fault_series=polling + _states(ctx, [(UP, total)]),
            expect=_on_node(ctx),
            healthy="every port LinkUp and ACTIVE",
            healthy_series=_states(ctx, [(UP, total)]) + _states(ctx, [(UP, total)], device="mlx5_1"),
            pending=f"down for less than {for_}",
            pending_series=polling,
            also_silent=[
                when.silent(
                    "one scrape Polling (a flap is IbLinkFlapping's)",
                    _states(ctx, [(UP, START), (NO_SIGNAL, 0), (UP, length + 19)], device="mlx5_1")
                    + [_port(ctx, "ib_link_downed", f"0x{START} 1x{length + 20}", device="mlx5_1")],
                ),
                when.silent(
                    "a port with its link up, left in INIT by the subnet manager, is IbPortNotActive's",
                    _out_of_service(ctx, NOT_ACTIVATED, length + 20, "mlx5_1"),
                ),
                when.silent("an unused HCA port", _states(ctx, [(UP, total)]) + _unused_port(ctx, total)),
            ],
        ),
    )


def _port_not_active(ctx: Context) -> Alert:
    for_ = ctx.thresholds.ib_port_not_active_for
    when, length = _port_out_of_service(ctx)
    total = START + length + 21
    init = _out_of_service(ctx, NOT_ACTIVATED, length + 20, "mlx5_1")
    physically_down = _out_of_service(ctx, NO_SIGNAL, length + 20, "mlx5_2")
    rails, on_port = compute_rails(ctx), ", ".join((ctx.cluster, *PORT))

    def ports(signal: str, comparison: tuple[str, int]) -> str:
        return ctx.select("node_exporter", [signal], PORT, where=rails, when=comparison)

    return _node_alert(ctx)(
        "IbPortNotActive",
        severity="critical",
        expr=f"count by ({ctx.cluster}, node) ({ports('ib_state', ('!=', ACTIVE))} and on ({on_port}) "
        f"{ports('ib_physical_state', ('==', LINK_UP))}) > 0",
        for_=for_,
        summary="An InfiniBand port has its link up but is not ACTIVE.",
        description=f"{label('node')} ({_where(ctx)}) has had an InfiniBand compute-rail port with its physical link "
        f"up but out of the ACTIVE state (INIT or ARMED) for {for_}: the subnet manager has not brought it into "
        "the fabric, and multi-node jobs on it lose that rail. Drain the node, check the port with ibstat and the "
        "subnet manager (sminfo, its log).",
        fired_by=("ib_port_init",),
        **standard_cases(
            when,
            fault="a port in INIT with its link up while the others are ACTIVE",
            fault_series=init + _states(ctx, [(UP, total)]),
            expect=_on_node(ctx),
            healthy="every port ACTIVE",
            healthy_series=_states(ctx, [(UP, total)]) + _states(ctx, [(UP, total)], device="mlx5_1"),
            pending=f"in INIT for less than {for_}",
            pending_series=init,
            also_fires=[
                when.fires(
                    "a port in INIT beside a port without link (IbPortLinkDown's)",
                    init + physically_down,
                    _on_node(ctx),
                ),
                when.fires(
                    "a port in INIT since boot (no subnet manager then): link up, never ACTIVE, no link lost",
                    _states(ctx, [(NOT_ACTIVATED, total)], device="mlx5_1")
                    + [_port(ctx, "ib_link_downed", f"0x{total}", device="mlx5_1")],
                    _on_node(ctx),
                ),
            ],
            also_silent=[
                when.silent(
                    "one scrape in INIT (a link coming back)",
                    _states(ctx, [(UP, START), (NOT_ACTIVATED, 0), (UP, length + 19)], device="mlx5_1")
                    + [_port(ctx, "ib_link_downed", f"0x{START} 1x{length + 20}", device="mlx5_1")],
                ),
                when.silent("a port without physical link is IbPortLinkDown's", physically_down),
                when.silent("an unused HCA port", _states(ctx, [(UP, total)]) + _unused_port(ctx, total)),
            ],
        ),
    )


def _link_event(ctx: Context, row: _LinkEvent) -> Alert:
    window, threshold = ctx.thresholds.ib_link_flap_window, row.threshold(ctx.thresholds)
    step, window_s = duration_seconds(ctx.scrape_interval), duration_seconds(ctx.thresholds.ib_link_flap_window)
    seen = window_s // step + START  # scrapes before the first event: the port has been seen for a whole window
    events = ctx.select(
        "node_exporter",
        [row.signal],
        PORT,
        op="sum",
        # Events counted against the counter's value a window ago, as node:ib_ports_flapped:count counts downs:
        # a port seen for less than the window (a node_exporter restart) or whose counter reset is not judged.
        over=lambda e: f"{e} - {e} offset {window}",
        where=compute_rails(ctx),
    )
    # Read a few scrapes after the last event: the value a window earlier is the count since boot, before them.
    at = duration((seen + threshold + 3) * step)

    def counting(times: int, device: str = "mlx5_2", since_boot: int = 4) -> Series:
        """A port whose counter stood at `since_boot` for a window, then counted `times` events a scrape apart."""
        rises = " ".join(str(since_boot + i) for i in range(1, times + 1))
        values = f"{since_boot}x{seen} {rises} {since_boot + times}x{window_s // step}"
        return _port(ctx, row.signal, " ".join(values.split()), device=device)

    return _node_alert(ctx)(
        row.alert,
        severity="warning",
        expr=f"{events} >= {threshold}",
        for_=None,
        no_for_reason=f"the condition is already a count over {window}; a `for` would only delay it",
        summary=row.summary,
        description=f"Port {label('port')} of {label('device')} on {label('node')} ({_where(ctx)}) {row.what} at "
        f"least {threshold} times in {window}: {row.action}",
        fired_by=row.fired_by,
        fires_on=[
            Case(
                f"{threshold} within {window}",
                at=at,
                series=[counting(threshold)],
                expect=_on_node(ctx, device="mlx5_2", port="1"),
            )
        ],
        silent_on=[
            Case(f"{threshold - 1}, one short", at=at, series=[counting(threshold - 1)]),
            Case(
                f"{threshold}, but longer ago than {window}",
                at=duration((2 * seen + threshold) * step),
                series=[counting(threshold)],
            ),
            Case(
                "a port first seen within the window: its count since boot is not a rise (node_exporter restarted)",
                at=at,
                series=[_port(ctx, row.signal, f"_x{seen} {threshold + 4}x{window_s // step}", device="mlx5_2")],
            ),
            *_off_the_rails(ctx, at, counting(threshold, device=STORAGE_RAIL)),
        ],
    )


def _link_flapping(ctx: Context) -> Alert:
    window, flaps = ctx.thresholds.ib_link_flap_window, ctx.thresholds.ib_link_flaps
    step, window_s = duration_seconds(ctx.scrape_interval), duration_seconds(ctx.thresholds.ib_link_flap_window)
    downs = ctx.select(
        "node_exporter",
        ["ib_link_downed"],
        PORT,
        op="sum",
        # Not increase(): VictoriaMetrics counts a counter's starting value as an increase, and a port's link_downed
        # is 1-3 since boot, so every node_exporter start would look like a flap (as recording_rules/network.py).
        over=lambda e: f"{e} - {e} offset {window}",
        where=compute_rails(ctx),
    )
    history = window_s // step  # a port is judged once it has a window of history
    within = duration(window_s + min(window_s // 2, 50 * step))

    def flapping(scrapes: int, times: int = flaps) -> Series:
        """A port stable for a window, going down `times` times one scrape apart from START on, then stable for
        `scrapes`."""
        values = f"0x{history + START} " + " ".join(str(i) for i in range(1, times)) + f" {times}x{scrapes}"
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
            Case("no down", at=within, series=[_port(ctx, "ib_link_downed", f"3x{2 * history}")]),
            Case(
                f"{flaps - 1} downs, one short of flapping (by default a single down: a port that went down and "
                "stayed down, or a peer reboot)",
                at=within,
                series=[flapping(window_s // step, times=flaps - 1)],
            ),
            Case(
                f"{flaps} downs, but longer ago than {window}",
                at=duration(2 * window_s + (START + flaps + 10) * step),
                series=[flapping(2 * history)],
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


def _off_the_rails(ctx: Context, at: str, storage_rail: Series) -> list[Case]:
    """A link event counter of an Ethernet storage rail, when the site names its compute rails so that it is not
    one: its links are the storage team's and its counters RoCE's."""
    if promregex.fullmatch(ctx.thresholds.ib_compute_rail_devices, STORAGE_RAIL):
        return []
    return [Case("an Ethernet storage rail is not a compute rail", at=at, series=[storage_rail])]


def _storage_rail_case(ctx: Context, when: Timing, length: int) -> list[Case]:
    """An ACTIVE Ethernet storage rail at 200 Gb/s, when the site names its compute rails so that it is not one."""
    nominal = ctx.thresholds.ib_port_rate_bytes_per_second
    if promregex.fullmatch(ctx.thresholds.ib_compute_rail_devices, STORAGE_RAIL):
        return []
    return [
        when.silent(
            "an Ethernet storage rail, slower than the compute rails by design",
            [
                _port(ctx, "ib_state", f"{ACTIVE}x{length}", device=STORAGE_RAIL),
                _port(ctx, "ib_rate", f"{nominal // 2}x{length}", device=STORAGE_RAIL),
            ],
        )
    ]
