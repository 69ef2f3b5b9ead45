"""Every config string bound for another language is checked against that language when the config loads:
one line per problem naming the site file, the key and the fix; the legitimate near miss is accepted."""

import pytest
import yaml

from hpcobs.build import pipeline
from hpcobs.errors import UserError
from hpcobs.exporters.sources import Sources
from hpcobs.lang import promql
from hpcobs.lang.selectors import parse_selector, scrape_labels
from hpcobs.settings import config as config_module
from hpcobs.settings.names import Team
from tests.conftest import run_build


def load(tmp_path, text):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    return site, config_module.load(site)


def refused(tmp_path, text):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    with pytest.raises(UserError) as caught:
        config_module.load(site)
    return [line.replace(str(site), "SITE") for line in caught.value.lines]


def built(tmp_path, text):
    """The model of a build of the site file: the routes a site needs are known once the alerts are built."""
    return pipeline.model(load(tmp_path, text)[1])


def refused_at_build(tmp_path, text):
    with pytest.raises(UserError) as caught:
        built(tmp_path, text)
    return [line.replace(str(tmp_path / "site.yaml"), "SITE") for line in caught.value.lines]


# Routes every team to the default receiver: sites that define their own receivers must still route each team.
TEAM_ROUTES = "  routes:\n" + "".join(
    f"    - {{receiver: default, match: {{team: {team}}}}}\n" for team in Team if team is not Team.NONE
)


def selector_site(selector):
    return "exporters:\n  dcgm:\n    selector: " + yaml.safe_dump(selector, width=1000).removesuffix("\n...\n")


# --- selectors: a real PromQL parser, ordinary labels, RE2, one line -------------------------------------


@pytest.mark.parametrize(
    "selector, problem",
    [
        (
            'job="dcgm"\n',
            "the selector contains the control character U+000A (a line break, tab or invisible character); remove it",
        ),
        (
            'job="a\\nb"',
            "the value of job contains the control character U+000A (a line break, tab or invisible "
            "character); remove it",
        ),
        (
            'job="x", __name__="up"',
            "matches on '__name__', which is reserved or not a label name (the metric name "
            'comes from the catalogue); select by an ordinary label, e.g. job="dcgm-exporter"',
        ),
        (
            '"up"',
            "matches on '__name__', which is reserved or not a label name (the metric name comes from the "
            'catalogue); select by an ordinary label, e.g. job="dcgm-exporter"',
        ),
        (
            'job=~"a(?=b)"',
            "the regex 'a(?=b)' is not valid RE2 (invalid perl operator: (?=); fix it (Prometheus uses "
            "Go's RE2: no lookaround, no backreferences)",
        ),
        (
            'job=~"x{1001}"',
            "the regex 'x{1001}' is not valid RE2 (invalid repetition size: {1001}); fix it (Prometheus "
            "uses Go's RE2: no lookaround, no backreferences)",
        ),  # Rust's regex, the parser's, allows it
        (
            'job="x"} or vector(1) + up{a="b"',
            '\'job="x"} or vector(1) + up{a="b"\' is not a list of label matchers; write e.g. job="dcgm-exporter"',
        ),
        (
            'job="x" or env="y"',
            '\'job="x" or env="y"\' joins matchers with `or`, which Prometheus 2 cannot read; '
            'write one list of matchers, with a regex for alternatives (job=~"a|b")',
        ),
        (
            'job="a", job="b"',
            'no label value can be invented that matches job="a", job="b" (needed for the rule '
            'tests\' synthetic series); write the value itself (job="...") or an alternation of values '
            '(job=~"a|b")',
        ),
    ],
)
def test_selector_refused_with_file_key_and_fix(tmp_path, selector, problem):
    assert refused(tmp_path, selector_site(selector)) == [f"config error: SITE: exporters.dcgm.selector: {problem}"]


@pytest.mark.parametrize(
    "selector, labels",
    [
        ('job=~"dcgm.*"', {"job": "dcgm"}),
        ('job=~"dcgm-(a|b)-[0-9]+"', {"job": "dcgm-a-0"}),
        ('job=~"(?i)DCGM.+"', {"job": "DCGMa"}),
        ('job="dcgm", env!="test"', {"job": "dcgm"}),  # an absent env label is "", which != "test"
        ('job="dcgm", env!~"test.*"', {"job": "dcgm"}),
        ('job="dcgm", env!=""', {"job": "dcgm", "env": "synthetic"}),
        ('job="a\\"b"', {"job": 'a"b'}),  # values are unescaped
    ],
)
def test_regex_and_negative_selectors_get_matching_synthetic_labels(tmp_path, selector, labels):
    _, config = load(tmp_path, selector_site(selector))
    assert Sources(config)["dcgm"].scrape_labels() == labels


