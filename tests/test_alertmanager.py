"""Alertmanager config: SchemaStore shape, amtool check-config, a routing table through amtool, and inhibitions
that name real alerts and labels they carry (tests/live/test_alertmanager_live.py proves them in Alertmanager)."""

import copy
import re
from pathlib import Path

import pytest
import yaml
from hpcobs.alerts import logs, security

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import outdir, pipeline, tools, validate
from hpcobs.errors import UserError
from hpcobs.settings import config as config_module
from hpcobs.settings.names import INHIBIT_ONLY_RECEIVER, Team

AM = "alertmanager/alertmanager.yml"


def test_matches_the_schemastore_schema(generated):
    assert validate.schema_errors(AM, generated[AM]) == []


def test_amtool_check_config(generated_tree):
    result = tools.check_config(generated_tree / AM)
    assert result.ok, result.output


def test_no_inline_secrets(generated):
    config = yaml.safe_load(generated[AM])
    for receiver in config["receivers"]:
        for block in receiver.values():
            for entry in block if isinstance(block, list) else []:
                for key in entry:
                    assert not key.endswith(("api_url", "routing_key", "service_key", "auth_password")), key


@pytest.mark.parametrize(
    "labels, receivers",
    [
        ({"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical"}, ["gpu-ops-pager", "gpu-ops"]),
        ({"alertname": "GpuThermalSlowdown", "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"]),
        (
            {"alertname": "GpuXidApplicationClass", "team": "job-owner", "severity": "warning", "hpc_job": "42"},
            ["job-owner"],
        ),
        (
            {"alertname": "TrainingStraggler", "team": "job-owner", "severity": "warning", "hpc_job": "42"},
            ["job-owner"],
        ),
        ({"alertname": "TrainingNcclCollectiveSlow", "team": "ml-platform", "severity": "warning"}, ["ml-platform"]),
        ({"alertname": "IbPortNotActive", "team": "network", "severity": "critical"}, ["network"]),
        ({"alertname": "StorageFilesystemFillingUp", "team": "storage", "severity": "warning"}, ["storage"]),
        (
            {"alertname": "SecurityFalcoCritical", "team": "security", "severity": "critical"},
            ["security-pager", "security"],
        ),
        ({"alertname": "SecurityUnexpectedOutbound", "team": "security", "severity": "warning"}, ["security"]),
        ({"alertname": "SlurmNodesDown", "team": "slurm-admins", "severity": "warning"}, ["slurm-admins"]),
        ({"alertname": "SlurmJobEnded", "team": "none", "severity": "info"}, [INHIBIT_ONLY_RECEIVER]),
        ({"alertname": "SlurmNodeOutOfService", "team": "none", "severity": "info"}, [INHIBIT_ONLY_RECEIVER]),
        ({"alertname": "ExporterNodeDown", "team": "gpu-ops", "severity": "warning"}, ["gpu-ops"]),
        ({"alertname": "Unrouted", "team": "nobody", "severity": "info"}, ["default"]),
    ],
)
def test_routing_table(generated_tree, labels, receivers):
    result = tools.routes_test(generated_tree / AM, labels, receivers)
    assert result.ok, result.output


def test_chat_repeats_daily_and_pagers_keep_the_default(generated):
    """A pager's repeat folds into the open incident (one dedup_key per group); a chat channel gets each repeat as a
    new message, so the chat routes repeat once a day (the week benchmark: 3 chat messages for a 12-hour repair)."""
    am = yaml.safe_load(generated[AM])
    kinds = {r["name"]: {k for k in r if k.endswith("_configs")} for r in am["receivers"]}
    default = am["route"]["repeat_interval"]
    repeats = {route["receiver"]: route.get("repeat_interval", default) for route in am["route"]["routes"]}
    chat = {name for name, configs in kinds.items() if configs == {"slack_configs"}}
    pagers = {name for name, configs in kinds.items() if configs == {"pagerduty_configs"}}
    assert chat and pagers
    assert {name: repeats[name] for name in chat} == dict.fromkeys(chat, "24h")
    assert {name: repeats[name] for name in pagers} == dict.fromkeys(pagers, "4h")


def security_alerts(config) -> list[Alert]:
    return [rule for group in security.groups(Context(config)) for rule in group.rules if isinstance(rule, Alert)]


