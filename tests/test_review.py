"""`build.py diff` (docs/review.md) on real builds: each case generates the default build and a changed one (a site
file, or content changed by wrapping a dashboard's or an alert domain's module) and asserts the Markdown a reviewer
reads, exactly. Git cases run in small repositories made here: one with out/ committed, one holding a copy of the
sources whose revisions are built in a temporary worktree."""

import copy
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

from hpcobs import alerts, cli, dashboards
from hpcobs.authoring.dashboard import every_panel, stat
from hpcobs.build import outdir, pipeline
from hpcobs.delivery import semantic_diff
from hpcobs.delivery.semantic_diff import Side, compare_dashboards, queries
from hpcobs.lang.render import GENERATED, load_yaml, yaml_text
from hpcobs.settings import config as config_module
from hpcobs.targets.dashboards import DASHBOARDS_DIR
from hpcobs.targets.prometheus import RULES_DIR
from hpcobs.targets.registry import TARGETS
from tests.conftest import ROOT

BASE = Side("abc1234", "main")
TRAINING = "grafana/dashboards/HPC/hpcobs-training.json"
ALERTMANAGER = "alertmanager/alertmanager.yml"
# Each changed rule is a noise-only difference in every target that copies the rule groups (PrometheusRule, Mimir).
RULE_COPIES = sum(1 for target in TARGETS if target.rule_groups_at)
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`')
# What a copy of the checkout leaves out: history, environments, caches, builds.
NOT_SOURCES = (".git", ".venv", "out", "__pycache__", "*_cache", "*.egg-info", "node_modules")


def markdown(old: dict[str, str], new: dict[str, str]) -> str:
    return semantic_diff.markdown(semantic_diff.compare(old, new), BASE)


def site_build(tmp_path, site: dict) -> dict[str, str]:
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(site))
    return pipeline.generate(config_module.load(path))


def wrapped_build(monkeypatch, config, module, function: str, change) -> dict[str, str]:
    """The build with module.function(ctx)'s result passed through change."""
    original = getattr(module, function)
    monkeypatch.setattr(module, function, lambda ctx: change(original(ctx)))
    return pipeline.generate(config)


@pytest.fixture(scope="module")
def rerouted(config, tmp_path_factory) -> dict[str, str]:
    """The build of a site file sending team network's alerts to the storage receiver."""
    routes = copy.deepcopy(config.get("alertmanager", "routes"))
    for route in routes:
        if route["match"] == {"team": "network"}:
            route["receiver"] = "storage"
    return site_build(tmp_path_factory.mktemp("rerouted"), {"alertmanager": {"routes": routes}})


def written(directory, files: dict[str, str]):
    outdir.write_tree(directory, {**files, outdir.MARKER: outdir.MARKER_TEXT})
    return directory


def diff(capsys, *arguments: str) -> tuple[int, str, str]:
    code = cli.main(["diff", *arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_renamed_in_inhibition(alertmanager: str, old: str, new: str) -> None:
    """The Alertmanager section of a diff renaming a GPU alert: the inhibition naming the alerts dcgm-exporter's
    silence explains (derived from what they read) names it anew; the inhibitions alerts/alertmanager.py writes with
    the name GpuTemperatureHigh (the throttling it causes) apply only where that alert is written, so the diff shows
    them going with the old name or coming with the new one, and nothing else changes there."""
    lines = alertmanager.splitlines()
    dcgm = [
        re.fullmatch(r'- (\w+) inhibition `alertname="ExporterDcgmDown" mutes alertname=~"(.*)" .*', line)
        for line in lines
    ]
    added, removed = (match for match in dcgm if match)
    assert (added[1], removed[1]) == ("added", "removed")
    assert set(added[2].split("|")) - set(removed[2].split("|")) == {new}
    assert set(removed[2].split("|")) - set(added[2].split("|")) == {old}
    caused = [line for line, match in zip(lines, dcgm, strict=True) if not match]
    literal = "GpuTemperatureHigh"
    change = "removed" if old == literal else "added"
    assert len(caused) == 2
    assert all(line.startswith(f'- {change} inhibition `alertname="{literal}" mutes') for line in caused), caused


# --------------------------------------------------------------------------------------------- what it shows


