"""The simulator: deterministic, streaming, catalogue-exact, and every scenario shows its signal in PromQL."""

import gc
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime

import pytest
import yaml

from hpcobs.authoring import synthetic
from hpcobs.authoring.context import Context
from hpcobs.build import tools
from hpcobs.exporters import catalogue
from hpcobs.lang.promql import duration
from hpcobs.proof.simulate import UP, Simulation, Spec, compress, expand, kinds, write
from hpcobs.proof.simulate.storage import JobIO
from hpcobs.proof.simulate.week import REAL_RATE, schedule
from hpcobs.settings import config as config_module
from tests.conftest import ROOT, run_build

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DCGM_FAMILIES = catalogue.load()["dcgm"].versions
MIXED = {
    "exporters": {
        "dcgm": {"versions": list(DCGM_FAMILIES)},
        "amd": {"enabled": True, "metric_prefix": "amd_"},
        "slurm": {"flavour": "native"},
        "job_info": {"source": "jontk", "selector": 'job="slurm-jobs"'},
    }
}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A fleet mid-rollout: every dcgm-exporter family, AMD nodes, native Slurm metrics, jontk job info."""
    path = tmp_path_factory.mktemp("site") / "site.yaml"
    path.write_text(yaml.safe_dump(MIXED), encoding="utf-8")
    return config_module.load(path)


def text(sim, fmt="openmetrics", names=None) -> str:
    out = io.StringIO()
    write(sim, fmt, out, names=names)
    return out.getvalue()


def series_of(sim, names=None) -> list[tuple[str, dict, list]]:
    return [
        (f.name, labels, values)
        for f in sim.families(names)
        for labels, values in f.series
        if any(v is not None for v in values)
    ]


def small(config, **kw) -> Simulation:
    args = dict(nodes=6, gpus_per_node=8, hours=0.5, scenarios="healthy", seed=1)
    return Simulation(config, **{**args, **kw})


class Null(io.TextIOBase):
    def write(self, s):
        return len(s)


# -- determinism and formats ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openmetrics", "vm", "promtool"])
def test_same_seed_same_bytes_other_seed_other_bytes(config, fmt):
    kw = dict(nodes=3, gpus_per_node=2, hours=0.25, scenarios="xid79,ib_link_flap,queue_backlog")
    first, again = text(Simulation(config, seed=5, **kw), fmt), text(Simulation(config, seed=5, **kw), fmt)
    assert first == again
    assert text(Simulation(config, seed=6, **kw), fmt) != first


def test_openmetrics_backfills_with_real_promtool(mixed, tmp_path):
    sim = Simulation(
        mixed,
        nodes=8,
        gpus_per_node=2,
        hours=0.5,
        seed=2,
        scenarios="xid79,ib_link_flap,prolog_not_writing,slurm_nodes_down,oom_kill,unexpected_outbound",
    )
    path = tmp_path / "cluster.om"
    with path.open("w", encoding="utf-8") as out:
        stats = write(sim, "openmetrics", out)
    assert path.read_text(encoding="utf-8").endswith("# EOF\n")
    result = subprocess.run(
        [tools.find(tools.PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(path), str(tmp_path / "blocks")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:] if line.strip()]
    assert sum(int(row[-4]) for row in rows) == stats.samples  # NUM SAMPLES column, every block
    assert max(int(row[-2]) for row in rows) == stats.series  # one block holds every series


def test_openmetrics_families_are_contiguous_and_typed(config):
    names = []
    for line in text(small(config, hours=0.1)).splitlines():
        if line.startswith("# TYPE"):
            assert line.split()[3] in ("counter", "gauge", "info", "unknown")
        elif not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            if not names or names[-1] != name:
                names.append(name)
    assert len(names) == len(set(names)), "a family is split"


def test_vm_lines_are_import_format(config):
    for line in text(small(config, hours=0.1), "vm").splitlines()[:200]:
        row = json.loads(line)
        assert row["metric"]["__name__"] and len(row["values"]) == len(row["timestamps"])
        assert all(t % 1000 == 0 for t in row["timestamps"]) and "" not in row["metric"].values()


# -- what is emitted matches the catalogue -------------------------------------------------------


def catalogue_names(sim) -> set[str]:
    return sim.sources.metric_names()


@pytest.mark.parametrize("site", ["default", "mixed"])
def test_every_emitted_name_is_in_the_catalogue(config, mixed, site):
    sim = small(config if site == "default" else mixed, hours=0.1, scenarios="dbe,thermal,unexpected_outbound")
    emitted = {name for name, _, _ in series_of(sim)}
    assert emitted - catalogue_names(sim) == {UP}


@pytest.mark.parametrize("site", ["default", "mixed"])
def test_every_mandatory_signal_is_simulated(config, mixed, site):
    """Non-optional catalogue metrics all appear, except the Xid, absent until the first Xid (issues 646, 700)."""
    sim = small(config if site == "default" else mixed, hours=0.1)
    emitted = {name for name, _, _ in series_of(sim)}
    xid = {sim.sources["dcgm"].name("xid", v) for v in sim.sources["dcgm"].versions}
    missing = {
        m.name
        for src in sim.sources.enabled()
        for s in src.exporter.signals()
        for v in src.versions
        if (m := src.metric(s, v)) and not m.optional
    }
    assert missing - emitted - xid == set()


def test_label_names_are_the_exporters(mixed):
    """Every series carries only its metric's catalogue labels, its host label, the driver label (dcgm),
    the scrape labels and the cluster label; Falco adds one tag_<tag> label per rule tag."""
    sim = small(mixed, nodes=8, gpus_per_node=2, hours=0.1, scenarios="unexpected_outbound,checkpoint_foreign_read")
    cluster_label = mixed.get("cluster", "label")
    allowed: dict[str, set[str]] = {}
    for source in sim.sources.enabled():
        for version in source.versions:
            for signal in source.exporter.signals():
                metric = source.metric(signal, version)
                if metric:
                    allowed.setdefault(metric.name, set()).update(
                        {
                            *metric.labels,
                            source.host_label(version),
                            *source.exporter.info_labels(version)[-1:],
                            *source.scrape_labels(),
                            "instance",
                            cluster_label,
                        }
                    )
    allowed[UP] = {"job", "instance", cluster_label}
    for name, labels, _ in series_of(sim):
        extra = {k for k in labels if k not in allowed[name] and not k.startswith("tag_")}
        assert not extra, (name, extra)


def test_dcgm_versions_differ_in_host_label_names_and_units(mixed):
    sim = small(mixed, nodes=8, gpus_per_node=2, hours=0.1)
    source = sim.sources["dcgm"]
    by_node = {n.name: n.version for n in sim.cluster.nodes if n.vendor == "nvidia"}
    assert set(by_node.values()) == set(DCGM_FAMILIES)
    utilization = {source.name("gpu_utilization", v) for v in source.versions}
    assert utilization == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"}
    seen = set()
    for name, labels, values in series_of(sim, utilization):
        host = "Hostname" if "Hostname" in labels else "hostname"
        version = by_node[labels[host]]
        assert host == source.host_label(version)
        assert name == source.name("gpu_utilization", version)
        present = [v for v in values if v is not None]
        if name == "DCGM_FI_DEV_GPU_UTIL":  # percent, integers 0..100
            assert all(isinstance(v, int) and 0 <= v <= 100 for v in present)
        else:  # ratio 0..1
            assert all(0 <= v <= 1 for v in present)
        seen.add((version, name, host))
    assert ("3.x-4.5", "DCGM_FI_DEV_GPU_UTIL", "Hostname") in seen
    assert ("4.6-4.8", "DCGM_FI_DEV_GPU_UTIL", "hostname") in seen
    assert ("4.9", "DCGM_FI_DEV_GPU_UTIL_RATIO", "hostname") in seen


def test_a_remote_hostengine_names_every_node_after_its_address(tmp_path):
    """dcgm-exporter -r localhost:5555 writes "localhost" as every node's hostname (hostname.go UseRemoteHE):
    a site reading the node from instance gets the simulator to do so, and its expectations select on instance."""
    site = tmp_path / "site.yaml"
    site.write_text("exporters:\n  dcgm:\n    versions: ['3.x-4.5', '4.10+']\n    node_from: instance\n")
    sim = small(config_module.load(site), nodes=4, gpus_per_node=2, hours=0.1, scenarios="xid79")
    source = sim.sources["dcgm"]
    utilization = {source.name("gpu_utilization", v) for v in source.versions}
    labelled = [labels for _, labels, _ in series_of(sim, utilization)]
    assert {labels.get("Hostname") or labels["hostname"] for labels in labelled} == {"localhost"}
    nvidia = {node.name for node in sim.cluster.nodes if node.vendor == "nvidia"}
    assert {labels["instance"].partition(":")[0] for labels in labelled} == nvidia
    selected = [e.labels for e in sim.expectations() if e.metric.startswith("DCGM_")]
    assert selected and all("instance" in labels and not {"Hostname", "hostname"} & set(labels) for labels in selected)


def test_synthetic_rule_test_series_use_the_simulators_labels(config):
    sim = small(config, hours=0.1)
    name = sim.sources["dcgm"].name("gpu_utilization", "4.6-4.8")
    labels = next(lab for n, lab, _ in series_of(sim, {name}) if lab["gpu"] == "3")
    made = synthetic.dcgm(
        Context(config), "gpu_utilization", "1", node=labels["hostname"], gpu="3", hpc_job=labels["hpc_job"]
    )
    assert made.labels == {k: v for k, v in labels.items()} and made.name == name


# -- behaviour of the series ---------------------------------------------------------------------


def test_a_shared_gpu_yields_two_series_differing_only_in_hpc_job(config):
    sim = small(config)
    node, gpu = sim.cluster.roles.shared_gpu
    host = sim.cluster.nodes[node].name
    name = sim.sources["dcgm"].name("power", "4.6-4.8")
    copies = [
        (lab, val) for _, lab, val in series_of(sim, {name}) if lab["hostname"] == host and lab["gpu"] == str(gpu)
    ]
    jobs = {lab["hpc_job"] for lab, _ in copies}
    assert jobs == set(sim.cluster.roles.interactive_jobs)
    (a, va), (b, vb) = copies
    assert {k: v for k, v in a.items() if k != "hpc_job"} == {k: v for k, v in b.items() if k != "hpc_job"}
    both = [(x, y) for x, y in zip(va, vb) if x is not None and y is not None]
    assert both and all(x == y for x, y in both)  # the exporter deep-copies the series per job


def test_allocated_but_idle_gpu_in_the_healthy_model(config):
    sim = small(config)
    job = sim.cluster.job(sim.cluster.roles.interactive_jobs[-1])
    ((node, gpu),) = job.idle_gpus
    name = sim.sources["dcgm"].name("gpu_utilization", "4.6-4.8")
    values = next(v for _, lab, v in series_of(sim, {name}) if lab.get("hpc_job") == job.id and lab["gpu"] == str(gpu))
    held = [v for v in values if v is not None]
    assert held[0] == 0 and held[-1] > 0  # idle for its first 20 minutes, then used


def test_xid79_reports_the_xid_then_the_gpus_series_stop(config):
    sim = small(config, scenarios="xid79", hours=0.5)
    fault = sim.faults.faults[0]
    host, gpu = fault.target["node"], fault.target["gpu"]
    lost = sim.window.index(fault.start + 2 * sim.window.step)
    dcgm = {
        sim.sources["dcgm"].name(s, "4.6-4.8")
        for s in sim.sources["dcgm"].exporter.signals()
        if sim.sources["dcgm"].metric(s, "4.6-4.8")
    }
    mine = [
        (name, lab, val) for name, lab, val in series_of(sim, dcgm) if lab["hostname"] == host and lab["gpu"] == gpu
    ]
    assert len(mine) > 20
    assert all(v is None for _, _, val in mine for v in val[lost:])
    assert all(any(v is not None for v in val[:lost]) for _, _, val in mine)
    xid = [(lab, val) for name, lab, val in mine if name == sim.sources["dcgm"].name("xid", "4.6-4.8")]
    assert [lab["err_code"] for lab, _ in xid] == ["79"] and 79 in xid[0][1]
    others = [val for _, lab, val in series_of(sim, dcgm) if lab["hostname"] == host and lab["gpu"] != gpu]
    assert all(val[-1] is not None for val in others)


def test_a_job_hung_by_an_xid79_writes_no_scheduled_checkpoint(config):
    """The hero job's half-hourly checkpoint falls within this half hour; once an Xid 79 has hung the job, no rank
    returns from its step to save one (activity.py names the training loop), so its Lustre writes stay at 0."""
    healthy, hung = (small(config, nodes=3, scenarios=s) for s in ("healthy", "xid79:start=5m"))
    fault = hung.faults.faults[0]
    after = hung.window.index(fault.start)
    job = fault.target["job"]
    assert any(healthy.activity.checkpoint_mask(healthy.cluster.job(job))[after:])
    assert not any(hung.activity.checkpoint_mask(hung.cluster.job(job))[after:])
    assert not any(JobIO(hung).io(hung.cluster.job(job))[1][after:])


def test_counters_are_monotonic_except_at_a_scripted_driver_reload(mixed):
    sim = Simulation(
        mixed,
        nodes=8,
        gpus_per_node=2,
        hours=1,
        seed=4,
        scenarios="xid48:start=10m:duration=20m,nvlink_errors,ib_link_flap,checkpoint_stall",
    )
    reload_node = sim.faults.faults[0].target["node"]
    reload_at = sim.window.index(30 * 60)
    resets = set()
    counters = [f.name for f in sim.families() if f.type == "counter"]
    for name, labels, values in series_of(sim, set(counters)):
        present = [(i, v) for i, v in enumerate(values) if v is not None]
        for (_, a), (j, b) in zip(present, present[1:]):
            if b < a:
                resets.add((name, labels.get("hostname") or labels.get("Hostname"), j))
    energy = {sim.sources["dcgm"].name("energy", sim.cluster.node(reload_node).version)}
    assert resets and {(n, h, j) for n, h, j in resets} <= {(e, reload_node, reload_at) for e in energy} | {
        (n, reload_node, reload_at) for n, _, _ in resets
    }
    assert any(n in energy for n, _, _ in resets)


def test_memory_does_not_grow_with_cluster_size_or_duration(config):
    """Series by series: 4x the nodes or 4x the hours, 4x the samples, about the same peak (tracemalloc)."""

    def peak(nodes, hours):
        # Each run starts from a fresh collection: otherwise whether the collector frees this run's cycles before
        # its peak depends on what the tests before it allocated.
        gc.collect()
        tracemalloc.start()
        stats = write(Simulation(config, nodes=nodes, gpus_per_node=2, hours=hours, seed=1), "openmetrics", Null())
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top, stats.samples

    peak(8, 0.05)  # the first traced run pays one-time caches
    small_peak, small_samples = peak(8, 0.05)
    wide_peak, wide_samples = peak(32, 0.05)
    long_peak, long_samples = peak(8, 0.2)
    assert wide_samples > 3.5 * small_samples and long_samples > 3.5 * small_samples
    assert wide_peak < 2 * small_peak + 64 * 1024, (small_peak, wide_peak)  # the model itself is O(nodes)
    assert long_peak < 1.5 * small_peak + 32 * 1024, (small_peak, long_peak)
    assert max(small_peak, wide_peak, long_peak) < 512 * 1024


# -- promtool expanding notation -----------------------------------------------------------------


def test_compression_round_trips_and_compacts():
    rng = random.Random(0)
    cases = [
        [1, 2, 3, 4],
        [0.1 * k for k in range(50)],
        [5] * 30,
        [None, None, 3, 3, None, 7, 8, 9, None],
        [1e16, 1e16 + 2, 1e16 + 4],
        [-2, 2, 6, 10],
        [1.5e-07, 3e-07],
        [None] * 4,
    ]
    for _ in range(200):
        values, v = [], rng.choice((0, 1e9, 0.25))
        for _ in range(rng.randrange(1, 60)):
            roll = rng.random()
            v = (
                None
                if roll < 0.1
                else (v or 0) + rng.choice((0, 1, 0.1, -3, 123456789))
                if roll < 0.8
                else rng.random()
            )
            values.append(v)
        cases.append(values)
    for values in cases:
        packed = compress(values)
        assert (expand(packed) + [None] * len(values))[: len(values)] == [
            None if v is None else float(v) for v in values
        ]
    assert compress([0] * 120) == "0x119"
    assert compress(list(range(0, 1200, 10))) == "0+10x119"
    assert compress([1, 1, None, None, 2]) == "1x1 stale _ 2"
    assert compress([3, None, None]) == "3 stale"


def test_compressed_series_read_back_exactly_in_real_promtool(config, tmp_path):
    sim = Simulation(
        config,
        nodes=3,
        gpus_per_node=2,
        hours=0.25,
        seed=3,
        start=EPOCH,
        scenarios="xid79,prolog_not_writing:start=3m:duration=4m",
    )
    names = {sim.sources["dcgm"].name(s, "4.6-4.8") for s in ("power", "gpu_utilization", "energy", "xid")}
    raw = [(n, {k: v for k, v in lab.items() if v}, val) for n, lab, val in series_of(sim, names)]
    chosen = raw[:: max(1, len(raw) // 12)] + [r for r in raw if None in r[2]][:4]
    inputs = [{"series": synthetic.Series(n, lab, "").text(), "values": compress(val)} for n, lab, val in chosen]
    checks = []
    for n, lab, val in chosen:
        for i, v in enumerate(val):
            if v is not None and i % 3 == 0:
                checks.append(
                    {
                        "expr": synthetic.Series(n, lab, "").text(),
                        "eval_time": duration(i * sim.window.step) or "0s",
                        "exp_samples": [{"labels": synthetic.Series(n, lab, "").text(), "value": v}],
                    }
                )
    (tmp_path / "rules.yml").write_text("groups: []\n")
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [{"interval": "30s", "input_series": inputs, "promql_expr_test": checks}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, width=10**9))
    result = tools.test_rules(tmp_path / "test.yml")
    assert result.ok, result.output[-2000:]
    assert len(checks) > 50


# -- scenarios -----------------------------------------------------------------------------------

SCENARIOS = sorted(kinds())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_shows_its_expected_signal_in_promql(config, tmp_path, scenario):
    """Every expectation, as PromQL, holds in real promtool over the simulated series (the live servers get
    the same queries later)."""
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=2, scenarios=scenario, seed=11, start=EPOCH)
    expectations = sim.expectations()
    assert expectations, f"{scenario} describes no expected signal"
    names = {m for e in expectations for m in e.metrics}
    inputs = [{"series": s.text(), "values": s.values} for s in sim.input_series(names)]
    rules = {
        "groups": [
            {
                "name": "expect",
                "rules": [{"alert": f"E{i}", "expr": f"count({e.query}) > 0"} for i, e in enumerate(expectations)],
            }
        ]
    }
    tests = [
        {"alertname": f"E{i}", "eval_time": duration(e.at) or "0s", "exp_alerts": [{"exp_labels": {}}]}
        for i, e in enumerate(expectations)
    ]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, width=10**9))
    (tmp_path / "test.yml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "30s",
                "tests": [{"interval": "30s", "input_series": inputs, "alert_rule_test": tests}],
            },
            width=10**9,
        )
    )
    result = tools.test_rules(tmp_path / "test.yml")
    assert result.ok, "\n".join([e.query for e in expectations] + [result.output[-1500:]])


def test_expectations_are_machine_readable(config):
    sim = Simulation(config, nodes=10, gpus_per_node=8, hours=2, scenarios=",".join(SCENARIOS[:8]), seed=1)
    known = catalogue_names(sim) | {UP}
    for expectation in sim.expectations():
        row = json.loads(json.dumps(expectation.to_dict()))
        assert row["query"] and row["metric"] in known and 0 <= row["at"] < 2 * 3600
        assert re.fullmatch(r"[a-z_]+", row["scenario"])


def test_default_targets_are_documented_in_the_fault(config):
    sim = Simulation(
        config,
        nodes=10,
        gpus_per_node=8,
        hours=2,
        seed=1,
        scenarios="xid79,xid48,dbe,thermal,ib_port_down,straggler,slurm_nodes_down,exporter_down",
    )
    targets = {f.kind: f.target for f in sim.faults.faults}
    assert targets["xid79"] == {"node": "gpu005", "gpu": "3", "job": sim.cluster.roles.hero_job}
    assert targets["xid48"]["class"] == "drain" and targets["xid48"]["gpu"] == "1"
    assert targets["ib_port_down"] == {"node": "gpu001", "hca": "mlx5_1", "port": "1"}
    assert targets["slurm_nodes_down"] == {"down": "gpu006", "drained": "gpu007"}
    gpus = {(t.get("node"), t.get("gpu")) for k, t in targets.items() if "gpu" in t}
    assert len(gpus) == 4  # composed GPU faults land on different GPUs


def test_scenario_parameters_and_errors(config):
    (spec,) = Spec.parse("ib_port_down:node=gpu002:hca=mlx5_3:start=90s:duration=inf")
    assert (spec.node, spec.hca, spec.start, spec.duration) == ("gpu002", "mlx5_3", 90, 10**9)
    for bad, message in (
        ("nope", "unknown scenario"),
        ("xid79:gpu=9", "GPUs 0..1"),
        ("xid79:when=1m", "key=value"),
        ("thermal:node=gpu099", "no node named"),
    ):
        with pytest.raises(Exception, match=message):
            Simulation(config, nodes=3, gpus_per_node=2, hours=0.1, scenarios=bad)


def test_realistic_week_draws_faults_at_the_llama3_rate(config):
    """The realistic_week scenario is week.py's fault schedule at the real rate (tests/test_week.py has the mix)."""
    week = Simulation(config, nodes=16, gpus_per_node=8, hours=168, seed=3, scenarios="realistic_week")
    plan = schedule(week.faults.cluster, 3, REAL_RATE, background=False)
    assert [f.kind for f in week.faults.faults] == [s.kind for s in plan.specs]
    assert (
        week.faults.faults
        == Simulation(config, nodes=16, gpus_per_node=8, hours=168, seed=3, scenarios="realistic_week").faults.faults
    )


