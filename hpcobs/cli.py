"""Command line: `python build.py [build|check|diff|deploy|doctor] [--config site.yaml] [--out DIR] [--profile]`,
`simulate` and `demo`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpcobs.build import cache as cache_module
from hpcobs.build import outdir, pipeline, validate
from hpcobs.build.cache import Cache
from hpcobs.build.timing import Timings
from hpcobs.delivery import deploy, doctor, preview, review
from hpcobs.errors import UserError
from hpcobs.paths import ROOT
from hpcobs.settings import config as config_module
from hpcobs.targets import dashboards, prometheus

# The options shared by the commands: flags, argparse keywords, and the value when given nowhere.
_SHARED: dict[str, tuple[dict[str, Any], Any]] = {
    "--config": ({"metavar": "FILE", "help": "site YAML merged over config/default.yaml"}, None),
    "--out": (
        {
            "metavar": "DIR",
            "help": "output directory (default: out/ beside build.py): new, empty or written by hpcobs",
        },
        str(ROOT / "out"),
    ),
    "--no-tool-checks": (
        {
            "action": "store_true",
            "help": "skip promtool/amtool (schemas are still checked); for machines without them",
        },
        False,
    ),
    "--cache-dir": (
        {
            "metavar": "DIR",
            "help": "where successful promtool/amtool and schema results are kept between builds, keyed by "
            "a hash of everything that decides them; any run may delete it (default: "
            "$HPCOBS_CACHE_DIR, else $XDG_CACHE_HOME/hpcobs or ~/.cache/hpcobs)",
        },
        None,
    ),
    "--no-cache": (
        {"action": "store_true", "help": "validate everything again, without reading or writing the cache"},
        False,
    ),
    "--profile": (
        {"action": "store_true", "help": "print on stderr where the time went, step by step (stdout is unchanged)"},
        False,
    ),
}


def _options(defaults: bool, names: tuple[str, ...] = tuple(_SHARED)) -> argparse.ArgumentParser:
    """Shared options, accepted both before and after the subcommand; a command lists only those it reads."""
    parser = argparse.ArgumentParser(add_help=False)
    for name in names:
        keywords, default = _SHARED[name]
        parser.add_argument(name, **keywords, default=default if defaults else argparse.SUPPRESS)
    return parser


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="build.py",
        parents=[_options(True)],
        description="Generate hpcobs dashboards, rules, alerts, Alertmanager config and Grafana provisioning.",
    )
    sub = main.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser(
        "build",
        parents=[_options(False)],
        help="generate, validate and atomically replace out/ (the default)",
        description="Generate everything into a staging dir beside out/, validate it (schemas, promtool, "
        "amtool), then exchange it with out/ in one step. A failed or interrupted build leaves "
        "out/ untouched. Validation results are cached (see --cache-dir): an unchanged input "
        "is not checked twice. See docs/output.md.",
    )
    sub.add_parser(
        "check",
        parents=[_options(False)],
        help="exit 1 listing the files where out/ differs from a fresh build",
        description="Generate everything in memory and compare it with out/ byte for byte (the "
        f"{outdir.MARKER} marker included); exit 1 listing the files that differ. It does not "
        "validate: no JSON schemas, no promtool, no amtool, so --no-tool-checks, --cache-dir "
        "and --no-cache change nothing here. out/ was validated by the build that wrote it, "
        "and the test suite validates the committed out/.",
    )
    # The cache options reach the build of BASE in a worktree.
    review.add_arguments(
        _command(
            sub,
            "diff",
            ("--config", "--cache-dir", "--no-cache"),
            "what changed for a reviewer, against a git ref or another out/ (Markdown or JSON)",
            "Compare this build with BASE semantically (dashboards, panels, queries, rules, Alertmanager, "
            "provisioning) and print a Markdown summary fit for a pull-request comment. See docs/review.md.",
        )
    )
    deploy.add_arguments(
        _command(
            sub,
            "deploy",
            ("--config",),
            "push folders, datasources and dashboards to a running Grafana through its HTTP API",
            "Upsert what this build generates into Grafana through its HTTP API: folders and datasources by uid, "
            "dashboards written over the version just read (an edit made in between is refused, not lost), "
            "unchanged ones skipped. See docs/deploy.md.",
        )
    )
    doctor.add_arguments(
        _command(
            sub,
            "doctor",
            ("--config",),
            "what a running Prometheus lacks for these rules, exporter by exporter, with the fix",
            "Ask a running Prometheus, for every exporter the config enables, whether its targets are scraped and "
            "up, carry the cluster label, export the metrics the rules read, and name nodes the way the joins need; "
            "one line per check, ok or problem with its fix. Exit 0 when all is well, 1 on a problem, 2 when "
            "Prometheus cannot be reached. See docs/doctor.md.",
        )
    )
    preview.add_arguments(
        _command(
            sub,
            "preview",
            ("--config", "--out"),
            "draw built dashboards to PNG with Grafana's own panel libraries, from a simulated fault cluster",
            "Issue each panel's queries as Grafana would against a simulated cluster with faults on a loopback "
            "Prometheus (started and stopped here) or against --prometheus, draw the dashboard with Grafana's "
            "Apache-2.0 panel libraries (preview/, built with npm) in headless Chromium and write one PNG per "
            "dashboard and digests.json (the dashboard JSON each was drawn from); one line per panel that shows no "
            "data, a placeholder or an error. Exit 1 on a panel error. See docs/preview.md.",
        )
    )
    _simulate_parser(sub)
    _demo_parser(sub)
    return main


def _command(sub, name: str, options: tuple[str, ...], summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand that reads the shared `options` only; its module adds its own arguments."""
    return sub.add_parser(name, parents=[_options(False, options)], help=summary, description=description)


