"""The corpus of hostile and careless site files (tests/hostile/cases.yaml): each is refused with one line
naming the site file and the key, or accepted with its values landing verbatim where they belong."""

import re
from pathlib import Path

import pytest
import yaml

from hpcobs.build import pipeline
from hpcobs.errors import UserError
from hpcobs.settings import config as config_module

CASES = [
    case
    for path in sorted((Path(__file__).parent / "hostile").glob("*.yaml"))
    for case in yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]
]


def test_corpus_is_well_formed():
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names)) and len(names) >= 60
    for case in CASES:
        assert {"name", "class", "site"} <= set(case), case["name"]
        assert ("refused" in case and "message" in case) != (case.get("accepted") is True), case["name"]


@pytest.mark.parametrize("case", [c for c in CASES if "refused" in c], ids=lambda c: c["name"])
def test_refused(tmp_path, case):
    site = tmp_path / "site.yaml"
    site.write_text(case["site"], encoding="utf-8")
    with pytest.raises(UserError) as caught:
        pipeline.model(config_module.load(site))  # a route no built alert needs is known only once they are built
    where = f":{case['refused']}" if re.fullmatch(r"\d+:\d+", case["refused"]) else f": {case['refused']}"
    assert len(caught.value.lines) == 1, caught.value.lines
    line = caught.value.lines[0]
    assert line.startswith(f"config error: {site}{where}: "), line
    assert case["message"] in line, line


@pytest.mark.parametrize("case", [c for c in CASES if c.get("accepted")], ids=lambda c: c["name"])
def test_accepted(tmp_path, case):
    site = tmp_path / "site.yaml"
    site.write_text(case["site"], encoding="utf-8")
    files = pipeline.generate(config_module.load(site))
    for landing in case.get("lands", []):
        assert landing["file"] in files, f"{landing['file']} not generated"
        assert landing["literal"] in files[landing["file"]], landing