def test_a_changed_threshold(generated, tmp_path):
    """The alert and the panel that draws its limit change together (docs/dashboards.md)."""
    changed = site_build(tmp_path, {"thresholds": {"gpu_temperature_celsius": 80}})
    assert markdown(generated, changed) == temperature_change("hpcobs diff against `abc1234` (main)", 85, 80)


def layout_noise(old: str, new: str, moved: str = "") -> str:
    """What an edit of the layout renumbers and shifts, counted straight from the two dashboards' JSON: the panels
    and rows both have (by title; a collapsed row's panels too) with another id, or elsewhere (the moved panel
    aside)."""
    before, after = (
        {panel["title"]: panel for panel in [*dashboard["panels"], *every_panel(dashboard)]}
        for dashboard in (json.loads(text) for text in (old, new))
    )
    common = [title for title in before if title in after]
    ids = sum(before[title]["id"] != after[title]["id"] for title in common)
    positions = sum(
        title != moved
        and (before[title]["gridPos"]["x"], before[title]["gridPos"]["y"])
        != (after[title]["gridPos"]["x"], after[title]["gridPos"]["y"])
        for title in common
    )
    assert ids and positions
    return f"{ids + positions} noise-only differences (ids, positions) not listed"


def test_an_added_panel_is_listed_and_the_renumbering_is_noise(generated, config, monkeypatch):
    def with_checkpoints(spec):
        first = spec.rows[0]
        panel = stat(
            "Checkpoints",
            'sum(job:training_checkpoints:count{cluster="$cluster", hpc_job="$hpc_job"})',
            unit="none",
            width=4,
            description="Checkpoints written by the job.",
        )
        rows = (dataclasses.replace(first, panels=[*first.panels, panel]), *spec.rows[1:])
        return dataclasses.replace(spec, rows=rows)

    changed = wrapped_build(monkeypatch, config, dashboards.training, "dashboard", with_checkpoints)
    first_row = json.loads(generated[TRAINING])["panels"][0]["title"]
    noise = layout_noise(generated[TRAINING], changed[TRAINING])
    assert markdown(generated, changed) == (
        f"hpcobs diff against `abc1234` (main): 1 change in 1 dashboard; {noise}\n"
        "\n"
        "### Dashboards\n"
        "\n"
        "#### Training (`hpcobs-training`)\n"
        "\n"
        f"- added panel `Checkpoints` (stat) in row `{first_row}`\n"
    )


def test_a_panel_moved_to_another_row_is_a_move(generated, config, monkeypatch):
    # Straggler ratio is in the second row (Progress, after the job's header); it moves under the third.
    def straggler_under_the_next_row(spec):
        here, there = spec.rows[1], spec.rows[2]
        moving = next(panel for panel in here.panels if panel.title == "Straggler ratio")
        rows = (
            spec.rows[0],
            dataclasses.replace(here, panels=[panel for panel in here.panels if panel is not moving]),
            dataclasses.replace(there, panels=[*there.panels, moving]),
            *spec.rows[3:],
        )
        return dataclasses.replace(spec, rows=rows)

    changed = wrapped_build(monkeypatch, config, dashboards.training, "dashboard", straggler_under_the_next_row)
    rows = [panel["title"] for panel in json.loads(generated[TRAINING])["panels"] if panel["type"] == "row"]
    noise = layout_noise(generated[TRAINING], changed[TRAINING], moved="Straggler ratio")
    assert markdown(generated, changed) == (
        f"hpcobs diff against `abc1234` (main): 1 change in 1 dashboard; {noise}\n"
        "\n"
        "### Dashboards\n"
        "\n"
        "#### Training (`hpcobs-training`)\n"
        "\n"
        f"- moved panel `Straggler ratio`: row `{rows[1]}` → `{rows[2]}`\n"
    )


