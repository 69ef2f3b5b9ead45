"""GPU exporters: NVIDIA dcgm-exporter (every version family) and the AMD Device Metrics Exporter.

One table per exporter maps a catalogue signal to a value model written in SI units; `to_unit` turns it
into what the node's exporter version exposes (percent or ratio, MiB or bytes, MHz or Hz, mJ or J).
A model returns one or more (extra labels, values) parts: most return one, Xid/health/clock events several.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from functools import cached_property

from hpcobs.exporters.labels import (
    DCGM_EXP_WINDOW_MS,
    DRIVER,
    H100_GPU_MAX_OPERATING_CELSIUS,
    H100_MEMORY_MAX_OPERATING_CELSIUS,
    amd_gpu_labels,
    dcgm_gpu_labels,
)
from hpcobs.proof.simulate.core import (
    Family,
    accumulate,
    blank,
    seeded,
    to_unit,
    trailing_count,
    where,
    window_mask,
    within,
)
from hpcobs.proof.simulate.model import AMD_VRAM_MIB, GPU_FB_MIB, GPU_FB_RESERVED_MIB, Node

MIB = 1024**2
FB_USABLE = (GPU_FB_MIB - GPU_FB_RESERVED_MIB) * MIB
# dcgm-exporter's -c (--collect-interval, default 30000 ms): DCGM samples the fields it watches at this interval
# (internal/pkg/devicewatcher/device_watcher.go WatchDeviceFields, keeping 600 s of them).
DCGM_COLLECT_SECONDS = 30
# PCIe link of the simulated GPUs (H100 SXM: Gen5 x16); an idle GPU lowers its link generation to save power
# (nvidia-smi --help-query-gpu, pcie.link.gen.gpucurrent: "These may be reduced when the GPU is not in use").
PCIE_MAX_GEN, PCIE_IDLE_GEN, PCIE_MAX_WIDTH = 5, 1, 16
# dcgmFabricManagerStatus_t (NVIDIA/DCGM dcgm_structs.h): the simulated GPUs are H100 SXM on an NVSwitch board, so
# they report success once Fabric Manager has trained the fabric, and not started while it does not run.
FM_NOT_STARTED, FM_SUCCESS = 1, 3
HEALTH_WATCHES = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER", "ALL")
# Optional dcgm fields that the shipped etc/default-counters.csv enables (dcgm-exporter repository); the others
# only exist on nodes whose CSV enables them (Node.csv == "extended").
DEFAULT_CSV_OPTIONAL = frozenset({"fb_reserved", "nvlink_throughput"})
# Counters that restart from zero when the driver reloads (DCGM: "since the driver was last reloaded").
RESET_ON_RELOAD = frozenset(
    {
        "energy",
        "pcie_replay",
        "ecc_sbe_volatile",
        "ecc_dbe_volatile",
        "power_violation",
        "thermal_violation",
        "nvlink_crc_flit_errors",
        "nvlink_crc_data_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
    }
)


class Gpu:
    """One GPU as a value model sees it: load arrays, fault masks and a per-series random stream."""

    def __init__(self, sim, node: Node, gpu: int, signal: str):
        self.sim, self.node, self.gpu, self.signal = sim, node, gpu, signal
        self.n = sim.window.steps
        self.step = sim.window.step
        self.rng = seeded(sim.seed, node.vendor, signal, node.name, gpu)
        self.busy, self.work, self.held = sim.activity.gpu(node.index, gpu)

    def mask(self, kind: str) -> list[bool] | None:
        return self.sim.faults.mask(kind, self.node.index, self.gpu)

    def level(self, idle: float, busy: float, spread: float = 0.0, over: list[float] | None = None) -> list[float]:
        """idle + (busy - idle) * work, plus uniform noise."""
        r = self.rng.random
        return [idle + (busy - idle) * w + spread * (r() - 0.5) for w in (over or self.work)]

    def during(self, kind: str, values: list, value: Callable[[float], float] | float) -> list:
        mask = self.mask(kind)
        if mask is None:
            return values
        fn = value if callable(value) else (lambda _v: value)
        return [fn(v) if m else v for m, v in zip(mask, values)]

    @cached_property
    def resets(self) -> list[int]:
        return [e.start for e in self.sim.faults.effects("driver_reload", self.node.index)]

    def counter(self, per_second: list[float], initial: float = 0.0, signal: str | None = None) -> list[float]:
        """A counter growing by per_second * step, plus +1 bumps; restarts at driver reloads when it should."""
        increments = [r * self.step for r in per_second]
        for effect in self.sim.faults.effects("bump", self.node.index, self.gpu):
            if effect.get("signal") == (signal or self.signal) and effect.start < self.n:
                increments[effect.start] += 1
        resets = self.resets if (signal or self.signal) in RESET_ON_RELOAD else ()
        return accumulate(increments, initial, resets)

    def flag(self) -> list[int]:
        wins = [
            (e.start, e.end)
            for e in self.sim.faults.effects("flag", self.node.index, self.gpu)
            if e.get("signal") == self.signal
        ]
        return [int(m) for m in window_mask(self.n, wins)]

    def rate_in(self, kind: str, per_second: float) -> list[float]:
        mask = self.mask(kind)
        r = self.rng.random
        return [per_second * (0.5 + r()) if m else 0.0 for m in mask] if mask else [0.0] * self.n


def one(fn: Callable[[Gpu], list]) -> Callable[[Gpu], list[tuple[dict, list]]]:
    return lambda g: [({}, fn(g))]


def _xid_parts(g: Gpu) -> list[tuple[dict, list]]:
    """The last Xid code ("Value of the last XID error encountered", etc/default-counters.csv), sticky; a new
    code is a new series (err_code label, internal/pkg/collector/xid_errors.go). A code followed by another
    before the next scrape (effects starting at the same step, in the order they happened) is never exported,
    and a repeat of the code changes nothing. No series before the first Xid: blank values are skipped since
    4.5.3-4.8.2 (NVIDIA/dcgm-exporter issues 646 and 700)."""
    effects = sorted(g.sim.faults.effects("xid", g.node.index, g.gpu), key=lambda e: e.start)
    parts = []
    for k, effect in enumerate(effects):
        end = min([effect.end] + [e.start for e in effects[k + 1 :]])
        mask = window_mask(g.n, [(effect.start, end)])
        code = effect.get("code")
        parts.append(({"err_code": str(code), "err_msg": effect.get("message")}, where(mask, [code] * g.n)))
    return parts


def _xid_count_parts(g: Gpu) -> list[tuple[dict, list]]:
    """The Xid count collector (internal/pkg/collector/xid_collector.go, expcollector.go getMetrics): every Xid
    DCGM recorded in the last window, repeats and overwritten codes included, one series per code while it is in
    the window; a GPU with none in the window has one series without `xid`, value 0."""
    width = max(1, DCGM_EXP_WINDOW_MS // 1000 // g.step)
    counts: dict[str, list[int]] = {}
    for effect in g.sim.faults.effects("xid", g.node.index, g.gpu):
        onset = trailing_count([i == effect.start for i in range(g.n)], width)
        code = str(effect.get("code"))
        counts[code] = [a + b for a, b in zip(counts.get(code, [0] * g.n), onset)]
    window = {"window_size_in_ms": str(DCGM_EXP_WINDOW_MS)}
    none_counted = [not any(c[i] for c in counts.values()) for i in range(g.n)]
    return [
        (window, where(none_counted, [0] * g.n)),
        *(({"xid": code, **window}, [c or None for c in v]) for code, v in sorted(counts.items())),
    ]


def _clock_event_parts(g: Gpu) -> list[tuple[dict, list]]:
    """The clock-events count collector (internal/pkg/collector/clock_events_collector.go, expcollector.go
    getMetrics): DCGM samples the reasons bitmask every collect interval, and each scrape counts, per reason, the
    samples of the last window (GetValuesSince now - window) that carry it. A reason no sample carried has no
    series; a GPU none of whose samples carried any reason (busy at full clocks) has none at all."""
    window = DCGM_EXP_WINDOW_MS // 1000
    sampled = range(0, g.n * g.step, DCGM_COLLECT_SECONDS)  # DCGM's sample times, seconds from the start
    thermal = g.mask("thermal") or [False] * g.n
    reasons = {
        "gpu_idle": [w == 0 for w in g.work],
        "power_cap": g.mask("power_cap") or [False] * g.n,
        "hw_slowdown": thermal,
        "hw_thermal": thermal,
        "sw_thermal": thermal,
    }
    parts = []
    for event, scraped in reasons.items():
        carried = list(itertools.accumulate((int(scraped[t // g.step]) for t in sampled), initial=0))

        def samples_until(seconds: int) -> int:
            """DCGM samples taken at or before `seconds` (none before the start)."""
            return 0 if seconds < 0 else min(len(sampled), seconds // DCGM_COLLECT_SECONDS + 1)

        counts = [carried[samples_until(i * g.step)] - carried[samples_until(i * g.step - window)] for i in range(g.n)]
        parts.append(
            ({"clock_event": event, "window_size_in_ms": str(DCGM_EXP_WINDOW_MS)}, [c or None for c in counts])
        )
    return parts


def _pcie_link_gen(g: Gpu) -> list[int]:
    return [PCIE_MAX_GEN if b > 0 else PCIE_IDLE_GEN for b in g.busy]


def _pcie_link_width(g: Gpu) -> list[int]:
    """x16, or fewer lanes while a pcie_link_degraded fault holds (a lane lost at link training)."""
    return g.during("pcie_link_degraded", [PCIE_MAX_WIDTH] * g.n, PCIE_MAX_WIDTH // 2)


def _health_parts(g: Gpu) -> list[tuple[dict, list]]:
    """One series per watch, PASS (0, DCGM_FR_OK) unless a fault raises WARN (10) or FAIL (20) with its code."""
    parts = []
    effects = g.sim.faults.effects("health", g.node.index, g.gpu)
    for watch in HEALTH_WATCHES:
        mine = [e for e in effects if e.get("watch") == watch]
        bad = window_mask(g.n, [(e.start, e.end) for e in mine])
        parts.append(
            ({"health_watch": watch, "health_error_code": "DCGM_FR_OK"}, where([not b for b in bad], [0] * g.n))
        )
        for e in mine:
            parts.append(
                (
                    {"health_watch": watch, "health_error_code": e.get("code")},
                    where(window_mask(g.n, [(e.start, e.end)]), [e.get("status")] * g.n),
                )
            )
    return parts


def _fb_used(g: Gpu) -> list[float]:
    # Seeded by the GPU, not the signal: fb_free and fb_used must add up to the same total.
    rng = seeded(g.sim.seed, "fb", g.node.name, g.gpu)
    share = 0.70 + 0.2 * rng.random()
    return [FB_USABLE * share + 64 * MIB * (rng.random() - 0.5) if h else MIB for h in g.held]


# The simulated GPUs' power limit (H100 SXM5: 700 W board power, NVIDIA H100 datasheet). A busy GPU draws just
# under it; in a power excursion the draw overshoots it until the firmware's power capping pulls the clocks down.
POWER_LIMIT_WATTS = 700


def _power(g: Gpu) -> list[float]:
    busy = g.during("thermal", g.level(72, 690, 24), lambda v: v * 0.55)
    return g.during("power_cap", busy, lambda v: POWER_LIMIT_WATTS + 25 + (v - int(v)) * 20)


def _sm_clock(g: Gpu) -> list[float]:
    """Boost clock when busy; halved by a thermal slowdown; a power cap trims it by about a tenth."""
    clocks = g.during("thermal", [1.98e9 if w > 0.02 else 3.45e8 for w in g.work], 1.005e9)
    return g.during("power_cap", clocks, lambda v: min(v, 1.785e9))


def _power_violation(g: Gpu) -> list[float]:
    """Time throttled by power: a busy GPU brushes its limit now and then; a capped one is throttled all along."""
    capped = g.mask("power_cap") or [False] * g.n
    return g.counter([1.0 if c else 0.02 * w for c, w in zip(capped, g.work)])


def _energy(g: Gpu) -> list[float]:
    initial = seeded(g.sim.seed, "energy0", g.node.name, g.gpu).uniform(3e7, 9e7)
    return g.counter(_power(g), initial)


DCGM: dict[str, Callable[[Gpu], list[tuple[dict, list]]]] = {
    "sm_clock": one(_sm_clock),
    "memory_clock": one(lambda g: [2.619e9] * g.n),
    "gpu_temperature": one(lambda g: g.during("thermal", g.level(34, 72, 2), lambda v: 92 + (v - int(v)))),
    "memory_temperature": one(
        lambda g: g.during(
            "hbm_thermal",
            g.during("thermal", g.level(32, 66, 2), lambda v: 87 + (v - int(v))),
            lambda v: H100_MEMORY_MAX_OPERATING_CELSIUS + (v - int(v)),
        )
    ),
    # DCGM reads the limits from NVML (nvmlDeviceGetTemperatureThreshold), the same every scrape.
    "gpu_max_op_temperature": one(lambda g: [H100_GPU_MAX_OPERATING_CELSIUS] * g.n),
    "memory_max_op_temperature": one(lambda g: [H100_MEMORY_MAX_OPERATING_CELSIUS] * g.n),
    "power": one(_power),
    "energy": one(_energy),
    "pcie_replay": one(lambda g: g.counter(g.rate_in("pcie_replays", 200.0), g.rng.randrange(4))),
    "pcie_link_gen": one(_pcie_link_gen),
    "pcie_link_width": one(_pcie_link_width),
    "pcie_max_link_gen": one(lambda g: [PCIE_MAX_GEN] * g.n),
    "pcie_max_link_width": one(lambda g: [PCIE_MAX_WIDTH] * g.n),
    "gpu_utilization": one(lambda g: [b * (1 - 0.03 * g.rng.random()) if b > 0 else 0.0 for b in g.busy]),
    "memory_copy_utilization": one(lambda g: [max(0.0, v) for v in g.level(0, 0.35, 0.06)]),
    "xid": _xid_parts,
    "fb_free": one(lambda g: [FB_USABLE - u for u in _fb_used(g)]),
    "fb_used": one(_fb_used),
    "fb_reserved": one(lambda g: [GPU_FB_RESERVED_MIB * MIB] * g.n),
    "fb_capacity": one(lambda g: [GPU_FB_MIB * MIB] * g.n),
    "nvlink_throughput": one(lambda g: [max(0.0, v) for v in g.level(0, 1.5e11, 1.5e10)]),
    "row_remap_uncorrectable": one(lambda g: g.counter([0.0] * g.n)),
    "row_remap_correctable": one(lambda g: g.counter([0.0] * g.n, g.rng.choice((0, 0, 0, 1, 2)))),
    "row_remap_failure": one(Gpu.flag),
    "row_remap_pending": one(Gpu.flag),
    # Banks with no spare row left (row remapper histogram, "none"): 0 until a scenario exhausts one.
    "row_remap_banks_exhausted": one(Gpu.flag),
    # The recovery action, 0 (none) unless a scenario sets it; its flag is action 1, GPU reset
    # (nvmlDeviceGpuRecoveryAction_t).
    "gpu_recovery_action": one(Gpu.flag),
    "gr_engine_active": one(
        lambda g: [max(0.0, min(1.0, b * 0.97 + 0.02 * (g.rng.random() - 0.5))) if b else 0.0 for b in g.busy]
    ),
    "sm_active": one(lambda g: [max(0.0, v) for v in g.level(0, 0.82, 0.04)]),
    "sm_occupancy": one(lambda g: [max(0.0, v) for v in g.level(0, 0.42, 0.04)]),
    "tensor_active": one(lambda g: [max(0.0, v) for v in g.level(0, 0.55, 0.05)]),
    "dram_active": one(lambda g: [max(0.0, v) for v in g.level(0, 0.38, 0.04)]),
    "pcie_tx_rate": one(
        lambda g: g.during("pcie_replays", [max(0.0, v) for v in g.level(2e7, 1.8e9, 3e8)], lambda v: v * 0.5)
    ),
    "pcie_rx_rate": one(
        lambda g: g.during("pcie_replays", [max(0.0, v) for v in g.level(2e7, 2.4e9, 3e8)], lambda v: v * 0.5)
    ),
    "nvlink_tx_rate": one(lambda g: [max(0.0, v) for v in g.level(0, 1.1e11, 1e10)]),
    "nvlink_rx_rate": one(lambda g: [max(0.0, v) for v in g.level(0, 1.1e11, 1e10)]),
    "ecc_sbe_volatile": one(lambda g: g.counter([0.0] * g.n)),
    "ecc_dbe_volatile": one(lambda g: g.counter([0.0] * g.n)),
    "ecc_dbe_aggregate": one(lambda g: g.counter([0.0] * g.n)),
    "retired_pages_dbe": one(lambda g: [0] * g.n),
    "retired_pages_pending": one(lambda g: [0] * g.n),
    "nvlink_crc_flit_errors": one(lambda g: g.counter(g.rate_in("nvlink_errors", 40.0))),
    "nvlink_crc_data_errors": one(lambda g: g.counter(g.rate_in("nvlink_errors", 4.0))),
    "nvlink_replay_errors": one(lambda g: g.counter(g.rate_in("nvlink_errors", 15.0))),
    "nvlink_recovery_errors": one(lambda g: g.counter(g.rate_in("nvlink_errors", 1 / 300))),
    "power_violation": one(_power_violation),
    "thermal_violation": one(lambda g: g.counter([0.7 if m else 0.0 for m in (g.mask("thermal") or [False] * g.n)])),
    "clock_events": _clock_event_parts,
    # No model for the NVLink5 fields (nvlink_effective_ber_raw, nvlink_recovery_events, nvlink_recovery_failed): the
    # simulated GPUs are H100s (NVLink4), on which DCGM reports them blank ("NVLink5+ only", dcgm_fields.h) and
    # dcgm-exporter skips blank values (internal/pkg/collector/gpu_collector.go toString).
    "xid_count": _xid_count_parts,
    "health_status": _health_parts,
    # GPU fleet signals (alerts/gpu_fleet.py): fabric state and ECC mode (1 enabled, NVML's nvmlEnableState_t).
    "fabric_manager_status": one(lambda g: g.during("fabric_not_ready", [FM_SUCCESS] * g.n, FM_NOT_STARTED)),
    "ecc_mode": one(lambda g: [1] * g.n),
    "ecc_pending": one(lambda g: [1 - f for f in g.flag()]),
}


def dcgm_emits(node: Node, metric) -> bool:
    return not metric.optional or node.csv == "extended" or metric.signal in DEFAULT_CSV_OPTIONAL


def dcgm_families(sim) -> Iterator[Family]:
    source = sim.sources["dcgm"]
    nodes = [n for n in sim.cluster.nodes if n.vendor == "nvidia"]
    for signal in source.exporter.signals():
        if signal not in DCGM:
            continue  # a signal the simulator has no model for (tests list them)
        by_name: dict[str, list] = {}
        for version in dict.fromkeys(n.version for n in nodes):
            metric = source.metric(signal, version)
            if metric is not None:
                by_name.setdefault(metric.name, []).append((version, metric))
        for name, spellings in by_name.items():
            metrics = dict(spellings)
            first = spellings[0][1]
            yield Family(
                name,
                first.type,
                first.help,
                _dcgm_series(
                    sim,
                    signal,
                    metrics,
                    [n for n in nodes if n.version in metrics and dcgm_emits(n, metrics[n.version])],
                ),
            )


def _dcgm_series(sim, signal: str, metrics: dict, nodes: list[Node]):
    source = sim.sources["dcgm"]
    model = DCGM[signal]
    for node in nodes:
        metric = metrics[node.version]
        target = sim.target("dcgm", node.name)
        unscraped = sim.unscraped("dcgm", node.index)
        frozen = sim.faults.windows("dcgm_frozen", node.index)
        drivers = _drivers(sim, node)
        for gpu in range(node.gpus):
            absent = unscraped + sim.faults.windows("gpu_lost", node.index, gpu)
            base = {**dcgm_gpu_labels(source, node.version, node.name, gpu), **target}
            driver_label = source.exporter.info_labels(node.version)[-1]
            variants = sim.job_variants(node.index, gpu)
            for extra, values in model(Gpu(sim, node, gpu, signal)):
                raw = to_unit(values, metric)
                for (job, runs), (driver, running) in itertools.product(variants, drivers):
                    labels = {**base, **extra, driver_label: driver}
                    if job is not None:
                        labels["hpc_job"] = job.id
                    served = _held(_only(running, raw if runs is None else within(raw, runs)), frozen)
                    yield labels, blank(served, absent) if absent else served


def _drivers(sim, node: Node) -> list[tuple[str, list[bool] | None]]:
    """The driver label a node's series carry over time (the CSV's DCGM_FI_DRIVER_VERSION label row, read from DCGM
    at each collection): the fleet's driver, or another one from a `driver` effect on (a node reimaged with another
    image); a new label value is a new series."""
    changes = sim.faults.effects("driver", node.index)
    if not changes:
        return [(DRIVER, None)]
    other = window_mask(sim.window.steps, [(e.start, e.end) for e in changes])
    return [(DRIVER, [not m for m in other]), (changes[0].get("version"), other)]


def _only(mask: list[bool] | None, values: list) -> list:
    return values if mask is None else where(mask, values)


def _held(values: list, windows: list[tuple[int, int]]) -> list:
    """dcgm-exporter before 3.1.3-3.1.2 keeps serving its last output when a collection fails, as after an
    nv-hostengine restart (pkg/dcgmexporter/pipeline.go Run `continue`, server.go serving the cached string, tag
    3.0.4-3.0.0; NVIDIA/gpu-monitoring-tools issue 188): every series repeats, or stays absent as, its sample
    before the window."""
    out = list(values)
    for start, end in windows:
        last = out[start - 1] if start > 0 else None
        out[start:end] = [last] * (min(end, len(out)) - start)
    return out


# -- AMD -----------------------------------------------------------------------------------------

AMD_EMITTED_OPTIONAL = frozenset({"package_power", "junction_temperature"})  # MI3xx spellings
AMD_LINKS, AMD_HBM_STACKS = 7, 8
AMD_CLOCKS = (("0", "system"), ("0", "memory"), ("0", "data"), ("0", "soc"), ("0", "video"))


def _amd_vram_used(g: Gpu) -> list[float]:
    share = 0.6 + 0.3 * seeded(g.sim.seed, "vram", g.node.name, g.gpu).random()
    return [AMD_VRAM_MIB * MIB * share if h else 256 * MIB for h in g.held]


AMD: dict[str, Callable[[Gpu], list[tuple[dict, list]]]] = {
    "gfx_activity": one(lambda g: [b * (1 - 0.04 * g.rng.random()) if b else 0.0 for b in g.busy]),
    "umc_activity": one(lambda g: [max(0.0, v) for v in g.level(0, 0.4, 0.06)]),
    "vram_used": one(_amd_vram_used),
    "vram_total": one(lambda g: [AMD_VRAM_MIB * MIB] * g.n),
    "vram_free": one(lambda g: [AMD_VRAM_MIB * MIB - u for u in _amd_vram_used(g)]),
    "package_power": one(lambda g: g.level(140, 720, 20)),
    "power_usage": one(lambda g: g.level(140, 720, 20)),
    "energy": one(
        lambda g: g.counter(g.level(140, 720, 20), seeded(g.sim.seed, "amd-e0", g.node.name, g.gpu).uniform(3e7, 9e7))
    ),
    "junction_temperature": one(lambda g: g.level(38, 84, 2)),
    "memory_temperature": one(lambda g: g.level(36, 74, 2)),
    "hbm_temperature": lambda g: [({"hbm_index": str(i)}, g.level(36, 74 + i % 3, 2)) for i in range(AMD_HBM_STACKS)],
    "ecc_correctable": one(lambda g: [g.node.index % 3] * g.n),
    "ecc_uncorrectable": one(lambda g: [0] * g.n),
    "ecc_deferred": one(lambda g: [0] * g.n),
    "pcie_replays": one(lambda g: [0] * g.n),
    "pcie_recoveries": one(lambda g: [0] * g.n),
    "pcie_bandwidth": one(lambda g: [max(0.0, v) for v in g.level(1e8, 3e9, 4e8)]),
    "health": one(lambda g: [1] * g.n),
    "xgmi_link_rx": lambda g: [
        ({"link_index": str(i)}, g.counter(g.level(0, 4e10, 4e9), 1e15)) for i in range(AMD_LINKS)
    ],
    "xgmi_link_tx": lambda g: [
        ({"link_index": str(i)}, g.counter(g.level(0, 4e10, 4e9), 1e15)) for i in range(AMD_LINKS)
    ],
    "clock": lambda g: [
        (
            {"clock_index": index, "clock_type": kind},
            [2.1e9 if w > 0.02 else 1.5e8 for w in g.work] if kind == "system" else [1.3e9] * g.n,
        )
        for index, kind in AMD_CLOCKS
    ],
    "gpus_in_node": one(lambda g: [g.node.gpus] * g.n),
}


def amd_families(sim) -> Iterator[Family]:
    source = sim.sources["amd"]
    nodes = [n for n in sim.cluster.nodes if n.vendor == "amd"]
    for signal in source.exporter.signals():
        metric = source.metric(signal)
        if signal in AMD and (not metric.optional or signal in AMD_EMITTED_OPTIONAL):
            yield Family(metric.name, metric.type, metric.help, _amd_series(sim, signal, metric, nodes))


def _amd_series(sim, signal: str, metric, nodes: list[Node]):
    per_gpu = "gpu_id" in metric.labels  # gpu_nodes_total carries only the node's labels
    for node in nodes:
        target = sim.target("amd", node.name)
        scraped = sim.scraped("amd", node.index)
        if not per_gpu:
            raw = to_unit(AMD[signal](Gpu(sim, node, 0, signal))[0][1], metric)
            yield {"hostname": node.name, **target}, raw if scraped is None else where(scraped, raw)
            continue
        for gpu in range(node.gpus):
            base = {**amd_gpu_labels(node.name, node.index, gpu), **target}
            for extra, values in AMD[signal](Gpu(sim, node, gpu, signal)):
                raw = to_unit(values, metric)
                if scraped is not None:
                    raw = where(scraped, raw)
                # The exporter always has job_id/job_user/job_partition, empty without a job (= absent).
                for job, runs in sim.job_variants(node.index, gpu):
                    labels = {**base, **extra}
                    if job is not None:
                        labels.update(job_id=job.id, job_user=job.user, job_partition=job.partition)
                    yield labels, raw if runs is None else within(raw, runs)


def families(sim) -> Iterator[Family]:
    if sim.enabled("dcgm"):
        yield from dcgm_families(sim)
    if sim.enabled("amd"):
        yield from amd_families(sim)


__all__ = ["families", "DCGM", "AMD"]
