"""Command line: `python build.py [build|check] [--config site.yaml] [--out DIR]`."""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
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
    return main


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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    command = {"build": build, "check": check}[args.command or "build"]
    try:
        return command(args)
    except UserError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        return 2