def test_a_renamed_alert_is_a_rename(generated, config, monkeypatch):
    def renamed(groups):
        return [
            dataclasses.replace(
                group,
                rules=[
                    dataclasses.replace(rule, alert="GpuTooHot")
                    if getattr(rule, "alert", None) == "GpuTemperatureHigh"
                    else rule
                    for rule in group.rules
                ],
            )
            for group in groups
        ]

    changed = wrapped_build(monkeypatch, config, alerts.gpu, "groups", renamed)
    runbooks = "https://github.com/hpcobs/hpcobs/blob/main/docs/runbooks/gpu.md"
    rules, alertmanager = markdown(generated, changed).split("\n### Alertmanager\n\n")
    assert rules == (
        "hpcobs diff against `abc1234` (main): 6 changes in 1 rule group and Alertmanager; "
        f"{3 * RULE_COPIES} noise-only differences (rule copies) not listed\n"
        "\n"
        "### Rule groups\n"
        "\n"
        "#### `hpcobs-gpu-alerts-thermal` (`gpu.rules.yaml`)\n"
        "\n"
        "- renamed warning alert `GpuTemperatureHigh` → `GpuTooHot`:\n"
        f"  - annotations.runbook_url `{runbooks}#gputemperaturehigh` → `{runbooks}#gputoohot`\n"
    )
    assert_renamed_in_inhibition(alertmanager, "GpuTemperatureHigh", "GpuTooHot")


def test_a_changed_route(generated, rerouted):
    assert markdown(generated, rerouted) == (
        "hpcobs diff against `abc1234` (main): 1 change in Alertmanager\n"
        "\n"
        "### Alertmanager\n"
        "\n"
        '- route `team="network"`: receiver `network` → `storage`\n'
    )


def test_a_renamed_panel_and_its_changed_fields(generated):
    """compare_dashboards, which `deploy --dry-run` prints: a panel renamed with its unit, legend and thresholds."""
    old = json.loads(generated[TRAINING])
    new = copy.deepcopy(old)
    panel = next(panel for panel in new["panels"] if panel["title"] == "Tokens per second, whole job")
    panel["title"] = "Throughput"
    panel["fieldConfig"]["defaults"]["unit"] = "tokens/s"
    panel["fieldConfig"]["defaults"]["thresholds"]["steps"].append({"color": "red", "value": 1000})
    panel["targets"][0]["legendFormat"] = "{{hpc_job}}"
    assert compare_dashboards(old, new) == [
        "#### Training (`hpcobs-training`)",
        "",
        "- renamed panel `Tokens per second, whole job` → `Throughput`:",
        "  - unit `short` → `tokens/s`",
        "  - thresholds `0 green` → `0 green, 1000 red`",
        "  - query A legend (none) → `{{hpc_job}}`",
    ]
    assert compare_dashboards(old, old) == []
    rows = sum(panel["type"] == "row" for panel in old["panels"])
    contents = f"({rows} rows, {len(every_panel(old))} panels)"  # a collapsed row's panels too
    assert compare_dashboards(None, old) == ["#### Training (`hpcobs-training`)", "", f"- added dashboard {contents}"]
    assert compare_dashboards(old, None)[2:] == [f"- removed dashboard {contents}"]


def respaced(expr: str) -> str:
    """The expression spread over lines and spaced out, its string literals untouched."""
    literals = STRING.findall(expr)
    code = [part.replace("(", "( ").replace(",", " ,\n    ").replace("[", "[ ") for part in STRING.split(expr)]
    return "".join(part + literal for part, literal in zip(code, [*literals, ""]))


def test_a_pure_reformat_shows_no_change(generated, capsys, tmp_path):
    """JSON indented and ordered otherwise, YAML in another style, PromQL spread over lines: nothing changed."""

    def reversed_keys(value):
        if isinstance(value, dict):
            return {key: reversed_keys(value[key]) for key in reversed(value)}
        return [reversed_keys(item) for item in value] if isinstance(value, list) else value

    rewritten = []  # for each query: whether it is written otherwise now (each is one difference of formatting)

    def rewrite(holder: dict, key: str, text: str) -> None:
        rewritten.append(holder[key] != text)
        holder[key] = text

    reformatted = dict(generated)
    for path, text in generated.items():
        if path.startswith(f"{DASHBOARDS_DIR}/"):
            dashboard = json.loads(text)
            for panel in every_panel(dashboard):
                for target in panel.get("targets", []):
                    if target["datasource"]["type"] == "prometheus":
                        rewrite(target, "expr", respaced(target["expr"]))
            reformatted[path] = json.dumps(reversed_keys(dashboard), indent=4)
        elif path.startswith(f"{RULES_DIR}/"):
            rules = load_yaml(text)
            for rule in (rule for group in rules["groups"] for rule in group["rules"]):
                rewrite(rule, "expr", queries.promql(rule["expr"], pretty=True))
            reformatted[path] = yaml.safe_dump(rules, indent=4, width=60, default_flow_style=False)
    # The same document written otherwise as a whole is one difference of formatting too.
    reformatted[ALERTMANAGER] = yaml.safe_dump(load_yaml(generated[ALERTMANAGER]), indent=4)
    assert sum(rewritten) > 100
    noise = f"{sum(rewritten) + 1} noise-only differences (formatting) not listed"
    assert markdown(generated, reformatted) == f"hpcobs diff against `abc1234` (main): no changes; {noise}\n"
    old, new = written(tmp_path / "old", generated), written(tmp_path / "new", reformatted)
    assert diff(capsys, str(old), "--new", str(new), "--exit-code") == (
        0,
        f"hpcobs diff of `{new}` against `{old}`: no changes; {noise}\n",
        "",
    )


