"""Beyond one Prometheus (docs/scale-out.md): the scale_out config, where each rule group may run (from the PromQL
syntax tree), the collectors' and the central ruler's files, and the sharding key."""

import hashlib
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from hpcobs.build import outdir, pipeline, validate
from hpcobs.build.cache import Cache
from hpcobs.errors import UserError
from hpcobs.lang import placement as analysis
from hpcobs.proof.servers import free_port
from hpcobs.settings import config as config_module
from hpcobs.targets import scale_out, scrape
from hpcobs.targets.scrape import Node
from tests.conftest import ROOT

SITE = ROOT / "tests" / "sites" / "sharded-vmagent.yaml"
DOC = ROOT / "docs" / "scale-out.md"


def _load(tmp_path: Path, text: str, name: str = "site.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return config_module.load(path)


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(UserError) as refused:
        scale_out.files(pipeline.model(_load(tmp_path, text)))
    return refused.value.lines


@pytest.fixture(scope="module")
def sharded():
    config = config_module.load(SITE)
    model = pipeline.model(config)
    return config, model, scale_out.files(model)


# --- The placement analysis, construct by construct -------------------------------------------------------------


def _raw_from_nodes(selector) -> str | None:
    return None if selector.name in ("node_x", "node_y") or ":" in (selector.name or "") else "reads elsewhere"


NODE_LOCAL = [
    "node_x",
    "rate(node_x[5m]) > 0",
    "max by (cluster, node, gpu) (node_x)",
    "sum without (gpu) (node_x)",
    "topk by (node) (1, node_x)",
    "quantile by (cluster, node) (0.9, node_x)",
    "node_x / node_y",
    "node_x * on (cluster, node) group_left (model) node_y",
    "node_x unless ignoring (gpu) node_y",
    "label_replace(node_x, 'node', '$1', 'hostname', '(.+)') > 2 * 3",
    "node_x - time()",
    "max_over_time(node_x[1h:1m])",
    "node:recorded:count",
]
CENTRAL = [
    ("sum(node_x)", "`sum` combines series of every node"),
    ("sum by (cluster) (node_x)", "`sum by (cluster)` combines series of every node"),
    ("count without (node) (node_x)", "`count without (node)` combines series of every node"),
    ("topk(3, node_x)", "`topk` combines series of every node"),
    ("quantile by (cluster) (0.5, node_x)", "`quantile by (cluster)` combines series of every node"),
    ("node_x * on (cluster, gpu) node_y", "`* on (cluster, gpu)` matches series across nodes"),
    ("node_x or ignoring (node) node_y", "`or ignoring (node)` matches series across nodes"),
    ("node_x > scalar(node_y)", "`scalar()` answers for every series at once"),
    ("absent(node_x)", "`absent()` answers for every series at once"),
    ("vector(1)", "`vector()` answers for every series at once"),
    ("node_x * other_y", "reads elsewhere"),
    ("max by (node) (sum by (cluster) (node_x))", "`sum by (cluster)` combines series of every node"),
]


@pytest.mark.parametrize("expr", NODE_LOCAL)
def test_a_node_local_expression_answers_for_a_node_from_its_series(expr):
    assert analysis.mixes(expr, "node", _raw_from_nodes) is None


@pytest.mark.parametrize(("expr", "reason"), CENTRAL)
def test_an_expression_that_reads_other_nodes_says_how(expr, reason):
    assert analysis.mixes(expr, "node", _raw_from_nodes) == reason


# --- The real groups --------------------------------------------------------------------------------------------


def _doc_table() -> dict[str, tuple[str, str]]:
    """docs/scale-out.md's placement table: group -> (runs, why)."""
    section = DOC.read_text(encoding="utf-8").split("<!-- placement table -->")[1]
    rows = re.findall(r"^\| `([^`]+)` \| (shard|central) \| (.*) \|$", section, re.M)
    return {group: (runs, why) for group, runs, why in rows}


def test_the_placement_of_every_group_is_the_docs_table(sharded):
    """The table of docs/scale-out.md is what placement() says of the sharded site's groups: node-local groups
    on a shard, every other with the first rule that reads several nodes and why."""
    config, model, _ = sharded
    placed = scale_out.placement(config, model.rule_groups)
    assert {p.group: (p.runs, p.why.replace("|", "\\|")) for p in placed} == _doc_table()
    # The failure the issue names: no job- or cluster-level group on a shard.
    assert not [p.group for p in placed if p.runs == "shard" and re.search(r"-(jobs?|cluster|fleet)\b", p.group)]


def test_placement_yaml_lists_every_group_in_build_order(sharded):
    config, model, files = sharded
    listed = yaml.safe_load(files[scale_out.PLACEMENT])["groups"]
    assert [g["group"] for g in listed] == [g.name for groups in model.rule_groups.values() for g in groups]
    assert all(set(g) == {"group", "domain", "file", "runs", "why"} for g in listed)


def test_every_rule_keeps_the_cluster_label(sharded):
    """Topology clusters: one ruler over several clusters' series mixes none of them, since every aggregation
    keeps the cluster label and every match matches on it (a lint over every rule of the build)."""
    config, model, _ = sharded
    label = config.get("cluster", "label")
    mixing = {
        rule.record if hasattr(rule, "record") else rule.alert: analysis.mixes(rule.expr, label, lambda _: None)
        for groups in model.rule_groups.values()
        for group in groups
        for rule in group.rules
    }
    assert len(mixing) > 100 and not {name: why for name, why in mixing.items() if why}


def test_two_clusters_share_one_ruler(tmp_path):
    """Topology clusters: each cluster's collector adds its own cluster label; the central rule files are the
    same for both, so one vmalert evaluates them over both clusters' series."""
    site = "scrape: {nodes: ['n[1-4]']}\nscale_out: {topology: clusters}\ncluster: {name: %s}\n"
    builds = [scale_out.files(pipeline.model(_load(tmp_path, site % name, f"{name}.yaml"))) for name in "ab"]
    for name, files in zip("ab", builds):
        jobs = yaml.safe_load(files["scale-out/collector/scrape.yml"])["scrape_configs"]
        assert all({"target_label": "cluster", "replacement": name} in job["relabel_configs"] for job in jobs)
        assert not any(step.get("action") == "hashmod" for job in jobs for step in job["relabel_configs"])
    central = [{p: t for p, t in files.items() if p.startswith(scale_out.CENTRAL_DIR)} for files in builds]
    assert central[0] == central[1]


# --- The sharding key -------------------------------------------------------------------------------------------


def _prometheus_hashmod(value: str, modulus: int) -> int:
    """Prometheus' hashmod (model/relabel/relabel.go, sum64 of md5.Sum): the md5 digest's last 8 bytes as a
    big-endian integer (its loop shifts the first 8 bytes out of 64 bits), modulo the modulus."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


def test_the_hashmod_is_prometheus_own():
    """The values of Prometheus' own relabel tests (model/relabel/relabel_test.go): "baz" and "foo\\nbar" modulo
    1000 give 976 and 734."""
    assert (_prometheus_hashmod("baz", 1000), _prometheus_hashmod("foo\nbar", 1000)) == (976, 734)


def _relabel(labels: dict[str, str], steps: list[dict]) -> dict[str, str] | None:
    """The replace, hashmod and keep steps of Prometheus' relabelling, as shard_relabel writes them."""
    labels = dict(labels)
    for step in steps:
        value = ";".join(labels.get(name, "") for name in step["source_labels"])
        action = step.get("action", "replace")
        if action == "hashmod":
            labels[step["target_label"]] = str(_prometheus_hashmod(value, step["modulus"]))
        elif action == "keep" and not re.fullmatch(step["regex"], value):
            return None
        elif action == "replace" and (found := re.fullmatch(step["regex"], value)):
            labels[step["target_label"]] = found.expand(step.get("replacement", "$1").replace("$1", r"\1"))
    return labels


def test_every_exporter_of_a_node_lands_on_the_same_shard(tmp_path):
    """Each node's targets of every port (dcgm, node_exporter, job metrics), reached by name or at an address of
    its own (NodeAddr: instance names the node), are kept by exactly one shard, the same for all of them."""
    shards = 3
    config = _load(
        tmp_path, f"scrape: {{nodes: ['gpu[001-030]']}}\nscale_out: {{topology: sharded, shards: {shards}}}\n"
    )
    nodes = [Node(f"gpu{n:03}", f"gpu{n:03}") for n in range(1, 21)] + [
        Node(f"gpu{n:03}", f"10.0.0.{n}") for n in range(21, 31)
    ]
    kept: dict[str, set[int]] = {node.name: set() for node in nodes}
    for port in (9400, 9100, 9500):
        for group in scrape.target_groups(nodes, port):
            for target in group["targets"]:
                labels = {"__address__": target, **group.get("labels", {})}
                node = labels.get("instance", target).rsplit(":", 1)[0]
                for shard in range(shards):
                    if _relabel(labels, scale_out.shard_relabel(config, shard)) is not None:
                        kept[node].add(shard)
    assert all(len(on) == 1 for on in kept.values()), kept
    assert {shard for on in kept.values() for shard in on} == set(range(shards))


def _vmagent_targets(directory: Path, port: int, tmp_path: Path) -> set[tuple[str, str]]:
    flags = (directory / "vmagent.flags").read_text().splitlines()
    command = ["vmagent", *flags, f"-httpListenAddr=127.0.0.1:{port}", f"-remoteWrite.tmpDataPath={tmp_path}"]
    process = subprocess.Popen(command, cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        listed: set[tuple[str, str]] = set()
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=2) as response:
                    active = json.load(response)["data"]["activeTargets"]
                now = {(t["labels"]["job"], t["labels"]["instance"]) for t in active}
                if now and now == listed:  # every target file read: two answers alike
                    return now
                listed = now
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"vmagent on {directory} listed no target")
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.live
def test_real_vmagents_split_the_nodes_whole(sharded, tmp_path):
    """Two vmagents started with the generated shard directories (their flags, scrape.yml and target files)
    list the targets they scrape: together every target once, and each node's exporters on one of them. vmagent
    hashes with xxhash, not md5, so which shard keeps a node differs from Prometheus: never that it is one."""
    _, _, files = sharded
    outdir.write_tree(tmp_path / "out", files)
    found = [
        _vmagent_targets(tmp_path / "out" / "scale-out" / f"shard-{shard}", free_port(), tmp_path / f"q{shard}")
        for shard in range(2)
    ]
    assert found[0] and found[1] and not found[0] & found[1]
    hosts = [{instance.rsplit(":", 1)[0] for _, instance in shard} for shard in found]
    assert not hosts[0] & hosts[1]
    jobs = {job for shard in found for job, _ in shard}
    assert {"dcgm-exporter", "node"} <= jobs