# -- command line ----------------------------------------------------------------------------------


def test_cli_writes_a_file_and_the_expectations(tmp_path):
    out, expect = tmp_path / "c.om", tmp_path / "expect.json"
    result = run_build(
        "simulate",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--hours",
        "0.1",
        "--scenario",
        "xid13",
        "--seed",
        "3",
        "--format",
        "openmetrics",
        "--out",
        str(out),
        "--expectations",
        str(expect),
    )
    assert result.returncode == 0, result.stderr
    assert "samples" in result.stderr and "[" not in result.stderr  # no progress bar off a terminal
    assert out.read_text().endswith("# EOF\n") and json.loads(expect.read_text())[0]["scenario"] == "xid13"
    listing = run_build("simulate", "--list-scenarios")
    assert "xid79" in listing.stdout and "realistic_week" in listing.stdout
    bad = run_build("simulate", "--out", str(out), "--scenario", "nope")
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr


def test_cli_promtool_output_is_a_valid_input_series_block(tmp_path):
    out = tmp_path / "series.yml"
    result = run_build(
        "simulate", "--nodes", "2", "--gpus-per-node", "1", "--hours", "0.05", "--format", "promtool", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["interval"] == "30s" and doc["input_series"][0]["series"].startswith("DCGM_FI_")
    assert sys.executable and ROOT.exists()


# -- hostile and careless arguments ----------------------------------------------------------------

TINY = ["--nodes", "2", "--gpus-per-node", "2", "--hours", "0.05"]
# (arguments after the tiny cluster and --out FILE, expected fragment of the one line, exit code). `{dir}` is a
# fresh directory, `{file}` a regular file in it.
BAD_ARGUMENTS = [
    (["--hours", "nan"], "--hours nan: not a finite number", 2),
    (["--hours", "inf"], "--hours inf: not a finite number", 2),
    (["--hours", "-1"], "--hours -1: a simulation lasts more than 0 hours", 2),
    (["--hours", "0"], "--hours 0: a simulation lasts more than 0 hours", 2),
    (["--hours", "2h"], "--hours 2h: not a number of hours", 2),
    (["--hours", "0.0001"], "shorter than one scrape interval (30s); give at least 0.0084", 2),
    (["--hours", "1e9"], "more than the 1,000,000 one series may hold in memory; split it into runs", 2),
    (["--hours"], "--hours: expected one argument", 2),
    (["--nodes", "0"], "--nodes 0: less than 1", 2),
    (["--nodes", "abc"], "--nodes abc: not a whole number; e.g. --nodes 16", 2),
    (["--nodes", "1.5"], "--nodes 1.5: not a whole number", 2),
    (["--nodes", "100001"], "--nodes 100001: more than 100,000 (the model holds every node in memory)", 2),
    (["--nodes", "2000", "--gpus-per-node", "8", "--hours", "1"], "exceed --max-samples 200,000,000; pass", 2),
    (["--gpus-per-node", "100000"], "--gpus-per-node 100000: more than 16, the most a real node has", 2),
    (["--gpus-per-node", "17"], "--gpus-per-node 17: more than 16, the most a real node has; add --nodes", 2),
    (["--gpus-per-node", "0"], "--gpus-per-node 0: less than 1", 2),
    (["--max-samples", "0"], "--max-samples 0: less than 1", 2),
    (["--max-samples", "1e9"], "--max-samples 1e9: not a whole number", 2),
    (["--seed", "1.5"], "--seed 1.5: not a whole number", 2),
    (["--format", "xml"], "--format xml: unknown format; use one of openmetrics, vm, promtool", 2),
    (["--format", "VM"], "(did you mean vm?)", 2),
    (["--start", "yesterday"], "--start yesterday: not an ISO 8601 time", 2),
    (["--start", "1960-01-01"], "--start 1960-01-01: before 1970-01-01", 2),
    (["--start", ""], "--start '': not an ISO 8601 time", 2),
    (
        ["--start", "2999-01-01"],
        "--start 2999-01-01T00:00:00+00:00: the --hours 0.05 window would end at 2999-01-01T00:02:30+00:00, after now; "
        "leave --start out for a window that ends now",
        2,
    ),
    (["--scenario", ""], "--scenario '': no scenario given; name at least one, e.g. healthy", 2),
    (["--scenario", " , "], "no scenario given", 2),
    (["--scenario", "xid79,,dbe"], "an empty scenario between commas; remove the extra comma", 2),
    (["--scenario", "thermla"], "unknown scenario 'thermla'; did you mean thermal?", 2),
    (["--scenario", "XID79"], "did you mean xid79?", 2),
    (["--scenario", "xid0"], "xid0 is not an Xid code", 2),
    (["--scenario", ":start=1m"], "no scenario name", 2),
    (["--scenario", "xid79:start=abc"], "--scenario xid79:start=abc: start=abc is not a duration", 2),
    (["--scenario", "xid79:start=-5m"], "start=-5m is not a duration", 2),
    (["--scenario", "xid79:start=inf"], "start=inf never comes", 2),
    (["--scenario", "xid79:duration=0s"], "duration=0s lasts no time", 2),
    (["--scenario", "xid79:gpu=abc"], "gpu=abc is not a GPU index", 2),
    (["--scenario", "xid79:gpu=99"], "gpu001 has GPUs 0..1, not 99; use gpu=0..1", 2),
    (["--scenario", "xid79:node=nope"], "no node named 'nope'; use one of gpu001..gpu002", 2),
    (["--scenario", "xid79:node="], "node= has no value", 2),
    (["--scenario", "xid79:strat=1m"], "did you mean start=?", 2),
    (["--scenario", "xid79:start=1m:start=2m"], "start= given twice; keep one", 2),
    (["--scenario", "xid79:hca=mlx5_0"], "xid79 takes no hca=; it takes start, duration, node, gpu", 2),
    (["--scenario", "healthy:start=1m"], "healthy takes no start=; remove it", 2),
    (["--scenario", "oom_kill:duration=5m"], "oom_kill takes no duration=", 2),
    (["--scenario", "xid79:start=10m,xid79:start=600s"], "--scenario xid79:start=600s: listed twice", 2),
    (["--scenario", "xid79:start=10h"], "start=10h is not before the end of the simulation (3m)", 2),
    (["--scenario", "ib_port_down:hca=mlx5_9"], "has HCAs mlx5_0..mlx5_1, not 'mlx5_9'", 2),
    (["--scenario", "checkpoint_stall:job=1"], "no job '1' in the cluster; use job=400001", 2),
    (["--scenario", "slurm_nodes_down"], "no node for its default target; add --nodes", 2),
    (["--out", ""], "--out '': missing a file; give a file to write, or - for stdout", 2),
    (["--out", "{dir}"], "is a directory; name a file in it", 2),
    (["--out", "{dir}/missing/c.om"], "missing does not exist; create it first", 2),
    (["--out", "{file}/c.om"], "cannot be used (Not a directory)", 2),
    (["--expectations", "{dir}"], "--expectations {dir}: is a directory", 2),
    (["--expectations", "{dir}/c.om"], "the same file as --out", 2),
    (["--out", "-", "--expectations", "-"], "--expectations -: the same file as --out -", 2),
    (["--nodez", "3"], "--nodez: unknown argument (did you mean --nodes?)", 2),
    (["stray"], "stray: unknown argument", 2),
    (["--out", "/dev/full"], "--out /dev/full: could not write (No space left on device); free some space", 1),
    (["--expectations", "/dev/full"], "--expectations /dev/full: could not write (No space left on device)", 1),
]


def simulate_cli(argv: list[str], capsys) -> tuple[int, str]:
    """`build.py simulate ARGV` in this process: exit code and stderr."""
    from hpcobs import cli

    try:
        code = cli.main(["simulate", *argv])
    except SystemExit as exc:  # argparse's own mistakes exit from the parser
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, fragment, code", BAD_ARGUMENTS, ids=[" ".join(extra) or "empty" for extra, _, _ in BAD_ARGUMENTS]
)
def test_every_bad_argument_is_one_line_with_the_fix(tmp_path, capsys, extra, fragment, code):
    (tmp_path / "file").write_text("")
    paths = {"dir": str(tmp_path), "file": str(tmp_path / "file")}
    argv = TINY + ["--out", str(tmp_path / "c.om")] + [a.format(**paths) for a in extra]
    exit_code, err = simulate_cli(argv, capsys)
    lines = err.splitlines()
    assert exit_code == code and len(lines) == 1, err
    assert lines[0].startswith("simulate: ") and fragment.format(**paths) in lines[0], lines[0]
    assert re.search(r": .+; .+", lines[0]), f"not `flag VALUE: problem; fix`: {lines[0]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"], "a refused run wrote something"


