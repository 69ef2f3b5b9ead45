"""`build.py demo` refuses in one line before it builds or starts anything, and never notifies outside loopback.

The demo itself runs live in tests/live/test_demo_live.py."""

import subprocess

import pytest
import yaml

from hpcobs import cli
from hpcobs.build import tools
from hpcobs.proof import demo
from tests.conftest import ROOT

ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"


@pytest.mark.parametrize(
    "variable, package", [("PROMETHEUS", "prometheus"), ("ALERTMANAGER", "prometheus-alertmanager")]
)
def test_a_missing_server_is_one_line_naming_its_package(monkeypatch, capsys, tmp_path, variable, package):
    monkeypatch.setenv(variable, str(tmp_path / "absent"))
    assert cli.main(["demo", "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"apt-get install {package}" in err and "Traceback" not in err


@pytest.mark.parametrize("duration", ["10m", "2d", "an hour"])
def test_a_duration_out_of_range_is_one_line(capsys, duration):
    assert cli.main(["demo", "--duration", duration]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--duration {duration}" in err


@pytest.mark.parametrize(
    "duration, hours, scenarios",
    [
        ("1h", "1", "xid79:start=59m,dbe:start=50m,straggler:start=30m"),
        ("150m", "2.5", "xid79:start=149m,dbe:start=140m,straggler:start=120m"),
    ],
)
def test_the_faults_keep_their_lead_before_the_end_of_any_window(duration, hours, scenarios):
    assert demo.simulate_arguments(duration) == ["--nodes", "4", "--hours", hours, "--scenario", scenarios]


def test_every_notifying_receiver_posts_to_the_loopback_sink_only(tmp_path):
    sink = demo._Sink()
    try:
        copy = demo._loopback_config(ALERTMANAGER_YML, sink, tmp_path)
    finally:
        sink.server.server_close()
    original = yaml.safe_load(ALERTMANAGER_YML.read_text())
    rewritten = yaml.safe_load(copy.read_text())
    notifying = {r["name"] for r in original["receivers"] if any(k.endswith("_configs") for k in r)}
    assert notifying and sink.receivers == notifying
    for receiver in rewritten["receivers"]:
        integrations = {k: v for k, v in receiver.items() if k.endswith("_configs")}
        if receiver["name"] in notifying:
            assert integrations == {
                "webhook_configs": [{"url": f"{sink.url}/{receiver['name']}", "send_resolved": False}]
            }
        else:
            assert not integrations
    assert rewritten["route"] == original["route"] and rewritten["inhibit_rules"] == original["inhibit_rules"]
    done = subprocess.run([tools.find(tools.AMTOOL), "check-config", str(copy)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