def test_alertmanager_routes_in_order_receivers_and_inhibitions(generated):
    """Routes named by their matchers down the tree, order compared (first match wins), secrets never shown."""
    config = load_yaml(generated[ALERTMANAGER])
    changed = copy.deepcopy(config)
    routes = changed["route"]["routes"]
    network = next(route for route in routes if route["matchers"] == ['team="network"'])
    routes.remove(network)
    routes.insert(3, network)
    storage = next(route for route in routes if route["matchers"] == ['team="storage"'])
    storage["routes"] = [{"matchers": ['alertname="StorageLustreOstFull"'], "receiver": "default"}]
    fell_off_bus = ['alertname!="GpuFellOffBus"']
    changed["inhibit_rules"].remove(
        next(rule for rule in changed["inhibit_rules"] if rule["target_matchers"] == fell_off_bus)
    )
    for side, url in ((config, "https://hooks.slack.com/services/T0/B0/old"), (changed, "https://chat.example/new")):
        side["receivers"].append({"name": "chat", "slack_configs": [{"api_url": url, "channel": "#hpc"}]})
    old = {ALERTMANAGER: yaml_text(config, GENERATED)}
    assert markdown(old, {ALERTMANAGER: yaml_text(changed, GENERATED)}) == (
        "hpcobs diff against `abc1234` (main): 4 changes in Alertmanager\n"
        "\n"
        "### Alertmanager\n"
        "\n"
        '- added route `team="storage" › alertname="StorageLustreOstFull"` → `default`\n'
        '- moved route `team="network"` before `team="gpu-ops"`\n'
        "- receiver `chat`: slack_configs[0].api_url changed (not shown: it looks like a secret)\n"
        '- removed inhibition `alertname="GpuFellOffBus" mutes alertname!="GpuFellOffBus" '
        "(equal: cluster, node, gpu)`\n"
    )


# --------------------------------------------------------------------------------------------- the command


def test_exit_code_and_json(rerouted, capsys, tmp_path):
    base = written(tmp_path / "base", rerouted)
    code, out, _ = diff(capsys, str(base), "--exit-code", "--format", "json")
    assert code == 1
    assert json.loads(out) == {
        "base": {"name": str(base), "note": "", "commit": None},
        "new": {"name": "working tree", "note": "", "commit": None},
        "changed": True,
        "summary": f"hpcobs diff against `{base}`: 1 change in Alertmanager",
        "noise": {},
        "sections": [
            {
                "area": "alertmanager",
                "subject": "",
                "heading": "",
                "changes": [
                    {
                        "kind": "route",
                        "name": 'team="network"',
                        "action": "changed",
                        "field": "receiver",
                        "old": "storage",
                        "new": "network",
                        "detail": "",
                        "secret": False,
                    }
                ],
            }
        ],
    }
    # Without --exit-code a change is no failure.
    assert diff(capsys, str(base))[0] == 0


def test_bad_bases_are_one_line_errors(capsys, tmp_path):
    # A repository of its own: the checkout may be a release tarball, without history.
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "empty")
    assert diff(capsys, "--repo", str(repo), "no-such-ref-or-directory") == (
        2,
        "",
        f"diff error: BASE no-such-ref-or-directory: neither a directory nor a commit of {repo}; give an out/ "
        "directory or a git ref (CI: fetch the history, actions/checkout with fetch-depth: 0)\n",
    )
    assert diff(capsys, str(tmp_path)) == (
        2,
        "",
        f"diff error: BASE {tmp_path}: not an hpcobs output directory (no .hpcobs-output); give an out/ written "
        "by `python build.py`, or a git ref\n",
    )
    assert diff(capsys, "--repo", str(tmp_path), "HEAD") == (
        2,
        "",
        f"diff error: --repo {tmp_path}: not a git checkout; run the diff in a clone of the repository, or give "
        "BASE as an out/ directory\n",
    )


