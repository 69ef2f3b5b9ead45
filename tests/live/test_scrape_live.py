"""The generated scrape config (out/prometheus/scrape/, docs/collection.md) in a real Prometheus: its prometheus.yml,
rules and file_sd target files as built, only each target's address moved to loopback the way the target files
move a node reached at another address (`instance` kept). Each node's node_exporter is a real
prometheus-node-exporter (filesystem collector, and the textfile collector reading the job-info file the prolog
would write); every other exporter is a stand-in replaying the simulator's series of that node, one sample per
scrape, without the labels the scrape adds. The recording rules then produce their per-node and per-job series with
the cluster label and the node, and the alerts that compare the node's names across exporters stay silent."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.authoring.rules import Alert
from hpcobs.build import pipeline
from hpcobs.lang.render import load_yaml
from hpcobs.proof.servers import Prometheus, StandIn, exposition_prefix, free_port
from hpcobs.proof.simulate import Simulation
from hpcobs.settings import config as config_module
from hpcobs.targets import scrape
from hpcobs.targets.prometheus import RULES_DIR
from tests.conftest import MEASUREMENT

pytestmark = pytest.mark.live

NODE_EXPORTER = "prometheus-node-exporter"
NODES, GPUS = 2, 2
FAST = "1s"  # scrape and rule evaluation, so that a few seconds give every rate window its samples
WAIT = 30.0
JOB_INFO = "hpcobs_slurm_job_info"


def stand_in(series: dict[str, list[tuple[str, list]]], first: int) -> StandIn:
    """Every stand-in target on one server, the next sample at each scrape from `first` on."""
    scrapes: defaultdict[str, int] = defaultdict(lambda: first)

    def at(path: str) -> int:
        scrapes[path] += 1
        return scrapes[path] - 1

    return StandIn(series, at)


def busiest_step(sim: Simulation, room: int) -> int:
    """The scrape of the window with the most running jobs, leaving `room` scrapes after it."""
    window = sim.window
    starts = range(0, window.steps - room)
    return max(starts, key=lambda i: sum(j.start <= window.time(i) < j.end for j in sim.cluster.jobs))


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    began = time.monotonic()
    folder = tmp_path_factory.mktemp("scrape")
    site = folder / "site.yaml"
    site.write_text("scrape_interval: 5s\n")
    sim = Simulation(config_module.load(site), nodes=NODES, gpus_per_node=GPUS, hours=0.25, scenarios="healthy")
    names = [node.name for node in sim.cluster.nodes]
    site.write_text(f"scrape_interval: 5s\nscrape: {{nodes: {names}, controller: slurmctld}}\n")
    config = config_module.load(site)
    first = busiest_step(sim, room=60)

    # The series each target serves, the scrape's labels taken off; job info goes to node_exporter's textfiles.
    cluster = config.get("cluster", "label")
    served: dict[str, list] = defaultdict(list)
    job_info: dict[str, list[str]] = defaultdict(list)
    for family in sim.families():
        for labels, values in family.series:
            if family.name == "up" or not any(v is not None for v in values):
                continue
            own = {k: v for k, v in labels.items() if k not in ("job", "instance", cluster)}
            if family.name == JOB_INFO:
                if values[first] is not None:
                    job_info[labels["instance"]].append(f"{exposition_prefix(family.name, own)} 1")
                continue
            served[f"/{labels['job']}/{labels['instance']}"].append((exposition_prefix(family.name, own), values))
    stack = contextlib.ExitStack()
    server = stack.enter_context(stand_in(served, first))

    out = folder / "out"
    for path, text in pipeline.generate(config).items():
        if path.startswith((scrape.SCRAPE_DIR, RULES_DIR)):
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            (out / path).write_text(text)
    node_exporters, processes = {}, []
    owners = {Path(place.targets_file).name: job for job in scrape.jobs(config) for place in job.places}
    for target_file in (out / scrape.SCRAPE_DIR / scrape.TARGETS_DIR).glob("*.json"):
        moved = []
        for group in json.loads(target_file.read_text()):
            for target in group["targets"]:
                labels = {"instance": target, **group.get("labels", {})}
                if target_file.name == "node_exporter.json":
                    if target not in node_exporters:
                        textfiles = folder / "textfiles" / target.replace(":", "_")
                        textfiles.mkdir(parents=True)
                        (textfiles / "job_info.prom").write_text("\n".join(job_info[target]) + "\n")
                        node_exporters[target] = f"127.0.0.1:{free_port()}"
                        processes.append(
                            subprocess.Popen(
                                [
                                    NODE_EXPORTER,
                                    "--collector.disable-defaults",
                                    "--collector.filesystem",
                                    "--collector.textfile",
                                    f"--collector.textfile.directory={textfiles}",
                                    f"--web.listen-address={node_exporters[target]}",
                                ],
                                stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL,
                            )  # fmt: skip
                        )
                    moved.append({"targets": [node_exporters[target]], "labels": labels})
                else:
                    path = f"/{owners[target_file.name].name}/{labels['instance']}"
                    moved.append({"targets": [server.address], "labels": {**labels, "__metrics_path__": path}})
        target_file.write_text(json.dumps(moved))
    # Scrapes and evaluations each second; the rule files as built otherwise.
    prometheus_yml = out / scrape.PROMETHEUS_YML
    document = load_yaml(prometheus_yml.read_text())
    document["global"] = {"scrape_interval": FAST, "evaluation_interval": FAST}
    for job in document["scrape_configs"]:
        job["scrape_interval"] = FAST
    prometheus_yml.write_text(yaml.safe_dump(document))
    for rules in (out / RULES_DIR).glob("*.rules.yaml"):
        groups = load_yaml(rules.read_text())
        for group in groups["groups"]:
            group["interval"] = FAST
        rules.write_text(yaml.safe_dump(groups))
    prometheus = Prometheus(config_file=prometheus_yml)
    with stack:
        stack.callback(shutil.rmtree, folder / "textfiles", ignore_errors=True)
        for process in processes:
            stack.callback(process.wait, timeout=10)
            stack.callback(process.terminate)
        stack.callback(prometheus.stop)
        prometheus.start()
        yield config, names, prometheus, time.monotonic() - began


def settled(prometheus: Prometheus, expr: str, done) -> list:
    """The query's result once `done(result)` holds, or at the deadline."""
    deadline = time.monotonic() + WAIT
    while True:
        result = prometheus.query(expr, time.time())
        if done(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def alert(config, name: str) -> Alert:
    return next(
        rule
        for groups in pipeline.rule_groups(Context(config)).values()
        for group in groups
        for rule in group.rules
        if isinstance(rule, Alert) and rule.alert == name
    )


def test_the_generated_jobs_scrape_every_target_with_the_labels_the_rules_read(collected, record_property):
    config, names, prometheus, ready = collected
    cluster = config.get("cluster", "label")
    jobs = scrape.jobs(config)
    expected = {
        (job.name, f"{host}:{place.port}")
        for job in jobs
        for place in job.places
        for host in (names if place.runs_on == "node" else [config.get("scrape", "controller")])
    }
    up = settled(prometheus, "up == 1", lambda result: len(result) == len(expected))
    assert {(s.labels["job"], s.labels["instance"]) for s in up} == expected
    assert {s.labels[cluster] for s in up} == {config.get("cluster", "name")}

    per_node = ["node:filesystem_used:ratio", "node:gpu_utilization:avg", "node:slurm_gpus:count"]
    for record in per_node:
        series = settled(prometheus, record, lambda r: {s.labels.get("node") for s in r} == set(names))
        assert {s.labels.get("node") for s in series} == set(names), record
        assert {s.labels[cluster] for s in series} == {config.get("cluster", "name")}, record
    for record in ("job:gpus_allocated:count", "job:slurm_job_info:max"):
        series = settled(prometheus, record, bool)
        assert series and all(s.labels.get("hpc_job") for s in series), record

    # The node's names agree: dcgm-exporter's hostname with up's instance, the Slurm node with both.
    for name in ("ExporterGpuSeriesAbsent", "ExporterJobMappingMissing"):
        assert prometheus.query(alert(config, name).expr, time.time()) == [], name
    record_property(MEASUREMENT, f"scrape: servers up in {ready:.1f}s")
