"""`build.py doctor` against a real Prometheus holding simulated clusters: silent and exit 0 on a healthy one, and on
each broken one exactly the problem it has, with its fix, and exit 1.

One Prometheus serves every case: each dataset is simulated with its own `dataset="..."` matcher added to every
exporter's selector (the simulator gives every series the labels its selector asks for, like a scrape job's target
labels), and doctor runs with the site file of the same dataset, or of a site that scrapes it otherwise.
"""

import io
import re
from datetime import UTC, datetime

import pytest
import yaml

from hpcobs.cli import main
from hpcobs.exporters.sources import Sources
from hpcobs.proof.servers import Prometheus
from hpcobs.proof.simulate import Simulation, write
from hpcobs.settings import config as config_module

NODES, GPUS = 4, 4
# doctor looks at one instant: a healthy cluster needs a few scrapes before it, a fault its whole course.
HOURS = {"healthy": 0.1, "prolog_not_writing": 0.5, "exporter_down": 0.5}
START = datetime(2026, 1, 1, tzinfo=UTC)


def site(dataset: str, **overrides) -> dict:
    """A site file whose every exporter selector also asks for dataset="<dataset>"."""
    exporters = config_module.load().data["exporters"]
    data: dict = {
        "exporters": {role: {"selector": f'{e["selector"]}, dataset="{dataset}"'} for role, e in exporters.items()}
    }
    for role, settings in overrides.pop("exporters", {}).items():
        data["exporters"][role].update(settings)
    return {**data, **overrides}


def as_scraped(sim: Simulation, text: str) -> str:
    """The series as a scrape config that names its targets by their host names writes them."""
    return text


def fqdn_targets(sim: Simulation, text: str) -> str:
    """dcgm-exporter's targets scraped by their fully qualified names, while dcgm-exporter reports the short host
    name (os.Hostname) as its hostname."""
    port = sim.target("dcgm", "host")["instance"].rpartition(":")[2]
    return re.sub(rf'instance="([^":]+):{port}"', rf'instance="\1{DOMAIN}:{port}"', text)


def without_job_info(sim: Simulation, text: str) -> str:
    """node_exporter's textfile collector reading another directory than the prolog's: no job-info series."""
    name = sim.sources["job_info"].name("job_info")
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(f"{name}{{"))


