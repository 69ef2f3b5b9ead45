"""promtool/amtool wrappers: clear errors when missing or too old; real results when present."""

import stat

import pytest

from hpcobs.build import tools
from hpcobs.errors import ToolError


def fake_tool(tmp_path, name, version_line):
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_missing_promtool_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PROMTOOL", raising=False)
    with pytest.raises(ToolError) as caught:
        tools.check_rules(tmp_path / "x.yaml")
    assert str(caught.value) == "promtool not found: apt-get install prometheus, or set PROMTOOL"


def test_missing_amtool_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("AMTOOL", str(tmp_path / "no-amtool"))
    with pytest.raises(ToolError) as caught:
        tools.check_config(tmp_path / "am.yml")
    assert str(caught.value) == "amtool not found: apt-get install prometheus-alertmanager, or set AMTOOL"


def test_too_old_promtool_is_refused(monkeypatch, tmp_path):
    old = fake_tool(tmp_path, "promtool", "promtool, version 2.30.3 (branch: HEAD)")
    monkeypatch.setenv("PROMTOOL", str(old))
    with pytest.raises(ToolError) as caught:
        tools.check_rules(tmp_path / "x.yaml")
    assert str(caught.value) == (
        f"promtool 2.30 at {old} is too old: need >= 2.42 (apt-get install prometheus, or set PROMTOOL)"
    )


def test_real_promtool_reports_a_broken_rule(tmp_path):
    bad = tmp_path / "bad.rules.yaml"
    bad.write_text("groups:\n- name: g\n  rules:\n  - record: a:b:c\n    expr: sum(\n")
    result = tools.check_rules(bad)
    assert not result.ok
    assert any("FAILED" in line for line in result.failures())


def test_real_promtool_accepts_a_good_rule(tmp_path):
    good = tmp_path / "good.rules.yaml"
    good.write_text("groups:\n- name: g\n  rules:\n  - record: a:b:c\n    expr: sum(up)\n")
    result = tools.check_rules(good)
    assert result.ok, result.output
    assert "SUCCESS: 1 rules found" in result.output


def test_real_amtool_rejects_a_bad_config(tmp_path):
    bad = tmp_path / "am.yml"
    bad.write_text("route:\n  receiver: nobody\nreceivers: []\n")
    result = tools.check_config(bad)
    assert not result.ok
    assert "nobody" in result.output


def test_a_tool_is_probed_once_per_process_and_again_when_it_changes(monkeypatch, tmp_path):
    real = tools.find(tools.PROMTOOL)
    wrapper, log = tmp_path / "promtool", tmp_path / "calls.log"

    def install(version_line):
        wrapper.write_text(
            f'#!/bin/sh\necho "$1" >> {log}\n'
            f'if [ "$1" = --version ]; then echo "{version_line}"; exit 0; fi\nexec {real} "$@"\n'
        )
        wrapper.chmod(0o755)

    good = tmp_path / "good.rules.yaml"
    good.write_text("groups:\n- name: g\n  rules:\n  - record: a:b:c\n    expr: sum(up)\n")
    install("promtool, version 2.42.0 (wrapper)")
    monkeypatch.setenv("PROMTOOL", str(wrapper))
    for _ in range(3):
        assert tools.check_rules(good).ok
    assert log.read_text().split() == ["--version", "check", "check", "check"]
    install("promtool, version 2.42.1 (another wrapper)")
    assert tools.locate(tools.PROMTOOL).version == "promtool, version 2.42.1 (another wrapper)"
    assert tools.check_rules(good).ok
    assert log.read_text().split()[4:] == ["--version", "check"]
