"""Sharded collection with central rules gives the answers of one Prometheus, proven live on loopback (issue 32).

The demo's simulated cluster (hpcobs.proof.demo: four nodes, a training job on two of them, a double-bit ECC error
and a GPU fallen off the bus late in its history) is served at wall-clock time by loopback stand-ins of its
exporters, its history loaded into both stores. A sharded site (its central store and Alertmanager at loopback
ports chosen first) is built, and out/scale-out/ runs as built: two vmagents on shard-<i>/'s vmagent.flags and
scrape.yml, each keeping the targets of its own nodes (a hashmod of the node's name) and remote writing to the
central VictoriaMetrics, and vmalert on central/'s vmalert.flags and rule files, writing its records back and
sending its alerts to a real Alertmanager. Only the target lists move to loopback; the site declares Debian's
vmalert 1.79, so the central rule files come without keep_firing_for. Beside them one Prometheus scrapes every
target with out/prometheus/'s rule files and its own Alertmanager: the reference.

Alerts covered: those of the demo's faults with no `for:` or a `for:` of at most FOR_COVERED (they fire within the
live window in both rulers); the longer ones (`for: 5m` and more) stay pending in both and are compared as such.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hpcobs.authoring.rules import Alert, Record
from hpcobs.build import outdir, pipeline
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof import demo, loopback, servers, workload
from hpcobs.proof.simulate.formats import write_vm
from hpcobs.settings import config as config_module
from hpcobs.targets import scale_out, scrape

pytestmark = pytest.mark.live

SHARDS = 2
SCRAPE = "5s"  # the shortest scrape interval the config allows: rate windows of 20 s fill within the live window
LIVE_SECONDS = 100.0  # past the first evaluation: a `for: 1m` alert fires, and a group_wait of 30 s notifies
NOTIFIED_WITHIN = 30.0  # then both Alertmanagers have notified the alerts of the first evaluation (a group_wait)
# Records are compared at COMPARISONS instants COMPARE_EVERY apart, the latest INGESTED + BAND before the end:
# vmagent flushes its remote write every second, vmalert evaluates each group at its interval.
COMPARISONS, COMPARE_EVERY, INGESTED = 3, 20.0, 5.0
EVALUATION = duration_seconds(SCRAPE)  # the evaluation interval: the scrape interval unless set
BAND = 2 * EVALUATION  # two evaluations (and scrapes) either side: see differences
TOLERANCE = 0.08  # see within
# The stand-ins serve the history's last samples until both collectors have scraped them: a series that stops
# after that is marked stale by both. Else one that stops at their first scrapes, seen live by one collector only,
# is marked stale by that one, and the other's rules read its last backfilled sample for 5m (the lookback).
WARM_UP = 12.0
# Records whose series are chosen by value: which rank topk finds slowest among near-equal ones, which bucket a GPU
# near a bucket's edge counts in, depends on the scrape a ruler read. They are compared summed over those labels:
# the slowest step time of each job, the GPUs counted in all buckets.
CHOSEN_BY_VALUE = {
    "job:training_straggler_rank:step_seconds": {"rank", "node"},
    "job:training_straggler_rank:excess_seconds": {"rank", "node"},
    "cluster:gpus_by_utilization:count": {"utilization"},
}
# Records that are a difference of near-equal rates: a balanced job's straggler excess is its ranks' noise, a few
# thousandths of a step, whose TOLERANCE of itself means nothing. Their slack is TOLERANCE of the job's step time,
# the scale of the rates they subtract.
SCALED_BY = {"job:training_straggler_rank:excess_seconds": "job:training_step_seconds:max"}
FOR_COVERED = "1m"
SPANNING_JOB = "400001"  # the demo's training job, on its first two nodes
JOB_RECORD = "job:gpus_allocated:count"  # job-level: the job's GPUs on every node it runs on


def site_text(central: servers.VictoriaMetrics, alertmanager: servers.Alertmanager) -> str:
    """A sharded site whose central store and Alertmanager are the loopback ones (their ports chosen first), so
    the generated flags are used as written."""
    return yaml.safe_dump(
        {
            "scrape_interval": SCRAPE,
            "scrape": {"alertmanagers": [f"127.0.0.1:{alertmanager.port}"]},
            "scale_out": {
                "topology": "sharded",
                "shards": SHARDS,
                "collector": "vmagent",
                # Debian 12's vmalert: the central rule files come without keep_firing_for (docs/scale-out.md).
                "central": {"url": central.url, "vmalert_version": "1.79"},
            },
        }
    )


def point_targets_at(shard_dir: Path, loopback_yml: Path) -> None:
    """The shard's file_sd target files replaced by links to the stand-ins' target lists of the same jobs (which
    the demo's exporters keep current): only the targets move to loopback, the generated scrape.yml stays."""
    loopback_sd = {
        job["job_name"]: job["file_sd_configs"] for job in yaml.safe_load(loopback_yml.read_text())["scrape_configs"]
    }
    for job in yaml.safe_load((shard_dir / "scrape.yml").read_text())["scrape_configs"]:
        (generated,), (loopback_file,) = (
            sd[0]["files"] for sd in (job["file_sd_configs"], loopback_sd[job["job_name"]])
        )
        (shard_dir / generated).unlink()
        (shard_dir / generated).symlink_to(loopback_file)


class PhaseLocked:
    """The stand-ins' sample index by scrape, not by wall clock: a collector scrapes a target at a steady phase,
    and a phase within the scheduling jitter of the stand-ins' slot boundary would read a slot twice, then skip
    one, on a loaded machine: a rate off by one increment in four (observed, in either engine). Each phase seen on
    a path is anchored at its first scrape; a later scrape within a quarter interval of an anchor's phase counts
    whole intervals from it."""

    def __init__(self, wall_clock: Callable[[str], int], interval: float) -> None:
        self.wall_clock, self.interval = wall_clock, interval
        self.anchors: defaultdict[str, list[tuple[float, int]]] = defaultdict(list)

    def __call__(self, path: str) -> int:
        now = time.time()
        for at, index in self.anchors[path]:
            intervals = (now - at) / self.interval
            if abs(intervals - round(intervals)) < 0.25:
                return index + round(intervals)
        self.anchors[path].append((now, self.wall_clock(path)))
        return self.anchors[path][-1][1]


@dataclass
class Run:
    reference: servers.Prometheus
    central: servers.VictoriaMetrics
    one_shard: servers.VictoriaMetrics  # shard 0's samples only: the negative control
    ruler: servers.VMAlert
    shards: list[servers.VMAgent]
    alertmanagers: dict[str, servers.Alertmanager]  # "central", "reference"
    sinks: dict[str, loopback.Sink]
    records: list[str]
    expander: workload.Expander
    job_nodes: set[str]  # SPANNING_JOB's
    job_gpus: int
    covered: set[str]  # the faults' alerts with a `for:` of at most FOR_COVERED
    first: set[str]  # those firing at the first evaluation (no `for:`)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sharded")
    central, one_shard = servers.VictoriaMetrics(), servers.VictoriaMetrics()
    sinks = {name: loopback.Sink() for name in ("central", "reference")}
    alertmanagers = {name: servers.Alertmanager(folder / name / "alertmanager.yml") for name in sinks}
    central.port, alertmanagers["central"].port = servers.free_port(), servers.free_port()
    (folder / "site.yaml").write_text(site_text(central, alertmanagers["central"]))
    config = config_module.load(folder / "site.yaml")
    out = folder / "out"
    outdir.write_tree(out, pipeline.generate(config))
    central_dir = out / scale_out.CENTRAL_DIR
    groups = demo.rule_groups(config)
    past, live = demo._simulate(config, demo.MIN_DURATION)
    families = demo._families(live)
    demo._write_history(past, families, folder / "history.om")
    demo._write_history(past, families, folder / "history.jsonl", write_vm)

    with ExitStack() as stack:
        for name, sink in sinks.items():
            stack.enter_context(sink)
            (folder / name).mkdir()
            loopback.write_config(
                loopback.loopback_document(out / "alertmanager" / "alertmanager.yml", sink), folder / name
            )
            stack.callback(alertmanagers[name].stop)
            alertmanagers[name].start()
        exporters = stack.enter_context(demo._Exporters(live.window, families, live.cluster_label, folder))
        wall_clock = exporters.now
        exporters.now = lambda: past.steps - 1  # see WARM_UP
        exporters.write_config(out / scrape.PROMETHEUS_YML, alertmanagers["reference"], folder / "prometheus.yml")

        reference = servers.Prometheus(config_file=folder / "prometheus.yml")
        stack.callback(reference.stop)
        reference.load_openmetrics(folder / "history.om")
        for store in (central, one_shard):
            stack.callback(store.stop)
            store.start()
        central.import_jsonl(folder / "history.jsonl")

        shards = []
        for shard in range(SHARDS):
            shard_dir = out / scale_out.SCALE_OUT_DIR / f"shard-{shard}"
            point_targets_at(shard_dir, folder / "prometheus.yml")
            # Shard 0 also writes to a store of its own: the negative control's one-shard data.
            extra = [f"-remoteWrite.url={one_shard.url}{scale_out.REMOTE_WRITE_PATH}"] if shard == 0 else []
            agent = servers.VMAgent(shard_dir / "vmagent.flags", extra)
            stack.callback(agent.stop)
            shards.append(agent.start())
        ruler = servers.VMAlert(central_dir / scale_out.VMALERT_FLAGS)
        stack.callback(ruler.stop)
        reference.start()
        ruler.start()
        time.sleep(WARM_UP)
        exporters.now = wall_clock
        exporters.server.at = PhaseLocked(exporters.server.at, EVALUATION)
        time.sleep(LIVE_SECONDS)
        first = demo.expected_alerts(groups)
        deadline = time.monotonic() + NOTIFIED_WITHIN
        while any(first - notified_names(sink) for sink in sinks.values()) and time.monotonic() < deadline:
            time.sleep(1)
        job = next(job for job in live.cluster.jobs if job.id == SPANNING_JOB)
        yield Run(
            reference,
            central,
            one_shard,
            ruler,
            shards,
            alertmanagers,
            sinks,
            sorted({rule.record for group in groups for rule in group.rules if isinstance(rule, Record)}),
            workload.Expander(config, groups),
            {live.cluster.nodes[node].name for node, _ in job.gpus},
            len(job.gpus),
            {
                alert.alert
                for group in groups
                for alert in group.rules
                if isinstance(alert, Alert)
                and set(alert.fired_by) & demo.FAULTS.keys()
                and duration_seconds(alert.for_ or "0s") <= duration_seconds(FOR_COVERED)
            },
            first,
        )


def test_the_spanning_job_runs_on_nodes_of_both_shards(run):
    nodes_of_shard = [{t["labels"]["instance"].split(":")[0] for t in agent.targets()} for agent in run.shards]
    assert not set.intersection(*nodes_of_shard), nodes_of_shard
    assert all(nodes_of_shard[shard] & run.job_nodes for shard in range(SHARDS)), (nodes_of_shard, run.job_nodes)


def test_every_record_has_the_reference_series_and_values(run):
    mismatches = [m for at in comparison_instants() for name in run.records for m in differences(run, name, at)]
    assert not mismatches, "\n".join(mismatches[:20])


def test_the_job_record_across_both_shards_equals_the_reference_and_one_shard_would_not(run):
    at = comparison_instants()[0]
    job = f'{JOB_RECORD}{{hpc_job="{SPANNING_JOB}"}}'
    reference, central = (only_value(store.query(job, at)) for store in (run.reference, run.central))
    assert central == reference == run.job_gpus
    # The classic silent failure: the job's group evaluated on one shard's data counts that shard's GPUs only.
    # The same expression with its records expanded to raw series, on shard 0's store and on the central one.
    expanded = f'({run.expander.expand(JOB_RECORD)}) and on (hpc_job) {{hpc_job="{SPANNING_JOB}"}}'
    assert only_value(run.central.query(expanded, at)) == reference
    one_shard = only_value(run.one_shard.query(expanded, at))
    assert 0 < one_shard < reference
    assert not within(one_shard, [reference]), "the comparison would not catch a one-shard evaluation"


def test_each_alert_fires_once_from_the_central_ruler_with_the_reference_labels(run):
    assert active(run.ruler.alerts()) == active(run.reference.alerts())
    firing = {name for name, state, _ in active(run.ruler.alerts()) if state == "firing"}
    assert run.covered <= firing, run.covered - firing
    received = {name: sorted(labels(a) for a in am.alerts()) for name, am in run.alertmanagers.items()}
    assert received["central"] == received["reference"]
    assert len(set(received["central"])) == len(received["central"]), "an alert reached Alertmanager twice"
    # Which alerts a notification carries depends on when each group's timer ran: the central ones are checked
    # against the reference ruler's firing alerts, not against the reference's notifications.
    assert run.first <= notified_names(run.sinks["central"]) & notified_names(run.sinks["reference"])
    firing_labels = {alert_labels for _, state, alert_labels in active(run.reference.alerts()) if state == "firing"}
    notified = notifications(run.sinks["central"])
    assert {alert for _, alert in notified} <= firing_labels
    for (receiver, alert), groups in notified.items():
        assert len(groups) == 1, f"{receiver}: {dict(alert)} notified in {len(groups)} groups"


def comparison_instants() -> list[float]:
    """Instants inside the live window that both stores have ingested and both rulers evaluated around."""
    now = time.time()
    return [now - INGESTED - BAND - k * COMPARE_EVERY for k in range(COMPARISONS)]


def differences(run: Run, name: str, at: float) -> list[str]:
    """Where the central and reference records of `name` disagree at `at`: a series one ruler wrote at its last
    evaluation before `at` that the other wrote at no evaluation within BAND of `at`, or a value outside the
    other's values within BAND, with TOLERANCE (see within)."""
    found = []
    for this, other in ((run.central, run.reference), (run.reference, run.central)):
        latest = {key: points[-1][1] for key, points in recorded(this, name, at - EVALUATION, at).items()}
        around = recorded(other, name, at - BAND, at + BAND)
        scale = {
            key: points[-1][1] for key, points in recorded(this, SCALED_BY.get(name, name), at - EVALUATION, at).items()
        }
        for key, value in latest.items():
            floor = TOLERANCE * scale.get(key, 0.0) if name in SCALED_BY else 0.0
            if key not in around:
                found.append(f"{name}{dict(key)}: at {at:.0f} on {this.name} only")
            elif not within(value, [v for _, v in around[key]], floor):
                found.append(f"{name}{dict(key)}: {value} on {this.name}, {around[key]} on {other.name}")
    return found


def recorded(store: servers.Server, name: str, start: float, end: float) -> dict[tuple, list]:
    """Each series' samples in (start, end] (NaN ones left out: VictoriaMetrics' staleness markers), those of
    CHOSEN_BY_VALUE summed per evaluation over the labels chosen by value."""
    chosen = CHOSEN_BY_VALUE.get(name, set())
    summed: dict[tuple, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for series in store.stored(name, start, end):
        key = tuple((k, v) for k, v in labels(series) if k not in chosen)
        for at, value in series.points:
            if not math.isnan(value):
                summed[key][at] += value
    return {key: sorted(points.items()) for key, points in summed.items()}


def within(value: float, others: list[float], floor: float = 0.0) -> bool:
    """`value` lies between the least and greatest of `others`, widened by TOLERANCE of the larger magnitude (at
    least `floor`).

    Both rulers read the same scrapes (the stand-ins serve one sample per scrape interval, and each collector
    scrapes each target once in it), but not at the same moment: either may read a scrape more or less than the
    other, hence the band. Within it the engines still differ where rates are taken: Prometheus extrapolates a
    rate to the edges of its window, MetricsQL does not but reaches back to the sample before it: over a window of
    four scrapes, one more increment of a counter whose increments vary from scrape to scrape. Measured in the
    runs that made this test: up to 3.6% (an NFS read rate), 2% for the training counters; twice that is
    allowed. The negative control (one shard's half of a job) is off by 50%."""
    low, high = min(others), max(others)
    slack = max(floor, TOLERANCE * max(abs(low), abs(high)))
    return low - slack <= value <= high + slack


def labels(item: dict | servers.Series | servers.Sample) -> tuple:
    found = item["labels"] if isinstance(item, dict) else item.labels
    return tuple(sorted((k, v) for k, v in found.items() if k != "__name__"))


def only_value(samples: list[servers.Sample]) -> float:
    assert len(samples) == 1, samples
    return samples[0].value


def active(alerts: list[dict]) -> set[tuple]:
    return {(a["labels"]["alertname"], a["state"], labels(a)) for a in alerts}


def notified_names(sink: loopback.Sink) -> set[str]:
    return {name for _, name in sink.snapshot()}


def notifications(sink: loopback.Sink) -> dict[tuple, set[str]]:
    """Each notified (receiver, alert labels) with the notification groups it came in."""
    groups = defaultdict(set)
    for notification in sink.received():
        for alert in notification.alerts:
            groups[notification.receiver, labels(alert)].add(notification.group_key)
    return dict(groups)