# --- The files and the tools that read them ---------------------------------------------------------------------


def test_the_sharded_site_writes_each_piece(sharded):
    config, _, files = sharded
    for shard in range(2):
        assert f"scale-out/shard-{shard}/scrape.yml" in files
        assert files[f"scale-out/shard-{shard}/vmagent.flags"] == (
            "-promscrape.config=scrape.yml\n-remoteWrite.url=http://victoria-metrics.example.org:8428/api/v1/write\n"
        )
    flags = files["scale-out/central/vmalert.flags"].splitlines()
    url = "http://victoria-metrics.example.org:8428"
    assert [f for f in flags if not f.startswith("-rule=")] == [
        f"-datasource.url={url}",
        f"-remoteWrite.url={url}",
        f"-remoteRead.url={url}",
        "-notifier.url=http://alertmanager-1:9093",
        "-notifier.url=http://alertmanager-2:9093",
        "-evaluationInterval=30s",
        "-disableAlertgroupLabel",
    ]
    assert {f.removeprefix("-rule=") for f in flags if f.startswith("-rule=")} == {
        path.removeprefix("scale-out/central/") for path in files if path.endswith(".rules.yaml")
    }
    assert pipeline.generate(config) == pipeline.generate(config)  # deterministic


def test_a_single_prometheus_writes_no_scale_out():
    model = pipeline.model(config_module.load())
    assert scale_out.files(model) == {}


