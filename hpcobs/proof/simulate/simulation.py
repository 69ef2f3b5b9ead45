"""A simulation run: the config's exporters over a modelled cluster, a time window and scenarios.

sim = Simulation(config, nodes=4, gpus_per_node=8, hours=1, scenarios="xid79", seed=1)
for family in sim.families(): ...            # lazily, one series at a time
sim.expectations()                           # what the scenarios must make visible
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cached_property

# Where the simulated exporters listen and the Slurm exporters run: the same as in the rule tests' series.
from hpcobs.exporters.labels import EXPORTER_PORTS, SLURM_CONTROLLER
from hpcobs.exporters.sources import Sources
from hpcobs.lang.promql import duration_seconds
from hpcobs.proof.simulate import gpu, model, node, security, slurm, storage, training, week
from hpcobs.proof.simulate.activity import Activity
from hpcobs.proof.simulate.core import UP, Family, Runs, Window, between, blank, complement, where, window_mask
from hpcobs.proof.simulate.expect import Expectation
from hpcobs.proof.simulate.formats import promtool_series
from hpcobs.proof.simulate.model import Job
from hpcobs.proof.simulate.scenarios import Spec, resolve
from hpcobs.settings.config import Config
from hpcobs.settings.thresholds import Thresholds

# Exporters whose series another exporter's target serves from its textfile directory (same target, same `up`):
# NCCL Inspector's dumps are written by the job, into its own metrics directory, read by slurm/job-metrics
# that also serves the training metrics (docs/slurm.md#security).
SERVED_BY = {"nccl_inspector": "training"}


class Simulation:
    def __init__(
        self,
        config: Config,
        *,
        nodes: int = 4,
        gpus_per_node: int = 8,
        hours: float = 1.0,
        scenarios: str | Iterable[Spec] = "healthy",
        seed: int = 0,
        start: datetime | None = None,
    ):
        self.config = config
        self.sources = Sources(config)
        self.cluster_label = config.get("cluster", "label")
        self.seed = seed
        step = duration_seconds(config["scrape_interval"])
        self.window = Window(int((start or model.DEFAULT_START).timestamp()), step, max(1, round(hours * 3600 / step)))
        specs = Spec.parse(scenarios) if isinstance(scenarios, str) else list(scenarios)
        base = model.build(self.sources, config.get("cluster", "name"), nodes, gpus_per_node, seed, self.window)
        self.thresholds = Thresholds.from_config(config["thresholds"])
        self.faults = resolve(week.expand(specs, base, seed), self.sources, self.thresholds, base, seed)
        self.cluster = self.faults.cluster
        self.activity = Activity(self)
        self._scrape: dict[str, dict[str, str]] = {}

    # -- what the emitters ask -------------------------------------------------------------------
    def enabled(self, exporter: str) -> bool:
        return bool(self.config["exporters"][exporter]["enabled"])

    def port(self, exporter: str) -> int:
        if exporter == "slurm":
            return EXPORTER_PORTS[f"slurm_{self.config['exporters']['slurm']['flavour']}"]
        if exporter in SERVED_BY:
            return self.port(SERVED_BY[exporter])
        if exporter == "job_info" and self.job_info_source == "prolog":
            return EXPORTER_PORTS["node_exporter"]
        if exporter == "job_info":
            return EXPORTER_PORTS["slurm_jontk"]
        return EXPORTER_PORTS[exporter]

    @cached_property
    def job_info_source(self) -> str:
        return self.config["exporters"]["job_info"]["source"]

    def target(self, exporter: str, host: str) -> dict[str, str]:
        """Labels the scrape adds: the exporter's selector labels, instance and the cluster label."""
        # Not cached: a cache would hold one dict per target, growing with the cluster.
        return {
            **self._scrape_labels(exporter),
            "instance": f"{host}:{self.port(exporter)}",
            self.cluster_label: self.cluster.name,
        }

    def _scrape_labels(self, exporter: str) -> dict[str, str]:
        if exporter not in self._scrape:
            self._scrape[exporter] = self.sources[exporter].scrape_labels()
        return self._scrape[exporter]

    def scraped(self, exporter: str, node_index: int) -> list[bool] | None:
        """Scrapes at which the exporter on that node answers; None = all of them."""
        down = self.unscraped(exporter, node_index)
        return [not d for d in window_mask(self.window.steps, down)] if down else None

    def unscraped(self, exporter: str, node_index: int) -> list[tuple[int, int]]:
        """The windows in which the exporter on that node does not answer (they may overlap)."""
        served_by = "node_exporter" if exporter == "job_info" else SERVED_BY.get(exporter, exporter)
        return (
            self.faults.windows("host_down", node_index)
            + self.faults.windows("exporter_down", served_by, node_index)
            + self.faults.windows("node_absent", node_index)
        )

    def in_cluster(self, node_index: int) -> list[bool] | None:
        """Scrapes at which the node is part of the cluster (in file_sd and slurm.conf); None = all of them."""
        absent = self.faults.mask("node_absent", node_index)
        return [not a for a in absent] if absent else None

    def job_variants(self, node: int, gpu: int) -> list[tuple[Job | None, Runs | None]]:
        """The label variants of one GPU's series over time: one per job (mapping file present) and one
        without a job; each with the runs of scrapes where it exists (None = all of them)."""
        n = self.window.steps
        mapped = complement(self.faults.windows("no_mapping", node), n)
        out: list[tuple[Job | None, Runs | None]] = []
        for job in self.cluster.jobs_on_gpu(node, gpu):
            if runs := between(mapped, *self.activity.span(job)):
                out.append((job, runs))
        if not out:
            return [(None, None)]
        unmapped = complement([run for _, runs in out for run in runs or ()], n)
        if unmapped:
            out.insert(0, (None, unmapped))
        return out

    # -- outputs ---------------------------------------------------------------------------------
    def families(self, names: set[str] | None = None) -> Iterator[Family]:
        """Every family, exporter by exporter; `names` keeps only those metric names."""
        emitted: set[str] = set()
        gap = self.faults.windows("scrape_gap")
        for family in self._all_families():
            if names is not None and family.name not in names:
                continue
            if family.name in emitted:
                raise AssertionError(f"metric {family.name} emitted by two families (catalogue clash)")
            emitted.add(family.name)
            yield _with_gap(family, gap) if gap else family

    def _all_families(self) -> Iterator[Family]:
        for domain in (gpu, node, slurm, storage, security, training):
            yield from domain.families(self)
        yield Family(UP, "gauge", "1 if the target answered the scrape (written by Prometheus).", self._up_series())

    def _up_series(self):
        for exporter, node_index, host, present in self._targets_list():
            labels = self.target(exporter, host)
            scraped = self.scraped(exporter, node_index) if node_index is not None else None
            values = [1] * self.window.steps if scraped is None else [int(s) for s in scraped]
            # A node out of the cluster is in no file_sd list: no target, so no `up` either.
            listed = self.in_cluster(node_index) if node_index is not None else None
            if listed is not None:
                values = where(listed, values)
            yield labels, values if present is None else where(present, values)

    def _targets_list(self):
        """(exporter, node index or None, host, presence mask or None) for every scrape target."""
        for n in self.cluster.nodes:
            vendor_exporter = "dcgm" if n.vendor == "nvidia" else "amd"
            for exporter in (vendor_exporter, "node_exporter", "lustre", "falco", "tetragon"):
                if self.enabled(exporter):
                    yield exporter, n.index, n.name, None
        if self.enabled("lustre"):
            for server in model.LUSTRE_SERVERS:
                yield "lustre", None, server, None
        if self.enabled("slurm"):
            yield "slurm", None, SLURM_CONTROLLER, None
        if self.enabled("job_info") and self.job_info_source == "jontk":
            yield "job_info", None, SLURM_CONTROLLER, None
        if self.enabled("training") or self.enabled("nccl_inspector"):
            for n in self.cluster.nodes:
                runs = [self.activity.span(j) for j in self.cluster.jobs_on(n.index) if j.training or j.nccl]
                if runs:
                    yield "training", n.index, n.name, window_mask(self.window.steps, runs)

    def expectations(self) -> list[Expectation]:
        return self.faults.expectations

    def input_series(self, names: set[str] | None = None):
        """The simulation as promtool `input_series` (hpcobs.authoring.ruletest.Series, in expanding notation)."""
        return list(promtool_series(self.families(names)))


def _with_gap(family: Family, gap: Runs) -> Family:
    """The family as Prometheus stores it when it scraped nothing during `gap` (it was restarting)."""
    series = ((labels, blank(values, gap)) for labels, values in family.series)
    return Family(family.name, family.type, family.help, series)