def test_the_default_window_ends_at_the_last_scrape_before_now(tmp_path, capsys):
    """So a backfilled Prometheus evaluates the rules on it at once: no sample ahead of its clock, none older
    than one scrape interval at the end (tests that compare bytes pass --start)."""
    out = tmp_path / "c.om"
    before = datetime.now(UTC).timestamp()
    exit_code, err = simulate_cli(TINY + ["--out", str(out)], capsys)
    after = datetime.now(UTC).timestamp()
    assert exit_code == 0, err
    times = [float(line.split()[-1]) for line in out.read_text().splitlines() if not line.startswith("#")]
    assert before // 30 * 30 - 30 <= max(times) <= after and max(times) % 30 == 0
    assert max(times) - min(times) == 0.05 * 3600 - 30


def test_bad_arguments_cover_every_class():
    assert len(BAD_ARGUMENTS) >= 28
    flags = {a for extra, _, _ in BAD_ARGUMENTS for a in extra if a.startswith("--")}
    assert flags >= {
        "--nodes",
        "--gpus-per-node",
        "--hours",
        "--scenario",
        "--seed",
        "--format",
        "--out",
        "--start",
        "--expectations",
        "--max-samples",
    }


def test_the_bound_says_how_to_go_bigger_and_the_escape_hatch_works(tmp_path, capsys):
    out = tmp_path / "c.om"
    code, err = simulate_cli(TINY + ["--max-samples", "1000", "--out", str(out)], capsys)
    assert code == 2 and not out.exists()
    estimate = int(re.search(r"about ([\d,]+) samples", err).group(1).replace(",", ""))
    bigger = int(re.search(r"pass --max-samples (\d+) to go bigger", err).group(1))
    assert "exceed --max-samples 1,000" in err and "or split it into runs" in err and bigger >= estimate
    code, err = simulate_cli(TINY + ["--max-samples", str(bigger), "--out", str(out)], capsys)
    written = int(re.search(r"([\d,]+) samples \(", err).group(1).replace(",", ""))
    assert code == 0 and out.read_text().endswith("# EOF\n")
    assert written <= estimate, "the estimate must not undercount what is written"