def test_synthetic_labels_satisfy_every_matcher():
    matchers = parse_selector('job=~"dcgm.*", job!="dcgm", job!~"dcgm0+"')
    assert [(m.label, m.op, m.value) for m in matchers] == [
        ("job", "=~", "dcgm.*"),
        ("job", "!=", "dcgm"),
        ("job", "!~", "dcgm0+"),
    ]
    with pytest.raises(ValueError, match="no label value can be invented"):
        scrape_labels(matchers)  # the generator offers "dcgm" only: refused rather than a non-matching value


def test_regex_job_selector_builds(tmp_path):
    """Without the generated scrape jobs, which name each job once (test_scrape.py refuses it with them)."""
    site = tmp_path / "site.yaml"
    site.write_text(selector_site('job=~"dcgm.*"') + "\nscrape: {enabled: false}\n")
    result = run_build("--no-tool-checks", "--config", str(site), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    rules = (tmp_path / "out/prometheus/rules/gpu.rules.yaml").read_text()
    tests = (tmp_path / "out/prometheus/tests/gpu/GpuFellOffBus.tests.yaml").read_text()
    assert 'DCGM_FI_DEV_XID_ERRORS{job=~"dcgm.*"' in rules
    assert ',instance="n1:9400",job="dcgm",' in tests  # the synthetic series carry the invented value


# --- job info: trusted only from the files root writes -----------------------------------------------------

JOB_INFO_FORGEABLE = (
    'select the job of the node_exporter that reads the root-only textfile directory here (e.g. job="node") and '
    'the job of the one that reads the jobs\' own directories there (e.g. job="training"), see '
    "docs/slurm.md#security"
)


@pytest.mark.parametrize(
    "site, same",
    [
        # The old default: NCCL Inspector's dumps beside the prolog's file. The site set the other key, and is blamed.
        (
            "exporters:\n  nccl_inspector: {selector: 'job=\"node\"'}\n",
            "exporters.nccl_inspector.selector ('job=\"node\"')",
        ),
        (
            "exporters:\n  training: {selector: \"job='node'\"}\n",  # other quotes, same matcher
            "exporters.training.selector (\"job='node'\")",
        ),
        (
            'exporters:\n  job_info: {selector: \'env="prod", job="node"\'}\n'
            '  nccl_inspector: {selector: \'job = "node",env="prod"\'}\n',  # other order and spacing
            'exporters.nccl_inspector.selector (\'job = "node",env="prod"\')',
        ),
    ],
)
def test_job_info_selector_differs_from_the_job_written_roles(tmp_path, site, same):
    job_info = yaml.safe_load(site)["exporters"].get("job_info", {}).get("selector", 'job="node"')
    assert refused(tmp_path, site) == [
        f"config error: SITE: exporters.job_info.selector: {job_info!r} selects the same series as {same}, written by "
        "the jobs themselves, so a job could forge job-info series naming another user or account; "
        + JOB_INFO_FORGEABLE
    ]


def test_job_info_selector_shared_with_both_job_written_roles_is_one_line(tmp_path):
    assert refused(tmp_path, "exporters:\n  job_info: {selector: 'job = \"training\"'}\n") == [
        "config error: SITE: exporters.job_info.selector: 'job = \"training\"' selects the same series as "
        "exporters.training.selector ('job=\"training\"') and exporters.nccl_inspector.selector ('job=\"training\"'), "
        "written by the jobs themselves, so a job could forge job-info series naming another user or account; "
        + JOB_INFO_FORGEABLE
    ]


@pytest.mark.parametrize("selector", ['instance=~".+:9100"', 'job=~"node"', 'job!="training", instance=~".+"'])
def test_job_info_selector_names_its_scrape_job(tmp_path, selector):
    """Only the scrape job tells the root-written textfiles from the jobs' own: a file cannot set it."""
    assert refused(
        tmp_path, "exporters:\n  job_info:\n    selector: " + yaml.safe_dump(selector).removesuffix("\n...\n")
    ) == [
        f'config error: SITE: exporters.job_info.selector: {selector!r} has no job="..." matcher, so it can select '
        "job-info series that a job forges in its own metric files; select the job of the node_exporter that reads "
        'the root-only textfile directory (e.g. job="node"), see docs/slurm.md#security'
    ]


@pytest.mark.parametrize(
    "site",
    [
        # kube-prometheus' job names; the jobs' metrics reader under a job of its own
        "exporters:\n  job_info: {selector: 'job=\"node-exporter\"'}\n"
        "  training: {selector: 'job=\"hpcobs-jobs\"'}\n  nccl_inspector: {selector: 'job=\"hpcobs-jobs\"'}\n",
        # one scrape job for both node_exporters, told apart by the port Prometheus puts in `instance`
        'exporters:\n  job_info: {selector: \'job="node", instance=~".+:9100"\'}\n'
        '  nccl_inspector: {selector: \'job="node", instance=~".+:9101"\'}\n',
        # a role that is off reads nothing; jontk's job info comes from slurmrestd, not from a file on the node
        "exporters:\n  nccl_inspector: {enabled: false, selector: 'job=\"node\"'}\n",
        "exporters:\n  job_info: {source: jontk, selector: 'job=\"training\"'}\n",
        "exporters:\n  job_info: {enabled: false, selector: 'instance=~\".+\"'}\n",
    ],
)
def test_job_info_selector_near_misses(tmp_path, site):
    load(tmp_path, site)


def test_job_info_selector_not_judged_while_the_schema_refuses_the_other(tmp_path):
    """One mistake, one line: a broken selector is reported, not the conflict it might have been."""
    assert refused(tmp_path, "exporters:\n  training: {selector: 'job=\"node\"} or up{'}\n") == [
        "config error: SITE: exporters.training.selector: 'job=\"node\"} or up{' is not a list of label matchers; "
        'write e.g. job="dcgm-exporter"'
    ]


def test_forgeable_job_info_exits_2_before_anything_is_written(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("exporters:\n  nccl_inspector: {selector: 'job=\"node\"'}\n")
    out = tmp_path / "out"
    result = run_build("--no-tool-checks", "--config", str(site), "--out", str(out))
    assert result.returncode == 2 and result.stdout == "" and not out.exists()
    assert result.stderr.startswith(f"config error: {site}: exporters.job_info.selector: 'job=\"node\"' selects ")


# --- metric names and prefixes ----------------------------------------------------------------------------


def test_metric_names_name_the_file_and_the_signal(tmp_path):
    assert refused(tmp_path, "exporters:\n  dcgm:\n    metric_names: {gpu_temprature: X, xid: 'MY XID'}\n") == [
        "config error: SITE: exporters.dcgm.metric_names.gpu_temprature: unknown signal; did you mean "
        "'gpu_temperature'? (signal ids are listed in hpcobs/exporters/catalogue/dcgm.yaml)",
        "config error: SITE: exporters.dcgm.metric_names.xid: 'MY XID' is not a Prometheus metric name",
    ]
    _, config = load(tmp_path, "exporters:\n  dcgm:\n    metric_names: {xid: MY_XID}\n")
    assert Sources(config)["dcgm"].name("xid", "4.6-4.8") == "MY_XID"


def test_metric_prefix(tmp_path):
    assert refused(tmp_path, "exporters:\n  amd:\n    metric_prefix: 'amd-'\n") == [
        "config error: SITE: exporters.amd.metric_prefix: 'amd-' is not empty or a metric-name prefix such as amd_"
    ]


# --- durations: Prometheus' grammar and range, whole seconds, windows that hold two scrapes -----------------


@pytest.mark.parametrize(
    "text, key, problem",
    [
        (
            "thresholds:\n  gpu_idle_window: 5m1h\n",
            "thresholds.gpu_idle_window",
            "'5m1h' repeats a unit or does not put its units largest first; write each unit once, in the order "
            "y, w, d, h, m, s, ms (e.g. 1h5m)",
        ),
        (
            "thresholds:\n  exporter_down_for: 999999999999y\n",
            "thresholds.exporter_down_for",
            "'999999999999y' is beyond the longest duration Prometheus can hold (about 292y); write a shorter one",
        ),
        (
            "scrape_interval: 0s\n",
            "scrape_interval",
            "'0s' is outside the intervals hpcobs is proven at; write from 5s to 2m (e.g. 30s)",
        ),
        (
            "scrape_interval: 1ms\n",
            "scrape_interval",
            "'1ms' is not a whole number of seconds; write whole seconds (e.g. 1s, 90s)",
        ),
        (
            "alertmanager:\n  resolve_timeout: 1m1m\n",
            "alertmanager.resolve_timeout",
            "'1m1m' repeats a unit or does not put its units largest first; write each unit once, in the order "
            "y, w, d, h, m, s, ms (e.g. 2m)",
        ),
        (
            "thresholds:\n  security_event_window: 30s\n",
            "thresholds.security_event_window",
            "'30s' holds fewer than two scrapes of scrape_interval 30s; write at least 1m",
        ),
    ],
)
def test_durations(tmp_path, text, key, problem):
    assert refused(tmp_path, text) == [f"config error: SITE: {key}: {problem}"]


def test_durations_near_misses_are_accepted(tmp_path):
    _, config = load(
        tmp_path,
        "scrape_interval: 5s\nthresholds:\n  gpu_idle_window: 1h5m\n"
        "  exporter_down_for: 0s\n  gpu_count_lookback: 292y\n",
    )
    assert config.get("thresholds", "gpu_idle_window") == "1h5m"


def test_duration_helpers_agree_with_the_check():
    assert promql.duration_seconds("1h5m") == 3900
    assert promql.duration(promql.duration_seconds("1d2h3m4s")) == "1d2h3m4s"
    for text in ("5m1h", "1500ms", "999999999999y", "", "1.5h"):
        with pytest.raises(ValueError):
            promql.duration_seconds(text)


def test_a_threshold_in_si_units_is_compared_in_the_raw_unit():
    assert promql.compare_raw("rate(x[2m])", (">", 0.1), "nanoseconds") == "rate(x[2m]) > 100000000"
    assert promql.compare_raw("x", (">=", 0.85), "percent") == "x >= 85"
    assert promql.compare_raw("x", ("<", 2147483648), "mebibytes") == "x < 2048"
    assert promql.compare_raw("x", ("==", 20), "celsius") == "x == 20"
    with pytest.raises(ValueError, match="not a PromQL comparison"):
        promql.compare_raw("x", ("=~", 1), "celsius")


# --- numbers: finite, in range ----------------------------------------------------------------------------


def test_non_finite_numbers(tmp_path):
    assert refused(
        tmp_path,
        "thresholds:\n  gpu_busy_ratio: .nan\n  ib_symbol_errors_per_second: .inf\n  storage_full_ratio: .inf\n",
    ) == [
        "config error: SITE: thresholds.gpu_busy_ratio: nan is not a finite number; write an ordinary number "
        "(e.g. 0.5)",
        "config error: SITE: thresholds.ib_symbol_errors_per_second: inf is not a finite number; write an "
        "ordinary number (e.g. 0.5)",
        "config error: SITE: thresholds.storage_full_ratio: inf is not a ratio above 0 and at most 1, such as 0.8",
    ]
    _, config = load(tmp_path, "thresholds:\n  gpu_busy_ratio: 1\n  ib_symbol_errors_per_second: 1.0e+3\n")
    assert config.get("thresholds", "ib_symbol_errors_per_second") == 1000


def test_ranges(tmp_path):
    assert refused(tmp_path, "thresholds:\n  storage_fill_min_ratio: 0\n  slurm_partition_pending_jobs: -1\n") == [
        "config error: SITE: thresholds.slurm_partition_pending_jobs: -1 is not a non-negative whole number",
        "config error: SITE: thresholds.storage_fill_min_ratio: 0 is not a ratio above 0 and at most 1, such as 0.8",
    ]


# --- regex settings ---------------------------------------------------------------------------------------


def test_regex_setting_is_re2(tmp_path):
    assert refused(tmp_path, "thresholds:\n  storage_shared_mountpoints: '(/lustre)\\1'\n") == [
        "config error: SITE: thresholds.storage_shared_mountpoints: the regex '(/lustre)\\\\1' is not valid RE2 "
        "(invalid escape sequence: \\1); fix it (Prometheus uses Go's RE2: no lookaround, no backreferences)"
    ]
    # Valid only once wrapped in ^(?:...)$, which would change what is anchored: refused.
    assert refused(tmp_path, "thresholds:\n  storage_shared_mountpoints: 'a)|(b'\n")[0].startswith(
        "config error: SITE: thresholds.storage_shared_mountpoints: the regex 'a)|(b' is not valid RE2 (unexpected )"
    )
    load(tmp_path, "thresholds:\n  storage_shared_mountpoints: '/scratch(/.*)?|/gpfs/[a-z]+'\n")


# --- label names ------------------------------------------------------------------------------------------


def test_label_names(tmp_path):
    assert refused(
        tmp_path,
        "cluster:\n  label: __cluster\nalertmanager:\n  routes:\n"
        "    - {receiver: default, match: {team-name: x}, group_by: [cluster, 'alert name']}\n",
    ) == [
        "config error: SITE: alertmanager.routes[0].group_by[1]: 'alert name' is not a Prometheus label name; "
        "use letters, digits and _, not starting with a digit (e.g. cluster)",
        "config error: SITE: alertmanager.routes[0].match.team-name: 'team-name' is not a Prometheus label name; "
        "use letters, digits and _, not starting with a digit (e.g. cluster)",
        "config error: SITE: cluster.label: '__cluster' is reserved (names starting with __ are Prometheus' own); "
        "choose another name",
    ]
    load(tmp_path, "cluster:\n  label: site_cluster\n")


# --- free text that becomes literals ----------------------------------------------------------------------


def test_free_text(tmp_path):
    assert refused(
        tmp_path,
        'cluster:\n  name: "gpu\\u202eprod"\nthresholds:\n  security_outbound_rules: []\n'
        "  security_checkpoint_rules: ['']\n",
    ) == [
        "config error: SITE: cluster.name: 'gpu\\u202eprod' contains the control character U+202E (a line break, "
        "tab or invisible character); remove it",
        "config error: SITE: thresholds.security_checkpoint_rules[0]: the value is empty; write a name",
        "config error: SITE: thresholds.security_outbound_rules: [] is empty; write a non-empty list of names",
    ]
    _, config = load(tmp_path, "cluster:\n  name: 'lab \"7\" {{ x }}'\n")
    assert config.get("cluster", "name") == 'lab "7" {{ x }}'  # escaped where it lands, not refused


@pytest.mark.parametrize(
    "folder", ["../../x", "/etc/grafana", "..", ".", ".hidden", "a/b", "a\\b", "x\0y", "", "HPC ", "x" * 65]
)
def test_folder_is_one_safe_path_segment(tmp_path, folder):
    lines = refused(tmp_path, "grafana:\n  folder: " + yaml.safe_dump(folder).removesuffix("\n...\n") + "\n")
    assert len(lines) == 1 and lines[0].startswith("config error: SITE: grafana.folder: ")
    assert lines[0].endswith(
        "is not one plain directory name; write 1-64 letters, digits, spaces, '.', '_' or '-', "
        "starting with a letter or digit and not ending with a space or '.' (e.g. HPC)"
    )


def test_folder_near_miss(tmp_path):
    load(tmp_path, "grafana:\n  folder: HPC Cluster-2.0\n")


# --- URLs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, url, problem",
    [
        (
            "runbooks.base_url",
            "https://wiki/{{ .x }}",
            "the URL contains '{', which a URL cannot carry as is; percent-encode it (%7B) or remove it",
        ),
        (
            "grafana.url",
            "https://admin:s3cret@grafana",
            "the URL carries credentials (user:password@); remove them, the URL is written into the generated files",
        ),
        (
            "grafana.url",
            "javascript:alert(1)",
            "the URL is not an http:// or https:// URL; write e.g. https://host.example.org:443/path",
        ),
        ("grafana.url", "https://grafana/", "the URL ends with /; remove it (hpcobs appends /<path> to it)"),
        (
            "grafana.url",
            "https://grafana?orgId=1",
            "the URL has a query or fragment (? or #), which would sit before the paths appended to it; remove it",
        ),
        (
            "grafana.datasources.loki.url",
            "http://loki:99999",
            "the URL has an invalid port; write a number from 1 to 65535",
        ),
        (
            "grafana.datasources.loki.url",
            "http://",
            "the URL is not an http:// or https:// URL; write e.g. https://host.example.org:443/path",
        ),
    ],
)
def test_urls(tmp_path, key, url, problem):
    *parents, leaf = key.split(".")
    text = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents)) + f"{'  ' * len(parents)}{leaf}: '{url}'\n"
    assert refused(tmp_path, text) == [f"config error: SITE: {key}: {problem}"]


