"""Command line: `python build.py [build|check] [--config site.yaml] [--out DIR]`, and `simulate`."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from . import config as config_module
from . import outdir, pipeline, validate
from .errors import UserError

ROOT = Path(__file__).resolve().parent.parent


def _options(defaults: bool) -> argparse.ArgumentParser:
    """Options accepted both before and after the subcommand."""
    keep = {} if defaults else {"default": argparse.SUPPRESS}
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config", metavar="FILE", help="site YAML merged over config/default.yaml",
                        **({"default": None} if defaults else keep))
    parser.add_argument("--out", metavar="DIR", help="output directory (default: out/ beside build.py)",
                        **({"default": str(ROOT / "out")} if defaults else keep))
    parser.add_argument("--no-tool-checks", action="store_true",
                        help="skip promtool/amtool (schemas are still checked); for machines without them",
                        **({"default": False} if defaults else keep))
    return parser


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="build.py", parents=[_options(True)],
        description="Generate hpcobs dashboards, rules, alerts, Alertmanager config and Grafana provisioning.")
    sub = main.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("build", parents=[_options(False)],
                   help="generate, validate and atomically replace out/ (the default)",
                   description="Generate everything into a temp dir, validate it (schemas, promtool, amtool), "
                               "then swap it in place of out/. A failed build leaves out/ untouched.")
    sub.add_parser("check", parents=[_options(False)],
                   help="exit 1 listing the files where out/ differs from a fresh build",
                   description="Rebuild into a temp dir and compare with out/ byte for byte; exit 1 when stale.")
    _simulate_parser(sub)
    return main


def _simulate_parser(sub) -> None:
    from .simulate import FORMATS
    sim = sub.add_parser(
        "simulate", help="write a simulated cluster's raw series (OpenMetrics, VictoriaMetrics or promtool input)",
        description="Simulate a Slurm GPU cluster and the exporters of the config, with fault scenarios, and "
                    "stream its raw series to a file. Same arguments and seed, same bytes. See docs/simulator.md.")
    sim.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="site YAML merged over config/default.yaml")
    sim.add_argument("--nodes", type=int, default=4, help="nodes (default 4)")
    sim.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    sim.add_argument("--hours", type=float, default=1.0, help="simulated duration in hours (default 1)")
    sim.add_argument("--scenario", default="healthy", metavar="S[,S2]",
                     help="comma-separated scenarios, each name[:start=10m][:duration=20m][:node=..][:gpu=..][:hca=..]"
                          "[:job=..]; see --list-scenarios")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("--format", choices=FORMATS, default="openmetrics", help="output format (default openmetrics)")
    sim.add_argument("--out", metavar="FILE", help="output file, - for stdout")
    sim.add_argument("--start", metavar="ISO8601",
                     help="time of the first sample (default 2026-01-01T00:00:00Z; 1970-01-01T00:00:00Z for promtool, "
                          "whose tests start at time 0)")
    sim.add_argument("--expectations", metavar="FILE", help="also write the scenarios' expected signals as JSON")
    sim.add_argument("--list-scenarios", action="store_true", help="list the scenarios and exit")


def _validator(files: dict[str, str], with_tools: bool):
    return lambda root: validate.check(root, files, with_tools=with_tools)


def build(args: argparse.Namespace) -> int:
    config = config_module.load(args.config)
    files = pipeline.generate(config)
    out = Path(args.out)
    tmp = outdir.staged(out, files, _validator(files, not args.no_tool_checks))
    outdir.swap_in(tmp, out)
    rules = sum(1 for p in files if p.startswith(pipeline.RULES_DIR))
    dashboards = sum(1 for p in files if p.startswith("grafana/dashboards/"))
    print(f"wrote {out} ({len(files)} files: {rules} rule files, {dashboards} dashboards) from {', '.join(config.origin)}")
    print("\n".join(pipeline.budget_report(config)))
    return 0


def check(args: argparse.Namespace) -> int:
    config = config_module.load(args.config)
    files = pipeline.generate(config)
    out = Path(args.out)
    tmp = outdir.staged(out, files, _validator(files, not args.no_tool_checks))
    shutil.rmtree(tmp)
    stale = outdir.differences(out, files)
    if stale:
        print(f"{out} is stale; run `python build.py` and commit the result:", file=sys.stderr)
        for line in stale:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"{out} is up to date ({len(files)} files)")
    return 0


def simulate(args: argparse.Namespace) -> int:
    import json
    import time
    from datetime import datetime, timezone

    from . import simulate as sim_module

    if args.list_scenarios:
        for name, kind in sim_module.kinds().items():
            print(f"{name:24} {kind.doc}")
        print(f"{'realistic_week':24} faults drawn at the Llama 3 rates (0.47 interruptions per 1,000 GPU-days)")
        return 0
    if not args.out:
        raise UserError("simulate: --out FILE is required (- for stdout)")
    if args.nodes < 1 or args.gpus_per_node < 1 or args.hours <= 0:
        raise UserError("simulate: --nodes and --gpus-per-node must be >= 1 and --hours > 0")
    start = None
    if args.start:
        try:
            start = datetime.fromisoformat(args.start)
        except ValueError:
            raise UserError(f"simulate: --start {args.start!r} is not ISO 8601 (e.g. 2026-01-01T00:00:00Z)") from None
        start = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
    elif args.format == "promtool":
        start = datetime(1970, 1, 1, tzinfo=timezone.utc)
    config = config_module.load(args.config)
    began = time.monotonic()
    sim = sim_module.Simulation(config, nodes=args.nodes, gpus_per_node=args.gpus_per_node, hours=args.hours,
                                scenarios=args.scenario, seed=args.seed, start=start)
    families = list(sim.families())
    bar = _ProgressBar(len(families), sys.stderr)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8", newline="\n")
    try:
        stats = sim_module.formats.WRITERS[args.format](iter(families), out, sim.window, bar.update)
    finally:
        if out is not sys.stdout:
            out.close()
    bar.done()
    if args.expectations:
        Path(args.expectations).write_text(json.dumps([e.to_dict() for e in sim.expectations()], indent=2, sort_keys=True)
                                           + "\n", encoding="utf-8")
    seconds = time.monotonic() - began
    print(f"wrote {args.out}: {stats.families} families, {stats.series} series, {stats.samples} samples "
          f"({stats.samples / max(seconds, 1e-9):,.0f} samples/s, {len(sim.expectations())} expectations)", file=sys.stderr)
    return 0


class _ProgressBar:
    """A one-line bar on stderr, redrawn per metric family; silent when stderr is not a terminal."""

    def __init__(self, total: int, stream):
        self.total, self.stream, self.done_families = max(1, total), stream, 0
        self.active = stream.isatty()

    def update(self, stats) -> None:
        self.done_families += 1
        if self.active:
            filled = 30 * self.done_families // self.total
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done_families}/{self.total} families, "
                              f"{stats.series:,} series, {stats.samples:,} samples")
            self.stream.flush()

    def done(self) -> None:
        if self.active:
            self.stream.write("\n")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = {"build": build, "check": check, "simulate": simulate}[args.command or "build"]
    try:
        return command(args)
    except UserError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return 2
