"""`build.py deploy` against a fake Grafana on a loopback port (tests/grafana_fake.py): what it creates, skips,
updates and prunes, how each failure reads, that a deploy stopped halfway says what it applied and a rerun
converges, and that the token never shows. tests/test_grafana_real.py runs the same against a real Grafana."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hpcobs import cli
from hpcobs.build import pipeline
from hpcobs.delivery import deploy
from hpcobs.delivery.endpoint import Endpoint
from hpcobs.errors import UserError
from hpcobs.settings import config as config_module
from tests.conftest import ROOT
from tests.grafana_fake import FakeGrafana, forbidden

TOKEN = "glsa_q7Tz0kP2mN4vB6cD8eF1gH3iJ5kL7mN9_4f2a9c1e"
REVISION = "0123456789ab (clean)"
UIDS = [
    "hpcobs-gpu-cluster",
    "hpcobs-network-storage",
    "hpcobs-node",
    "hpcobs-security",
    "hpcobs-slurm-jobs",
    "hpcobs-training",
]
DATASOURCES = ["hpcobs-prometheus", "hpcobs-loki", "hpcobs-tempo", "hpcobs-alertmanager"]
SAVE = "/api/dashboards/db"
SERVER_ERROR = {"message": "Failed to save dashboard"}
WITHOUT_URL = ""  # run(url=WITHOUT_URL): no --url on the command line
_GENERATED: dict[str, dict[str, str]] = {}
_generate, _source_revision = pipeline.generate, deploy.source_revision


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    """Each config is generated once for the module (a build takes half a second), and the revision is fixed."""

    def generate(config):
        key = json.dumps(config.data, sort_keys=True)
        if key not in _GENERATED:
            _GENERATED[key] = _generate(config)
        return _GENERATED[key]

    monkeypatch.setattr(pipeline, "generate", generate)
    monkeypatch.setattr(deploy, "source_revision", lambda: REVISION)


@pytest.fixture
def grafana():
    with FakeGrafana(TOKEN) as fake:
        yield fake


def secret_file(path, text: str, mode: int = 0o600):
    """A token file as its owner should keep it: only they can read it (deploy refuses anything looser)."""
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def token_file(tmp_path):
    return secret_file(tmp_path / "grafana-token", TOKEN + "\n")


@dataclass
class Run:
    code: int
    out: str
    err: str

    def row(self, uid: str) -> str:
        """The report's line for one object."""
        row = re.compile(rf"\S.{{10}} \S+ +{re.escape(uid)}(?=[ :]|$)")
        rows = [line for line in self.out.splitlines() if row.match(line)]
        assert len(rows) == 1, f"{uid} in:\n{self.out}"
        return rows[0]

    @property
    def summary(self) -> str:
        return self.out.splitlines()[-1]


@pytest.fixture
def run(grafana, token_file, capsys):
    """`build.py deploy` in this process against the fake; the token must appear nowhere in what it prints."""

    def run_deploy(*extra: str, url: str | None = None, token: tuple[str, ...] | None = None) -> Run:
        where = [] if url == WITHOUT_URL else ["--url", url or grafana.url]
        arguments = ["deploy", *where, "--backoff", "0.01", "--timeout", "5", *extra]
        arguments += token if token is not None else ("--token-file", str(token_file))
        grafana.forget_requests()
        code = cli.main(arguments)
        out, err = capsys.readouterr()
        assert TOKEN not in out + err
        return Run(code, out, err)

    return run_deploy


@pytest.fixture
def site(tmp_path):
    def write(text: str):
        path = tmp_path / "site.yaml"
        path.write_text(text)
        return str(path)

    return write


def built_dashboards(site_file: str | None = None) -> dict[str, dict]:
    config = config_module.load(site_file)
    return {d.uid: d.model for d in deploy.Build.of(config, pipeline.generate(config)).dashboards}


def saves(grafana: FakeGrafana) -> list[dict]:
    return [request.body for request in grafana.requests if request.method == "POST" and request.path == SAVE]