def test_url_near_misses(tmp_path):
    load(
        tmp_path,
        "grafana:\n  url: https://grafana.example.org:3000/sub%20path\n"
        "  datasources:\n    loki: {uid: l, url: 'http://[::1]:3100/'}\n",
    )


# --- webhook URLs carry no secret -------------------------------------------------------------------------


def webhook_site(url):
    return (
        "alertmanager:\n  receivers:\n    - {name: default}\n    - name: hook\n"
        f"      webhook_url: '{url}'\n" + TEAM_ROUTES
    )


@pytest.mark.parametrize(
    "url, problem",
    [
        (
            "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXX",
            "the webhook URL is a Slack incoming-webhook URL, itself a secret; use a receiver with slack_api_url_file "
            "(a file holding the URL) and slack_channel instead",
        ),
        (
            "https://contoso.webhook.office.com/webhookb2/x/IncomingWebhook/y/z",
            "the webhook URL is a Microsoft Teams webhook URL, itself a secret; point webhook_url at a relay that "
            "holds it, authenticated by a token in webhook_credentials_file (sent as the Authorization header)",
        ),
        (
            "https://relay.example.org/hook?token=abc",
            "the webhook URL has a query string or fragment, where tokens travel; remove it and put the token in "
            "webhook_credentials_file (sent as the Authorization header)",
        ),
        (
            "https://relay.example.org/hook/a8F3kq92LmZx01PqRt7Y",
            "path segment 2 of the webhook URL looks like a token (20+ letters and digits, or a UUID); remove it and "
            "put the token in webhook_credentials_file (sent as the Authorization header)",
        ),
        (
            "https://relay.example.org/3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            "path segment 1 of the webhook URL looks like a token (20+ letters and digits, or a UUID); remove it and "
            "put the token in webhook_credentials_file (sent as the Authorization header)",
        ),
        (
            "https://bot:pw@relay.example.org/hook",
            "the webhook URL carries credentials (user:password@); remove them, "
            "the URL is written into the generated files",
        ),
    ],
)
def test_webhook_url_carries_no_secret(tmp_path, url, problem):
    lines = refused(tmp_path, webhook_site(url))
    assert lines == [f"config error: SITE: alertmanager.receivers[1].webhook_url: {problem}"]
    assert not any(secret in lines[0] for secret in ("XXXXXXXX", "abc", "a8F3kq", "3f2504e0", ":pw"))


