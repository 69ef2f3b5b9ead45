"""InfiniBand alerts (DESIGN.md §10), read from the per-node records of recording_rules/network.py.

The records sum a node's ports, so these alerts name the node; docs/runbooks/network.md says how to find
the port (ibstat, perfquery). Only the flap alert reads a raw counter: it needs the number of downs per
port, which no record keeps (one counter per port, the same selection node:ib_ports_flapped:count reads).
"""
from hpcobs.context import Context
from hpcobs.promql import duration, duration_seconds
from hpcobs.rules import Alert, Group, label
from hpcobs.ruletest import Case, alert
from hpcobs.synthetic import series

PORT = ("node", "device", "port")
DASHBOARD = "hpcobs-network-storage"



def groups(ctx: Context) -> list[Group]:
    c = ctx.cluster
    cl = ctx.cluster_labels
    th = ctx.thresholds
    step = duration_seconds(ctx.scrape_interval)
    where = f"cluster {label(c)}"
    nominal = th["ib_port_rate_bytes_per_second"]
    flap_window = th["ib_link_flap_window"]
    flaps = th["ib_link_flaps"]

    def port(signal, values, node="n1", device="mlx5_0"):
        return series(ctx, "node_exporter", signal, values, node=node, device=device, port="1")

    start = 10                                  # faults start at this scrape in every case

    def per_second(rate: float, scrapes: int) -> str:
        """A counter flat for `start` scrapes, then growing by `rate` per second."""
        return f"0x{start} 0+{rate * step:.12g}x{scrapes}"

    n1 = dict(**cl, node="n1")

    def rate_alert(name, record, key, for_key, signal, summary, what, act, fired_by=(), severity="warning"):
        threshold = th[key]
        hold = duration_seconds(th[for_key])
        n = hold // step + 30
        fires = (start + 1) * step + hold       # the first increment shows in rate() one scrape after start
        return Alert(
            name, severity=severity, team="network",
            expr=f"{record} > {threshold}", for_=th[for_key],
            summary=summary,
            description=f"{what} on {label('node')} ({where}) for {th[for_key]}: {act}",
            runbook="network", dashboard=DASHBOARD, dashboard_vars=(c, "node"), fired_by=fired_by,
            fires_on=[Case(f"twice the threshold for longer than {th[for_key]}", at=duration(fires + 10 * step),
                           series=[port(signal, per_second(2 * threshold, n)), port(signal, f"0x{start + n}", device="mlx5_1")],
                           expect=[alert(**n1)])],
            silent_on=[
                Case("a clean port", at=duration(fires + 10 * step), series=[port(signal, f"0x{start + n}")]),
                Case("just under the threshold", at=duration(fires + 10 * step),
                     series=[port(signal, per_second(0.9 * threshold, n))]),
                Case(f"above the threshold for less than {th[for_key]}", at=duration(fires - 3 * step),
                     series=[port(signal, per_second(2 * threshold, n))]),
            ],
        )

    not_active_for = duration_seconds(th["ib_port_not_active_for"])
    down = f"4x{start} 1x{not_active_for // step + 20}"
    down_fires = (start + 1) * step + not_active_for
    active = f"4x{start + not_active_for // step + 21}"
    below_for = duration_seconds(th["ib_rate_below_nominal_for"])
    below_len = below_for // step + 20
    slow = f"{nominal}x{start} {nominal // 2}x{below_len}"
    slow_fires = (start + 1) * step + below_for
    flap_window_s = duration_seconds(flap_window)
    def flapping(scrapes: int, downs: int = flaps):
        """A port going down `downs` times, one scrape apart from `start` on, then stable for `scrapes`."""
        values = f"0x{start} " + " ".join(str(i) for i in range(1, downs)) + f" {downs}x{scrapes}"
        return port("ib_link_downed", " ".join(values.split()), device="mlx5_2")

    downs = ctx.select("node_exporter", ["ib_link_downed"], PORT, op="sum",
                       over=lambda e: f"increase({e}[{flap_window}])")

    return [Group("hpcobs-network-alerts", domain="network", interval=ctx.scrape_interval, rules=[
        Alert(
            "IbPortNotActive", severity="critical", team="network",
            expr="node:ib_ports_not_active:count > 0", for_=th["ib_port_not_active_for"],
            summary="An InfiniBand port is not ACTIVE.",
            description=f"{label('node')} ({where}) has had an InfiniBand port out of the ACTIVE state for "
                        f"{th['ib_port_not_active_for']}; multi-node jobs on it lose that rail. Drain the node and "
                        "check the port with ibstat.",
            runbook="network", dashboard=DASHBOARD, dashboard_vars=(c, "node"), fired_by=("ib_port_down",),
            fires_on=[Case("a port DOWN while the others are ACTIVE", at=duration(down_fires + 5 * step),
                           series=[port("ib_state", down, device="mlx5_1"), port("ib_state", active)],
                           expect=[alert(**n1)])],
            silent_on=[
                Case("every port ACTIVE", at=duration(down_fires + 5 * step),
                     series=[port("ib_state", active), port("ib_state", active, device="mlx5_1")]),
                Case("one scrape DOWN (a flap is IbLinkFlapping's)", at=duration(down_fires + 5 * step),
                     series=[port("ib_state", f"4x{start} 1 4x{not_active_for // step + 19}", device="mlx5_1")]),
                Case(f"DOWN for less than {th['ib_port_not_active_for']}", at=duration(down_fires - 3 * step),
                     series=[port("ib_state", down, device="mlx5_1")]),
            ],
        ),
        Alert(
            "IbLinkFlapping", severity="warning", team="network",
            expr=f"{downs} >= {flaps}", for_=None,
            no_for_reason=f"the condition is already a count over {flap_window}; a `for` would only delay it",
            summary="An InfiniBand link keeps going down.",
            description=f"Port {label('port')} of {label('device')} on {label('node')} ({where}) went down at least "
                        f"{flaps} times in {flap_window}: reseat or replace the cable or transceiver, then drain the "
                        "node if it continues.",
            runbook="network", dashboard=DASHBOARD, dashboard_vars=(c, "node"), fired_by=("ib_link_flap",),
            fires_on=[Case(f"{flaps} downs within {flap_window}", at=duration(min(flap_window_s // 2, 50 * step)),
                           series=[flapping(flap_window_s // step)],
                           expect=[alert(**n1, device="mlx5_2", port="1")])],
            silent_on=[
                Case("no down", at=duration(min(flap_window_s // 2, 50 * step)),
                     series=[port("ib_link_downed", f"3x{flap_window_s // step}")]),
                Case("a single down (a port that went down and stayed down, or a peer reboot)",
                     at=duration(min(flap_window_s // 2, 50 * step)),
                     series=[flapping(flap_window_s // step, downs=1)]),
                Case(f"{flaps} downs, but longer ago than {flap_window}", at=duration(flap_window_s + (start + flaps + 10) * step),
                     series=[flapping(2 * flap_window_s // step)]),
            ],
        ),
        rate_alert("IbSymbolErrors", "node:ib_symbol_errors:rate", "ib_symbol_errors_per_second", "ib_errors_for",
                   "ib_symbol_errors", "InfiniBand symbol errors keep rising.",
                   "Symbol errors (bad lanes) keep counting up",
                   "a cable, transceiver or port is failing; find the port with perfquery and plan a reseat or swap.",
                   fired_by=("ib_symbol_errors",)),
        rate_alert("IbReceiveErrors", "node:ib_receive_errors:rate", "ib_receive_errors_per_second", "ib_errors_for",
                   "ib_port_rcv_errors", "InfiniBand ports receive malformed packets.",
                   "Packets received with errors keep counting up",
                   "the link corrupts packets (cable, transceiver or the peer switch port); NCCL retries slow jobs down.",
                   fired_by=("ib_symbol_errors",)),
        rate_alert("IbTransmitDiscards", "node:ib_transmit_discards:rate", "ib_transmit_discards_per_second",
                   "ib_errors_for", "ib_port_xmit_discards", "InfiniBand ports discard outbound packets.",
                   "Outbound packets keep being discarded",
                   "the fabric is congested or a path is broken; check IbCongestion and the switch with ibdiagnet.",
                   fired_by=("ib_congestion",)),
        rate_alert("IbCongestion", "node:ib_transmit_wait:rate", "ib_transmit_wait_ticks_per_second", "ib_congestion_for",
                   "ib_port_xmit_wait", "InfiniBand ports wait for credits to send (congestion).",
                   "The HCAs have data queued but no credit to send it (port_xmit_wait)",
                   "the fabric is congested; see which jobs share the switches and check adaptive routing.",
                   fired_by=("ib_congestion",)),
        Alert(
            "IbLinkRateBelowNominal", severity="warning", team="network",
            expr="node:ib_ports_below_nominal_rate:count > 0", for_=th["ib_rate_below_nominal_for"],
            summary="An InfiniBand port trained below its nominal rate.",
            description=f"{label('node')} ({where}) has an InfiniBand port running below {nominal} bytes/s for "
                        f"{th['ib_rate_below_nominal_for']}: a degraded cable or a lane down; every job crossing it "
                        "runs at the slower rate.",
            runbook="network", dashboard=DASHBOARD, dashboard_vars=(c, "node"),
            fires_on=[Case("a port at half its nominal rate", at=duration(slow_fires + 5 * step),
                           series=[port("ib_rate", f"{nominal}x{start + below_len}"), port("ib_rate", slow, device="mlx5_1")],
                           expect=[alert(**n1)])],
            silent_on=[
                Case("every port at the nominal rate", at=duration(slow_fires + 5 * step),
                     series=[port("ib_rate", f"{nominal}x{start + below_len}"),
                             port("ib_rate", f"{nominal}x{start + below_len}", device="mlx5_1")]),
                Case(f"slow for less than {th['ib_rate_below_nominal_for']} (retraining after a reset)",
                     at=duration(slow_fires - 3 * step), series=[port("ib_rate", slow, device="mlx5_1")]),
            ],
        ),
    ])]