def test_first_deploy_creates_everything_and_a_rerun_writes_nothing(run, grafana):
    first = run()
    assert first.code == 0, first.out + first.err
    assert first.row("hpcobs") == "created     folder     hpcobs (HPC)"
    assert first.row("hpcobs-prometheus") == "created     datasource hpcobs-prometheus (Prometheus)"
    assert first.row("hpcobs-gpu-cluster") == "created     dashboard  hpcobs-gpu-cluster (GPU cluster)"
    assert first.summary == (
        f"deploy to {grafana.url}: 1 folder ensured, 4 datasources created, 6 dashboards created, 0 failed"
    )
    # Every call but the health check carries the token, as a Bearer token.
    assert {r.authorization for r in grafana.requests if r.path != "/api/health"} == {f"Bearer {TOKEN}"}
    assert grafana.folders["hpcobs"]["title"] == "HPC"
    assert sorted(grafana.datasources) == sorted(DATASOURCES)
    prometheus = grafana.datasources["hpcobs-prometheus"]
    assert (prometheus["url"], prometheus["isDefault"], prometheus["jsonData"]["timeInterval"]) == (
        "http://prometheus:9090",
        True,
        "30s",
    )
    assert grafana.datasources["hpcobs-tempo"]["jsonData"] == {"tracesToLogsV2": {"datasourceUid": "hpcobs-loki"}}
    built = built_dashboards()
    assert sorted(grafana.dashboards) == UIDS
    for uid, entry in grafana.dashboards.items():
        stored = entry["model"]
        assert entry["folderUid"] == "hpcobs" and "hpcobs" in stored["tags"]
        assert stored["hpcobs"] == {"sha256": deploy.digest(built[uid]), "revision": REVISION}
        assert {k: v for k, v in stored.items() if k not in ("id", "version", "hpcobs")} == built[uid]
    assert {(body["message"], body["overwrite"], body["folderUid"]) for body in saves(grafana)} == {
        (f"hpcobs {REVISION}", False, "hpcobs")
    }

    second = run()
    assert second.code == 0 and grafana.writes() == []
    assert second.summary == (
        f"deploy to {grafana.url}: 1 folder ensured, 4 datasources unchanged, 6 dashboards unchanged, 0 failed"
    )


def test_a_threshold_change_updates_exactly_the_dashboards_it_changes(run, grafana, site):
    run()
    changed = site("thresholds:\n  training_straggler_ratio: 0.7\n")
    result = run("--config", changed)
    assert result.code == 0, result.out
    assert result.row("hpcobs-training") == "updated     dashboard  hpcobs-training (Training)"
    assert all("unchanged" in result.row(uid) for uid in UIDS if uid != "hpcobs-training")
    # One write, carrying the version it read, so that an edit made in between is refused, not replaced.
    assert [(r.method, r.path) for r in grafana.writes()] == [("POST", SAVE)]
    (body,) = saves(grafana)
    assert (body["dashboard"]["uid"], body["dashboard"]["version"]) == ("hpcobs-training", 1)
    assert grafana.dashboards["hpcobs-training"]["model"]["version"] == 2
    assert result.summary.endswith("1 dashboard updated, 5 unchanged, 0 failed")


def test_dry_run_writes_nothing_and_shows_the_semantic_diff(run, grafana, site):
    fresh = run("--dry-run")
    assert fresh.code == 0 and grafana.writes() == []
    assert fresh.row("hpcobs-security") == "create      dashboard  hpcobs-security (Security)"
    assert fresh.summary == (
        f"dry run against {grafana.url}, nothing written: 1 folder to create, 4 datasources to create, "
        "6 dashboards to create, 0 failed"
    )
    run()
    changed = site("thresholds:\n  training_straggler_ratio: 0.7\n")
    result = run("--dry-run", "--config", changed)
    assert result.code == 0 and grafana.writes() == []
    assert result.row("hpcobs-training") == "update      dashboard  hpcobs-training (Training)"
    review = pytest.importorskip("hpcobs.delivery.review")
    if not hasattr(review, "compare_dashboards"):
        pytest.skip("hpcobs.delivery.review.compare_dashboards is not written yet")
    stored = {k: v for k, v in grafana.dashboards["hpcobs-training"]["model"].items() if k not in deploy.GRAFANA_KEYS}
    diff = review.compare_dashboards(stored, built_dashboards(changed)["hpcobs-training"])
    assert diff, "the straggler threshold is shown on the training dashboard"
    lines = result.out.splitlines()
    start = lines.index(result.row("hpcobs-training")) + 1
    assert lines[start : start + len(diff)] == [f"    {line}" if line else "" for line in diff]


def test_prune_deletes_only_owned_dashboards_the_build_no_longer_makes(run, grafana):
    grafana.add_folder("hpcobs", "HPC")
    grafana.add_dashboard({"uid": "hpcobs-old", "title": "Old", "tags": ["hpcobs"]}, "hpcobs")
    foreign = {
        "team-gpu": {"uid": "team-gpu", "title": "Team GPU", "tags": ["hpcobs", "gpu"]},  # the tag, not the prefix
        "hpcobs-handmade": {"uid": "hpcobs-handmade", "title": "Handmade", "tags": ["gpu"]},  # the prefix only
        "unrelated": {"uid": "unrelated", "title": "Unrelated", "tags": []},
    }
    for model in foreign.values():
        grafana.add_dashboard(model, "hpcobs")

    listed = run()
    assert listed.code == 0
    assert listed.row("hpcobs-old") == "stale       dashboard  hpcobs-old (Old): no longer built; --prune deletes it"
    assert "hpcobs-old" in grafana.dashboards

    planned = run("--prune", "--dry-run")
    assert planned.row("hpcobs-old") == "delete      dashboard  hpcobs-old (Old): no longer built"
    assert grafana.writes() == []

    pruned = run("--prune")
    assert pruned.code == 0
    assert pruned.row("hpcobs-old") == "deleted     dashboard  hpcobs-old (Old): no longer built"
    assert [(r.method, r.path) for r in grafana.writes()] == [("DELETE", "/api/dashboards/uid/hpcobs-old")]
    assert sorted(grafana.dashboards) == sorted(UIDS + list(foreign))
    assert pruned.summary.endswith("6 dashboards unchanged, 1 deleted, 0 failed")
    for line in pruned.out.splitlines():
        assert not any(uid in line for uid in foreign), line
    assert run("--prune").code == 0 and grafana.writes() == []


