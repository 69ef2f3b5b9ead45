"""`build.py diff [BASE]`: what changed between two builds, for a reviewer (docs/review.md).

The new side is this working tree, generated in memory (or --new DIR). BASE is an out/ directory, or a git ref,
by default the merge-base of HEAD with main (else origin/main). At a ref, the out/ committed there is read straight
from git when no --config is given; with --config (a site's build is not committed), or when the ref has no out/,
the ref is checked out in a temporary worktree and built there by its own build.py, and the worktree is removed
whatever happens. A site file committed in the repository is taken as the ref has it (docs/site-repository.md):
each side is built with its own version of the site. The comparison itself is hpcobs.delivery.semantic_diff.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from hpcobs.build import outdir, pipeline
from hpcobs.delivery import diff_images, preview, semantic_diff
from hpcobs.delivery.semantic_diff import Side, compare_dashboards
from hpcobs.errors import UserError
from hpcobs.paths import ROOT
from hpcobs.settings import config as config_module

__all__ = ["add_arguments", "run", "compare_dashboards"]

DEFAULT_BRANCHES = ("main", "origin/main")
# Runs a revision's build.py with that revision's code only: its folder first on sys.path, and the content packages
# its pyproject.toml maps (package-dir: hpcobs.alerts -> alerts/ ...) found in its folders before any installed
# hpcobs is asked, since an editable install of this checkout would otherwise lend it this checkout's content.
_REVISION_BUILD = """
import importlib.util, runpy, sys, tomllib
project = sys.argv.pop(1)
try:
    with open(project + "/pyproject.toml", "rb") as handle:
        folders = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
except (OSError, KeyError):
    folders = {}

class RevisionContent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name not in folders:
            return None
        folder = project + "/" + folders[name]
        init = folder + "/__init__.py"
        return importlib.util.spec_from_file_location(name, init, submodule_search_locations=[folder])

sys.meta_path.insert(0, RevisionContent)
sys.path.insert(0, project)
sys.argv[0] = project + "/build.py"
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `build.py diff`."""
    parser.add_argument(
        "base",
        nargs="?",
        metavar="BASE",
        help="an out/ directory, or a git ref (default: the merge-base of HEAD with main, else with origin/main)",
    )
    parser.add_argument(
        "--new", metavar="DIR", help="compare this out/ directory instead of a build of the working tree"
    )
    parser.add_argument(
        "--repo",
        metavar="DIR",
        default=str(ROOT),
        help="the hpcobs checkout whose history BASE is read from (default: the one holding build.py)",
    )
    parser.add_argument(
        "--format",
        choices=("markdown", "json"),
        default="markdown",
        help="Markdown for a pull-request comment (the default), or JSON for tools",
    )
    parser.add_argument(
        "--images",
        metavar="DIR",
        help="draw each changed panel before and after to PNGs in DIR, from a simulated fault cluster, and link them "
        "in the Markdown (needs Chromium and the built preview/ page, docs/preview.md)",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="write the report to FILE instead of standard output; --images links are relative to FILE's folder "
        "(to the current directory on standard output)",
    )
    parser.add_argument(
        "--exit-code", action="store_true", help="exit 1 when anything changed (noise aside), 0 when nothing did"
    )


def run(args: argparse.Namespace, simulated: preview.Simulated | None = None) -> int:
    """The report; with --images, `simulated` (the fault cluster, which cli passes in) gives the pictures' data."""
    if args.images and args.format == "json":
        raise UserError("diff error: --images links its pictures in the Markdown; drop --format json")
    if args.images:
        preview.preflight()  # one line naming the install, before BASE is built or a cluster simulated
    # The site file is checked first: a mistake in it is reported before any checkout or build of BASE.
    config = config_module.load(args.config) if args.new is None else None
    base_files, base_side = _base(args)
    if config is None:
        new_files, new_side = _read_out(Path(args.new), "--new"), Side(args.new)
    else:
        new_files, new_side = pipeline.generate(config), None
    report = semantic_diff.compare(base_files, new_files)
    render = semantic_diff.as_json if args.format == "json" else semantic_diff.markdown
    text = render(report, base_side, new_side)
    if args.images:
        assert simulated is not None, "cli passes the fault cluster with --images"
        text += _pictures(args, report, base_files, new_files, simulated)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 1 if args.exit_code and report.changed else 0


def _pictures(
    args: argparse.Namespace,
    report: semantic_diff.Report,
    base_files: dict[str, str],
    new_files: dict[str, str],
    simulated: preview.Simulated,
) -> str:
    """Each changed panel drawn before and after into --images, and their links, relative to where the Markdown
    goes."""
    panels = diff_images.changed_panels(report, diff_images.dashboards(base_files), diff_images.dashboards(new_files))
    folder = Path(args.images)
    diff_images.draw(panels, folder, config_module.load(args.config), simulated)
    written_in = Path(args.output).resolve().parent if args.output else Path.cwd()
    return diff_images.markdown(panels, folder.resolve(), written_in)


def _base(args: argparse.Namespace) -> tuple[dict[str, str], Side]:
    if args.base is not None and Path(args.base).is_dir():
        return _read_out(Path(args.base), "BASE"), Side(args.base)
    repo = Path(args.repo)
    prefix = _git_text(repo, "rev-parse", "--show-prefix")
    if prefix is None:
        raise UserError(
            f"diff error: --repo {repo}: not a git checkout; run the diff in a clone of the repository, or give "
            "BASE as an out/ directory"
        )
    commit, note = _merge_base(repo) if args.base is None else (_commit(repo, args.base), args.base)
    if commit is None:
        raise UserError(
            f"diff error: BASE {args.base}: neither a directory nor a commit of {repo}; give an out/ directory or "
            "a git ref (CI: fetch the history, actions/checkout with fetch-depth: 0)"
        )
    side = Side(_git_text(repo, "rev-parse", "--short", commit) or commit[:12], note, commit)
    committed = None if args.config else _committed_out(repo, commit, f"{prefix}out")
    if committed is not None:
        return committed, side
    files, built = _built(repo, commit, prefix, args)
    return files, Side(side.name, f"{note}, {built}", commit)