def test_webhook_near_miss(tmp_path):
    load(tmp_path, webhook_site("http://job-owner-notifier:8080/alertmanager-webhook-v2/receiver"))


def test_secret_files_are_paths_and_never_echoed(tmp_path):
    lines = refused(
        tmp_path,
        "alertmanager:\n  receivers:\n    - {name: default}\n    - name: s\n"
        "      slack_api_url_file: https://hooks.slack.com/services/T0/B0/SECRET\n" + TEAM_ROUTES,
    )
    assert lines == [
        "config error: SITE: alertmanager.receivers[1].slack_api_url_file: the value is not an absolute "
        "file path; write the path of the file that holds the secret (e.g. /etc/alertmanager/secrets/slack), "
        "never the secret itself"
    ]


# --- e-mail addresses and the smarthost -------------------------------------------------------------------


def test_email_and_smarthost(tmp_path):
    assert refused(
        tmp_path,
        "alertmanager:\n  smtp_smarthost: 'mail:70000'\n  smtp_from: 'ops@'\n  receivers:\n"
        '    - {name: default, email_to: "a@example.org\\nBcc: x@evil.example"}\n' + TEAM_ROUTES,
    ) == [
        "config error: SITE: alertmanager.receivers[0].email_to: 'a@example.org\\nBcc: x@evil.example' is not an "
        "e-mail address; write e.g. team@example.org, several separated by commas",
        "config error: SITE: alertmanager.smtp_from: 'ops@' is not an e-mail address; write e.g. alerts@example.org "
        "(or Name <alerts@example.org> for smtp_from)",
        "config error: SITE: alertmanager.smtp_smarthost: 'mail:70000' is not host:port; write e.g. "
        "mail-relay.example.org:25 (port 1-65535, [::1]:25 for IPv6)",
    ]
    load(
        tmp_path,
        "alertmanager:\n  smtp_smarthost: '[::1]:587'\n  smtp_from: HPC Alerts <alerts@example.org>\n"
        '  receivers:\n    - {name: default, email_to: "a@example.org, o\'brien+hpc@mail.example.org"}\n' + TEAM_ROUTES,
    )