def test_only_critical_security_alerts_page(generated_tree, config):
    """The security team's pager gets the alerts that need a response now; every other security alert (a Notice or
    Warning Falco rule, an enforcement, a blind sensor) reaches its queue only: Alertmanager routes each as built."""
    for built in security_alerts(config):
        expected = ["security-pager", "security"] if built.severity == "critical" else ["security"]
        result = tools.routes_test(generated_tree / AM, {"alertname": built.alert, **built.all_labels()}, expected)
        assert result.ok, (built.alert, result.output)


@pytest.mark.parametrize(
    "critical_priority, severities",
    [
        # Falco's levels: the shipped outbound rule is Notice (5), the checkpoint rule Warning (4).
        (2, {"SecurityUnexpectedOutbound": "warning", "SecurityCheckpointForeignRead": "warning"}),
        (4, {"SecurityUnexpectedOutbound": "warning", "SecurityCheckpointForeignRead": "critical"}),
        (5, {"SecurityUnexpectedOutbound": "critical", "SecurityCheckpointForeignRead": "critical"}),
    ],
)
def test_a_falco_rules_alert_pages_only_at_the_priorities_that_page(tmp_path, critical_priority, severities):
    site = tmp_path / "site.yaml"
    site.write_text(f"thresholds: {{security_falco_critical_priority: {critical_priority}}}\n")
    built = {rule.alert: rule.severity for rule in security_alerts(config_module.load(site))}
    assert {name: built[name] for name in severities} == severities


def test_job_alerts_are_grouped_by_job(generated):
    routes = {r["receiver"]: r for r in yaml.safe_load(generated[AM])["route"]["routes"]}
    assert routes["job-owner"]["group_by"] == ["cluster", "alertname", "hpc_job"]
    assert yaml.safe_load(generated[AM])["route"]["group_by"] == ["cluster", "alertname", "node"]


def test_alerts_that_only_inhibit_never_notify_whatever_routes_the_site_writes(tmp_path):
    """A site routing each team and nothing else (no catch for SlurmJobEnded) still gets no notification per ended
    job: the build's own first route takes every team="none" alert to a receiver without integrations."""
    site = tmp_path / "site.yaml"
    teams = [team.value for team in Team if team is not Team.NONE]
    site.write_text(
        yaml.safe_dump(
            {
                "alertmanager": {
                    "default_receiver": "default",
                    "receivers": [{"name": "default", "email_to": "ops@example.org"}],
                    "routes": [{"receiver": "default", "match": {"team": team}} for team in teams],
                }
            }
        )
    )
    files = pipeline.generate(config_module.load(site))
    outdir.write_tree(tmp_path / "out", files)
    am = tmp_path / "out" / AM
    ended = {"alertname": "SlurmJobEnded", "team": Team.NONE.value, "severity": "info", "hpc_job": "42"}
    assert tools.routes_test(am, ended, [INHIBIT_ONLY_RECEIVER]).ok
    receiver = next(r for r in yaml.safe_load(files[AM])["receivers"] if r["name"] == INHIBIT_ONLY_RECEIVER)
    assert receiver == {"name": INHIBIT_ONLY_RECEIVER}