@pytest.mark.parametrize("site", ["default", "mixed"])
def test_the_sample_estimate_is_close_above_what_is_written(config, mixed, site):
    from hpcobs.proof.simulate.arguments import estimated_samples

    for nodes, gpus in ((1, 1), (1, 8), (3, 16), (5, 4)):
        sim = Simulation(config if site == "default" else mixed, nodes=nodes, gpus_per_node=gpus, hours=0.05, seed=1)
        written = write(sim, "vm", Null()).samples
        assert written <= estimated_samples(nodes, gpus, sim.window.steps) <= 1.6 * written, (nodes, gpus)


def documented_runs() -> list[str]:
    """Every `build.py simulate` command in the README and docs, and the benchmark's default run."""
    lines = [
        line
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for line in doc.read_text(encoding="utf-8").replace("\\\n", " ").splitlines()
        if "build.py" in line
    ]
    runs = [re.search(r"simulate (.*?)(`|$|  #)", line).group(1) for line in lines if "simulate --" in line]
    return [run for run in runs if "--list-scenarios" not in run] + [
        "--nodes 1024 --gpus-per-node 8 --hours 1 --format vm --out /dev/null --seed 1"
    ]


@pytest.mark.parametrize("run", documented_runs())
def test_documented_runs_stay_within_the_bounds(config, run, tmp_path, monkeypatch):
    from hpcobs.proof.simulate import arguments

    monkeypatch.setenv("trial", str(tmp_path))  # the local trial's directory (docs/simulator.md#try-it-locally)
    args = arguments.parser("build.py simulate").parse_args(shlex.split(os.path.expandvars(run)))
    arguments.check_size(arguments.checked(args), 30)