# --- Alertmanager consistency -----------------------------------------------------------------------------


def test_receivers_defined_once_and_every_reference_defined(tmp_path):
    assert refused(
        tmp_path,
        "alertmanager:\n  receivers: [{name: a}, {name: a}, {name: c}]\n"
        "  routes: [{receiver: b, match: {team: x}}, {receiver: c, match: {}}]\n"
        "  default_receiver: z\n",
    ) == [
        "config error: SITE: alertmanager.default_receiver: receiver 'z' is not defined; define it under "
        "alertmanager.receivers (['a', 'c'])",
        "config error: SITE: alertmanager.receivers[1].name: receiver 'a' is defined twice; rename one or merge them",
        "config error: SITE: alertmanager.routes[0].receiver: receiver 'b' is not defined; define it under "
        "alertmanager.receivers (['a', 'c'])",
        "config error: SITE: alertmanager.routes[1].match: {} is empty; write at least one label: value (a route "
        "without one would catch every alert)",
    ]


def test_a_site_receivers_list_that_replaces_the_defaults_is_blamed_for_their_references(tmp_path):
    """Lists replace: a site's own receivers drop config/default.yaml's, whose default receiver and routes the site
    left alone still name them. The site file is to blame, once per key it left, with both ways out."""
    assert refused(tmp_path, 'alertmanager:\n  receivers: [{name: ops, webhook_url: "https://x.example/hook"}]\n') == [
        "config error: SITE: alertmanager.receivers: this list replaced the one of config/default.yaml (lists "
        "replace, mappings merge), but alertmanager.default_receiver of config/default.yaml still names 'default', "
        "which no longer exists; list it too, or set alertmanager.default_receiver as well",
        "config error: SITE: alertmanager.receivers: this list replaced the one of config/default.yaml (lists "
        "replace, mappings merge), but alertmanager.routes of config/default.yaml still name 'job-owner', "
        "'gpu-ops-pager', 'gpu-ops', 'network', 'storage', 'ml-platform', 'security-pager', 'security', "
        "'slurm-admins', which no longer exist; list them too, or set alertmanager.routes as well",
    ]
    # Routes the site writes itself are its own lines.
    assert (
        "config error: SITE: alertmanager.routes[0].receiver: receiver 'ops' is not defined; define it under "
        "alertmanager.receivers (['default'])"
    ) in refused(
        tmp_path, "alertmanager:\n  receivers: [{name: default}]\n  routes: [{receiver: ops, match: {team: x}}]\n"
    )