def test_a_site_cannot_define_the_inhibit_only_receiver(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(f"alertmanager:\n  receivers: [{{name: default}}, {{name: {INHIBIT_ONLY_RECEIVER}}}]\n")
    with pytest.raises(UserError, match="reserved"):
        pipeline.generate(config_module.load(site))


def test_routing_table_catches_a_wrong_expectation(generated_tree):
    result = tools.routes_test(generated_tree / AM, {"team": "gpu-ops", "severity": "critical"}, ["default"])
    assert not result.ok


def alert_labels(generated, config) -> dict[str, set[str]]:
    """Alert name -> the label names it carries in every firing case of the generated promtool tests, and of the
    Loki alerts' cases on real log lines (their rule and case labels)."""
    carried: dict[str, set[str]] = {}

    def carries(name: str, labels: set[str]) -> None:
        carried[name] = carried.get(name, labels) & labels

    for path, text in generated.items():
        if path.startswith("prometheus/tests/") and path.endswith(".tests.yaml"):
            for test in yaml.safe_load(text)["tests"]:
                for case in test.get("alert_rule_test", []):
                    for fired in case["exp_alerts"]:
                        carries(case["alertname"], set(fired["exp_labels"]))
    for group in logs.loki_groups(Context(config)):
        for log_rule in group.rules:
            if isinstance(log_rule.rule, Alert):
                fixed = {"severity", "team", *log_rule.rule.labels}
                for case in log_rule.rule.fires_on:
                    for fired in case.expect:
                        carries(log_rule.rule.alert, fixed | set(fired.labels))
    return carried


def alert_names(matchers: list[str]) -> tuple[list[str], bool]:
    """The alert names the alertname matcher of `matchers` mentions, and whether it selects them (= or =~)."""
    for matcher in matchers:
        parsed = re.fullmatch(r'(\w+)(=~|!~|!=|=)"(.*)"', matcher)
        assert parsed is not None, matcher
        name, op, value = parsed.groups()
        if name == "alertname":
            return value.split("|"), op in ("=", "=~")
    return [], False


def test_inhibitions_name_real_alerts_that_carry_the_equal_labels(generated, config):
    """A renamed alert never matches; an `equal` label an alert lacks never matches either, or, absent from both
    sides (Alertmanager then counts it as equal), claims a scope the rule does not have."""
    carried = alert_labels(generated, config)
    for rule in yaml.safe_load(generated[AM])["inhibit_rules"]:
        sources, _ = alert_names(rule["source_matchers"])
        targets, selected = alert_names(rule["target_matchers"])
        for name in sources + targets:
            assert name in carried, f"{name} in {rule} is not a generated alert"
        for name in sources + (targets if selected else []):
            assert set(rule["equal"]) <= carried[name], f"{name} lacks {set(rule['equal']) - carried[name]} of {rule}"


# --- Notification templates, site routes and time intervals, the subtree, every alert routed (issue 27) ----------

TEMPLATES = "alertmanager/templates/hpcobs.tmpl"
SUBTREE = "alertmanager/hpcobs-subtree.yml"


def site_build(tmp_path, alertmanager: dict) -> tuple[dict[str, str], Path]:
    """Build with a site file setting these alertmanager keys; the files and the out/ they are written to."""
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"alertmanager": alertmanager}))
    files = pipeline.generate(config_module.load(site))
    outdir.write_tree(tmp_path / "out", files)
    return files, tmp_path / "out"


def site_errors(tmp_path, alertmanager: dict) -> list[str]:
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump({"alertmanager": alertmanager}))
    with pytest.raises(UserError) as caught:
        config_module.load(site)
    return caught.value.lines


def test_every_receiver_notifies_with_the_shipped_templates(generated):
    """Slack, PagerDuty and e-mail show the shipped templates' title and list; alertmanager.yml loads the file the
    build ships next to it (a relative path: Alertmanager resolves it from the config file's directory)."""
    config = yaml.safe_load(generated[AM])
    assert config["templates"] == ["templates/hpcobs.tmpl"] and TEMPLATES in generated
    kinds = {"slack_configs": ("title", "text"), "pagerduty_configs": ("description",), "email_configs": ("html",)}
    for receiver in config["receivers"]:
        for kind, fields in kinds.items():
            for block in receiver.get(kind, []):
                for field in fields:
                    assert block[field].startswith('{{ template "hpcobs.'), (receiver["name"], field)
    defined = set(re.findall(r'define "([^"]+)"', generated[TEMPLATES]))
    used = set(re.findall(r'template "([^"]+)"', generated[AM] + generated[TEMPLATES]))
    assert used <= defined


def test_the_templates_dir_and_the_sites_templates_are_loaded(tmp_path):
    files, _ = site_build(tmp_path, {"templates_dir": "/etc/alertmanager/templates", "templates": ["/srv/am/*.tmpl"]})
    assert yaml.safe_load(files[AM])["templates"] == ["/etc/alertmanager/templates/hpcobs.tmpl", "/srv/am/*.tmpl"]


RICH_SITE = {
    "time_intervals": {
        "maintenance": [{"weekdays": ["saturday"], "times": [{"start_time": "02:00", "end_time": "06:00"}]}],
        "working-hours": [
            {
                "weekdays": ["monday:friday"],
                "times": [{"start_time": "08:00", "end_time": "18:00"}],
                "location": "Europe/Berlin",
            }
        ],
    },
    "routes": [
        {
            "receiver": "gpu-ops-pager",
            "match": {"team": "gpu-ops"},
            "match_re": {"node": "gpu0[0-4].*"},
            "matchers": ['severity!="info"'],
            "continue": True,
            "group_wait": "10s",
            "repeat_interval": "1h",
            "mute_time_intervals": ["maintenance"],
        },
        {
            "receiver": "gpu-ops",
            "match_re": {"team": "gpu-ops|ml-platform"},
            "group_by": ["cluster", "alertname"],
            "group_interval": "10m",
            "active_time_intervals": ["working-hours"],
        },
        *(
            {"receiver": "default", "match": {"team": team.value}}
            for team in Team
            if team not in (Team.NONE, Team.GPU_OPS, Team.ML_PLATFORM)
        ),
    ],
}