def test_every_declared_target_is_read_by_its_scenario(config):
    """A kind's parameters are what its resolver reads: a bad value for each is refused, never ignored."""
    bad = {"node": ("nope", "no node named"), "gpu": ("99", "GPUs"), "hca": ("mlx5_99", "HCAs"), "job": ("1", "no job")}
    for name, entry in kinds().items():
        for target in set(entry.params) - {"start", "duration"}:
            value, message = bad[target]
            with pytest.raises(Exception, match=message):
                Simulation(config, nodes=10, gpus_per_node=8, hours=0.5, scenarios=f"{name}:{target}={value}")


# -- output files are written whole or not at all --------------------------------------------------


def test_a_failed_write_leaves_the_previous_file_and_no_debris(tmp_path):
    """A real write error mid-file (the file size limit, as a full disk would): one line, exit 1, the old file
    untouched, no temporary file left."""
    import resource
    import signal

    out = tmp_path / "c.om"
    out.write_text("previous run\n")

    def small_file_limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    result = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), "simulate", *TINY, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_file_limit,
    )
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert f"simulate: --out {out}: could not write (File too large)" in result.stderr
    assert out.read_text() == "previous run\n" and sorted(p.name for p in tmp_path.iterdir()) == ["c.om"]


def test_an_interrupted_write_leaves_no_file(tmp_path):
    import signal
    import time

    out = tmp_path / "c.om"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "build.py"), "simulate", "--nodes", "16", "--hours", "2", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any(tmp_path.iterdir()) and time.monotonic() < deadline:  # the temporary file appears
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert not any(tmp_path.iterdir()), f"left behind: {list(tmp_path.iterdir())}"