def _read_out(directory: Path, option: str) -> dict[str, str]:
    """The files of an out/ a build wrote (it has the marker), by path."""
    if not (directory / outdir.MARKER).is_file():
        raise UserError(
            f"diff error: {option} {directory}: not an hpcobs output directory (no {outdir.MARKER}); give an out/ "
            "written by `python build.py`, or a git ref"
        )
    return {path: data.decode("utf-8", errors="replace") for path, data in outdir.read_tree(directory).items()}


# --------------------------------------------------------------------------------------------- git


def _git(repo: Path, *arguments: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(repo), *arguments], capture_output=True, check=False)
    except FileNotFoundError:
        raise UserError("diff error: git is not installed; give BASE as an out/ directory") from None


def _git_text(repo: Path, *arguments: str) -> str | None:
    """git's output, stripped, or None when it fails."""
    done = _git(repo, *arguments)
    return done.stdout.decode().strip() if done.returncode == 0 else None


def _commit(repo: Path, ref: str) -> str | None:
    return _git_text(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")


def _merge_base(repo: Path) -> tuple[str, str]:
    """Where HEAD left the first default branch that exists: what a pull request into it would change."""
    for branch in DEFAULT_BRANCHES:
        tip = _commit(repo, branch)
        base = tip and _git_text(repo, "merge-base", "HEAD", tip)
        if base:
            return base, f"merge-base with {branch}"
    raise UserError(
        f"diff error: no BASE given, and HEAD shares no history with {' or '.join(DEFAULT_BRANCHES)} in {repo}; "
        "name the base, e.g. `python build.py diff origin/<branch>`"
    )


def _committed_out(repo: Path, commit: str, tree: str) -> dict[str, str] | None:
    """The files of the out/ committed at commit, by path; None when the commit has none."""
    if _git_text(repo, "cat-file", "-t", f"{commit}:{tree}") != "tree":
        return None
    archive = _git(repo, "archive", "--format=tar", f"{commit}:{tree}")
    if archive.returncode != 0:
        raise UserError(f"diff error: git archive {commit[:12]}:{tree}: {_first_line(archive.stderr)}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        return {
            member.name: tar.extractfile(member).read().decode("utf-8", errors="replace")  # type: ignore[union-attr]
            for member in tar.getmembers()
            if member.isfile()
        }


def _built(repo: Path, commit: str, prefix: str, args: argparse.Namespace) -> tuple[dict[str, str], str]:
    """The commit built by its own build.py (schemas checked, not the tools) in a temporary worktree, removed in
    every outcome: an error, Ctrl-C or SIGTERM (which the command line raises as an exception) included; and how
    it was built, for the summary."""
    scratch = Path(tempfile.mkdtemp(prefix="hpcobs-diff-"))
    checkout = scratch / "checkout"
    try:
        added = _git(repo, "worktree", "add", "--detach", "--quiet", str(checkout), commit)
        if added.returncode != 0:
            raise UserError(f"diff error: cannot check out {commit[:12]} to build it: {_first_line(added.stderr)}")
        project = checkout / prefix
        command = [
            sys.executable,
            "-c",
            _REVISION_BUILD,
            str(project),
            "--no-tool-checks",
            "--out",
            str(scratch / "out"),
        ]
        site, built = _site_at(repo, checkout, args.config)
        if site is not None:
            command += ["--config", str(site)]
        if args.cache_dir:
            command += ["--cache-dir", str(Path(args.cache_dir).resolve())]
        if args.no_cache:
            command.append("--no-cache")
        done = subprocess.run(command, cwd=project, capture_output=True, check=False)
        if done.returncode != 0:
            raise UserError(
                f"diff error: building BASE {commit[:12]} failed (exit {done.returncode}): "
                f"{_last_line(done.stderr) or _last_line(done.stdout)}"
            )
        return _read_out(scratch / "out", "BASE build"), built
    finally:
        _git(repo, "worktree", "remove", "--force", str(checkout))
        shutil.rmtree(scratch, ignore_errors=True)
        _git(repo, "worktree", "prune")


def _site_at(repo: Path, checkout: Path, config: str | None) -> tuple[Path | None, str]:
    """The site file the revision checked out is built with, and the words saying so. A site file committed in the
    repository is read as the revision has it, at the same path in its worktree: building it with today's file
    would show a site's own change (a threshold, a route) as no change at all. A revision from before the file
    was added is built as it built then, with the defaults. A file outside the repository, or one git does not
    track (a local site file in a checkout of hpcobs), has no history here: both sides are built with it as it is."""
    if config is None:
        return None, "built"
    site = Path(config).resolve()
    top = Path(_git_text(repo, "rev-parse", "--show-toplevel") or repo).resolve()
    if not site.is_relative_to(top) or not _git_text(repo, "ls-files", "--", str(site)):
        return site, f"built with {config}"
    committed = checkout / site.relative_to(top)
    if not committed.is_file():
        return None, f"built with the defaults: {config} is not in it"
    return committed, f"built with its own {config}"


def _first_line(output: bytes) -> str:
    return next(iter(output.decode(errors="replace").strip().splitlines()), "no message")


def _last_line(output: bytes) -> str:
    return next(iter(reversed(output.decode(errors="replace").strip().splitlines())), "")