def test_a_bad_token_stops_at_the_first_call_with_one_line(run, grafana, tmp_path):
    wrong = secret_file(tmp_path / "wrong-token", "glsa_expired_0000000000000000\n")
    result = run(token=("--token-file", str(wrong)))
    assert result.code == 1 and grafana.writes() == []
    assert result.row("hpcobs") == (
        "failed      folder     hpcobs (HPC): Grafana refused the token (401 Invalid API key) on GET "
        "/api/folders/hpcobs: it is invalid, expired or revoked; create a service account token with the Editor "
        "role, Admin to manage datasources too (docs/deploy.md#token)"
    )
    assert result.out.splitlines()[2:] == [
        f"not applied 10 items (4 datasources, 6 dashboards) to {grafana.url}: deploy stopped at the failure above",
        f"deploy to {grafana.url}: 0 folders, 0 datasources, 0 dashboards, 1 failed, 10 not applied",
    ]
    assert result.err.strip() == "deploy incomplete: nothing applied; fix the failure and rerun"
    assert "glsa_expired" not in result.out + result.err


@pytest.mark.parametrize(
    ("method", "path", "body", "uid", "needed"),
    [
        ("POST", "/api/folders", forbidden("folders:create"), "hpcobs", "folders:create"),
        ("POST", "/api/datasources", forbidden("datasources:create"), "hpcobs-loki", "datasources:create"),
        # Grafana before RBAC answered only "Access denied": the line names what the request needs.
        ("POST", SAVE, {"message": "Access denied to save dashboard"}, "hpcobs-security", "dashboards:create"),
    ],
)
def test_a_missing_permission_names_it(run, grafana, method, path, body, uid, needed):
    grafana.fail(method, path, 403, body)
    result = run()
    assert result.code == 1
    assert (
        f": permission denied (403) on {method} {path}: the token's service account lacks {needed}; give it the "
        in (result.row(uid))
    )
    assert result.row(uid).startswith("failed ")
    if needed.startswith("datasources"):
        assert result.row(uid).endswith("Admin role (Editors cannot manage datasources), or pass --skip-datasources")
    if uid == "hpcobs":  # no folder, so no dashboard; the datasources do not need it
        assert f"not applied 6 dashboards to {grafana.url}: its folder is not in place" in result.out.splitlines()
        assert result.row("hpcobs-loki").startswith("created ")
        assert grafana.dashboards == {}


def test_a_wrong_sub_path_is_named_before_any_token_is_sent(run, grafana):
    result = run(url=f"{grafana.url}/grafana")
    assert result.code == 1
    assert result.row(f"{grafana.url}/grafana") == (
        f"failed      grafana    {grafana.url}/grafana: Grafana answered 404 (a web page, not Grafana's API) to GET "
        "/api/health: check that --url is Grafana's root URL, with its sub-path if it is served under one "
        "(https://host/grafana)"
    )
    assert [r.path for r in grafana.requests] == ["/grafana/api/health"]


def test_a_folder_deleted_during_the_deploy_is_named(run, grafana):
    grafana.fail("POST", SAVE, 400, {"message": "folder not found"}, times=1)
    result = run()
    assert result.code == 1
    assert result.row("hpcobs-gpu-cluster").endswith(
        "Grafana answered 400 (folder not found) to POST /api/dashboards/db: the folder was deleted while deploy "
        "ran; rerun deploy, which creates it again"
    )
    assert result.row("hpcobs-training").startswith("created ")  # a 4xx fails one dashboard, not the deploy