def test_every_team_has_a_route(tmp_path):
    """An alert's team that no route matches reaches only the default receiver: nobody of that team reads it."""
    without_storage = TEAM_ROUTES.replace("    - {receiver: default, match: {team: storage}}\n", "")
    assert refused_at_build(tmp_path, "alertmanager:\n  receivers: [{name: default}]\n" + without_storage) == [
        "config error: SITE: alertmanager.routes: no route for team 'storage' (its alerts would reach only the "
        "default receiver); add {receiver: ..., match: {team: storage}}",
    ]
    one_missing_each = [
        refused_at_build(
            tmp_path,
            "alertmanager:\n  receivers: [{name: default}]\n"
            + TEAM_ROUTES.replace(f"    - {{receiver: default, match: {{team: {team}}}}}\n", ""),
        )
        for team in Team
        if team is not Team.NONE
    ]
    assert [line.split("'")[1] for lines in one_missing_each for line in lines] == [
        team for team in Team if team is not Team.NONE
    ]


def test_no_route_at_all_sends_everything_to_the_default_receiver(tmp_path):
    """A small site with one receiver writes no route: that is a choice, not a forgotten team."""
    built(tmp_path, "alertmanager:\n  receivers: [{name: default}]\n  routes: []\n")


def test_team_routes_near_misses(tmp_path):
    # A team split by severity is routed; Team.NONE (alerts that only inhibit others) needs no route.
    split = TEAM_ROUTES.replace(
        "    - {receiver: default, match: {team: storage}}\n",
        "    - {receiver: default, match: {team: storage, severity: critical}}\n"
        "    - {receiver: default, match: {team: storage}}\n",
    )
    built(tmp_path, "alertmanager:\n  receivers: [{name: default}]\n" + split)
    assert "team: none" not in TEAM_ROUTES


