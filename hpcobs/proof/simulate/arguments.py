"""The `simulate` command's arguments: read, checked and bounded before anything is simulated.

Every mistake is one line, `simulate: --flag VALUE: problem; fix`, and exit code 2. The bounds keep a
careless run from writing for hours: real nodes have at most 16 GPUs, and the samples a run would write
are estimated up front and capped by --max-samples, which is also how to go bigger.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import shlex
import stat
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hpcobs.errors import UserError
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate.formats import FORMATS
from hpcobs.proof.simulate.output import in_place
from hpcobs.proof.simulate.scenarios import ScenarioError, Spec
from hpcobs.proof.simulate.simulation import Simulation
from hpcobs.settings.config import Config

MAX_GPUS_PER_NODE = 16  # the largest real GPU nodes (HGX-2 class); 8 is the common case
MAX_NODES = 100_000  # the model holds every node in memory; more than the largest clusters built
MAX_SCRAPES = 1_000_000  # one series' values are held whole in memory (about 8 MB at this length)
SAMPLES_PER_SECOND = 1_000_000  # the simulator's speed on one core (docs/benchmarks.md)
DEFAULT_MAX_SAMPLES = 200_000_000  # 3-4 minutes; covers the benchmark's 8,192 GPUs for an hour
# Samples a scrape writes, measured on the default config and on a mixed fleet (dcgm versions, AMD, native
# Slurm), rounded up: each node with its exporters, each GPU, and the cluster-wide targets (Slurm, Lustre).
SERIES_PER_NODE, SERIES_PER_GPU, SERIES_PER_CLUSTER = 500, 100, 200
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Request:
    """What to simulate and where to write it, every value checked."""

    nodes: int
    gpus_per_node: int
    hours: float
    specs: list[Spec]
    seed: int
    format: str
    out: str
    start: datetime | None
    expectations: str | None
    max_samples: int


class Parser(argparse.ArgumentParser):
    """argparse's own mistakes (a flag without its value, an unknown flag) as the same one `simulate:` line."""

    def error(self, message: str):
        print(f"simulate: {message.removeprefix('argument ')}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(self, args=None, namespace=None):
        # The top-level parser would report these with its usage text; say it here, in one line.
        namespace, extra = super().parse_known_args(args, namespace)
        if extra:
            flags = [s for action in self._actions for s in action.option_strings]
            near = difflib.get_close_matches(extra[0].partition("=")[0], flags, n=1)
            self.error(f"{extra[0]}: unknown argument{f' (did you mean {near[0]}?)' if near else ''}")
        return namespace, extra


def parser(prog: str) -> Parser:
    # Values are read as text and checked by `checked`, so that each mistake gets its own line and fix.
    sim = Parser(
        prog=prog,
        description="Simulate a Slurm GPU cluster and the exporters of the config, with fault "
        "scenarios, and stream its raw series to a file. Same arguments and seed, "
        "same bytes. See docs/simulator.md.",
    )
    sim.add_argument(
        "--config", metavar="FILE", default=argparse.SUPPRESS, help="site YAML merged over config/default.yaml"
    )
    sim.add_argument("--nodes", default="4", metavar="N", help=f"nodes, 1..{MAX_NODES:,} (default 4)")
    sim.add_argument(
        "--gpus-per-node", default="8", metavar="N", help=f"GPUs per node, 1..{MAX_GPUS_PER_NODE} (default 8)"
    )
    sim.add_argument("--hours", default="1", help="simulated duration in hours (default 1)")
    sim.add_argument(
        "--scenario",
        default="healthy",
        metavar="S[,S2]",
        help="comma-separated scenarios, each name[:start=10m][:duration=20m][:node=..][:gpu=..][:hca=..]"
        "[:job=..]; see --list-scenarios (default healthy)",
    )
    sim.add_argument("--seed", default="0", help="random seed, a whole number (default 0)")
    sim.add_argument(
        "--format", default="openmetrics", help=f"output format: {', '.join(FORMATS)} (default openmetrics)"
    )
    sim.add_argument("--out", metavar="FILE", help="output file, - for stdout; written whole or not at all")
    sim.add_argument(
        "--start",
        metavar="ISO8601",
        help="time of the first sample (default: the window ends at the last scrape before now, for a "
        "backfilled Prometheus to evaluate rules on; 1970-01-01T00:00:00Z for promtool, whose tests start at "
        "time 0); the window may not end in the future",
    )
    sim.add_argument("--expectations", metavar="FILE", help="also write the scenarios' expected signals as JSON")
    sim.add_argument(
        "--max-samples",
        default=str(DEFAULT_MAX_SAMPLES),
        metavar="N",
        help=f"refuse runs estimated to write more samples (default {DEFAULT_MAX_SAMPLES:,}); raise it to go bigger",
    )
    sim.add_argument("--list-scenarios", action="store_true", help="list the scenarios and exit")
    return sim


def refuse(flag: str, value: str | None, problem: str, fix: str) -> UserError:
    shown = "" if value is None else f" {shlex.quote(value)}"
    return UserError(f"simulate: {flag}{shown}: {problem}; {fix}")


def checked(args: argparse.Namespace) -> Request:
    """The arguments as a Request; the first bad one is a UserError line naming the flag, value and fix."""
    nodes = _whole(
        "--nodes",
        args.nodes,
        1,
        MAX_NODES,
        " (the model holds every node in memory)",
        "split the cluster into runs with different --seed",
    )
    gpus_per_node = _whole(
        "--gpus-per-node",
        args.gpus_per_node,
        1,
        MAX_GPUS_PER_NODE,
        ", the most a real node has",
        "add --nodes for a bigger cluster",
    )
    hours, seed = _hours(args.hours), _whole("--seed", args.seed)
    max_samples = _whole("--max-samples", args.max_samples, 1)
    fmt = args.format
    if fmt not in FORMATS:
        near = difflib.get_close_matches(fmt.lower(), FORMATS, n=1)
        raise refuse(
            "--format",
            fmt,
            "unknown format",
            f"use one of {', '.join(FORMATS)}" + (f" (did you mean {near[0]}?)" if near else ""),
        )
    start = _start(args.start) if args.start is not None else EPOCH if fmt == "promtool" else None
    try:
        specs = Spec.parse(args.scenario)
    except ScenarioError as exc:
        raise refuse("--scenario", exc.item, exc.problem, exc.fix) from None
    out = _output_path("--out", args.out, "cluster.om")
    expectations = args.expectations
    if expectations is not None:
        _output_path("--expectations", expectations, "expectations.json")
        if _same_file(out, expectations):
            raise refuse(
                "--expectations",
                expectations,
                f"the same file as --out {shlex.quote(out)}",
                "give the expectations their own file",
            )
    return Request(nodes, gpus_per_node, hours, specs, seed, fmt, out, start, expectations, max_samples)


def simulation(request: Request, config: Config) -> Simulation:
    """The Simulation of a request, refused when it is too long or too big for the config's scrape interval,
    or when a scenario does not fit the cluster."""
    step = duration_seconds(config["scrape_interval"])
    check_size(request, step)
    start = window_start(request, step, datetime.now(UTC))
    try:
        return Simulation(
            config,
            nodes=request.nodes,
            gpus_per_node=request.gpus_per_node,
            hours=request.hours,
            scenarios=request.specs,
            seed=request.seed,
            start=start,
        )
    except ScenarioError as exc:
        raise refuse("--scenario", exc.item, exc.problem, exc.fix) from None


def window_start(request: Request, step: int, now: datetime) -> datetime:
    """--start, or the start of the window whose last scrape is the last whole step before `now`.

    A window past now is refused: Prometheus refuses to evaluate rules on samples ahead of its clock ("out of
    bounds") and, once the backfilled samples lie ahead of the query time, sees no series at all, so every
    exporter-absent alert fires falsely."""
    last_offset = (max(1, round(request.hours * 3600 / step)) - 1) * step
    if request.start is None:
        return datetime.fromtimestamp(int(now.timestamp()) // step * step - last_offset, UTC)
    end = request.start + timedelta(seconds=last_offset)
    if end > now:
        latest = (now - timedelta(seconds=last_offset)).replace(microsecond=0)
        raise refuse(
            "--start",
            request.start.isoformat(),
            f"the --hours {request.hours:g} window would end at {end.isoformat()}, after now",
            f"leave --start out for a window that ends now, or give {latest.isoformat()} or earlier",
        )
    return request.start


def estimated_samples(nodes: int, gpus_per_node: int, scrapes: int) -> int:
    return (nodes * (SERIES_PER_NODE + gpus_per_node * SERIES_PER_GPU) + SERIES_PER_CLUSTER) * scrapes


def check_size(request: Request, step: int) -> None:
    """Refuse a run shorter than a scrape, longer than a series may be, or estimated to write more than
    --max-samples (the message says how to go bigger)."""
    hours = request.hours
    if hours * 3600 < step:
        raise refuse(
            "--hours",
            f"{hours:g}",
            f"shorter than one scrape interval ({step}s)",
            f"give at least {math.ceil(step / 3600 * 10**4) / 10**4:g}",
        )
    scrapes = round(hours * 3600 / step)
    if scrapes > MAX_SCRAPES:
        raise refuse(
            "--hours",
            f"{hours:g}",
            f"{scrapes:,} scrapes of {step}s per series, more than the {MAX_SCRAPES:,} one series may hold in memory",
            f"split it into runs of at most {MAX_SCRAPES * step // 3600:,} hours with later --start",
        )
    samples = estimated_samples(request.nodes, request.gpus_per_node, scrapes)
    if samples > request.max_samples:
        per_node = SERIES_PER_NODE + request.gpus_per_node * SERIES_PER_GPU
        raise UserError(
            f"simulate: --nodes {request.nodes} --gpus-per-node {request.gpus_per_node} --hours {hours:g}: about "
            f"{samples:,} samples ({request.nodes:,} nodes x ~{per_node:,} series x {scrapes:,} scrapes) exceed "
            f"--max-samples {request.max_samples:,}; pass --max-samples {_round_up(samples)} to go bigger "
            f"(about {_run_time(samples)}), or split it into runs of fewer --nodes or --hours with different --seed"
        )


def _run_time(samples: int) -> str:
    seconds = samples / SAMPLES_PER_SECOND
    return f"{math.ceil(seconds)} s" if seconds < 90 else f"{round(seconds / 60):,} min"


def _round_up(n: int) -> int:
    """n rounded up to two significant digits: a limit that is easy to type."""
    unit = 10 ** max(0, len(str(n)) - 2)
    return -(-n // unit) * unit


_EXAMPLES = {"--nodes": "16", "--gpus-per-node": "8", "--seed": "7", "--max-samples": "500000000"}


def _whole(flag: str, text: str, low: int | None = None, high: int | None = None, why: str = "", fix: str = "") -> int:
    try:
        value = int(text)
    except ValueError:
        raise refuse(flag, text, "not a whole number", f"e.g. {flag} {_EXAMPLES[flag]}") from None
    if low is not None and value < low:
        raise refuse(flag, text, f"less than {low}", f"give {low} or more")
    if high is not None and value > high:
        raise refuse(flag, text, f"more than {high:,}{why}", fix)
    return value


def _hours(text: str) -> float:
    try:
        hours = float(text)
    except ValueError:
        raise refuse("--hours", text, "not a number of hours", "e.g. --hours 2 or --hours 0.5") from None
    if not math.isfinite(hours):
        raise refuse("--hours", text, "not a finite number", "e.g. --hours 2 or --hours 0.5")
    if hours <= 0:
        raise refuse("--hours", text, "a simulation lasts more than 0 hours", "e.g. --hours 2 or --hours 0.5")
    return hours


def _start(text: str) -> datetime:
    try:
        start = datetime.fromisoformat(text)
    except ValueError:
        raise refuse("--start", text, "not an ISO 8601 time", "e.g. 2026-01-01T00:00:00Z") from None
    start = start if start.tzinfo else start.replace(tzinfo=UTC)
    if start < EPOCH:
        raise refuse(
            "--start",
            text,
            "before 1970-01-01 (Prometheus and VictoriaMetrics count time from there)",
            "give 1970-01-01T00:00:00Z or later",
        )
    return start


def _output_path(flag: str, path: str | None, example: str) -> str:
    """A path the command can write: `-` (stdout), an existing device or pipe, or a file in a writable directory."""
    if not path:
        raise refuse(flag, path, "missing a file", "give a file to write, or - for stdout")
    if path == "-":
        return path
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise refuse(flag, path, f"cannot be used ({exc.strerror})", "choose another path") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise refuse(flag, path, "is a directory", f"name a file in it, e.g. {os.path.join(path, example)}")
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise refuse(flag, path, f"directory {folder} does not exist", "create it first, or choose another place")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise refuse(flag, path, f"no permission to create files in {folder}", "choose a directory you can write")
    return path


def _same_file(a: str, b: str) -> bool:
    """Both stdout, or the same regular file (a device such as /dev/null takes both)."""
    if "-" in (a, b):
        return a == b
    return os.path.realpath(a) == os.path.realpath(b) and not in_place(a)