def test_promtool_and_the_schemas_accept_every_collector(tmp_path):
    """prometheus-agent's prometheus.yml and a full Prometheus shard's, with its rule files, pass promtool check
    config (promtool 2.42 has no agent flag: an agent's config is a server's without rules), and the rule files
    promtool check rules, as the build checks them."""
    site = "scrape: {nodes: ['n[1-4]']}\nscale_out: {topology: sharded, collector: %s, rules_on_shards: %s}\n"
    for name, collector, on_shards in (
        ("agent", "prometheus-agent", "[]"),
        ("full", "prometheus", "[hpcobs-gpu-normalise, hpcobs-gpu-idle, hpcobs-gpu-node]"),
    ):
        files = scale_out.files(pipeline.model(_load(tmp_path, site % (collector, on_shards), f"{name}.yaml")))
        root = tmp_path / name
        outdir.write_tree(root, files)
        assert validate.tool_errors(root, files, Cache(tmp_path / "cache")) == []
        assert not [line for path, text in files.items() for line in validate.schema_errors(path, text)]
        shard_rules = [p for p in files if p.startswith("scale-out/shard-0/rules/")]
        assert bool(shard_rules) == (collector == "prometheus")
    central = yaml.safe_load(files["scale-out/central/rules/gpu.rules.yaml"])["groups"]
    assert "hpcobs-gpu-node" not in [g["name"] for g in central]  # evaluated once, on the shards