def test_team_routes_not_judged_while_the_schema_refuses_a_route(tmp_path):
    """One mistake, one line: a broken route is reported, not the teams it might have routed."""
    assert refused(
        tmp_path, "alertmanager:\n  receivers: [{name: default}]\n  routes: [{receiver: default, match: {}}]\n"
    ) == [
        "config error: SITE: alertmanager.routes[0].match: {} is empty; write at least one label: value (a route "
        "without one would catch every alert)",
    ]


# --- datasource uids --------------------------------------------------------------------------------------


def test_datasource_uids_unique(tmp_path):
    assert refused(
        tmp_path,
        "grafana:\n  datasources:\n    loki: {uid: hpcobs-prometheus, url: 'http://loki:3100'}\n"
        "    tempo: {uid: 'a/b', url: 'http://tempo:3200'}\n",
    ) == [
        "config error: SITE: grafana.datasources.loki.uid: 'hpcobs-prometheus' is already the uid of the prometheus "
        "datasource; give each datasource its own uid",
        "config error: SITE: grafana.datasources.tempo.uid: 'a/b' is not a Grafana uid: 1-40 letters, digits, - or _",
    ]


def test_datasource_names_unique(tmp_path):
    assert refused(tmp_path, "grafana:\n  datasources:\n    tempo: {name: Loki}\n") == [
        "config error: SITE: grafana.datasources.tempo.name: 'Loki' is already the name of the loki datasource; give "
        "each datasource its own name",
    ]


