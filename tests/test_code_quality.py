"""The code is linted, formatted and type-checked: ruff and mypy, configured in pyproject.toml, run here so that
the README's test command (and so CI) enforces them. Each check lists what it found when it fails."""

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.test_layout import CONTENT

# Paths and rules come from pyproject.toml ([tool.ruff], [tool.mypy]); --no-cache and a temporary mypy cache
# keep the checks from writing into the repository. One line per finding: the file, the line and the rule.
CHECKS = {
    "ruff check": ["ruff", "check", "--no-cache", "--output-format", "concise", "."],
    "ruff format": ["ruff", "format", "--check", "--no-cache", "--output-format", "concise", "."],
    "mypy": ["mypy"],
}


@pytest.mark.lint  # `make lint` runs these tools itself; the length of content functions below is for every run
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


# Content is declarative: a function is one block (a group, a dashboard row, one alert with its cases), and a
# function that grows past one screen is several blocks that want names of their own. The longest blocks today
# (a dashboard row of panels, the Alertmanager config) are about 80 lines.
LONGEST_CONTENT_FUNCTION = 90


def test_content_functions_are_short():
    too_long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
        for folder in CONTENT
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > LONGEST_CONTENT_FUNCTION
    ]
    assert not too_long, (
        f"content functions longer than {LONGEST_CONTENT_FUNCTION} lines; split each into named blocks "
        "(one per alert, panel row or group):\n" + "\n".join(too_long)
    )
