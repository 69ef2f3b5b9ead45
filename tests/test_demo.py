"""`build.py demo` refuses in one line before it builds or starts anything, never notifies outside loopback, and
keeps its cluster alive: only the past is backfilled, and each exporter serves the simulated sample due at the
time it is scraped, listed in the target files of out/'s prometheus.yml (run as generated) while the simulation has it.

The demo itself runs live in tests/live/test_demo_live.py."""

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from hpcobs import cli
from hpcobs.build import tools
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import demo, loopback, servers
from hpcobs.proof.servers import exposition_prefix
from hpcobs.targets import scrape
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
    sink = loopback.Sink()
    try:
        copy = loopback.write_config(loopback.loopback_document(ALERTMANAGER_YML, sink), tmp_path)
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


@pytest.fixture(scope="module")
def live(config, tmp_path_factory):
    """The demo's cluster (the default --duration), its backfilled history and its exporters as a demo serves them."""
    past, sim = demo._simulate(config, "1h")
    families = demo._families(sim)
    folder = tmp_path_factory.mktemp("demo")
    demo._write_history(past, families, folder / demo.HISTORY)
    with demo._Exporters(sim.window, families, sim.cluster_label, folder) as exporters:
        yield past, sim, families, folder, exporters


def test_the_cluster_is_simulated_on_past_now_and_only_the_past_is_backfilled(live):
    past, sim, _, folder, _ = live
    now = time.time()
    assert sim.window.start == past.start and sim.window.step == past.step
    assert 0 <= now - (past.start + past.duration - past.step) < 2 * past.step  # the past ends at the last scrape
    assert sim.window.duration - past.duration == duration_seconds(demo.LIVE)
    stamps = {float(line.rsplit(" ", 1)[1]) for line in (folder / demo.HISTORY).open() if not line.startswith("#")}
    assert min(stamps) == past.start and max(stamps) == past.start + past.duration - past.step


@pytest.mark.parametrize("minutes", [1, 10, 60 * 24])  # the last is past LIVE: each target repeats its last scrape
def test_each_target_serves_the_simulated_sample_of_the_scrape_due_now(live, monkeypatch, minutes):
    past, sim, families, _, exporters = live
    at = past.start + past.duration + minutes * 60
    monkeypatch.setattr(demo.time, "time", lambda: at)
    scrape = min(sim.window.steps - 1, (at - sim.window.start) // sim.window.step)
    cluster = sim.cluster_label
    expected: dict[str, set[str]] = {}
    for family in families:
        for labels, values in family.series:
            path = f"/{labels['job']}/{labels['instance']}"
            own = {k: v for k, v in labels.items() if k not in ("job", "instance", cluster)}
            if family.name != "up" and values[scrape] is not None:
                expected.setdefault(path, set()).add(f"{exposition_prefix(family.name, own)} {values[scrape]}")
    assert any(p.startswith("/dcgm-exporter/") for p in expected)
    for path, lines in expected.items():
        with urllib.request.urlopen(f"http://{exporters.server.address}{path}") as response:
            assert set(response.read().decode().splitlines()) == lines, path


def test_prometheus_runs_on_the_generated_config_with_targets_listing_the_exporters_the_cluster_has_now(
    live, generated, tmp_path
):
    past, _, families, _, exporters = live
    alertmanager = servers.Alertmanager(tmp_path / "alertmanager.yml")
    alertmanager.port = 9093
    exporters.write_config(ROOT / "out" / scrape.PROMETHEUS_YML, alertmanager, tmp_path / "prometheus.yml")
    running = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    as_built = yaml.safe_load(generated[scrape.PROMETHEUS_YML])
    moved = ("file_sd_configs",)
    assert [{k: v for k, v in j.items() if k not in moved} for j in running["scrape_configs"]] == [
        {k: v for k, v in j.items() if k not in moved} for j in as_built["scrape_configs"]
    ]
    assert running["global"] == as_built["global"]
    assert running["rule_files"] == [str(ROOT / "out" / scrape.SCRAPE_DIR / p) for p in as_built["rule_files"]]
    assert running["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]
    now = (past.duration - past.step) // past.step
    up = next(f for f in families if f.name == "up").series
    for job in running["scrape_configs"]:
        (file,) = job["file_sd_configs"][0]["files"]
        listed = {g["labels"]["instance"] for g in json.loads(Path(file).read_text())}
        present = {t["instance"] for t, values in up if t["job"] == job["job_name"] and values[now] is not None}
        assert listed == present, job["job_name"]
    assert any(listed for listed in exporters.listed.values())
