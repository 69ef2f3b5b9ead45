"""A site's repository (docs/site-repository.md), made here as a real git repository: a fork of the sources with
a committed site.yaml whose threshold changes between commits, and out/ built from it. `diff --config site.yaml
REF` builds REF with REF's own site file, so a site's change is reported; `check --config site.yaml` passes on the
out/ built from it. A separate site repository that pins hpcobs commits only site.yaml and out/: its review reads
the out/ committed at REF against the one just built."""

import re
import shutil

import pytest

from hpcobs import cli
from tests.conftest import ROOT
from tests.test_review import NOT_SOURCES, committed, diff, git, temperature_change

TEMPERATURE = "thresholds:\n  gpu_temperature_celsius: {}\n"


def built(repo, site: str) -> None:
    """out/ as the site builds it, then committed with site.yaml."""
    (repo / "site.yaml").write_text(site)
    assert cli.main(["--config", str(repo / "site.yaml"), "--out", str(repo / "out"), "--no-tool-checks"]) == 0


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """The sources at tag `upstream`, then the site's two commits: GPUs warn at 80 C, then at 82 C."""
    repo = tmp_path_factory.mktemp("fork")
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(*NOT_SOURCES), dirs_exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    committed(repo, "hpcobs")
    git(repo, "tag", "upstream")
    built(repo, TEMPERATURE.format(80))
    committed(repo, "site: GPUs warn at 80 C")
    built(repo, TEMPERATURE.format(82))
    committed(repo, "site: GPUs warn at 82 C")
    return repo


def test_a_site_change_is_reported_against_the_site_file_of_the_base(fork, capsys, monkeypatch):
    monkeypatch.chdir(fork)
    short = git(fork, "rev-parse", "--short", "HEAD~1")
    assert diff(capsys, "--repo", ".", "--config", "site.yaml", "HEAD~1", "--exit-code") == (
        1,
        temperature_change(f"hpcobs diff against `{short}` (HEAD~1, built with its own site.yaml)", 80, 82),
        "",
    )


def test_a_base_before_the_site_file_is_built_with_the_defaults(fork, capsys, monkeypatch):
    monkeypatch.chdir(fork)
    short = git(fork, "rev-parse", "--short", "upstream")
    summary = f"hpcobs diff against `{short}` (upstream, built with the defaults: site.yaml is not in it)"
    assert diff(capsys, "--repo", ".", "--config", "site.yaml", "upstream", "--exit-code") == (
        1,
        temperature_change(summary, 85, 82),
        "",
    )


def test_an_untracked_site_file_builds_both_sides(fork, capsys, monkeypatch):
    """A local site file in a checkout of hpcobs has no history: both sides are built with it, as before."""
    monkeypatch.chdir(fork)
    (fork / "local.yaml").write_text(TEMPERATURE.format(80))
    short = git(fork, "rev-parse", "--short", "HEAD~1")
    assert diff(capsys, "--repo", ".", "--config", "local.yaml", "HEAD~1", "--exit-code") == (
        0,
        f"hpcobs diff against `{short}` (HEAD~1, built with local.yaml): no changes\n",
        "",
    )
    (fork / "local.yaml").unlink()


def test_check_takes_the_site_file(fork, capsys, monkeypatch):
    """The committed out/ is the site's build: up to date with the site file, stale without it."""
    monkeypatch.chdir(fork)
    assert cli.main(["check", "--config", "site.yaml", "--out", "out"]) == 0
    assert cli.main(["check", "--out", "out"]) == 1
    assert capsys.readouterr().err.startswith("out is stale; run `python build.py` and commit the result:\n")


def test_a_separate_site_repository_reviews_its_committed_out(tmp_path, capsys, monkeypatch):
    """site.yaml and out/ in a repository of their own, built by a pinned hpcobs (here, this checkout)."""
    site = tmp_path / "site"
    site.mkdir()
    git(site, "init", "-q", "-b", "main")
    built(site, TEMPERATURE.format(80))
    base = committed(site, "site: GPUs warn at 80 C")
    git(site, "switch", "-q", "-c", "cooler")
    built(site, TEMPERATURE.format(82))
    monkeypatch.chdir(site)
    assert cli.main(["check", "--config", "site.yaml", "--out", "out"]) == 0
    capsys.readouterr()
    assert diff(capsys, "--repo", ".", "--new", "out", "main", "--exit-code") == (
        1,
        temperature_change(f"hpcobs diff of `out` against `{base}` (main)", 80, 82),
        "",
    )


def test_every_ci_example_takes_the_site_file():
    """A workflow copied from the docs runs in a site's repository, whose out/ is the build of site.yaml: a check or
    diff without --config there reports every file the site changes."""
    steps = [
        (page.name, line.strip())
        for page in sorted((ROOT / "docs").glob("*.md"))
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)
        for line in block.splitlines()
        if re.search(r"run: .*build\.py (check|diff)\b", line)
    ]
    assert steps
    assert [(page, step) for page, step in steps if "--config site.yaml" not in step] == []
