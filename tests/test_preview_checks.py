"""preview_checks on reports as the page writes them: a panel drawn as its JSON says passes every check, and each
thing a drawing can lose (unit, thresholds, a threshold's colour, an override, a cell's colour, a stat's value, a
merged row, a legend) is found by its check. The page's own reports are checked live
(tests/live/test_preview_live.py)."""

import copy

import pytest

from hpcobs.delivery import preview_checks

GREEN, RED = "rgb(115, 191, 105)", "rgb(242, 73, 92)"
PALETTE = {"green": GREEN, "red": RED}
STEPS = [{"color": "green", "value": 0}, {"color": "red", "value": 1}]
DRAWN_STEPS = [{"value": None, "color": "green"}, {"value": 1, "color": "red"}]


def _table():
    panel = {
        "type": "table",
        "title": "Nodes",
        "fieldConfig": {
            "defaults": {"unit": "none", "thresholds": {"steps": [{"color": "green", "value": 0}]}},
            "overrides": [
                {
                    "matcher": {"id": "byNames", "options": {"names": ["Value #B", "Unhealthy"]}},
                    "properties": [
                        {"id": "thresholds", "value": {"mode": "absolute", "steps": STEPS}},
                        {"id": "color", "value": {"mode": "thresholds"}},
                        {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                    ],
                }
            ],
        },
        "transformations": [{"id": "filterFieldsByName"}, {"id": "merge"}, {"id": "organize"}],
    }
    base = [{"value": None, "color": "green"}]
    shown = {
        "state": "drawn",
        "text": "",
        "headers": ["node", "Unhealthy"],
        "legend": [],
        "rows": [
            [{"text": "gpu001", "color": "", "background": ""}, {"text": "1", "color": "", "background": RED}],
            [{"text": "gpu002", "color": "", "background": ""}, {"text": "0", "color": "", "background": GREEN}],
        ],
        "drawn": {
            "fields": [
                {"name": "node", "type": "string", "unit": "none", "thresholds": base},
                {
                    "name": "Unhealthy",
                    "type": "number",
                    "unit": "none",
                    "thresholds": DRAWN_STEPS,
                    "cell": "color-background",
                    "shown": [{"value": 1, "text": "1", "color": RED}, {"value": 0, "text": "0", "color": GREEN}],
                },
            ]
        },
    }
    return panel, {"frames": []}, shown


def _stat():
    panel = {
        "type": "stat",
        "title": "Unhealthy",
        "fieldConfig": {
            "defaults": {"unit": "percentunit", "color": {"mode": "thresholds"}, "thresholds": {"steps": STEPS}},
            "overrides": [],
        },
    }
    field = {"name": "Value", "type": "number", "unit": "percentunit", "thresholds": DRAWN_STEPS}
    shown = {
        "state": "drawn",
        "text": "Unhealthy\n250%",
        "headers": [],
        "legend": [],
        "rows": [],
        "drawn": {"fields": [field], "values": [{"name": "Value", "value": 2.5, "text": "250%", "color": RED}]},
    }
    return panel, {"frames": []}, shown


def _timeseries():
    panel = {
        "type": "timeseries",
        "title": "GPUs",
        "options": {"legend": {"showLegend": True}},
        "fieldConfig": {"defaults": {"unit": "none", "thresholds": {"steps": STEPS[:1]}}, "overrides": []},
    }
    sent = {
        "frames": [
            {"fields": [{"name": "Time"}, {"name": "Value", "config": {"displayNameFromDS": name}}]}
            for name in ("total", "idle")
        ]
    }
    fields = [{"name": n, "type": "number", "unit": "none", "thresholds": DRAWN_STEPS[:1]} for n in ("total", "idle")]
    shown = {
        "state": "drawn",
        "text": "",
        "headers": [],
        "legend": ["idle", "total"],
        "rows": [],
        "drawn": {"fields": fields},
    }
    return panel, sent, shown


PANELS = {"table": _table, "stat": _stat, "timeseries": _timeseries}


@pytest.mark.parametrize("kind", PANELS)
def test_a_panel_drawn_as_its_json_says_has_no_problem(kind):
    assert preview_checks.problems(*PANELS[kind](), PALETTE) == []


def _unit_lost(panel, sent, shown):
    shown["drawn"]["fields"][0]["unit"] = "none"


def _thresholds_lost(panel, sent, shown):
    shown["drawn"]["fields"][0]["thresholds"] = DRAWN_STEPS[:1]


def _stat_colour_wrong(panel, sent, shown):
    shown["drawn"]["values"][0]["color"] = GREEN


def _stat_value_not_shown(panel, sent, shown):
    shown["text"] = "Unhealthy\n2.50"


def _override_renamed(panel, sent, shown):
    panel["fieldConfig"]["overrides"][0]["matcher"]["options"]["names"] = ["Value #Z", "Sick"]


def _cell_not_coloured(panel, sent, shown):
    shown["rows"][0][1]["background"] = "rgba(0, 0, 0, 0)"


def _cell_colour_wrong(panel, sent, shown):
    shown["drawn"]["fields"][1]["shown"][0]["color"] = GREEN


def _rows_not_joined(panel, sent, shown):
    shown["rows"].append(copy.deepcopy(shown["rows"][0]))


def _legend_raw(panel, sent, shown):
    shown["legend"] = ['{__name__="cluster:gpus:count"}', "total"]


@pytest.mark.parametrize(
    ("kind", "lose", "found"),
    [
        ("stat", _unit_lost, "Value: drawn in unit 'none', the JSON says 'percentunit'"),
        ("stat", _thresholds_lost, "Value: drawn with thresholds [(None, 'green')], the JSON says"),
        ("stat", _stat_colour_wrong, f"Value: 250% drawn in {GREEN}, its threshold's colour is {RED}"),
        ("stat", _stat_value_not_shown, "Value: '250%' computed but not in the page"),
        ("table", _override_renamed, "the override for Value #Z / Sick matches no field (drawn: Unhealthy, node)"),
        ("table", _cell_not_coloured, "Unhealthy: cell '1' has background rgba(0, 0, 0, 0)"),
        ("table", _cell_colour_wrong, f"Unhealthy: 1 drawn in {GREEN}, its threshold's colour is {RED}"),
        ("table", _rows_not_joined, "rows repeat for gpu001: the merge did not join its queries"),
        (
            "timeseries",
            _legend_raw,
            "legend shows ['total', '{__name__=\"cluster:gpus:count\"}'], the queries' legends are ['idle', 'total']",
        ),
    ],
)
def test_what_a_drawing_loses_is_found(kind, lose, found):
    panel, sent, shown = PANELS[kind]()
    lose(panel, sent, shown)
    problems = preview_checks.problems(panel, sent, shown, PALETTE)
    assert any(found in problem for problem in problems), problems


def test_a_panel_without_data_or_drawn_by_a_placeholder_is_not_checked():
    panel, sent, shown = _stat()
    shown["drawn"]["fields"][0]["unit"] = "none"
    for state in ("nodata", "placeholder", "error"):
        assert preview_checks.problems(panel, sent, {**shown, "state": state}, PALETTE) == []
