"""`build.py deploy` against a real Grafana, opt-in (docs/deploy.md#testing-against-a-real-grafana):

    GRAFANA_URL=https://grafana.example.org GRAFANA_TOKEN=glsa_... .venv/bin/python -m pytest -m grafana \
        -p no:cacheprovider -n 0 tests/test_grafana_real.py

It deploys into a throwaway folder (uid hpcobs-test-<random>) and proves what tests/test_deploy.py proves
against the fake: the first deploy creates, a rerun changes nothing (the digest survives Grafana's storage), a
threshold change updates one dashboard, --prune deletes only what hpcobs owns. It cleans up after itself.
The dashboards' uids are fixed, so it refuses a Grafana that already holds hpcobs dashboards; datasources are
left alone (--skip-datasources) unless HPCOBS_TEST_DATASOURCES=1, for a scratch Grafana whose datasources it may
create and then delete. GRAFANA_INSECURE=1 allows plain http to a host that is not this machine.
"""

from __future__ import annotations

import os
import re
import secrets

import pytest

from hpcobs.build import pipeline
from hpcobs.delivery import deploy
from hpcobs.settings import config as config_module
from tests.conftest import run_build

pytestmark = pytest.mark.grafana


@pytest.fixture(scope="module")
def grafana():
    """grafana-client on GRAFANA_URL, for the test's own setup, checks and clean-up."""
    url, token = os.environ.get("GRAFANA_URL"), os.environ.get("GRAFANA_TOKEN")
    if not url:
        pytest.skip("GRAFANA_URL is not set: `GRAFANA_URL=... GRAFANA_TOKEN=... pytest -m grafana` (docs/deploy.md)")
    if not token:
        pytest.skip("GRAFANA_TOKEN is not set: a service account token, Editor role (Admin with datasources)")
    from grafana_client import GrafanaApi

    api = GrafanaApi.from_url(url, credential=token)
    config = config_module.load()
    built = deploy.Build.of(config, pipeline.generate(config))
    taken = [d.uid for d in built.dashboards if _exists(lambda uid=d.uid: api.dashboard.get_dashboard(uid))]
    owned = [hit["uid"] for hit in api.search.search_dashboards(tag="hpcobs", type_="dash-db", limit=5000)]
    owned = [uid for uid in owned if uid.startswith(deploy.UID_PREFIX)]
    if taken or owned:
        pytest.skip(
            f"{url} already holds hpcobs dashboards {sorted(set(taken + owned))}, which --prune would "
            "delete: run against a scratch Grafana"
        )
    return api, built


def _exists(read) -> bool:
    from grafana_client.client import GrafanaClientError

    try:
        read()
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return False
        raise
    return True


@pytest.fixture
def scratch(grafana, tmp_path):
    """A site config deploying into a new folder; everything the test made there is deleted afterwards."""
    api, built = grafana
    suffix = secrets.token_hex(4)
    folder_uid = f"hpcobs-test-{suffix}"
    site = tmp_path / "site.yaml"
    site.write_text(f"grafana:\n  folder: hpcobs test {suffix}\n  folder_uid: {folder_uid}\n")
    made: list[str] = []
    yield site, folder_uid, suffix, made
    for uid in [d.uid for d in built.dashboards] + made:
        if _exists(lambda uid=uid: api.dashboard.get_dashboard(uid)):
            api.dashboard.delete_dashboard(uid)
    if _exists(lambda: api.folder.get_folder(folder_uid)):
        api.folder.delete_folder(folder_uid)
    if os.environ.get("HPCOBS_TEST_DATASOURCES") == "1":
        for datasource in built.datasources:
            if _exists(lambda uid=datasource["uid"]: api.datasource.get_datasource_by_uid(uid)):
                api.datasource.delete_datasource_by_uid(datasource["uid"])


def deploy_to_grafana(site, *extra: str):
    arguments = ["deploy", "--url", os.environ["GRAFANA_URL"], "--token-env", "GRAFANA_TOKEN", "--config", str(site)]
    if os.environ.get("HPCOBS_TEST_DATASOURCES") != "1":
        arguments.append("--skip-datasources")
    if os.environ.get("GRAFANA_INSECURE") == "1":
        arguments.append("--insecure")
    done = run_build(*arguments, *extra)
    assert os.environ["GRAFANA_TOKEN"] not in done.stdout + done.stderr
    return done


def rows(stdout: str) -> dict[str, str]:
    """uid -> action of each row of the report ("created     dashboard  hpcobs-training (Training)")."""
    found = (re.match(r"(not applied|\S+) +\S+ +(\S+)", line) for line in stdout.splitlines())
    return {match[2]: match[1] for match in found if match}


def test_deploy_converges_updates_one_dashboard_and_prunes_only_its_own(grafana, scratch):
    api, built = grafana
    site, folder_uid, suffix, made = scratch
    uids = [d.uid for d in built.dashboards]

    first = deploy_to_grafana(site)
    assert first.returncode == 0, first.stdout + first.stderr
    assert all(rows(first.stdout)[uid] == "created" for uid in uids)
    for uid in uids:
        stored = api.dashboard.get_dashboard(uid)
        assert stored["meta"]["folderUid"] == folder_uid
        assert stored["dashboard"][deploy.MARK]["sha256"] == next(d.digest for d in built.dashboards if d.uid == uid)

    again = deploy_to_grafana(site)
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(rows(again.stdout)[uid] == "unchanged" for uid in uids), again.stdout

    changed = site.parent / "changed.yaml"
    changed.write_text(site.read_text() + "thresholds:\n  training_straggler_ratio: 0.7\n")
    update = deploy_to_grafana(changed)
    assert update.returncode == 0, update.stdout + update.stderr
    assert {uid: action for uid, action in rows(update.stdout).items() if uid in uids} == {
        uid: "updated" if uid == "hpcobs-training" else "unchanged" for uid in uids
    }
    preview = deploy_to_grafana(site, "--dry-run")
    assert preview.returncode == 0 and rows(preview.stdout)["hpcobs-training"] == "update"
    assert api.dashboard.get_dashboard("hpcobs-training")["dashboard"][deploy.MARK]["sha256"] != next(
        d.digest for d in built.dashboards if d.uid == "hpcobs-training"
    )

    stale, foreign_tagged, foreign_prefixed = (
        f"hpcobs-test-stale-{suffix}",
        f"other-{suffix}",
        f"hpcobs-test-manual-{suffix}",
    )
    for uid, tags in [(stale, ["hpcobs"]), (foreign_tagged, ["hpcobs"]), (foreign_prefixed, [])]:
        made.append(uid)
        api.dashboard.update_dashboard(
            {"dashboard": {"uid": uid, "title": f"{uid} title", "tags": tags}, "folderUid": folder_uid}
        )
    pruned = deploy_to_grafana(changed, "--prune")
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    assert rows(pruned.stdout)[stale] == "deleted"
    assert not _exists(lambda: api.dashboard.get_dashboard(stale))
    assert _exists(lambda: api.dashboard.get_dashboard(foreign_tagged))
    assert _exists(lambda: api.dashboard.get_dashboard(foreign_prefixed))

    last = deploy_to_grafana(changed, "--prune")
    assert last.returncode == 0 and "0 failed" in last.stdout
    assert all(action == "unchanged" for uid, action in rows(last.stdout).items() if uid in uids), last.stdout
