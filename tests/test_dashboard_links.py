"""Every link lands on a dashboard the build writes, with variables it has (issue 30, item 2): each alert's
dashboard_url opens the view of what the alert is about, and each link of a dashboard (dashboard links, panel and
field data links, table column links) opens a built dashboard with every variable it passes. A notification opens
the dashboard on a window centred on the alert's start."""

import json
import re
import subprocess
from datetime import UTC, datetime

import pytest
import yaml

from hpcobs.authoring.rules import Alert
from hpcobs.build import pipeline, tools
from hpcobs.settings.names import DashboardUid
from hpcobs.targets import alertmanager_templates

DASHBOARDS = "grafana/dashboards/"
RULE_FILES = ("prometheus/rules/", "loki/rules/")
# A link to a dashboard, wherever it is written: `/d/<uid>` and its query up to the end of the URL.
LINK = re.compile(r"/d/(?P<uid>[a-z0-9-]+)(?P<query>\?[^\s\"')\]]*)?")
PASSED = re.compile(r"[?&]var-([A-Za-z0-9_]+)=")
ACTION = re.compile(r"\{\{.*?\}\}")  # a Go template action of an annotation (a label value)

# What an alert is about decides where its link lands (by the labels it carries in every firing case):
# a job opens the job's view, a GPU or a node the node's view, anything else its domain's dashboard.
JOB = (DashboardUid.TRAINING, {"hpc_job"})
GPU = (DashboardUid.NODE, {"node", "gpu"})
NODE = (DashboardUid.NODE, {"node"})
# An alert about no one job or node: its domain's dashboard by its name, and the partition or filesystem it names.
DOMAINS = {
    "Gpu": DashboardUid.GPU_CLUSTER,
    "Ib": DashboardUid.NETWORK_STORAGE,
    "Storage": DashboardUid.NETWORK_STORAGE,
    "Slurm": DashboardUid.SLURM_JOBS,
    "Security": DashboardUid.SECURITY,
    "Training": DashboardUid.TRAINING,
    # A cluster-wide exporter: the dashboard of what it feeds.
    "ExporterSlurm": DashboardUid.SLURM_JOBS,
}
DOMAIN_FILTERS = {"partition", "fs"}
# Alerts whose node label names a host serving the whole cluster, not a compute node of the node view.
SERVER_HOSTS = ("StorageLustre", "ExporterSlurmDown")


def expected_view(alert: Alert) -> tuple[str, set[str]]:
    carried = alert.labels_carried()
    if "hpc_job" in carried:
        return JOB
    if "node" in carried and not alert.alert.startswith(SERVER_HOSTS):
        return GPU if "gpu" in carried else NODE
    domain = max((prefix for prefix in DOMAINS if alert.alert.startswith(prefix)), key=len)
    return DOMAINS[domain], carried & DOMAIN_FILTERS


@pytest.fixture(scope="module")
def built(config):
    return pipeline.model(config)


@pytest.fixture(scope="module")
def variables(generated) -> dict[str, set[str]]:
    """The variables of each built dashboard, by uid (the node dashboard's too, once it is built)."""
    out = {}
    for path, text in generated.items():
        if path.startswith(DASHBOARDS):
            model = json.loads(text)
            out[model["uid"]] = {variable["name"] for variable in model["templating"]["list"]}
    return out


@pytest.fixture(scope="module")
def alerts(built) -> dict[str, Alert]:
    rules = [rule for groups in built.rule_groups.values() for group in groups for rule in group.rules]
    rules += [log.rule for group in built.log_groups for log in group.rules]
    return {rule.alert: rule for rule in rules if isinstance(rule, Alert)}


@pytest.fixture(scope="module")
def dashboard_urls(generated) -> dict[str, str | None]:
    """Each alert of the generated Prometheus and Loki rule files: its dashboard_url (None without one), its
    template actions (label values) replaced by a plain value."""
    out = {}
    for path, text in generated.items():
        if path.startswith(RULE_FILES) and path.endswith((".yaml", ".yml")):
            for group in yaml.safe_load(text).get("groups", []):
                for rule in group["rules"]:
                    if "alert" in rule:
                        url = rule.get("annotations", {}).get("dashboard_url")
                        out[rule["alert"]] = url and ACTION.sub("value", url)
    return out