def test_412_names_the_conflict(run, grafana, site):
    # A dashboard of someone else titled like ours, in our folder: Grafana before 11 refuses ours (name-exists);
    # with `overwrite: true` ours would have taken it over, uid and all.
    grafana.add_folder("hpcobs", "HPC")
    grafana.add_dashboard({"uid": "team-training", "title": "Training", "tags": ["ml"]}, "hpcobs")
    result = run()
    assert result.code == 1
    assert result.row("hpcobs-training") == (
        "failed      dashboard  hpcobs-training (Training): Grafana answered 412 (A dashboard with the same name in "
        "the folder already exists) to POST /api/dashboards/db: another dashboard in the folder has the same title; "
        "rename or move that one (deploy never overwrites a dashboard it does not own)"
    )
    assert grafana.dashboards["team-training"]["model"]["version"] == 1
    del grafana.dashboards["team-training"]
    assert run().code == 0

    # Changed in Grafana between deploy's read and its write.
    grafana.fail(
        "POST",
        SAVE,
        412,
        {"message": "The dashboard has been changed by someone else", "status": "version-mismatch"},
        times=1,
    )
    result = run("--config", site("thresholds:\n  training_straggler_ratio: 0.7\n"))
    assert result.row("hpcobs-training").endswith(
        "Grafana answered 412 (The dashboard has been changed by someone else) to POST /api/dashboards/db: it "
        "changed in Grafana after this deploy read it; rerun deploy, which reads it again and replaces it"
    )


def test_5xx_is_retried_and_then_succeeds(run, grafana):
    grafana.fail("POST", SAVE, 500, SERVER_ERROR, times=2)
    result = run()
    assert result.code == 0, result.out
    assert result.row("hpcobs-gpu-cluster") == "created     dashboard  hpcobs-gpu-cluster (GPU cluster)"
    assert [body["dashboard"]["uid"] for body in saves(grafana)] == [UIDS[0]] * 3 + UIDS[1:]


def test_a_timeout_is_retried_and_a_lost_answer_is_not_written_twice(run, grafana):
    grafana.fail("GET", "/api/folders/hpcobs", delay=0.6, times=1)
    # The first save is applied, but only after the client gave up: the retry reads it back and writes nothing.
    grafana.fail("POST", SAVE, delay=0.6, times=1)
    result = run("--timeout", "0.3", "--backoff", "0.5")
    assert result.code == 0, result.out
    assert result.row("hpcobs") == "created     folder     hpcobs (HPC)"
    assert result.row("hpcobs-gpu-cluster") == "created     dashboard  hpcobs-gpu-cluster (GPU cluster)"
    assert [body["dashboard"]["uid"] for body in saves(grafana)] == UIDS
    assert grafana.dashboards["hpcobs-gpu-cluster"]["model"]["version"] == 1


def test_an_unreachable_or_untrusted_grafana_is_one_line(run, grafana):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    refused = run("--retries", "1", url=closed)
    assert refused.code == 1
    assert refused.row(closed) == (
        f"failed      grafana    {closed}: cannot connect to {closed} (Connection refused), 2 attempts; check "
        "--url and that Grafana is up and reachable from here"
    )
    # TLS to a server speaking plain http: not retried, as a certificate does not fix itself.
    tls = f"https://127.0.0.1:{grafana.port}"
    untrusted = run(url=tls)
    assert untrusted.row(tls) == (
        f"failed      grafana    {tls}: cannot connect to {tls} over TLS (wrong version number); give Grafana a "
        "certificate this machine trusts"
    )


def test_a_dry_run_does_not_retry_and_names_what_it_left_in_one_line(run, grafana):
    grafana.fail("GET", "/api/health", 503, {"message": "database is locked"})
    dry = run("--dry-run")
    assert dry.code == 1 and [r.path for r in grafana.requests] == ["/api/health"]
    assert dry.out.splitlines() == [
        f"failed      grafana    {grafana.url}: Grafana answered 503 (database is locked) to GET /api/health, "
        "1 attempt; see Grafana's log, then rerun (deploy converges)",
        f"not applied 11 items (1 folder, 4 datasources, 6 dashboards) to {grafana.url}: deploy stopped at the "
        "failure above",
        f"dry run against {grafana.url}, nothing written: 0 folders, 0 datasources, 0 dashboards, 1 failed, "
        "11 not applied",
    ]
    # A deploy that writes retries, unless told otherwise, as does a dry run given --retries.
    assert len(run().out.splitlines()) == 3 and len(grafana.requests) == 1 + deploy.RETRIES
    assert run("--dry-run", "--retries", "1").code == 1 and len(grafana.requests) == 2


def test_timeouts_after_the_last_retry_stop_the_deploy(run, grafana):
    grafana.fail("GET", "/api/folders/hpcobs", delay=0.5)
    result = run("--timeout", "0.2", "--retries", "1")
    assert result.code == 1
    assert result.row("hpcobs") == (
        "failed      folder     hpcobs (HPC): no answer to GET /api/folders/hpcobs within 0.2 s, 2 attempts; a "
        "write may or may not have been applied: rerun once Grafana answers (deploy converges), or raise --timeout"
    )


