"""Panels draw the limits the alerts use: for every numeric threshold, a build with that threshold set to another
value changes the rules that read it and every panel that draws its limit, together; and no panel of the default
build draws a threshold's default as a literal that does not follow the config.

The panels are found from the generated dashboards (their colour steps, field and per column), compared with the
default build, never from a list of expected panels. Generated in memory (hpcobs.build.pipeline.generate), no
promtool."""

import json

import pytest
import yaml

from hpcobs.build import codegen, pipeline
from hpcobs.lang.render import load_yaml
from hpcobs.settings import config as config_module

NUMERIC = tuple(
    threshold
    for thresholds in codegen.declared().values()
    for threshold in thresholds
    if threshold.schema["type"] in ("number", "integer")
)


def _changed(value: float) -> float:
    """Another valid value: a whole number one up; a ratio, rate or factor 10% lower (a ratio stays at most 1, a
    factor stays above 1)."""
    return value + 1 if isinstance(value, int) else round(value * 0.9, 12)


def _drawn_as(name: str, value: float) -> set[float]:
    """The values a threshold can be drawn as, by what its name says it measures: as configured, a ratio as a
    percentage, bytes per second as Gb/s; a per-minute limit on a panel of rates per second."""
    if name.endswith("_per_minute"):
        return {round(value / 60, 9)}
    forms = {value}
    if name.endswith("_ratio"):
        forms.add(round(value * 100, 9))
    if name.endswith("_bytes_per_second"):
        forms.add(round(value * 8 / 1e9, 9))
    return forms


def _panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _steps(thresholds: dict) -> tuple[float, ...]:
    """The limits of a threshold config: every step but the base one (Grafana's -Infinity)."""
    return tuple(step["value"] for step in thresholds.get("steps", [])[1:])


def drawn_limits(files: dict[str, str]) -> dict[tuple[str, str, str], tuple[float, ...]]:
    """(dashboard, panel, field or column) -> the limits it draws, for every panel of every generated dashboard."""
    limits = {}
    for path, text in files.items():
        if not (path.startswith("grafana/dashboards/") and path.endswith(".json")):
            continue
        for panel in _panels(json.loads(text).get("panels", [])):
            field_config = panel.get("fieldConfig", {})
            limits[(path, panel["title"], "field")] = _steps(field_config.get("defaults", {}).get("thresholds", {}))
            for override in field_config.get("overrides", []):
                column = override["matcher"]["options"]["names"][-1]
                for prop in override["properties"]:
                    if prop["id"] == "thresholds":
                        limits[(path, panel["title"], column)] = _steps(prop["value"])
    return limits


def rules(files: dict[str, str]) -> dict[str, dict]:
    """Every Prometheus and Loki record and alert, by file and name."""
    found = {}
    for path, text in files.items():
        if path.startswith(("prometheus/rules/", "loki/rules/")):
            for group in load_yaml(text)["groups"]:
                for index, rule in enumerate(group["rules"]):
                    found[f"{path} {group['name']} {rule.get('alert') or rule.get('record')} #{index}"] = rule
    return found


@pytest.fixture(scope="module")
def default_build(generated):
    return drawn_limits(generated), rules(generated)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """threshold name -> (drawn limits, rules) of a build with that threshold alone set to another value."""
    out = {}
    for threshold in NUMERIC:
        site = tmp_path_factory.mktemp("site") / "site.yaml"
        site.write_text(yaml.safe_dump({"thresholds": {threshold.name: _changed(threshold.default)}}), encoding="utf-8")
        files = pipeline.generate(config_module.load(site))
        out[threshold.name] = drawn_limits(files), rules(files)
    return out


# Thresholds of the dashboards' shared vocabulary (dashboards/common.py): presentation only, no rule reads them.
PRESENTATION = "dashboard_"
# A limit of one event is also every count panel's "any" step (red from 1: an unhealthy GPU, a port down): a panel
# drawing 1 cannot be told from one drawing such a threshold, so those thresholds are checked by their rules only.
ANY_EVENT = 1


def _rounded(limits: tuple[float, ...]) -> set[float]:
    return {round(limit, 9) for limit in limits}


@pytest.fixture(scope="module")
def followed(default_build, builds) -> set[tuple[tuple[str, str, str], float]]:
    """(panel, limit) of the default build that some threshold's change moves: limits read from the config."""
    default_panels, _ = default_build
    return {
        (key, limit)
        for panels, _ in builds.values()
        for key, limits in default_panels.items()
        for limit in _rounded(limits) - _rounded(panels.get(key, ()))
    }


def test_some_numeric_thresholds_are_declared():
    assert len(NUMERIC) > 20, [t.name for t in NUMERIC]


@pytest.mark.parametrize("threshold", NUMERIC, ids=lambda threshold: threshold.name)
def test_the_panels_drawing_a_threshold_change_with_the_rules_that_read_it(threshold, default_build, builds, followed):
    default_panels, default_rules = default_build
    panels, changed_rules = builds[threshold.name]

    moved_rules = sorted(key for key, rule in changed_rules.items() if default_rules.get(key) != rule)
    moved_panels = sorted(key for key, limits in panels.items() if default_panels.get(key) != limits)
    if threshold.name.startswith(PRESENTATION):  # the dashboards' own colours: panels move, never a rule
        assert moved_panels and not moved_rules, f"{threshold.name}: panels {moved_panels}, rules {moved_rules}"
    else:
        assert moved_rules, f"{threshold.name}: no record or alert changed with it"

    # Every panel that draws the default (in a unit the threshold can be drawn in) reads it, unless the limit it
    # draws there is another threshold's that happens to share the value (two error rates both 0.01 per second).
    forms = _drawn_as(threshold.name, threshold.default) - {ANY_EVENT}
    literal = [
        (key, limit)
        for key, limits in default_panels.items()
        for limit in forms & _rounded(limits)
        if key not in moved_panels and (key, limit) not in followed
    ]
    assert not literal, (
        f"{threshold.name}: these panels draw its default {threshold.default} as a literal, not from "
        f"ctx.thresholds (the rules move with the config, these panels do not): {literal}"
    )
    # A panel that moved draws the new value, in one of its units, or as its inverse (a straggler ratio of 0.75
    # is drawn as 1.33 times the median rank's step time).
    new = _drawn_as(threshold.name, _changed(threshold.default))
    expected = new | {round(1 / value, 9) for value in new if value}
    wrong = [key for key in moved_panels if not expected & _rounded(panels[key])]
    assert not wrong, f"{threshold.name}: these panels moved but do not draw its new value: {wrong}"


def test_a_time_series_draws_its_limits_as_lines(generated):
    """Grafana draws a time series' thresholds only when asked (thresholdsStyle, off by default): the limit of
    the temperature or straggler panels would be configured and invisible."""
    hidden = [
        (path, panel["title"])
        for path, text in generated.items()
        if path.startswith("grafana/dashboards/") and path.endswith(".json")
        for panel in _panels(json.loads(text).get("panels", []))
        if panel["type"] == "timeseries"
        and _steps(panel["fieldConfig"]["defaults"].get("thresholds", {}))
        and panel["fieldConfig"]["defaults"]["custom"].get("thresholdsStyle", {}).get("mode", "off") == "off"
    ]
    assert not hidden, f"time series with limits Grafana does not draw: {hidden}"