DOMAIN = ".cluster.example.org"
# The datasets loaded: their simulated site (as deployed), scenario and scrape.
DATASETS = {
    "healthy": (site("healthy"), "healthy", as_scraped),
    # dcgm-exporter against a standalone nv-hostengine (-r localhost:5555): every GPU on hostname localhost.
    "remote": (site("remote", exporters={"dcgm": {"node_from": "instance"}}), "healthy", as_scraped),
    "fqdn": (site("fqdn"), "healthy", fqdn_targets),
    "prolog": (site("prolog"), "prolog_not_writing", as_scraped),
    "textfile": (site("textfile"), "healthy", without_job_info),
    "down": (site("down"), "exporter_down", as_scraped),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The Prometheus URL, per dataset the instant to look at (RFC 3339: the fault's, or the window's end) and the
    nodes its fault is on, and a folder for site files."""
    folder = tmp_path_factory.mktemp("doctor")
    instants, nodes, prometheus = {}, {}, Prometheus()
    for name, (data, scenario, scrape) in DATASETS.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        config = config_module.load(path)
        sim = Simulation(
            config, nodes=NODES, gpus_per_node=GPUS, hours=HOURS[scenario], scenarios=scenario, start=START
        )
        # Five minutes into the fault, when the faulty series have been there for a while; else the window's end.
        faults = [fault for fault in sim.faults.faults if fault.kind == scenario != "healthy"]
        at = sim.window.start + (faults[0].start + 300 if faults else sim.window.duration - 60)
        instants[name] = datetime.fromtimestamp(at, UTC).isoformat()
        nodes[name] = {fault.target["node"] for fault in faults}
        written = io.StringIO()
        write(sim, "openmetrics", written)
        (folder / f"{name}.om").write_text(scrape(sim, written.getvalue()))
        prometheus.load_openmetrics(folder / f"{name}.om")
    with prometheus.start():
        yield prometheus.url, instants, nodes, folder


def doctor(cluster, capsys, dataset: str, site_file: dict | None = None) -> tuple[int, list[tuple[str, str, str]]]:
    """Exit status and problems (exporter, check, text) of doctor on a dataset, with its own site file or another."""
    url, instants, _, folder = cluster
    path = folder / f"doctor-{dataset}-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(site_file or DATASETS[dataset][0]))
    status = main(["doctor", "--config", str(path), "--prometheus", url, "--time", instants[dataset]])
    problems, exporter = [], ""
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith(" "):
            exporter = line.split(" ")[0]
        elif line.split()[0] == "problem":
            check, text = line.split(None, 1)[1].split(": ", 1)
            problems.append((exporter, check, text))
    return status, problems


@pytest.mark.live
def test_a_healthy_cluster_has_no_problem(cluster, capsys):
    assert doctor(cluster, capsys, "healthy") == (0, [])
    # The remote hostengine read from instance, as its site file says, is healthy too.
    assert doctor(cluster, capsys, "remote") == (0, [])


# One fault each: the dataset, the site file doctor reads (None: the dataset's own), the one problem doctor reports
# (exporter, check) and what its line says; {node} is the node the simulated fault is on.
ONE_PROBLEM = {
    "every GPU on localhost": (
        "remote",
        site("remote"),  # dcgm's node read from the hostname, as by default
        ("dcgm", "node names"),
        [
            "1 node name(s) each reported by several targets (e.g. localhost)",
            "fix: set exporters.dcgm.node_from: instance",
        ],
    ),
    "targets scraped by a name that is not the hostname": (
        "fqdn",
        None,
        ("dcgm", "node = instance"),
        [
            f"{NODES} targets report a hostname that is not their instance's host",
            f"(e.g. gpu001 (instance gpu001{DOMAIN}:",
            "ExporterGpuSeriesAbsent compares the two; fix: scrape each node with instance <host>:<port>",
        ],
    ),
    "GPU nodes Slurm knows by another name": (
        "fqdn",
        site("fqdn", exporters={"dcgm": {"node_from": "instance"}}),
        ("slurm", "node names"),
        [f"{NODES} GPU nodes are not Slurm node names (e.g. gpu001{DOMAIN}, ", "fix: name each node as slurm.conf's"],
    ),
    "a scrape job named otherwise than the selector": (
        "healthy",
        site("healthy", exporters={"slurm": {"selector": 'job="slurm", dataset="healthy"'}}),
        ("slurm", "scraped"),
        [
            'no `up` series matches {job="slurm", dataset="healthy"}',
            "fix: add its scrape job (docs/collection.md), or set exporters.slurm.selector",
        ],
    ),
    "a target down": (
        "down",
        None,
        ("dcgm", "targets up"),
        ["1 targets down (e.g. {node}:", "fix: start the exporter on those hosts, or open its port to Prometheus"],
    ),
    "a node whose prolog writes nothing": (
        "prolog",
        None,
        ("dcgm", "job mapping"),
        ["busy GPUs carry no hpc_job on 1 nodes (e.g. {node})", "fix: install slurm/prolog and slurm/epilog"],
    ),
}


@pytest.mark.live
@pytest.mark.parametrize(("dataset", "site_file", "where", "says"), ONE_PROBLEM.values(), ids=ONE_PROBLEM)
def test_one_fault_is_one_problem_with_its_fix(cluster, capsys, dataset, site_file, where, says):
    status, problems = doctor(cluster, capsys, dataset, site_file)
    assert status == 1
    ((exporter, check, text),) = problems
    assert (exporter, check) == where
    node = next(iter(cluster[2][dataset]), "")
    assert all(part.replace("{node}", node) in text for part in says), text


@pytest.mark.live
def test_a_cluster_label_the_scrape_does_not_write(cluster, capsys):
    status, problems = doctor(cluster, capsys, "healthy", site("healthy", cluster={"label": "site"}))
    assert status == 1
    enabled = [role for role, settings in config_module.load().data["exporters"].items() if settings["enabled"]]
    assert [(exporter, check) for exporter, check, _ in problems] == [(role, "cluster label") for role in enabled]
    assert all("carry no `site` label" in text and "fix: add site: <cluster name>" in text for *_, text in problems)


@pytest.mark.live
def test_jobs_without_job_info(cluster, capsys):
    status, problems = doctor(cluster, capsys, "textfile")
    assert status == 1
    assert [(exporter, check) for exporter, check, _ in problems] == [("job_info", "metrics"), ("job_info", "job info")]
    name = Sources(config_module.load())["job_info"].name("job_info")
    assert problems[0][2].startswith(f"the rules read {name}, which no series of this exporter has; fix: "), problems
    assert "jobs on GPUs have no job-info series" in problems[1][2]
    assert "fix: install slurm/prolog on every GPU node and let node_exporter's textfile collector" in problems[1][2]
