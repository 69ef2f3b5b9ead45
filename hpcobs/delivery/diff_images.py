"""`build.py diff --images DIR`: each panel the diff reports changed, drawn before and after (docs/review.md).

The panels are those of the dashboard sections' panel changes: a modified (or renamed, or moved) panel is drawn from
both builds' dashboards, an added one from the new build only, a removed one from the old only. Every picture reads
one simulated fault cluster, started once, over one window per dashboard ending at the same moment, so a difference
between before and after is the dashboard's and not the data's. A panel is drawn alone at its own size
(preview.panel_alone), so its queries' step is the one it has on the dashboard.

A picture is named `<dashboard uid>-panel<id>-<before|after>.png`, the id being the panel's in the build it is drawn
from (ids are renumbered when a panel is added, so each side's own id is the one that is unique there). The Markdown
links them relative to the folder the Markdown is written to.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcobs.delivery import preview
from hpcobs.delivery.semantic_diff import Report
from hpcobs.delivery.semantic_diff.core import code
from hpcobs.lang.promql import duration_seconds
from hpcobs.settings import config as config_module
from hpcobs.targets.dashboards import DASHBOARDS_DIR

SIDES = ("before", "after")
# Draws one dashboard from a Prometheus to a PNG: preview.render, or a stand-in in tests.
Draw = Callable[[dict, str, Path, int, preview.Window, Mapping[str, str], Mapping[str, str]], Any]


@dataclass(frozen=True)
class Picture:
    """One side of a changed panel: the dashboard it is drawn from, and the panel's title and id there."""

    side: str  # before | after
    dashboard: dict
    title: str
    panel_id: int

    @property
    def name(self) -> str:
        return f"{self.dashboard['uid']}-panel{self.panel_id}-{self.side}.png"


@dataclass(frozen=True)
class ChangedPanel:
    uid: str
    title: str  # as the diff names it: the new title, or the old one of a removed panel
    pictures: tuple[Picture, ...]  # before, after, or both, in that order


def dashboards(files: Mapping[str, str]) -> dict[str, dict]:
    """The dashboards of a build (its files by path under out/), by uid."""
    found = (json.loads(text) for path, text in files.items() if _is_dashboard(path))
    return {str(doc["uid"]): doc for doc in found if isinstance(doc, dict) and "uid" in doc}


def _is_dashboard(path: str) -> bool:
    return path.startswith(f"{DASHBOARDS_DIR}/") and path.endswith(".json")


def changed_panels(report: Report, old: Mapping[str, dict], new: Mapping[str, dict]) -> list[ChangedPanel]:
    """The panels the report names, in its order, each once, with the sides it has. A dashboard added or removed
    as a whole is one change of the dashboard, not of its panels: it has no pictures here."""
    panels = []
    for section in report.sections:
        if section.area != "dashboards":
            continue
        actions: dict[str, set[str]] = {}  # by title, in the report's order
        old_titles = {}  # a renamed panel's title before
        for change in section.changes:
            if change.kind == "panel":
                actions.setdefault(change.name, set()).add(change.action)
                if change.action == "renamed":
                    old_titles[change.name] = str(change.old)
        for title, done in actions.items():
            sides = []
            if "added" not in done:
                sides.append(_picture("before", old[section.subject], old_titles.get(title, title)))
            if "removed" not in done:
                sides.append(_picture("after", new[section.subject], title))
            panels.append(ChangedPanel(section.subject, title, tuple(sides)))
    return panels


def _picture(side: str, dashboard: dict, title: str) -> Picture:
    return Picture(side, dashboard, title, int(preview.panel_alone(dashboard, title)["panels"][0]["id"]))


def draw(
    panels: Iterable[ChangedPanel],
    folder: Path,
    config: config_module.Config,
    simulated: preview.Simulated,
    drawing: Draw = preview.render,
) -> None:
    """Every picture of `panels` into `folder`, from one fault cluster over the longest dashboard range."""
    pictures = [picture for panel in panels for picture in panel.pictures]
    if not pictures:
        return
    folder.mkdir(parents=True, exist_ok=True)
    longest = max(preview.dashboard_window(p.dashboard, 0).seconds for p in pictures)
    scrape = duration_seconds(config["scrape_interval"])
    # On stderr: the Markdown may be going to standard output.
    print("Simulating a cluster with faults on a loopback Prometheus (docs/preview.md)...", file=sys.stderr)
    with simulated(config, longest) as (url, end, focus):  # every picture reads up to the end of its window
        for picture in pictures:
            alone = preview.panel_alone(picture.dashboard, picture.title)
            window = preview.dashboard_window(picture.dashboard, end)
            drawing(alone, url, folder / picture.name, scrape, window, {}, focus)


def markdown(panels: Iterable[ChangedPanel], folder: Path, written_in: Path) -> str:
    """The pictures' section of the diff's Markdown, each linked relative to `written_in` (the Markdown's folder)."""
    lines = ["", "### Pictures", ""]
    for panel in panels:
        links = " → ".join(
            f"[{p.side}]({Path(os.path.relpath(folder / p.name, written_in)).as_posix()})" for p in panel.pictures
        )
        lines.append(f"- {code(panel.uid)} panel {code(panel.title)}: {links}")
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""
