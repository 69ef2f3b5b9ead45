"""Every Loki query in the dashboards parses with Grafana's own LogQL grammar (@grafana/lezer-logql, the
parser of Grafana's query editor), run by node from tests/logql/ (`npm ci --prefix tests/logql`)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_dashboards import DASHBOARDS, panels, substitute

TESTS = Path(__file__).resolve().parent


def parse(expressions: list[str], folder: str = "logql", package: str = "lezer-logql") -> list[str | None]:
    """The verdict of Grafana's grammar `package` (installed in tests/<folder>) on each expression: None if it
    parses, else the error position and a snippet."""
    where = TESTS / folder
    if shutil.which("node") is None or not (where / "node_modules" / "@grafana" / package).is_dir():
        pytest.fail(
            f"the {package} parser is not installed: install nodejs and npm, then `npm ci --prefix tests/{folder}`"
        )
    result = subprocess.run(
        ["node", "parse.mjs"], input=json.dumps(expressions), capture_output=True, text=True, cwd=where, timeout=120
    )
    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)
    assert len(verdicts) == len(expressions)
    return verdicts


@pytest.fixture(scope="module")
def loki_expressions(generated):
    """(dashboard / panel, expression with its Grafana variables substituted) of every Loki target."""
    found = []
    for path, text in sorted(generated.items()):
        if path.startswith(DASHBOARDS):
            dashboard = json.loads(text)
            for panel in panels(dashboard):
                for target in panel.get("targets", []):
                    if target.get("datasource", panel.get("datasource", {}))["type"] == "loki":
                        found.append((f"{dashboard['uid']} / {panel['title']}", substitute(target["expr"], dashboard)))
    return found


def test_every_loki_expression_parses(loki_expressions):
    assert len(loki_expressions) >= 3, loki_expressions
    verdicts = parse([expr for _, expr in loki_expressions])
    errors = [f"{where}: {expr}\n    {error}" for (where, expr), error in zip(loki_expressions, verdicts) if error]
    assert not errors, "LogQL that Grafana cannot parse:\n" + "\n".join(errors)


def test_the_parser_rejects_broken_logql(loki_expressions):
    """The check is not vacuous: broken variants of a real dashboard query and classic mistakes fail."""
    _, real = loki_expressions[0]
    broken = [
        real.replace("}", "", 1),  # unbalanced brace
        '{job="node-journal"} |~',  # line filter without a string
        '{job="node-journal"} |= oom',  # unquoted filter string
        'rate({job="node-journal"})',  # range function without a range
        "$log_selector |~ `oom`",  # an unsubstituted variable
        "",
    ]
    verdicts = parse([real, '{job="node-journal"} |~ `oom`', *broken])
    assert verdicts[:2] == [None, None]
    assert all(verdicts[2:]), dict(zip(broken, verdicts[2:]))
