"""The scrape side (hpcobs.targets.scrape, docs/collection.md): a job per enabled exporter named by its selector,
the cluster label relabelled in, target files from the site's node list (names, hostlists, `scontrol show nodes`)
with `instance` naming the node as Slurm does, refusals that name the key and the fix, and a prometheus.yml that
real promtool accepts. tests/live/test_scrape_live.py runs it in a real Prometheus."""

import json
from types import SimpleNamespace

import pytest

from hpcobs.build import tools
from hpcobs.errors import UserError
from hpcobs.exporters.labels import EXPORTER_PORTS
from hpcobs.exporters.labels_contract import SERVED_BY
from hpcobs.lang import hostlist
from hpcobs.lang.render import load_yaml
from hpcobs.settings import config as config_module
from hpcobs.targets import scrape
from hpcobs.targets.prometheus import RULES_DIR

SCONTROL = """NodeName=gpu003 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01
   NodeAddr=10.1.0.3 NodeHostName=gpu003 Version=22.05.8
   OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)
   Reason=ib link flaps [root@2024-05-01T10:00:00]

NodeName=gpu004 Arch=x86_64 CoresPerSocket=32 NodeAddr=gpu004 NodeHostName=gpu004 Version=22.05.8
"""


def site(tmp_path, text: str):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return config_module.load(path)


def scrape_files(config) -> dict[str, str]:
    return scrape.files(SimpleNamespace(config=config))  # type: ignore[arg-type]


def test_each_enabled_exporter_has_the_job_its_selector_names():
    config = config_module.load()
    jobs = {job.name: job for job in scrape.jobs(config)}
    for role, settings in config["exporters"].items():
        if settings["enabled"]:
            name = settings["selector"].split('"')[1]
            assert role in jobs[name].roles, (role, name)
    # NCCL Inspector and the training contract are served by one node_exporter: one job, its port.
    assert jobs["training"].roles == ("nccl_inspector", "training")
    assert jobs["node"].roles == ("node_exporter", "job_info")
    assert [place.runs_on for place in jobs["slurm-exporter"].places] == ["controller"]
    assert [place.served_by for place in jobs["training"].places] == ["training"]
    # The ports the simulator's targets carry are the config's defaults.
    ports = config.get("scrape", "ports")
    assert ports == {exporter: EXPORTER_PORTS[exporter] for exporter in ports}
    assert set(SERVED_BY.values()) <= set(ports)


def test_hostlist_expressions_expand_as_slurm_does():
    assert hostlist.expand("gpu[001-003,010],login1") == ["gpu001", "gpu002", "gpu003", "gpu010", "login1"]
    assert hostlist.expand("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]
    for bad, problem in [("gpu[3-1]", "backwards"), ("gpu[a]", "not a number"), ("gpu[1", "unclosed")]:
        with pytest.raises(ValueError, match=problem):
            hostlist.expand(bad)


def test_a_node_list_is_names_hostlists_or_scontrol_output():
    plain = scrape.parse_nodes("# compute\ngpu[001-002] login1  # the login node too\n\n")
    assert [(n.name, n.address) for n in plain] == [("gpu001",) * 2, ("gpu002",) * 2, ("login1",) * 2]
    nodes = scrape.parse_nodes(SCONTROL)
    assert [(n.name, n.address) for n in nodes] == [("gpu003", "10.1.0.3"), ("gpu004", "gpu004")]
    oneline = scrape.parse_nodes(SCONTROL.replace("\n   ", " "))  # scontrol show nodes -o
    assert oneline == nodes
    with pytest.raises(ValueError, match="line 2: 'gpu_1' is not a host name"):
        scrape.parse_nodes("gpu001\ngpu_1\n")


def test_a_node_reached_at_another_address_keeps_its_name_in_instance():
    groups = scrape.target_groups(scrape.parse_nodes(SCONTROL), 9400)
    assert groups == [
        {"targets": ["gpu004:9400"]},
        {"targets": ["10.1.0.3:9400"], "labels": {"instance": "gpu003:9400"}},
    ]
    ipv6 = scrape.target_groups([scrape.Node("gpu005", "fd00::5")], 9100)
    assert ipv6 == [{"targets": ["[fd00::5]:9100"], "labels": {"instance": "gpu005:9100"}}]


def test_the_site_files_nodes_reach_every_per_node_job_and_the_controller_the_slurm_job(tmp_path):
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "nodes.txt").write_text(SCONTROL)
    config = site(
        tmp_path,
        'cluster: {name: "a$1b"}\n'
        "scrape: {nodes: [gpu003, 'gpu[001-002]'], nodes_file: lists/nodes.txt, controller: slurmctld,\n"
        "         alertmanagers: ['am1.example.org:9093', 'am2.example.org:9093']}\n",
    )
    files = scrape_files(config)
    dcgm = json.loads(files["prometheus/scrape/targets/dcgm.json"])
    assert dcgm == [
        {"targets": ["gpu003:9400", "gpu001:9400", "gpu002:9400", "gpu004:9400"]},
    ], "gpu003 is listed first by name, and keeps that entry and its place"
    assert json.loads(files["prometheus/scrape/targets/slurm_sckyzo.json"]) == [{"targets": ["slurmctld:9341"]}]
    jobs = load_yaml(files["prometheus/scrape/scrape_configs.yml"])["scrape_configs"]
    # The cluster name is written as is: relabelling would expand $1.
    assert {str(job["relabel_configs"]) for job in jobs} == {str([{"replacement": "a$$1b", "target_label": "cluster"}])}
    # The complete prometheus.yml sends its alerts to the site's Alertmanagers.
    alerting = load_yaml(files["prometheus/scrape/prometheus.yml"])["alerting"]
    assert alerting == {
        "alertmanagers": [{"static_configs": [{"targets": ["am1.example.org:9093", "am2.example.org:9093"]}]}]
    }