def test_one_default_datasource_and_prometheus_provisioned(tmp_path):
    """Grafana has one default datasource (a disabled one is not provisioned, so not counted); every dashboard reads
    Prometheus."""
    assert refused(tmp_path, "grafana:\n  datasources:\n    loki: {is_default: true}\n") == [
        "config error: SITE: grafana.datasources.loki.is_default: the prometheus datasource is the default already "
        "and Grafana has one default; set is_default: false on all but one",
    ]
    assert refused(tmp_path, "grafana:\n  datasources:\n    prometheus: {enabled: false}\n") == [
        "config error: SITE: grafana.datasources.prometheus.enabled: every dashboard reads the Prometheus datasource, "
        "so it cannot be disabled; point its url (and uid) at the Prometheus that holds the rules' series instead",
    ]
    load(tmp_path, "grafana:\n  datasources:\n    loki: {is_default: true, enabled: false}\n")


# --- YAML, all at once, before anything is generated --------------------------------------------------------


def test_a_key_given_twice_is_refused(tmp_path):
    assert refused(tmp_path, "exporters:\n  amd: {enabled: true}\nexporters:\n  dcgm: {enabled: false}\n") == [
        "config error: SITE:3:1: invalid YAML (key 'exporters' is given twice in one mapping; keep one); "
        "fix the syntax at that line"
    ]


def test_config_is_read_with_the_c_loader():
    assert config_module._Loader.__mro__[1] is yaml.CSafeLoader


def test_every_problem_at_once_exit_2_nothing_written(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "scrape_interval: 0s\ngrafana:\n  folder: ../x\nthresholds:\n  gpu_busy_ratio: .nan\n"
        "exporters:\n  dcgm:\n    selector: '__name__=\"up\"'\n"
    )
    out = tmp_path / "out"
    result = run_build("--no-tool-checks", "--config", str(site), "--out", str(out))
    assert result.returncode == 2 and result.stdout == ""
    keys = [line.split(": ")[2] for line in result.stderr.splitlines()]
    assert keys == ["exporters.dcgm.selector", "grafana.folder", "scrape_interval", "thresholds.gpu_busy_ratio"]
    assert all(line.startswith(f"config error: {site}: ") for line in result.stderr.splitlines())
    assert not out.exists()