def test_regex_matchers_timing_and_time_intervals_reach_alertmanager(tmp_path):
    files, out = site_build(tmp_path, RICH_SITE)
    assert tools.check_config(out / AM).ok
    config = yaml.safe_load(files[AM])
    first, second = config["route"]["routes"][1:3]
    assert first["matchers"] == ['team="gpu-ops"', 'node=~"gpu0[0-4].*"', 'severity!="info"']
    assert (first["group_wait"], first["repeat_interval"]) == ("10s", "1h")
    assert first["mute_time_intervals"] == ["maintenance"]
    assert (second["group_interval"], second["active_time_intervals"]) == ("10m", ["working-hours"])
    assert [interval["name"] for interval in config["time_intervals"]] == ["maintenance", "working-hours"]
    node = {"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical"}
    assert tools.routes_test(out / AM, {**node, "node": "gpu03b"}, ["gpu-ops-pager", "gpu-ops"]).ok
    assert tools.routes_test(out / AM, {**node, "node": "gpu05"}, ["gpu-ops"]).ok


@pytest.mark.parametrize(
    "change, error",
    [
        (
            {
                "routes": [
                    {"receiver": "default", "match": {"team": "gpu-ops"}, "mute_time_intervals": ["maintenence"]}
                ],
                "time_intervals": {"maintenance": [{"weekdays": ["saturday"]}]},
            },
            "alertmanager.routes[0].mute_time_intervals[0]: time interval 'maintenence' is not defined; did you mean "
            "'maintenance'?",
        ),
        (
            {"routes": [{"receiver": "default", "match_re": {"node": "gpu(?=0)"}}]},
            "alertmanager.routes[0].match_re.node",
        ),
        (
            {"routes": [{"receiver": "default", "matchers": ['node=~"a", team="b"']}]},
            'alertmanager.routes[0].matchers[0]: \'node=~"a", team="b"\' is 2 matchers; write one per item',
        ),
        (
            {"routes": [{"receiver": "default", "match": {"team": "x"}, "group_wait": "soon"}]},
            "alertmanager.routes[0].group_wait",
        ),
        ({"routes": [{"receiver": "default"}]}, "alertmanager.routes[0]: the route matches nothing"),
        (
            {"time_intervals": {"night": [{"weekdays": ["Saturday"]}]}},
            "alertmanager.time_intervals.night[0].weekdays[0]: 'Saturday' is not a weekday or a range of them in lower "
            "case",
        ),
        (
            {"time_intervals": {"night": [{"times": [{"start_time": "22:00", "end_time": "25:00"}]}]}},
            "alertmanager.time_intervals.night[0].times[0].end_time: '25:00' is not a time of day HH:MM",
        ),
        (
            {"time_intervals": {"night": [{"location": "Mars/Olympus"}]}},
            "alertmanager.time_intervals.night[0].location: 'Mars/Olympus' is not an IANA time zone",
        ),
        (
            {"time_intervals": {"night": [{"times": [{"start_time": "22:00", "end_time": "06:00"}]}]}},
            "alertmanager.time_intervals.night[0].times[0]: start_time 22:00 is not before end_time 06:00",
        ),
        (
            {"time_intervals": {"summer": [{"months": ["august:june"]}]}},
            "alertmanager.time_intervals.summer[0].months[0]: the range 'august:june' runs backwards",
        ),
        ({"emit": "partial"}, "alertmanager.emit: 'partial' is not one of ['full', 'subtree']"),
    ],
)
def test_routes_and_time_intervals_are_validated(tmp_path, change, error):
    lines = site_errors(tmp_path, change)
    assert len(lines) == 1 and error in lines[0], lines


def test_a_team_routed_by_regex_counts_as_routed(tmp_path):
    """unrouted_teams reads match_re and matchers too: no team of RICH_SITE is reported unrouted."""
    files, _ = site_build(tmp_path, RICH_SITE)
    assert AM in files
    missing = {**RICH_SITE, "routes": RICH_SITE["routes"][:1] + RICH_SITE["routes"][2:]}
    assert any("no route for team 'ml-platform'" in line for line in build_errors(tmp_path, missing))


def build_errors(tmp_path, alertmanager: dict) -> list[str]:
    with pytest.raises(UserError) as caught:
        site_build(tmp_path, alertmanager)
    return caught.value.lines