def test_a_failure_halfway_reports_what_was_applied_and_a_rerun_converges(run, grafana):
    grafana.fail("POST", SAVE, 500, SERVER_ERROR, skip=2)
    stopped = run()
    assert stopped.code == 1
    assert stopped.row("hpcobs-network-storage").startswith("created ")
    assert stopped.row("hpcobs-node") == (
        "failed      dashboard  hpcobs-node (Node): Grafana answered 500 (Failed to save dashboard) to "
        "POST /api/dashboards/db, 4 attempts; see Grafana's log, then rerun (deploy converges)"
    )
    assert stopped.out.splitlines()[-2] == (
        f"not applied 3 dashboards to {grafana.url}: deploy stopped at the failure above"
    )
    assert stopped.err.strip() == (
        "deploy incomplete: applied created folder hpcobs, "
        + ", ".join(f"created datasource {uid}" for uid in DATASOURCES)
        + ", created dashboard hpcobs-gpu-cluster, created dashboard hpcobs-network-storage; not applied: "
        "dashboard hpcobs-node (failed), dashboard hpcobs-security, dashboard hpcobs-slurm-jobs, "
        "dashboard hpcobs-training; fix the failure and rerun, which skips what is already in place"
    )
    assert stopped.summary.endswith("2 dashboards created, 1 failed, 3 not applied")
    assert sorted(grafana.dashboards) == UIDS[:2]

    grafana.faults.clear()
    rerun = run()
    assert rerun.code == 0
    assert [line.split()[0] for line in rerun.out.splitlines()[1:-1]] == ["unchanged"] * 7 + ["created"] * 4
    assert [body["dashboard"]["uid"] for body in saves(grafana)] == UIDS[2:]
    third = run()
    assert third.code == 0 and grafana.writes() == []
    assert third.summary.endswith("1 folder ensured, 4 datasources unchanged, 6 dashboards unchanged, 0 failed")


def _echo_authorization(request) -> dict:
    return {"message": f"upstream rejected request with Authorization: {request.authorization}"}


@pytest.mark.parametrize(
    ("method", "path", "status", "body", "shown"),
    [
        ("GET", "/api/folders/hpcobs", 500, _echo_authorization, "Authorization: Bearer <token>"),
        ("POST", SAVE, 502, lambda request: f"<html>bad gateway {request.authorization}</html>", "a web page"),
        ("POST", "/api/datasources", 409, _echo_authorization, "Authorization: Bearer <token>"),
        # An answer grafana-client cannot decode: it raises inside the client.
        ("GET", "/api/dashboards/uid/hpcobs-security", 200, lambda request: f"{request.authorization}", "JSONDecode"),
    ],
)
def test_the_token_is_never_printed_even_when_grafana_echoes_it(run, grafana, method, path, status, body, shown):
    grafana.fail(method, path, status, body)
    result = run("--retries", "1")  # `run` asserts the token appears nowhere
    assert result.code == 1
    assert shown in result.out


def test_an_exception_inside_grafana_client_is_one_line_without_the_token(run, grafana, monkeypatch):
    from grafana_client.elements.dashboard import Dashboard

    def broken(self, uid):
        raise RuntimeError(f"internal state {TOKEN}")

    monkeypatch.setattr(Dashboard, "get_dashboard", broken)
    result = run()
    assert result.code == 1
    assert result.row("hpcobs-gpu-cluster") == (
        "failed      dashboard  hpcobs-gpu-cluster (GPU cluster): unexpected answer from Grafana (RuntimeError: "
        "internal state <token>)"
    )
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "http://grafana.example.com",
            "--url http://grafana.example.com: plain http to grafana.example.com, which is not this machine, would "
            "send the token unencrypted; use https, or pass --insecure if that network is trusted",
        ),
        ("ftp://grafana.example.com", "--url ftp://grafana.example.com: not an http(s) URL with a host"),
        (
            "https://admin:s3cret@grafana.example.com",
            "--url holds credentials (user:password@); remove them and pass a service account token",
        ),
        ("https://grafana.example.com/?orgId=2", "has a query or fragment"),
        ("https://grafana.example.com:99999", "--url: Port out of range 0-65535"),
    ],
)
def test_an_unsafe_or_malformed_url_is_refused_before_connecting(run, grafana, url, problem):
    result = run(url=url)
    assert result.code == 2 and result.out == ""
    assert len(result.err.splitlines()) == 1 and result.err.startswith("deploy error: ") and problem in result.err
    assert "s3cret" not in result.err
    assert grafana.requests == []


def test_grafana_url_of_the_site_file_is_the_default_url(run, grafana, site):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    deployed = run("--config", site(f"grafana:\n  url: {grafana.url}\n"), url=WITHOUT_URL)
    assert deployed.code == 0, deployed.out + deployed.err
    assert deployed.summary.startswith(f"deploy to {grafana.url}: 1 folder ensured")
    # --url overrides it; a Grafana the site file names but that does not answer is named with the key.
    unreachable = site(f"grafana:\n  url: {closed}\n")
    assert run("--config", unreachable).code == 0
    failed = run("--config", unreachable, "--dry-run", url=WITHOUT_URL)
    assert failed.row(closed).endswith(
        f"check grafana.url of {unreachable} and that Grafana is up and reachable from here"
    )