def _simulate_parser(sub) -> None:
    """`simulate` takes its arguments whole (no prefix character is an option here) and parses them with its own
    parser only when it runs, so that a build never imports the simulator."""
    entry = sub.add_parser(
        "simulate",
        add_help=False,
        prefix_chars="\0",
        help="write a simulated cluster's raw series (OpenMetrics, VictoriaMetrics or promtool input)",
    )
    entry.add_argument("simulate_arguments", nargs="*")


def _demo_parser(sub) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[_options(False)],
        help="run out/'s rules and Alertmanager config on a simulated cluster, on loopback, until Ctrl-C",
        description="Build out/ for --config if it is stale, simulate a cluster whose window ends now with a GPU "
        "fallen off the bus, a double-bit ECC error and a straggler, and start a real Prometheus (the generated "
        "rules, the history backfilled) and Alertmanager (the generated config, every receiver rewritten to a "
        "loopback webhook: nothing is sent out). Prints the URLs, the alerts firing and the notifications, then "
        "waits; Ctrl-C or SIGTERM stops both and removes their files. See docs/simulator.md.",
    )
    demo.add_argument("--duration", default="1h", help="history to simulate and backfill, 40m..24h (default 1h)")
    demo.add_argument(
        "--no-wait", action="store_true", help="exit once the alerts fired and were notified (for tests and CI)"
    )
    demo.add_argument("--prometheus-port", type=int, metavar="PORT", help="default: a free loopback port")
    demo.add_argument("--alertmanager-port", type=int, metavar="PORT", help="default: a free loopback port")


def build(args: argparse.Namespace) -> int:
    cache = None if args.no_cache else Cache(Path(args.cache_dir or cache_module.default_directory()))
    with _profiled(args, cache) as timings:
        config = config_module.load(args.config)
        timings.lap("load config")
        files = pipeline.generate(config)
        timings.lap(f"generate ({len(files)} files)")
        out = Path(args.out)

        def validated(staging: Path) -> None:
            timings.lap("lock out/'s directory, write and fsync the staging directory")
            validate.check(staging, files, not args.no_tool_checks, cache, timings)

        outdir.publish(out, files, validated)
        timings.lap("publish: exchange with out/, remove the previous tree")
        rules = sum(1 for p in files if prometheus.TARGET.owns(p))
        boards = sum(1 for p in files if dashboards.TARGET.owns(p))
        counts = f"{len(files)} files: {rules} rule files, {boards} dashboards"
        print(f"wrote {out} ({counts}) from {', '.join(config.origin)}")
        budget = pipeline.budget_report(config)
        timings.lap("cardinality budget")
        print("\n".join(budget))
    return 0


def check(args: argparse.Namespace) -> int:
    with _profiled(args) as timings:
        config = config_module.load(args.config)
        timings.lap("load config")
        files = pipeline.generate(config)
        timings.lap(f"generate ({len(files)} files)")
        out = Path(args.out)
        stale = outdir.differences(out, files)
        timings.lap(f"compare with {out}")
    if stale:
        print(f"{out} is stale; run `python build.py` and commit the result:", file=sys.stderr)
        for line in stale:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"{out} is up to date ({len(files)} files)")
    return 0


@contextmanager
def _profiled(args: argparse.Namespace, cache: Cache | None = None) -> Iterator[Timings]:
    """The command's steps, printed on stderr with --profile, also when it fails."""
    timings = Timings()
    try:
        yield timings
    finally:
        if args.profile:
            print("\n".join(timings.report() + ([cache.summary()] if cache else [])), file=sys.stderr)


