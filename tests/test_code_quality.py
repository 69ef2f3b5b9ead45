"""The code is linted, formatted and type-checked: ruff and mypy, configured in pyproject.toml, run here so that
the README's test command (and so CI) enforces them. Each check lists what it found when it fails."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.lint

# Paths and rules come from pyproject.toml ([tool.ruff], [tool.mypy]); --no-cache and a temporary mypy cache
# keep the checks from writing into the repository. One line per finding: the file, the line and the rule.
CHECKS = {
    "ruff check": ["ruff", "check", "--no-cache", "--output-format", "concise", "."],
    "ruff format": ["ruff", "format", "--check", "--no-cache", "--output-format", "concise", "."],
    "mypy": ["mypy"],
}


@pytest.mark.parametrize("check", CHECKS)
def test_the_code_passes(check, tmp_path):
    command = [sys.executable, "-m", *CHECKS[check]]
    if check == "mypy":
        command += ["--cache-dir", str(tmp_path / "mypy")]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(
            f"{check} failed (exit {done.returncode}); fix the code, or run `ruff format` on the files it names"
            f" (ruff and mypy come with the test extras: pip install -e '.[test]'):\n{done.stdout}{done.stderr}",
            pytrace=False,
        )
