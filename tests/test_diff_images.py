"""`build.py diff --images`: which panels are drawn, under which names, linked how (docs/review.md)."""

import copy
import json
from contextlib import contextmanager

import pytest

from hpcobs.delivery import diff_images, preview, semantic_diff
from hpcobs.proof import fault_cluster
from hpcobs.settings import config as config_module
from tests.conftest import ROOT

PATH = "grafana/dashboards/HPC/hpcobs-training.json"
BUILT = json.loads((ROOT / "out" / PATH).read_text(encoding="utf-8"))


def _panel(dashboard: dict, title: str) -> dict:
    return next(p for p in dashboard["panels"] if p.get("title") == title)


def _changed() -> tuple[dict, dict]:
    """The training dashboard, and a copy with a threshold changed, a panel renamed, one removed and one added."""
    new = copy.deepcopy(BUILT)
    # 0.75 -> 0.6: the fault cluster's straggler (about 0.62) turns from red to green
    _panel(new, "Straggler ratio")["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"] = 0.6
    _panel(new, "Tokens per second, whole job")["title"] = "Tokens per second of the job"
    new["panels"].remove(_panel(new, "Model TFLOP/s, whole job"))
    added = {**copy.deepcopy(_panel(new, "Optimizer steps per second")), "title": "Steps per minute", "id": 99}
    new["panels"].append(added)
    return BUILT, new


def _panels(old: dict, new: dict) -> list[diff_images.ChangedPanel]:
    report = semantic_diff.compare({PATH: json.dumps(old)}, {PATH: json.dumps(new)})
    return diff_images.changed_panels(report, {old["uid"]: old}, {new["uid"]: new})


def test_each_changed_panel_has_the_sides_it_exists_in_named_by_uid_id_and_side():
    old, new = _changed()
    found = {panel.title: [p.name for p in panel.pictures] for panel in _panels(old, new)}
    titles = ("Straggler ratio", "Tokens per second, whole job", "Model TFLOP/s, whole job")
    ids = {title: _panel(BUILT, title)["id"] for title in titles}
    assert found == {
        "Straggler ratio": [
            f"hpcobs-training-panel{ids['Straggler ratio']}-before.png",
            f"hpcobs-training-panel{ids['Straggler ratio']}-after.png",
        ],
        # a renamed panel is drawn under its old title before, its new one after
        "Tokens per second of the job": [
            f"hpcobs-training-panel{ids['Tokens per second, whole job']}-before.png",
            f"hpcobs-training-panel{ids['Tokens per second, whole job']}-after.png",
        ],
        "Steps per minute": ["hpcobs-training-panel99-after.png"],
        "Model TFLOP/s, whole job": [f"hpcobs-training-panel{ids['Model TFLOP/s, whole job']}-before.png"],
    }


def test_a_dashboard_with_only_noise_has_no_pictures():
    moved = copy.deepcopy(BUILT)
    moved["version"] = BUILT.get("version", 0) + 1
    assert _panels(BUILT, moved) == []


def test_one_cluster_draws_every_picture_alone_over_the_dashboards_window_ending_at_one_moment(tmp_path, capsys):
    old, new = _changed()
    panels = _panels(old, new)
    started = []
    drawn = []

    @contextmanager
    def simulated(config, seconds):
        started.append(seconds)
        yield "http://127.0.0.1:1", 1_000_000.0, {"hpc_job": "1"}

    def drawing(dashboard, url, png, scrape, window, given, focus):
        assert (given, focus) == ({}, {"hpc_job": "1"})  # the cluster's training job, for every picture
        drawn.append((dashboard["panels"][0]["title"], png.name, window.end))
        assert len(dashboard["panels"]) == 1 and dashboard["panels"][0]["gridPos"]["x"] == 0

    diff_images.draw(panels, tmp_path / "img", config_module.load(None), simulated, drawing)
    assert started == [6 * 3600]
    assert [(title, name) for title, name, _ in drawn] == [
        (picture.title, picture.name) for panel in panels for picture in panel.pictures
    ]
    assert {end for _, _, end in drawn} == {1_000_000.0}  # the end of the cluster's window, for every picture
    assert capsys.readouterr().out == ""  # the Markdown may be going to standard output


def test_the_links_are_relative_to_the_folder_the_markdown_is_written_to(tmp_path):
    old, new = _changed()
    panels = [p for p in _panels(old, new) if p.title in ("Straggler ratio", "Model TFLOP/s, whole job")]
    text = diff_images.markdown(panels, tmp_path / "review" / "img", tmp_path / "comment")
    straggler = _panel(BUILT, "Straggler ratio")["id"]
    removed = _panel(BUILT, "Model TFLOP/s, whole job")["id"]
    assert text.splitlines() == [
        "",
        "### Pictures",
        "",
        f"- `hpcobs-training` panel `Straggler ratio`: "
        f"[before](../review/img/hpcobs-training-panel{straggler}-before.png) → "
        f"[after](../review/img/hpcobs-training-panel{straggler}-after.png)",
        "- `hpcobs-training` panel `Model TFLOP/s, whole job`: "
        f"[before](../review/img/hpcobs-training-panel{removed}-before.png)",
    ]
    assert diff_images.markdown([], tmp_path, tmp_path) == ""


def test_a_panel_in_a_collapsed_row_is_drawn_alone_at_the_top_left():
    inner = {"type": "stat", "title": "In", "id": 7, "gridPos": {"x": 12, "y": 30, "w": 6, "h": 4}}
    row = {"type": "row", "title": "R", "collapsed": True, "panels": [inner]}
    alone = preview.panel_alone({"uid": "u", "panels": [row]}, "In")
    assert alone["panels"] == [{"type": "stat", "title": "In", "id": 7, "gridPos": {"x": 0, "y": 0, "w": 6, "h": 4}}]
    with pytest.raises(preview.UserError, match="no panel titled 'Out' in dashboard u"):
        preview.panel_alone({"uid": "u", "panels": [row]}, "Out")


@pytest.mark.live
def test_a_changed_threshold_is_drawn_before_and_after_from_the_fault_cluster(tmp_path):
    preview.preflight()  # `make setup` builds the page and the README's command installs Chromium
    old, new = (copy.deepcopy(side) for side in _changed())
    for side in (old, new):
        side["time"]["from"] = "now-90m"  # the shortest window that shows every fault: a quicker cluster
    panels = [p for p in _panels(old, new) if p.title == "Straggler ratio"]
    diff_images.draw(panels, tmp_path, config_module.load(None), fault_cluster.serving)
    before, after = (tmp_path / picture.name for picture in panels[0].pictures)
    assert before.read_bytes()[:8] == after.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert before.read_bytes() != after.read_bytes()