def test_vmagent_accepts_the_shard_config(sharded, tmp_path):
    _, _, files = sharded
    outdir.write_tree(tmp_path, files)
    shard = tmp_path / "scale-out" / "shard-0"
    flags = (shard / "vmagent.flags").read_text().splitlines()
    run = subprocess.run(
        ["vmagent", *flags, "-promscrape.config.dryRun", "-loggerLevel=ERROR"],
        cwd=shard,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr


def test_vmalert_accepts_the_flags_and_the_central_rules(sharded, tmp_path):
    """vmalert -dryRun (Debian 12's 1.79, as the site file declares it) with the generated flags loads every central
    rule file as generated: keep_firing_for, which it would refuse, is left out and the alerts it held are named."""
    _, _, files = sharded
    outdir.write_tree(tmp_path, files)
    central = tmp_path / "scale-out" / "central"
    flags = (central / "vmalert.flags").read_text().splitlines()
    command = ["vmalert", *flags, "-dryRun", "-loggerLevel=ERROR"]
    run = subprocess.run(command, cwd=central, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert not any("keep_firing_for" in text for path, text in files.items() if path.startswith("scale-out/central/"))
    left_out = yaml.safe_load(files["scale-out/placement.yaml"])["keep_firing_for_left_out"]
    assert "GpuFellOffBus" in left_out and "GpuTemperatureHigh" in left_out


def test_a_vmalert_that_keeps_firing_gets_keep_firing_for(tmp_path):
    """From vmalert 1.92 on the central rules are the rules: keep_firing_for kept, nothing named as left out."""
    site = tmp_path / "site.yaml"
    site.write_text(SITE.read_text().replace('vmalert_version: "1.79"', 'vmalert_version: "1.104"'))
    files = scale_out.files(pipeline.model(config_module.load(site)))
    central = "".join(text for path, text in files.items() if path.startswith("scale-out/central/rules/"))
    assert "keep_firing_for:" in central
    assert "keep_firing_for_left_out" not in yaml.safe_load(files["scale-out/placement.yaml"])


# --- The refusals -----------------------------------------------------------------------------------------------

SHARDED_FULL = (
    "scrape: {nodes: ['n[1-4]']}\nscale_out: {topology: sharded, collector: prometheus, rules_on_shards: %s}\n"
)


def test_a_cluster_level_group_on_a_shard_is_refused(tmp_path):
    assert _errors(tmp_path, SHARDED_FULL % "[hpcobs-gpu-cluster]") == [
        f"config error: {tmp_path / 'site.yaml'}: scale_out.rules_on_shards[0]: group hpcobs-gpu-cluster reads "
        "series of more than one node (cluster:gpus:count `sum by (cluster)` combines series of every node); it "
        "must run centrally; remove it from scale_out.rules_on_shards"
    ]


def test_an_unknown_group_on_a_shard_is_refused(tmp_path):
    (line,) = _errors(tmp_path, SHARDED_FULL % "[hpcobs-gpu-nodes]")
    assert line.endswith(
        "scale_out.rules_on_shards[0]: 'hpcobs-gpu-nodes' is no rule group of this build; write one of "
        "scale-out/placement.yaml's groups"
    )


def test_a_shard_group_needs_the_groups_it_reads_on_the_shard(tmp_path):
    (line,) = _errors(tmp_path, SHARDED_FULL % "[hpcobs-gpu-node]")
    assert line.endswith(
        "scale_out.rules_on_shards: group hpcobs-gpu-node reads records of hpcobs-gpu-idle, hpcobs-gpu-normalise, "
        "which the shards would not evaluate; list them too, or remove it"
    )


@pytest.mark.parametrize(
    ("scale_out_text", "key", "message"),
    [
        (
            "{topology: sharded, collector: vmagent, rules_on_shards: [hpcobs-gpu-node]}",
            "scale_out.rules_on_shards",
            "shards evaluate rules only as full Prometheus servers (topology sharded, collector prometheus), not "
            "with topology sharded and collector vmagent; set both, or empty scale_out.rules_on_shards",
        ),
        ("{shards: 1}", "scale_out.shards", "1 is not a whole number of collection shards from 2 to 64"),
        ("{topology: shards}", "scale_out.topology", "'shards' is not one of ['single', 'sharded', 'clusters']"),
        (
            "{central: {url: 'victoria-metrics:8428'}}",
            "scale_out.central.url",
            "the URL is not an http:// or https:// URL; write e.g. https://host.example.org:443/path",
        ),
    ],
)
def test_the_scale_out_section_is_validated(tmp_path, scale_out_text, key, message):
    path = tmp_path / "site.yaml"
    path.write_text(f"scale_out: {scale_out_text}\n")
    with pytest.raises(UserError) as refused:
        config_module.load(path)
    assert refused.value.lines == [f"config error: {path}: {key}: {message}"]


def test_scale_out_without_a_scrape_side_is_refused(tmp_path):
    (line,) = _errors(tmp_path, "scrape: {enabled: false}\nscale_out: {topology: sharded}\n")
    assert line.endswith(
        "scale_out.topology: sharded collection splits the scrape jobs of out/prometheus/scrape/, which this "
        'config does not generate; set scrape.enabled: true with each exporter\'s selector naming its job="...", '
        "or set scale_out.topology: single"
    )