def test_without_url_or_grafana_url_in_the_site_file_deploy_names_both(run, grafana, site):
    # config/default.yaml's grafana.url (http://grafana:3000) stands for the site's own: no token is sent to it.
    without_url = site("grafana:\n  folder: Cluster\n")
    for extra, where in [((), "the site file (--config FILE)"), (("--config", without_url), without_url)]:
        result = run(*extra, url=WITHOUT_URL)
        assert (result.code, result.out) == (2, "")
        assert result.err == (
            f"deploy error: no Grafana URL; set grafana.url in {where}, or pass --url (e.g. https://grafana.example.org)\n"
        )
    unsafe = site("grafana:\n  url: http://grafana.example.org\n")
    refused = run("--config", unsafe, url=WITHOUT_URL)
    assert refused.code == 2 and refused.err.startswith(
        f"deploy error: grafana.url of {unsafe} http://grafana.example.org: plain http to grafana.example.org"
    )
    assert grafana.requests == []


def test_the_help_says_where_the_url_comes_from(capsys):
    with pytest.raises(SystemExit):
        cli.main(["deploy", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: grafana.url of the --config site file; one of the two is required)" in text
    assert "(default 3; 0 with --dry-run, which writes nothing and is rerun at no cost)" in text


def test_plain_http_is_allowed_to_loopback_and_with_insecure(run, grafana):
    assert run(url=f"http://localhost:{grafana.port}").code == 0
    assert run(url=f"http://127.0.0.1:{grafana.port}/").code == 0
    assert run("--insecure", url=grafana.url).code == 0
    for url, sub_path in [
        ("https://grafana.example.org", ""),
        ("https://example.org/tools/grafana/", "tools/grafana/"),
        ("http://[::1]:3000", ""),
    ]:
        assert Endpoint.parse(url, insecure=False).sub_path == sub_path
    assert Endpoint.parse("http://[::1]:3000", insecure=False).url == "http://[::1]:3000"
    with pytest.raises(UserError):
        Endpoint.parse("http://10.0.0.7:3000", insecure=False)


def test_the_token_comes_from_a_file_or_a_variable_never_the_command_line(run, grafana, tmp_path, monkeypatch):
    monkeypatch.setenv("HPCOBS_TEST_GRAFANA_TOKEN", TOKEN)
    assert run(token=("--token-env", "HPCOBS_TEST_GRAFANA_TOKEN")).code == 0
    two_lines = secret_file(tmp_path / "two-lines", f"{TOKEN}\nglsa_another\n")
    empty = secret_file(tmp_path / "empty", "\n")
    monkeypatch.setenv("HPCOBS_TEST_EMPTY", "")
    for token, problem in [
        ((), "deploy error: no token; pass --token-file FILE or --token-env VAR"),
        (("--token-file", str(tmp_path / "missing")), "missing: file not found; write the token to it"),
        (("--token-file", str(empty)), "empty: empty or unset; it must hold the service account token"),
        (("--token-file", str(two_lines)), "two-lines: holds more than one token"),
        (("--token-file", str(tmp_path)), ": not a regular file"),
        (("--token-env", "HPCOBS_TEST_UNSET_VARIABLE"), "HPCOBS_TEST_UNSET_VARIABLE: empty or unset"),
        (("--token-env", "HPCOBS_TEST_EMPTY"), "HPCOBS_TEST_EMPTY: empty or unset"),
    ]:
        result = run(token=token)
        assert (result.code, result.out) == (2, ""), token
        assert len(result.err.splitlines()) == 1 and problem in result.err, (token, result.err)
    assert not grafana.writes()
    assert "--token " not in cli.parser().format_help()


@pytest.mark.parametrize(
    ("mode", "accepted"),
    [
        pytest.param(mode, accepted, id=f"{mode:04o}")
        for mode, accepted in [
            (0o600, True),
            (0o400, True),
            (0o640, False),
            (0o644, False),
            (0o620, False),
            (0o604, False),
        ]
    ],
)
def test_a_token_file_other_users_can_read_or_write_is_refused(run, grafana, tmp_path, mode, accepted):
    path = secret_file(tmp_path / "grafana-token", TOKEN + "\n", mode)
    result = run(token=("--token-file", str(path)))
    if accepted:
        assert result.code == 0, result.out + result.err
    else:
        assert (result.code, result.out) == (2, "") and grafana.requests == []
        assert result.err == (
            f"deploy error: --token-file {path}: mode {mode:04o} lets other users read or change the token; "
            f"run chmod 600 {path}\n"
        )


def test_a_token_file_must_be_a_regular_file_and_a_link_to_one_is_followed(run, grafana, tmp_path):
    secret = secret_file(tmp_path / "secret", TOKEN + "\n")
    readable = secret_file(tmp_path / "readable", TOKEN + "\n", 0o644)
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "link-to-readable").symlink_to(readable)
    assert run(token=("--token-file", str(tmp_path / "link"))).code == 0
    refused = run(token=("--token-file", str(tmp_path / "link-to-readable")))
    assert refused.code == 2 and "link-to-readable: mode 0644 lets other users read or change the token" in refused.err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    # The FIFO comes last: read as a file, it would wait for a writer forever.
    for path in (tmp_path, "/dev/null", fifo):
        result = run(token=("--token-file", str(path)))
        assert (result.code, result.out) == (2, ""), path
        assert result.err == (
            f"deploy error: --token-file {path}: not a regular file; write the token to a file only you can read "
            "(chmod 600), or pass it with --token-env\n"
        )
    assert not grafana.writes()


