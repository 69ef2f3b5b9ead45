"""Issue 30's rules over the generated dashboards that need no server: a range query never picks its top N again at
every step (the live rule, a graph whose lines grow with the fleet, is tests/live/test_dashboard_growth_live.py).
Units, descriptions, unused variables and links to missing variables: tests/test_dashboards.py."""

import json

import pytest

from hpcobs.authoring.dashboard import every_panel
from hpcobs.lang import lint

DASHBOARDS = "grafana/dashboards/"


@pytest.mark.parametrize(
    ("expr", "per_step"),
    [
        ("topk(10, rate(x[5m]))", True),
        ("bottomk(3, sum by (node) (x))", True),
        ("topk(10, max_over_time(x[$__range] @ end()))", False),  # the top 10 of the range, picked once
        ("x and on (node) topk(3, max_over_time(y[1h] @ end()))", False),
        ("topk(3, max_over_time(y[1h] @ end()) + z)", True),  # z still varies with each step
        ("sum by (node) (x)", False),
    ],
)
def test_a_top_set_is_picked_again_at_every_step_unless_pinned(expr, per_step):
    assert bool(lint.top_sets_per_step(expr)) is per_step


def _range_targets(generated):
    for path, text in generated.items():
        if not path.startswith(DASHBOARDS):
            continue
        dashboard = json.loads(text)
        for panel in every_panel(dashboard):
            for target in panel.get("targets", []):
                if panel.get("datasource", {}).get("type") == "prometheus" and not target.get("instant"):
                    yield dashboard["uid"], panel["title"], target["expr"]


def test_no_range_query_picks_its_top_set_at_every_step(generated):
    per_step = [
        f"{uid} / {title}: {', '.join(found)}"
        for uid, title, expr in _range_targets(generated)
        if (found := lint.top_sets_per_step(expr))
    ]
    assert not per_step, "top N picked at every step of a range query (pin it with @ end()):\n" + "\n".join(per_step)