# --------------------------------------------------------------------------------------------- git


def git(repo, *arguments: str) -> str:
    identity = ["-c", "user.name=hpcobs", "-c", "user.email=hpcobs@example.org", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", "-C", str(repo), *identity, *arguments], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def committed(repo, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def test_refs_read_the_out_committed_there(generated, rerouted, capsys, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    written(repo / "out", generated)
    on_main = committed(repo, "default build")
    git(repo, "switch", "-q", "-c", "feature")
    shutil.rmtree(repo / "out")
    written(repo / "out", rerouted)
    on_feature = committed(repo, "network alerts to storage")

    assert diff(capsys, "--repo", str(repo)) == (
        0,
        f"hpcobs diff against `{on_main}` (merge-base with main): no changes\n",
        "",
    )
    assert diff(capsys, "--repo", str(repo), "HEAD", "--exit-code") == (
        1,
        f"hpcobs diff against `{on_feature}` (HEAD): 1 change in Alertmanager\n"
        "\n"
        "### Alertmanager\n"
        "\n"
        '- route `team="network"`: receiver `storage` → `network`\n',
        "",
    )
    git(repo, "branch", "-q", "-m", "main", "trunk")
    assert diff(capsys, "--repo", str(repo)) == (
        2,
        "",
        f"diff error: no BASE given, and HEAD shares no history with main or origin/main in {repo}; name the "
        "base, e.g. `python build.py diff origin/<branch>`\n",
    )


@pytest.fixture(scope="module")
def source_repo(tmp_path_factory):
    """A repository of the sources with tagged revisions: `renamed` (GpuTemperatureHigh is GpuTooHot there),
    `broken` (its build.py fails) and `slow` (its build.py sleeps)."""
    repo = tmp_path_factory.mktemp("sources")
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(*NOT_SOURCES), dirs_exist_ok=True)
    alerts_gpu = repo / "alerts" / "gpu.py"
    alerts_gpu.write_text(alerts_gpu.read_text().replace('"GpuTemperatureHigh"', '"GpuTooHot"'))
    git(repo, "init", "-q", "-b", "main")
    committed(repo, "GpuTooHot")
    git(repo, "tag", "renamed")
    (repo / "build.py").write_text('import sys\nsys.exit("this revision cannot build")\n')
    committed(repo, "broken build")
    git(repo, "tag", "broken")
    (repo / "build.py").write_text('import pathlib, time\npathlib.Path("started").touch()\ntime.sleep(60)\n')
    committed(repo, "slow build")
    git(repo, "tag", "slow")
    return repo


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """Where the worktrees go: checked empty after each diff."""
    directory = tmp_path / "scratch"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def test_a_site_build_at_a_ref_is_built_by_that_revision_in_a_worktree(source_repo, capsys, scratch, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("thresholds:\n  gpu_temperature_celsius: 80\n")
    short = git(source_repo, "rev-parse", "--short", "renamed")
    runbooks = "https://github.com/hpcobs/hpcobs/blob/main/docs/runbooks/gpu.md"
    code, out, err = diff(capsys, "--repo", str(source_repo), "--config", str(site), "renamed")
    rules, alertmanager = out.split("\n### Alertmanager\n\n")
    assert_renamed_in_inhibition(alertmanager, "GpuTooHot", "GpuTemperatureHigh")
    assert (code, rules, err) == (
        0,
        f"hpcobs diff against `{short}` (renamed, built with {site}): 6 changes in 1 rule group and Alertmanager; "
        f"{3 * RULE_COPIES} noise-only differences (rule copies) not listed\n"
        "\n"
        "### Rule groups\n"
        "\n"
        "#### `hpcobs-gpu-alerts-thermal` (`gpu.rules.yaml`)\n"
        "\n"
        "- renamed warning alert `GpuTooHot` → `GpuTemperatureHigh`:\n"
        f"  - annotations.runbook_url `{runbooks}#gputoohot` → `{runbooks}#gputemperaturehigh`\n",
        "",
    )
    assert list(scratch.iterdir()) == []
    assert len(git(source_repo, "worktree", "list", "--porcelain").split("\n\n")) == 1


def test_a_failed_base_build_is_one_line_and_leaves_no_worktree(source_repo, capsys, scratch, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("{}\n")
    short = git(source_repo, "rev-parse", "broken")[:12]
    assert diff(capsys, "--repo", str(source_repo), "--config", str(site), "broken") == (
        2,
        "",
        f"diff error: building BASE {short} failed (exit 1): this revision cannot build\n",
    )
    assert list(scratch.iterdir()) == []
    assert len(git(source_repo, "worktree", "list", "--porcelain").split("\n\n")) == 1


def test_sigterm_during_the_base_build_leaves_no_worktree(source_repo, scratch, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("{}\n")
    command = [
        sys.executable,
        str(ROOT / "build.py"),
        "diff",
        "--repo",
        str(source_repo),
        "--config",
        str(site),
        "slow",
    ]
    with subprocess.Popen(
        command, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as diff_process:
        deadline = time.monotonic() + 60
        while not list(scratch.glob("*/checkout/started")) and time.monotonic() < deadline:
            time.sleep(0.05)
        diff_process.send_signal(signal.SIGTERM)
        out, err = diff_process.communicate(timeout=60)
    assert (diff_process.returncode, out, err) == (143, "", "diff: interrupted by SIGTERM, stopped cleanly\n")
    assert list(scratch.iterdir()) == []
    assert len(git(source_repo, "worktree", "list", "--porcelain").split("\n\n")) == 1


def temperature_change(summary: str, old: int, new: int) -> str:
    """The report of GpuTemperatureHigh's threshold going from old to new (also tests/test_site_repository.py's):
    the GPU cluster's GPUs not OK (its description, and the record gpu:problems:count it reads), the node
    dashboard's temperature panel (its red) and the alert. Rule copies: the two rules' copies in each target that
    copies the rule groups, and each rule's two rule-test files."""
    return (
        f"{summary}: 5 changes in 2 dashboards and 2 rule groups; "
        f"{RULE_COPIES + 2 * 2} noise-only differences (rule copies) not listed\n"
        "\n"
        "### Dashboards\n"
        "\n"
        "#### GPU cluster (`hpcobs-gpu-cluster`)\n"
        "\n"
        f"- panel `GPUs not OK now`: description `…a temperature above {old} C; and the job holding…` → "
        f"`…a temperature above {new} C; and the job holding…`\n"
        "\n"
        "#### Node (`hpcobs-node`)\n"
        "\n"
        f"- panel `Temperature per GPU`: thresholds `0 green, {old} red` → `0 green, {new} red`\n"
        "\n"
        "### Rule groups\n"
        "\n"
        "#### `hpcobs-gpu-health` (`gpu.rules.yaml`)\n"
        "\n"
        "- record `gpu:problems:count`: expr:\n"
        "  ```diff\n"
        "  @@ -128,7 +128,7 @@\n"
        "       count by (cluster, node, gpu) (\n"
        "         max by (cluster, node, gpu) (\n"
        "           label_replace(\n"
        f'  -          DCGM_FI_DEV_GPU_TEMP{{job="dcgm-exporter"}} > {old},\n'
        f'  +          DCGM_FI_DEV_GPU_TEMP{{job="dcgm-exporter"}} > {new},\n'
        '             "node",\n'
        '             "$1",\n'
        '             "hostname",\n'
        "  ```\n"
        "\n"
        "#### `hpcobs-gpu-alerts-thermal` (`gpu.rules.yaml`)\n"
        "\n"
        "- warning alert `GpuTemperatureHigh`:\n"
        "  - expr:\n"
        "    ```diff\n"
        "    @@ -27,7 +27,7 @@\n"
        "       (\n"
        "           max by (cluster, node, gpu) (\n"
        "             label_replace(\n"
        f'    -          DCGM_FI_DEV_GPU_TEMP{{job="dcgm-exporter"}} > {old},\n'
        f'    +          DCGM_FI_DEV_GPU_TEMP{{job="dcgm-exporter"}} > {new},\n'
        '               "node",\n'
        '               "$1",\n'
        '               "hostname",\n'
        "    ```\n"
        f"  - annotations.description `…temperature (above {old} C where that limit is…` → "
        f"`…temperature (above {new} C where that limit is…`\n"
    )