def test_the_default_build_lists_no_invented_node():
    files = scrape_files(config_module.load())
    targets = {path: json.loads(text) for path, text in files.items() if path.endswith(".json")}
    assert targets and all(groups == [] for groups in targets.values())


def test_promtool_accepts_the_generated_config_with_its_rules_and_targets(tmp_path):
    config = site(tmp_path, "scrape: {nodes: ['gpu[001-004]'], controller: slurmctld}\n")
    out = tmp_path / "out"
    for path, text in scrape_files(config).items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
    rules = out / RULES_DIR / "gpu.rules.yaml"
    rules.parent.mkdir(parents=True)
    rules.write_text("groups: []\n")
    for name in (scrape.PROMETHEUS_YML, scrape.SCRAPE_CONFIGS):
        command = tools.prometheus_config_check(name, cwd=out)
        assert command.inputs is not None and "prometheus/scrape/targets/dcgm.json" in command.inputs
        result = tools.run(command)
        assert result.ok, result.output


@pytest.mark.parametrize(
    "text, key, problem",
    [
        ("exporters: {dcgm: {selector: 'job=~\"dcgm.*\"'}}", "exporters.dcgm.selector", "names no single job"),
        ('exporters: {dcgm: {selector: \'job="dcgm", env="prod"\'}}', "exporters.dcgm.selector", "single job"),
    ],
)
def test_a_selector_no_scrape_job_produces_is_refused_with_the_fix(tmp_path, text, key, problem):
    asked = site(tmp_path, text + "\nscrape: {nodes: [gpu001]}\n")
    with pytest.raises(UserError) as refused:
        scrape_files(asked)
    [line] = refused.value.lines
    assert line.startswith(f"config error: {tmp_path / 'site.yaml'}: {key}: ") and problem in line, line
    assert scrape_files(site(tmp_path, text + "\nscrape: {enabled: false}\n")) == {}
    # A site that sets no scrape: block keeps its own scrape config: its build is not refused, nothing is generated.
    assert scrape_files(site(tmp_path, text + "\n")) == {}


def test_a_job_served_in_two_places_reads_both_target_files(tmp_path):
    """jontk/slurm-exporter's job info under the main node_exporter's job: node_exporter on each node, jontk's
    exporter once, on the controller."""
    config = site(tmp_path, "exporters: {job_info: {source: jontk}}\nscrape: {nodes: [gpu001], controller: ctl}\n")
    files = scrape_files(config)
    [node] = [job for job in load_yaml(files[scrape.SCRAPE_CONFIGS])["scrape_configs"] if job["job_name"] == "node"]
    assert node["file_sd_configs"] == [{"files": ["targets/node_exporter.json", "targets/slurm_jontk.json"]}]
    assert json.loads(files["prometheus/scrape/targets/slurm_jontk.json"]) == [{"targets": ["ctl:8080"]}]
    assert json.loads(files["prometheus/scrape/targets/node_exporter.json"]) == [{"targets": ["gpu001:9100"]}]


def test_a_node_list_it_cannot_read_names_the_file_and_the_key(tmp_path):
    config = site(tmp_path, "scrape: {nodes_file: missing.txt}\n")
    with pytest.raises(UserError, match=r"site.yaml: scrape.nodes_file: .*missing.txt: cannot read"):
        scrape.nodes(config)
    (tmp_path / "bad.txt").write_text("NodeName=gpu001 NodeAddr=not_an_address\n")
    config = site(tmp_path, "scrape: {nodes_file: bad.txt}\n")
    with pytest.raises(UserError, match=r"scrape.nodes_file: .*bad.txt: line 1: 'not_an_address' is not a host"):
        scrape.nodes(config)