def target(url: str) -> tuple[str, set[str]]:
    link = LINK.search(url)
    assert link, url
    return link["uid"], set(PASSED.findall(link["query"] or ""))


def test_every_alert_opens_the_view_of_what_it_is_about(alerts, dashboard_urls, variables, config):
    """Job alerts the job's view with the job, GPU and node alerts the node's view with the node (and GPU), the
    others their domain's dashboard; always with the cluster. An alert whose view is not built has no link."""
    cluster = config.get("cluster", "label")
    assert set(dashboard_urls) == set(alerts)
    wrong = {}
    for name, url in dashboard_urls.items():
        uid, passed = expected_view(alerts[name])
        found = target(url) if url else None
        if found != ((uid, passed | {cluster}) if uid in variables else None):
            wrong[name] = (found, (uid, sorted(passed | {cluster})))
    assert not wrong, "\n".join(f"{name}: links to {got}, should to {want}" for name, (got, want) in wrong.items())


def test_every_alert_carries_the_labels_its_link_passes(alerts, dashboard_urls):
    """A label the alert lacks would set the variable to an empty value."""
    missing = {
        name: passed - alerts[name].labels_carried()
        for name, url in dashboard_urls.items()
        if url and (passed := target(url)[1]) - alerts[name].labels_carried()
    }
    assert not missing


def test_every_alert_link_opens_a_built_dashboard_with_its_variables(dashboard_urls, variables):
    wrong = {}
    for name, url in dashboard_urls.items():
        if url:
            uid, passed = target(url)
            if uid not in variables or passed - variables[uid]:
                wrong[name] = (uid, sorted(passed - variables.get(uid, set())))
    assert not wrong, wrong


def test_every_alert_has_a_dashboard_link(dashboard_urls, variables):
    assert [name for name, url in dashboard_urls.items() if not url] == []


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_every_dashboard_link_opens_a_built_dashboard_with_its_variables(generated, variables):
    """Dashboard links, panel and field data links, table column links (overrides) and Markdown links alike."""
    wrong, seen = {}, 0
    for path, text in generated.items():
        if not path.startswith(DASHBOARDS):
            continue
        model = json.loads(text)
        for string in _strings(model):
            for link in LINK.finditer(string):
                seen += 1
                uid, passed = target(link[0])
                if uid not in variables or passed - variables[uid]:
                    wrong[f"{model['uid']}: {link[0]}"] = uid
    assert seen and not wrong, "\n".join(wrong)


def test_a_notification_opens_the_dashboard_around_the_alerts_start(tmp_path):
    """amtool renders the shipped templates (Alertmanager 0.25's functions and data): the dashboard link gets a
    two-hour window centred on .StartsAt in the text and in the HTML e-mail, the runbook link stays as it is."""
    templates = tmp_path / "hpcobs.tmpl"
    templates.write_text(alertmanager_templates.text())
    started = datetime(2026, 12, 5, 4, 0, tzinfo=UTC)
    url = "https://grafana.example.org/d/hpcobs-node?var-cluster=c1&var-node=n%201"
    data = {
        "receiver": "r",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "GpuFellOffBus", "node": "n 1"},
                "annotations": {"summary": "S.", "runbook_url": "https://r.example.org/gpu.md", "dashboard_url": url},
                "startsAt": started.isoformat(),
            }
        ],
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
    }
    (tmp_path / "data.json").write_text(json.dumps(data))
    around = f"&time={int(started.timestamp()) * 1000}&time.window=7200000"

    def render(name: str, kind: str) -> str:
        result = subprocess.run(
            [tools.find(tools.AMTOOL), "template", "render", f"--template.glob={templates}",
             f"--template.data={tmp_path / 'data.json'}", f"--template.type={kind}",
             f'--template.text={{{{ template "{name}" . }}}}'],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    text = render(alertmanager_templates.TEXT, "text")
    assert f"  Dashboard: {url}{around}\n" in text
    assert "  Runbook: https://r.example.org/gpu.md\n" in text
    html = render(alertmanager_templates.HTML, "html")
    assert f'<a href="{url.replace("&", "&amp;")}{around}">Dashboard</a>' in html