def simulate(args: argparse.Namespace) -> int:
    import json
    import time

    from hpcobs.proof import simulate as sim_module
    from hpcobs.proof.simulate import arguments, output

    # Options given before `simulate` (--config) stay; its parser reports its own mistakes in one line.
    args = arguments.parser("build.py simulate").parse_args(args.simulate_arguments, namespace=args)
    if args.list_scenarios:
        for name, kind in sim_module.kinds().items():
            print(f"{name:24} {kind.doc} Parameters: {', '.join(kind.params) or 'none'}.")
        print(
            f"{'realistic_week':24} faults drawn at the Llama 3 rates (0.47 interruptions per 1,000 GPU-days). "
            "Parameters: none."
        )
        return 0
    request = arguments.checked(args)
    config = config_module.load(args.config)
    began = time.monotonic()
    sim = arguments.simulation(request, config)
    families = list(sim.families())
    bar = _ProgressBar(len(families), sys.stderr)
    try:
        with output.replacing(("--out", request.out), ("--expectations", request.expectations)) as (out, expect):
            assert out is not None  # --out always names a file, or - for standard output
            stats = sim_module.formats.WRITERS[request.format](iter(families), out, sim.window, bar.update)
            if expect is not None:
                expect.write(json.dumps([e.to_dict() for e in sim.expectations()], indent=2, sort_keys=True) + "\n")
    except output.WriteError as exc:
        print(exc.line, file=sys.stderr)
        return 1
    finally:
        bar.done()
    seconds = time.monotonic() - began
    print(
        f"wrote {request.out}: {stats.families} families, {stats.series} series, {stats.samples} samples "
        f"({stats.samples / max(seconds, 1e-9):,.0f} samples/s, {len(sim.expectations())} expectations)",
        file=sys.stderr,
    )
    return 0


def demo(args: argparse.Namespace) -> int:
    from hpcobs.proof import demo as demo_module

    demo_module.preflight(args.duration)
    config = config_module.load(args.config)
    out = Path(args.out)
    if outdir.differences(out, pipeline.generate(config)):
        build(args)
    options = demo_module.Options(out, args.duration, not args.no_wait, args.prometheus_port, args.alertmanager_port)
    return demo_module.run(config, options)


def diff_builds(args: argparse.Namespace) -> int:
    """`diff`; with --images its pictures read the simulated fault cluster (imported only then)."""
    if not args.images:
        return review.run(args)
    from hpcobs.proof import fault_cluster

    return review.run(args, fault_cluster.serving)


def preview_dashboards(args: argparse.Namespace) -> int:
    """`preview`, its default data the simulated fault cluster (imported only here: it brings the simulator)."""
    from hpcobs.proof import fault_cluster

    nodes = fault_cluster.NODES if args.nodes is None else args.nodes
    if args.prometheus and args.nodes is not None:
        raise UserError(
            "preview: --nodes sizes the simulated cluster; with --prometheus nothing is simulated: drop one"
        )
    if nodes < fault_cluster.NODES:
        raise UserError(f"preview: --nodes {nodes}: the fault cluster needs {fault_cluster.NODES} nodes or more")
    return preview.run(args, lambda config, window: fault_cluster.serving(config, window, nodes))


class _ProgressBar:
    """A one-line bar on stderr, redrawn per metric family; silent when stderr is not a terminal."""

    def __init__(self, total: int, stream):
        self.total, self.stream, self.done_families = max(1, total), stream, 0
        self.active = stream.isatty()

    def update(self, stats) -> None:
        self.done_families += 1
        if self.active:
            filled = 30 * self.done_families // self.total
            self.stream.write(
                f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done_families}/{self.total} families, "
                f"{stats.series:,} series, {stats.samples:,} samples"
            )
            self.stream.flush()

    def done(self) -> None:
        if self.active:
            self.stream.write("\n")


class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised in the main thread so that every cleanup on the way out runs."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_interrupt() -> Iterator[None]:
    """Turn the first SIGINT/SIGTERM into Interrupted and ignore later ones, so a second Ctrl-C cannot cut the
    cleanup short (it only removes directories and kills children, so it is quick)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum, frame):
        for name in (signal.SIGINT, signal.SIGTERM):
            signal.signal(name, lambda *_: None)
        raise Interrupted(signum)

    previous = {name: signal.signal(name, interrupted) for name in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(name, handler)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    name = args.command or "build"
    with _signals_interrupt():
        try:
            return _run(name, args)
        except Interrupted as exc:
            done = f"; {args.out} is as it was, or the complete new build" if name == "build" else ""
            print(f"{name}: interrupted by {signal.Signals(exc.signum).name}, stopped cleanly{done}", file=sys.stderr)
            return 128 + exc.signum


def _run(name: str, args: argparse.Namespace) -> int:
    """The command; its errors as lines on stderr: exit 2 for bad input, 1 when the filesystem refuses."""
    try:
        commands = {
            "build": build,
            "check": check,
            "simulate": simulate,
            "demo": demo,
            "diff": diff_builds,
            "deploy": deploy.run,
            "doctor": doctor.run,
            "preview": preview_dashboards,
        }
        return commands[name](args)
    except UserError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return 2
    except outdir.PublishError as exc:
        print(exc, file=sys.stderr)
        return 1
    except OSError as exc:
        where = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
        print(f"{name} error: {where}", file=sys.stderr)
        return 1
