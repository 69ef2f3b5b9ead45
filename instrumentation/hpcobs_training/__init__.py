"""Per-rank training metrics of the hpcobs contract (docs/contracts.md, "Training metrics").

    tracker = Tracker()
    for batch in loader:
        with tracker.step(tokens=n_tokens, flops=n_flops):
            with tracker.phase("forward"): ...
            tracker.loss(loss.item())

The series go to `<dir>/hpcobs_training_<job>_rank<rank>.prom`, rewritten atomically at most every `interval`
seconds at a step's end and once at close, for node_exporter's textfile collector; or, with `http_port=`, to
prometheus_client's HTTP endpoint on `http_port + local_rank`. No thread of ours: the textfile is written by the
training loop itself. With traces on (tracing.py), the slow steps and a small share of the others become spans.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hpcobs_training import tracing
from hpcobs_training.tracing import RESOURCE_ATTRIBUTES, SPAN_ATTRIBUTES, STEP_SPAN, StepTracer

__all__ = ["Tracker", "PHASES", "DIR_VARIABLE", "STEP_SPAN", "RESOURCE_ATTRIBUTES", "SPAN_ATTRIBUTES"]

DIR_VARIABLE = "HPCOBS_TRAINING_TEXTFILE_DIR"
JOBS_DIR = "/run/hpcobs-jobs"  # one directory per job, made by slurm/prolog, read by slurm/job-metrics
PHASES = ("data", "forward", "backward", "optimizer", "comm", "checkpoint")
PHASE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
# A job id becomes part of a file name: no separator, no leading dot, nothing a shell or a glob would read.
JOB_ID = re.compile(r"[0-9A-Za-z_-][0-9A-Za-z_.-]{0,63}")
# node_exporter's own textfile directory holds the root-written job-info files (hpcobs_job_<id>.prom): the job
# must never write there (docs/contracts.md, "Why only root writes it").
ROOT_TEXTFILE_DIRS = ("/var/lib/prometheus/node-exporter", "/var/lib/node_exporter/textfile_collector")
LABELS = ["hpc_job", "rank", "node"]

# (name without _total for counters, type, help); the names are the contract's (catalogue training.yaml).
SERIES = {
    "steps": ("hpcobs_training_steps", "counter", "Optimizer steps completed by this rank since process start."),
    "step_seconds": ("hpcobs_training_step_seconds", "counter", "Sum of this rank's step durations (seconds)."),
    "tokens": ("hpcobs_training_tokens", "counter", "This rank's share of the tokens processed."),
    "flops": ("hpcobs_training_model_flops", "counter", "This rank's share of the model FLOPs."),
    "loss": ("hpcobs_training_loss", "gauge", "Training loss reported at the last step."),
    "last_step": (
        "hpcobs_training_last_step_timestamp_seconds",
        "gauge",
        "Unix time at which this rank finished its last step (before the first: when the tracker started).",
    ),
}
PHASE_SERIES = ("hpcobs_training_phase_seconds", "Seconds this rank spent in each phase.")


def _env(environ: os._Environ[str] | dict[str, str], *names: str, default: str) -> str:
    for name in names:
        if environ.get(name):
            return environ[name]
    return default


class Tracker:
    """One rank's training metrics. Job, rank, local rank and node come from Slurm or torchrun's environment
    (SLURM_JOB_ID; RANK else SLURM_PROCID; LOCAL_RANK else SLURM_LOCALID; SLURMD_NODENAME else the short
    hostname); each keyword overrides its variable.

    Traces (`traces=None`: on when an OTLP endpoint is configured and the OpenTelemetry SDK is installed, see
    tracing.traces_wanted): a span per kept step, see tracing.StepTracer for the `slow_*` and `sample_share`
    keywords. `tracer_provider=` uses a provider of yours (its resource is yours: tracing.resource_attributes
    gives ours) instead of one built from the OTEL_* variables."""

    def __init__(
        self,
        *,
        job: str | None = None,
        rank: int | str | None = None,
        local_rank: int | str | None = None,
        node: str | None = None,
        textfile_dir: str | os.PathLike[str] | None = None,
        http_port: int | None = None,
        interval: float = 15.0,
        environ: dict[str, str] | None = None,
        traces: bool | None = None,
        tracer_provider: Any = None,
        slow_factor: float = 1.5,
        slow_quantile: float = 0.5,
        slow_window: int = 256,
        sample_share: float = 0.01,
    ) -> None:
        env = os.environ if environ is None else environ
        self.job = str(job) if job is not None else _env(env, "SLURM_JOB_ID", default="unknown")
        self.rank = str(rank) if rank is not None else _env(env, "RANK", "SLURM_PROCID", default="0")
        self.local_rank = (
            str(local_rank) if local_rank is not None else _env(env, "LOCAL_RANK", "SLURM_LOCALID", default="0")
        )
        self.node = node or _env(env, "SLURMD_NODENAME", default="") or socket.gethostname().split(".")[0]
        if not JOB_ID.fullmatch(self.job):
            raise ValueError(f"job {self.job!r}: expected a Slurm job id ([0-9A-Za-z_.-], at most 64 characters)")
        if not (self.rank.isdigit() and self.local_rank.isdigit()):
            raise ValueError(f"rank {self.rank!r}, local rank {self.local_rank!r}: expected non-negative integers")
        self.interval = interval
        self.path: str | None = None
        if http_port is None:
            directory = os.fspath(textfile_dir) if textfile_dir is not None else env.get(DIR_VARIABLE, "")
            job_dir = os.path.join(JOBS_DIR, self.job)  # slurm/prolog makes it, the job's own (docs/contracts.md)
            if not directory and os.path.isdir(job_dir):
                directory = job_dir
            if not directory:
                raise ValueError(
                    f"no textfile directory: {job_dir} does not exist; pass textfile_dir=, set {DIR_VARIABLE}, "
                    "or pass http_port="
                )
            if os.path.realpath(directory) in ROOT_TEXTFILE_DIRS:
                raise ValueError(f"{directory}: node_exporter's root-owned textfile directory; use the job's own")
            # The file name and the hpc_job label are the same value: the file names the series it holds.
            self.path = os.path.join(directory, f"hpcobs_training_{self.job}_rank{self.rank}.prom")
        self.steps = self.step_seconds = self.tokens = self.flops = 0.0
        self.last_loss = float("nan")
        self.last_step = time.time()
        self.phases: dict[str, float] = {}
        self._previous_end: float | None = None
        self._tracer: StepTracer | None = None
        self.tracer_provider = None  # the provider the spans go to, when traces are on
        if traces is None:
            traces = tracer_provider is not None or tracing.traces_wanted(env)
        if traces:
            self._tracer = StepTracer(
                tracer_provider,
                tracing.resource_attributes(self.job, self.rank, self.node, self.local_rank, env),
                env,
                seed=f"{self.job}/{self.rank}",
                slow_factor=slow_factor,
                slow_quantile=slow_quantile,
                slow_window=slow_window,
                sample_share=sample_share,
            )
            self.tracer_provider = self._tracer.provider
        # The phases entered in the running step, (name, start, end) on the monotonic clock; None outside a step
        # and when traces are off, so that phase() records nothing then.
        self._step_phases: list[tuple[str, float, float]] | None = None
        self._last_write = float("-inf")
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)
        self._server = None
        if http_port is not None:
            self._server = start_http_server(http_port + int(self.local_rank), registry=self.registry)
        atexit.register(self.close)
        self._closed = False

    # prometheus_client calls this at every exposition (textfile or HTTP scrape).
    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        ident = [self.job, self.rank, self.node]
        values = {
            "steps": self.steps,
            "step_seconds": self.step_seconds,
            "tokens": self.tokens,
            "flops": self.flops,
            "loss": self.last_loss,
            "last_step": self.last_step,
        }
        for key, (name, kind, text) in SERIES.items():
            family = (CounterMetricFamily if kind == "counter" else GaugeMetricFamily)(name, text, labels=LABELS)
            family.add_metric(ident, values[key])
            yield family
        phases = CounterMetricFamily(*PHASE_SERIES, labels=[*LABELS, "phase"])
        for phase, seconds in sorted(self.phases.items()):
            phases.add_metric([*ident, phase], seconds)
        yield phases

    @contextlib.contextmanager
    def step(self, tokens: float = 0, flops: float = 0) -> Iterator[None]:
        """One optimizer step. Its duration runs from the previous step's end (so data loading between steps is
        included) or, for the first step, from its start. A step that raises is not counted, nor traced."""
        start = time.monotonic()
        if self._tracer is not None:
            # One wall-clock reading a step: the span times are this anchor plus monotonic offsets.
            start_ns = time.time_ns()
            self._step_phases = []
        try:
            yield
        finally:
            phases, self._step_phases = self._step_phases, None
        end = time.monotonic()
        self.steps += 1
        seconds = end - (start if self._previous_end is None else self._previous_end)
        self.step_seconds += seconds
        self._previous_end = end
        self.tokens += tokens
        self.flops += flops
        self.last_step = time.time()
        if self._tracer is not None and (slow := self._tracer.keep(seconds)) is not None:
            assert phases is not None

            def wall(moment: float) -> int:
                return start_ns + round((moment - start) * 1e9)

            spans = [(name, wall(began), wall(ended)) for name, began, ended in phases]
            self._tracer.emit(int(self.steps), slow, start_ns, wall(end), spans)
            # The next step starts after the spans are made: their cost would otherwise make it look slow, and
            # keeping it would make the one after it slow in turn.
            self._previous_end = time.monotonic()
        if end - self._last_write >= self.interval:
            self.write()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time spent in `name` (one of PHASES, or a custom name matching [a-z][a-z0-9_]{0,31})."""
        if not (isinstance(name, str) and PHASE_NAME.fullmatch(name)):
            raise ValueError(f"phase {name!r}: expected one of {', '.join(PHASES)} or [a-z][a-z0-9_]{{0,31}}")
        start = time.monotonic()
        try:
            yield
        finally:
            end = time.monotonic()
            self.phases[name] = self.phases.get(name, 0.0) + end - start
            if self._step_phases is not None:
                self._step_phases.append((name, start, end))

    def loss(self, value: float) -> None:
        self.last_loss = float(value)

    def write(self) -> None:
        """Rewrite the textfile atomically: a temporary file in the same directory (its name does not end in
        .prom, so the collector skips it), fsync, mode 0644, then rename over the old file."""
        self._last_write = time.monotonic()
        if self.path is None:
            return
        directory, name = os.path.split(self.path)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(descriptor, "wb") as file:
                file.write(generate_latest(self.registry))
                file.flush()
                os.fsync(file.fileno())
            os.chmod(temporary, 0o644)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def close(self) -> None:
        """Write the last values (textfile) or stop serving (HTTP). Called at context exit and at exit."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self.write()
        if self._tracer is not None:
            self._tracer.close()
        if self._server is not None:
            server = self._server[0] if isinstance(self._server, tuple) else self._server
            server.shutdown()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