# A site's own Alertmanager config, as a site has it before adopting hpcobs: its own receivers and routes.
SITE_ALERTMANAGER = {
    "route": {
        "receiver": "site-default",
        "group_by": ["alertname"],
        "routes": [{"receiver": "site-dba", "matchers": ['team="databases"']}],
    },
    "receivers": [{"name": "site-default"}, {"name": "site-dba"}],
}


def merge_subtree(site: dict, subtree: dict) -> dict:
    """What docs/output.md#alertmanager tells a site to do: hpcobs's route first under the root route, the rest
    appended to the site's lists."""
    merged = copy.deepcopy(site)
    merged["route"]["routes"].insert(0, subtree["route"])
    for key in ("receivers", "inhibit_rules", "time_intervals", "templates"):
        merged[key] = merged.get(key, []) + subtree.get(key, [])
    return merged


def test_the_subtree_merges_under_a_sites_own_config(tmp_path):
    files, out = site_build(tmp_path, {"emit": "subtree"})
    assert AM not in files and SUBTREE in files
    merged = out / "alertmanager" / "merged.yml"
    merged.write_text(yaml.safe_dump(merge_subtree(SITE_ALERTMANAGER, yaml.safe_load(files[SUBTREE]))))
    result = tools.check_config(merged)
    assert result.ok and "1 templates" in result.output, result.output
    gpu = {"alertname": "GpuFellOffBus", "team": "gpu-ops", "severity": "critical", "cluster": "c", "node": "n"}
    assert tools.routes_test(merged, gpu, ["gpu-ops-pager", "gpu-ops"]).ok
    assert tools.routes_test(merged, {"alertname": "SlurmNodesDown", "team": "slurm-admins"}, ["slurm-admins"]).ok
    assert tools.routes_test(merged, {"alertname": "PostgresDown", "team": "databases"}, ["site-dba"]).ok
    assert tools.routes_test(merged, {"alertname": "DiskFull", "team": "web"}, ["site-default"]).ok


@pytest.fixture(scope="module")
def produced(generated) -> list[dict[str, str]]:
    """Every alert the Prometheus and Loki rules produce, as the labels routes read: its name and the rule's labels
    (team and severity; fixed when the rules are built, never a template)."""
    found = []
    for path, text in generated.items():
        if path.startswith(("prometheus/rules/", "loki/rules/")):
            for group in yaml.load(text, Loader=yaml.CSafeLoader)["groups"]:
                found += [{"alertname": r["alert"], **r.get("labels", {})} for r in group["rules"] if "alert" in r]
    assert not [labels for labels in found if "{{" in str(labels)]
    return found


FELL_THROUGH = "unrouted-sentinel"


def fallen_through(am_text: str, tmp_path: Path, alerts: list[dict[str, str]]) -> list[dict[str, str]]:
    """The alerts no route of the config takes: its root receiver replaced by a sentinel (so a route the site
    points at the default receiver on purpose still counts as a route). Routing reads only the labels the routes'
    matchers name, so amtool routes each distinct set of those once (a dozen runs, not one per alert)."""
    config = yaml.safe_load(am_text)
    config["route"]["receiver"] = FELL_THROUGH
    config["receivers"].append({"name": FELL_THROUGH})
    config.pop("templates")
    probe = tmp_path / "probe.yml"
    probe.write_text(yaml.safe_dump(config))
    read = {re.match(r"\w+", m)[0] for route in config["route"]["routes"] for m in route["matchers"]}
    projected = {alert: tuple((k, v) for k, v in alert if k in read) for alert in map(key, alerts)}
    distinct = sorted(set(projected.values()))
    with tools.pool() as pool:
        fell = dict(zip(distinct, pool.map(lambda s: tools.routes_test(probe, dict(s), [FELL_THROUGH]).ok, distinct)))
    return [dict(alert) for alert, routed_by in projected.items() if fell[routed_by]]


def key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_every_alert_the_rules_produce_reaches_a_teams_route(generated, produced, tmp_path):
    assert {"alertname": "SlurmJobEnded", "severity": "info", "team": "none"} in produced
    assert fallen_through(generated[AM], tmp_path, produced) == []


def test_an_alert_whose_team_lost_its_route_is_reported(generated, produced, tmp_path):
    config = yaml.safe_load(generated[AM])
    config["route"]["routes"] = [r for r in config["route"]["routes"] if r["receiver"] != "network"]
    fell = fallen_through(yaml.safe_dump(config), tmp_path, produced)
    assert fell and {a["team"] for a in fell} == {"network"}