@dataclass
class EnvironmentProxy:
    """A proxy on a loopback port that records each request it receives and answers 502, and an environment
    naming it in every proxy variable, no_proxy unset, as on a machine behind a corporate proxy."""

    seen: list[str]
    environment: dict[str, str]


@pytest.fixture
def environment_proxy():
    seen: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def record(self) -> None:
            seen.append(f"{self.command} {self.path} {self.headers.get('Authorization')}")
            self.send_error(502)

        do_GET = do_POST = do_PUT = do_DELETE = do_CONNECT = record

        def log_message(self, format, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    environment = {name: value for name, value in os.environ.items() if name.lower() != "no_proxy"}
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        environment |= {name: address, name.upper(): address}
    yield EnvironmentProxy(seen, environment)
    server.shutdown()
    server.server_close()


def deploy_process(url: str, token_file, environment: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """`build.py deploy` in a process of its own: niquests reads the proxy variables once per process."""
    command = [sys.executable, "build.py", "deploy", "--url", url, "--token-file", str(token_file), *extra]
    done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert TOKEN not in done.stdout + done.stderr
    return done


def test_a_grafana_on_this_machine_is_reached_directly_never_through_an_environment_proxy(
    grafana, token_file, environment_proxy
):
    for url in (grafana.url, f"http://localhost:{grafana.port}"):
        done = deploy_process(url, token_file, environment_proxy.environment)
        assert environment_proxy.seen == [], url
        assert done.returncode == 0, done.stdout + done.stderr
    assert grafana.requests and all(request.authorization == f"Bearer {TOKEN}" for request in grafana.requests)
    assert environment_proxy.seen == []


def test_another_host_is_still_reached_through_the_environment_proxy(grafana, token_file, environment_proxy):
    done = deploy_process(
        "http://grafana.example.org", token_file, environment_proxy.environment, "--insecure", "--retries", "0"
    )
    assert done.returncode == 1
    assert environment_proxy.seen == [f"GET http://grafana.example.org/api/health Bearer {TOKEN}"]
    assert grafana.requests == []


def test_datasources_are_upserted_by_uid_keeping_what_the_build_does_not_set(run, grafana):
    grafana.add_datasource(
        {
            "uid": "hpcobs-prometheus",
            "name": "Prometheus",
            "type": "prometheus",
            "url": "http://old-prometheus:9090",
            "basicAuth": True,
            "basicAuthUser": "grafana",
            "isDefault": True,
            "jsonData": {"timeInterval": "30s", "httpMethod": "POST", "exemplarTraceIdDestinations": []},
            "secureJsonFields": {"basicAuthPassword": True},
        }
    )
    grafana.add_datasource(
        {"uid": "hpcobs-loki", "name": "Loki", "type": "loki", "url": "http://elsewhere:3100"}, read_only=True
    )
    result = run()
    assert result.row("hpcobs-prometheus") == (
        "updated     datasource hpcobs-prometheus (Prometheus): url differs from this build"
    )
    assert result.row("hpcobs-loki") == (
        "failed      datasource hpcobs-loki (Loki): url differs from this build, but it is read-only in Grafana, "
        "provisioned from a file there; change that file, or remove the datasource from it to let deploy manage it"
    )
    assert result.code == 1
    prometheus = grafana.datasources["hpcobs-prometheus"]
    assert prometheus["url"] == "http://prometheus:9090"
    assert (prometheus["basicAuth"], prometheus["basicAuthUser"], prometheus["secureJsonFields"]) == (
        True,
        "grafana",
        {"basicAuthPassword": True},
    )
    assert prometheus["jsonData"]["exemplarTraceIdDestinations"] == []
    (update,) = [r.body for r in grafana.writes() if r.method == "PUT"]
    assert update["version"] == 1  # Grafana refuses an update older than what it holds


def test_a_datasource_or_folder_name_taken_under_another_uid_is_named(run, grafana):
    grafana.add_folder("ops-hpc", "HPC")
    grafana.add_datasource({"uid": "PBFA97CFB590B2093", "name": "Tempo", "type": "tempo", "url": "http://t:3200"})
    result = run()
    assert result.code == 1
    assert result.row("hpcobs") == (
        "failed      folder     hpcobs (HPC): Grafana answered 409 (a folder or dashboard in the general folder with "
        "the same name already exists) to POST /api/folders: another folder or datasource in Grafana already has "
        "this name under another uid; rename that one, or set this one's uid in the config (grafana.folder_uid, "
        "grafana.datasources.<kind>.uid) to deploy into it"
    )
    assert "409 (data source with the same name already exists)" in result.row("hpcobs-tempo")
    assert grafana.dashboards == {} and grafana.datasources["PBFA97CFB590B2093"]["url"] == "http://t:3200"


def test_dashboards_edited_in_grafana_are_replaced_and_foreign_ones_left_alone(run, grafana):
    run()
    edited = grafana.dashboards["hpcobs-security"]["model"]
    edited["title"] = "Security (edited by hand)"
    grafana.dashboards["hpcobs-training"]["folderUid"] = ""
    result = run()
    assert result.row("hpcobs-security") == (
        "updated     dashboard  hpcobs-security (Security): changed in Grafana since the last deploy"
    )
    assert result.row("hpcobs-training") == (
        "updated     dashboard  hpcobs-training (Training): moved into folder hpcobs"
    )
    assert grafana.dashboards["hpcobs-security"]["model"]["title"] == "Security"

    grafana.dashboards.clear()
    grafana.add_dashboard({"uid": "hpcobs-security", "title": "Someone's", "tags": []}, "hpcobs")
    grafana.add_dashboard({"uid": "hpcobs-training", "title": "Training", "tags": ["hpcobs"]}, provisioned=True)
    result = run()
    assert result.row("hpcobs-security").endswith(
        "a dashboard with this uid exists in Grafana without the 'hpcobs' tag, so hpcobs does not own it and "
        "leaves it as it is; delete it, or tag it 'hpcobs' to let deploy replace it"
    )
    assert result.row("hpcobs-training").endswith(
        "it is provisioned from files in this Grafana; deploy through one way only, files "
        "(out/grafana/provisioning) or build.py deploy"
    )
    assert grafana.dashboards["hpcobs-security"]["model"]["title"] == "Someone's"
    assert {body["dashboard"]["uid"] for body in saves(grafana)} == set(UIDS) - {"hpcobs-security", "hpcobs-training"}


def test_skip_datasources_leaves_them_alone(run, grafana):
    grafana.fail("GET", "/api/datasources/uid/.*", 403, forbidden("datasources:read"))
    result = run("--skip-datasources")
    assert result.code == 0, result.out
    assert grafana.datasources == {} and not any(r.path.startswith("/api/datasources") for r in grafana.requests)
    assert result.summary == (
        f"deploy to {grafana.url}: 1 folder ensured, datasources skipped, 6 dashboards created, 0 failed"
    )


def test_a_new_folder_title_renames_the_folder(run, grafana, site):
    run()
    result = run("--config", site("grafana:\n  folder: GPU HPC\n"))
    assert result.code == 0
    assert result.row("hpcobs") == "updated     folder     hpcobs (GPU HPC): renamed from 'HPC'"
    assert grafana.folders["hpcobs"]["title"] == "GPU HPC"
    assert all("unchanged" in result.row(uid) for uid in UIDS)


def test_the_folder_uid_is_configured_and_checked(site):
    assert config_module.load().get("grafana", "folder_uid") == "hpcobs"
    for uid, problem in [
        ("hpcobs-training", "is the uid of an hpcobs dashboard"),
        ("x" * 41, "is not a Grafana uid: 1-40 letters, digits, - or _"),
        ("with space", "is not a Grafana uid"),
    ]:
        with pytest.raises(UserError) as caught:
            config_module.load(site(f"grafana:\n  folder_uid: '{uid}'\n"))
        assert len(caught.value.lines) == 1 and problem in caught.value.lines[0]


def test_every_dashboard_the_build_makes_is_owned():
    built = built_dashboards()
    assert sorted(built) == UIDS
    assert all("hpcobs" in model["tags"] and model["uid"].startswith(deploy.UID_PREFIX) for model in built.values())


def test_the_message_names_the_git_revision():
    assert re.fullmatch(r"[0-9a-f]{12} \((clean|dirty)\)|unknown", _source_revision())


def test_a_build_never_imports_grafana_client():
    code = (
        "import sys\nfrom hpcobs import cli\nfrom hpcobs.delivery import deploy\ncli.parser()\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'grafana_client', 'niquests'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