def test_a_complete_write_replaces_the_file_through_its_symlink(tmp_path, capsys):
    target, link = tmp_path / "real.om", tmp_path / "link.om"
    target.write_text("old\n")
    link.symlink_to(target)
    code, err = simulate_cli(TINY + ["--out", str(link), "--expectations", str(tmp_path / "e.json")], capsys)
    assert code == 0, err
    assert link.is_symlink() and target.read_text().endswith("# EOF\n")
    assert json.loads((tmp_path / "e.json").read_text())
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # not the 0600 of a temp file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json", "link.om", "real.om"]
    code, err = simulate_cli(TINY + ["--out", "/dev/null", "--expectations", "/dev/null"], capsys)
    assert code == 0 and os.path.exists("/dev/null") and not os.path.isfile("/dev/null"), err


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_runs_helpers_agree_with_masks():
    from hpcobs.proof.simulate.core import blank, complement, where, window_mask, within

    n, windows = 20, [(15, 30), (-3, 2), (5, 9), (7, 12), (18, 16)]
    values = list(range(n))
    outside = [not m for m in window_mask(n, windows)]
    assert complement(windows, n) == [(2, 5), (12, 15)]
    assert window_mask(n, complement(windows, n)) == outside
    assert blank(values, windows) == where(outside, values)
    assert within(values, complement(windows, n)) == where(outside, values)
    assert complement([], n) == [(0, n)] and blank(values, []) == values


def test_job_variants_split_a_gpu_at_its_jobs_and_the_prolog_gap():
    """Each job's variant exists while the job runs and its mapping file is there; the job-less variant at every
    other scrape; together they cover the window once."""
    from hpcobs.proof.simulate.core import window_mask

    sim = Simulation(config_module.load(), nodes=4, gpus_per_node=2, hours=3, scenarios="prolog_not_writing", seed=3)
    (fault,) = sim.faults.faults
    (effect,) = fault.effects
    node = effect.key[0]
    n = sim.window.steps
    variants = sim.job_variants(node, 0)
    masks = [[True] * n if runs is None else window_mask(n, runs) for _, runs in variants]
    assert [sum(column) for column in zip(*masks)] == [1] * n
    for job, mask in zip((job for job, _ in variants), masks):
        if job is None:
            continue
        first, last = sim.activity.span(job)
        expected = [first <= i < last and not effect.start <= i < effect.end for i in range(n)]
        assert mask == expected
    assert variants[0][0] is None and any(window_mask(n, variants[0][1])[effect.start : effect.end])
