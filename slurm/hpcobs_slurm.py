"""hpcobs Slurm prolog and epilog: the files that attribute GPUs to jobs (manual: docs/slurm.md).

slurmd runs the `prolog` and `epilog` scripts beside this module as root on every node of a job; both call `main`.
For its job, the prolog makes these files match the job's allocation on the node, and the epilog empties them:

- dcgm-exporter's HPC job mapping (its `--hpc-job-mapping-dir`): one file per GPU, named by the index the exporter
  gives the GPU (`<gpu>`, or `<gpu>.<gpu-instance>` for a MIG instance), one job id a line, a line per job on a
  shared GPU. The epilog removes its line and leaves the file, possibly empty: dcgm-exporter fails the whole scrape
  when a file it listed is gone when it opens it, and treats an empty file as no file.
- The AMD Device Metrics Exporter's Slurm job file per GPU (`<gpu id>`, a JSON object of strings). The exporter
  keeps one job per GPU: the newest job on a shared GPU wins, and when it ends the file passes to the newest
  remaining job, or is removed.
- The job-info series for node_exporter's textfile collector (docs/contracts.md#job-info).
- A record of the job in the state directory: what the epilog and `epilog --sweep` need to know later.

`epilog --sweep` empties the files of jobs Slurm no longer has on the node (a node that crashed never ran their
epilog). Every change happens under one lock, through a temporary file renamed into place. A monitoring failure
is logged (stderr and syslog) and never fails the job unless the configuration sets strict mode.

Standard library only. This runs at every job start, so the common path imports nothing that takes time: re and
json alone (with the enum, functools and collections they pull in) would double the prolog's wall time. They,
subprocess and argparse are imported where needed: reading a JSON file, asking scontrol or squeue, by hand.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and collections.abc would add to every job start, for annotations only
    from collections.abc import Callable
    from typing import TypeVar

    Result = TypeVar("Result")

HERE = os.path.dirname(os.path.realpath(__file__))
CONFIG_ENV = "HPCOBS_SLURM_CONF"
CONFIG_NAME = "hpcobs-slurm.conf"

# Every key of the configuration file, with its default (an empty directory or map turns that output off).
DEFAULTS = {
    "textfile_dir": "/var/lib/prometheus/node-exporter",
    "dcgm_mapping_dir": "/run/dcgm-job-map",
    "amd_mapping_dir": "",
    "metric_prefix": "hpcobs_",
    "state_dir": "/run/hpcobs-slurm",
    "gpu_map": "",
    "slurm_bin_dir": "/usr/bin",
    "query_scontrol": "no",
    "strict": "no",
    "lock_timeout_seconds": "10",
}
PATH_KEYS = ("textfile_dir", "dcgm_mapping_dir", "amd_mapping_dir", "state_dir", "gpu_map", "slurm_bin_dir")
FLAGS = {"yes": True, "true": True, "no": False, "false": False}
MAX_LOCK_TIMEOUT = 300.0

DIGITS = "0123456789"
METRIC_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:" + DIGITS)
JOB_INFO_PREFIX, JOB_INFO_SUFFIX = "hpcobs_job_", ".prom"
# `scontrol show job -o` prints the job name unquoted: the greedy name ends before the last owner fields, so a
# name that imitates them cannot shift the fields after it.
SCONTROL_JOB = r"JobId=[0-9]+ JobName=(.*) UserId=\S*\([0-9]+\) GroupId=\S*\([0-9]+\) "
SCONTROL_FIELD = r" (Account|QOS)=(\S*)"

# The job-info labels after hpc_job, in the contract's order (hpcobs/catalogue/job_info.yaml).
INFO_LABELS = ("user", "account", "partition", "job_name", "qos")
OWNER_ENVIRONMENT = {
    "user": "SLURM_JOB_USER",
    "account": "SLURM_JOB_ACCOUNT",
    "partition": "SLURM_JOB_PARTITION",
    "job_name": "SLURM_JOB_NAME",
    "qos": "SLURM_JOB_QOS",
    "cluster": "SLURM_CLUSTER_NAME",
}
# What the state directory keeps of a job (the AMD files of a shared GPU are rebuilt from it).
RECORD_KEYS = {"job", *OWNER_ENVIRONMENT, "slurm_gpus", "dcgm", "amd", "started"}
JOB_NAME_LIMIT = 128
# HELP lines are identical in every job's file: node_exporter keeps the first of differing ones and logs an error.
INFO_HELP = "Slurm job identity written by the hpcobs prolog (value 1)."
START_HELP = "Unix time the hpcobs prolog ran for the job on this node."
# The AMD exporter keys its GPU-to-job table by this value of the file; the job keys become its job_* labels.
AMD_GPU_KEY = "CUDA_VISIBLE_DEVICES"
# Upstream's own scripts reduce Slurm's ids modulo 128 (render-node minors start at 128); a gpu_map replaces that.
AMD_ID_MODULO = 128
SLURM_COMMAND_TIMEOUT = 5.0


class SetupError(Exception):
    """A problem the site fixes (configuration, environment, files), told in one line with its fix."""


class Settings:
    """The checked values of the configuration file."""

    def __init__(self, path: str, values: dict[str, str]) -> None:
        self.values = values
        self.textfile_dir = values["textfile_dir"]
        self.dcgm_mapping_dir = values["dcgm_mapping_dir"]
        self.amd_mapping_dir = values["amd_mapping_dir"]
        self.metric_prefix = values["metric_prefix"]
        self.state_dir = values["state_dir"]
        self.gpu_map = values["gpu_map"]
        self.slurm_bin_dir = values["slurm_bin_dir"]
        self.query_scontrol = _flag(path, "query_scontrol", values["query_scontrol"])
        self.strict = _flag(path, "strict", values["strict"])
        self.lock_timeout = _seconds(path, "lock_timeout_seconds", values["lock_timeout_seconds"])
        if not is_metric_prefix(self.metric_prefix):
            raise SetupError(
                f"config error: {path}: metric_prefix: {self.metric_prefix!r} cannot start a metric name; "
                "fix: use letters, digits, '_' or ':' (no digit first), as config/default.yaml's metric_prefix"
            )
        for key in PATH_KEYS:
            if values[key] and not os.path.isabs(values[key]):
                raise SetupError(f"config error: {path}: {key}: {values[key]!r} is relative; fix: give a full path")
        if not self.state_dir:
            raise SetupError(f"config error: {path}: state_dir: empty; fix: give a directory for the lock and records")

    @property
    def records_dir(self) -> str:
        return os.path.join(self.state_dir, "jobs")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.state_dir, "lock")


def is_number(text: str) -> bool:
    """ASCII digits only: a job id, an AMD GPU id (which the AMD exporter reads with strconv.Atoi)."""
    return text.isascii() and text.isdigit()


def is_dcgm_name(name: str) -> bool:
    """A name dcgm-exporter reads as a mapping file, `<gpu>` or `<gpu>.<gpu-instance>`: the whole name matches
    ^\\d+(\\.\\d+)?$ in its internal/pkg/transformation/hpc.go, where \\d is an ASCII digit."""
    gpu, dot, instance = name.partition(".")
    return is_number(gpu) and (not dot or is_number(instance))


def is_metric_prefix(prefix: str) -> bool:
    """Empty, or the start of a metric name: letters, digits, '_' and ':', no digit first."""
    return not prefix or (prefix[0] not in DIGITS and set(prefix) <= METRIC_NAME_CHARACTERS)


def job_of_info_file(name: str) -> str | None:
    """The job id in the name of a job-info file (`hpcobs_job_<id>.prom`), else None."""
    job_id = name.removeprefix(JOB_INFO_PREFIX).removesuffix(JOB_INFO_SUFFIX)
    return job_id if name == f"{JOB_INFO_PREFIX}{job_id}{JOB_INFO_SUFFIX}" and is_number(job_id) else None


def _flag(path: str, key: str, value: str) -> bool:
    if value.lower() not in FLAGS:
        raise SetupError(f"config error: {path}: {key}: {value!r} is not yes or no; fix: write {key} = yes or no")
    return FLAGS[value.lower()]


def _seconds(path: str, key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_LOCK_TIMEOUT:
        raise SetupError(
            f"config error: {path}: {key}: {value!r} is not 0 to {MAX_LOCK_TIMEOUT:g} seconds; fix: write e.g. 10"
        )
    return seconds


def config_path(environ: dict[str, str]) -> str:
    """HPCOBS_SLURM_CONF, else hpcobs-slurm.conf beside the scripts: slurmd gives the Prolog an environment of its
    own making, so an installation keeps the file there."""
    return environ.get(CONFIG_ENV) or os.path.join(HERE, CONFIG_NAME)


def read_config(path: str) -> dict[str, str]:
    """`key = value` lines; blank lines and lines starting with '#' are skipped; a missing key keeps its default."""
    try:
        with open(path, encoding="utf-8") as config:
            text = config.read()
    except (OSError, UnicodeDecodeError) as error:
        raise SetupError(
            f"config error: {path}: cannot be read ({_reason(error)}); fix: install {CONFIG_NAME} beside the scripts"
        ) from None
    values = dict(DEFAULTS)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = (part.strip() for part in line.partition("="))
        if not equals:
            raise SetupError(f"config error: {path}: line {number}: {line!r} is not key = value; fix: write it so")
        if key not in DEFAULTS:
            raise SetupError(f"config error: {path}: {key}: unknown key; fix: use one of {', '.join(DEFAULTS)}")
        values[key] = value
    return values


def strict_requested(values: dict[str, str]) -> bool:
    """Whether the file turns strict mode on, read before the other keys are checked: a file with a wrong key
    still decides whether that fails the job."""
    return FLAGS.get(values["strict"].lower(), False)


def job_id_from(environ: dict[str, str]) -> str:
    job_id = environ.get("SLURM_JOB_ID", "")
    if not is_number(job_id):
        raise SetupError(
            f"SLURM_JOB_ID: {job_id!r} is not a job id; fix: run this as slurmd's Prolog or Epilog, which sets it"
        )
    return job_id


def slurm_gpu_ids(value: str) -> list[int]:
    """SLURM_JOB_GPUS ('0,1'; ranges such as '0-3' accepted): Slurm's ids of the job's GPUs on this node."""
    ids: list[int] = []
    for token in filter(None, (part.strip() for part in value.split(","))):
        first, dash, last = token.partition("-")
        if not is_number(first) or (dash and not is_number(last)):
            raise SetupError(f"SLURM_JOB_GPUS: {value!r} is not a list of GPU ids; fix: request GPUs as gres/gpu")
        ids += [gpu for gpu in range(int(first), int(last or first) + 1) if gpu not in ids]
    return ids


def owner_from(environ: dict[str, str]) -> dict[str, str]:
    """User, account, partition, job name, QOS and cluster from the environment; missing ones are empty."""
    return {key: environ.get(variable, "") for key, variable in OWNER_ENVIRONMENT.items()}


def scontrol_details(bin_dir: str, job_id: str) -> dict[str, str]:
    """Account, job name and QOS from `scontrol show job -o` (one slurmctld round trip)."""
    import re
    import subprocess

    command = [os.path.join(bin_dir, "scontrol"), "show", "job", "-o", job_id]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=SLURM_COMMAND_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupError(f"{command[0]}: {_reason(error)}; fix: set slurm_bin_dir, or query_scontrol = no") from None
    line = next((line for line in done.stdout.splitlines() if line.startswith(f"JobId={job_id} ")), "")
    match = re.match(SCONTROL_JOB, line, re.DOTALL)
    if done.returncode or not match:
        problem = (done.stderr.strip().splitlines() or ["the job is not in its output"])[0]
        raise SetupError(f"scontrol show job {job_id}: {problem}; fix: check slurmctld, or set query_scontrol = no")
    fields = dict(re.findall(SCONTROL_FIELD, line[match.end() - 1 :]))
    return {
        "job_name": match[1],
        "account": _set_or_empty(fields.get("Account", "")),
        "qos": _set_or_empty(fields.get("QOS", "")),
    }


def _set_or_empty(value: str) -> str:
    return "" if value == "(null)" else value


def read_gpu_map(path: str) -> dict[int, str]:
    """A site's table from Slurm GPU ids to exporter GPU names: lines `<slurm id> <exporter gpu>`, '#' comments."""
    table: dict[int, str] = {}
    try:
        with open(path, encoding="utf-8") as lines:
            for number, raw in enumerate(lines, start=1):
                fields = raw.split("#", 1)[0].split()
                if not fields:
                    continue
                if len(fields) != 2 or not is_number(fields[0]) or not is_dcgm_name(fields[1]):
                    raise SetupError(
                        f"gpu_map: {path}: line {number}: {raw.strip()!r} is not '<slurm gpu id> <exporter gpu>'; "
                        "fix: write e.g. '4 1.2' (Slurm GPU 4 is GPU 1, GPU instance 2)"
                    )
                table[int(fields[0])] = fields[1]
    except OSError as error:
        raise SetupError(f"gpu_map: {path}: {_reason(error)}; fix: write the file or leave gpu_map empty") from None
    return table


def exporter_gpus(settings: Settings, slurm_gpus: list[int]) -> tuple[list[str], list[str]]:
    """The job's GPUs as dcgm-exporter and as the AMD exporter name them."""
    if not settings.gpu_map:
        return [str(gpu) for gpu in slurm_gpus], [str(gpu % AMD_ID_MODULO) for gpu in slurm_gpus]
    table = read_gpu_map(settings.gpu_map)
    missing = [gpu for gpu in slurm_gpus if gpu not in table]
    if missing:
        raise SetupError(f"gpu_map: {settings.gpu_map}: no line for Slurm GPU {missing[0]}; fix: list every GPU")
    names = [table[gpu] for gpu in slurm_gpus]
    if settings.amd_mapping_dir and not all(is_number(name) for name in names):
        raise SetupError(f"gpu_map: {settings.gpu_map}: AMD GPU ids are integers; fix: map Slurm ids to gpu_id values")
    return names, names


def escape(value: str) -> str:
    """A label value in the text exposition format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def job_info_text(prefix: str, record: dict) -> str:
    """The job's file for node_exporter's textfile collector (no timestamps: the collector would drop them)."""
    labels = {"hpc_job": record["job"], **{name: record[name] for name in INFO_LABELS}}
    info = ",".join(f'{name}="{escape(value)}"' for name, value in labels.items())
    return (
        f"# HELP {prefix}slurm_job_info {INFO_HELP}\n"
        f"# TYPE {prefix}slurm_job_info gauge\n"
        f"{prefix}slurm_job_info{{{info}}} 1\n"
        f"# HELP {prefix}slurm_job_start_time_seconds {START_HELP}\n"
        f"# TYPE {prefix}slurm_job_start_time_seconds gauge\n"
        f'{prefix}slurm_job_start_time_seconds{{hpc_job="{record["job"]}"}} {record["started"]}\n'
    )


def amd_payload(record: dict, gpu: str) -> dict[str, str]:
    """The AMD exporter's file for one GPU of a job record: the keys its own Slurm scripts write, strings only (it
    ignores a file holding any other type). The GPU key names this file's GPU alone: removing the file clears
    exactly that GPU in the exporter."""
    return {
        "SLURM_JOB_ID": record["job"],
        "SLURM_JOB_USER": record["user"],
        "SLURM_JOB_PARTITION": record["partition"],
        "SLURM_CLUSTER_NAME": record["cluster"],
        "SLURM_JOB_GPUS": ",".join(map(str, record["slurm_gpus"])),
        AMD_GPU_KEY: gpu,
    }


def json_text(value: dict) -> str:
    """`value` (strings, integers, lists of them) as a line of JSON, keys sorted. By hand: see the module doc."""
    return "{" + ", ".join(f"{_json_value(key)}: {_json_value(item)}" for key, item in sorted(value.items())) + "}\n"


def _json_value(value: object) -> str:
    if isinstance(value, str):
        # JSON strings escape the quote, the backslash and the control characters below U+0020 (RFC 8259).
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + "".join(char if char >= " " else f"\\u{ord(char):04x}" for char in escaped) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(map(_json_value, value)) + "]"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"no JSON for {value!r}")


class Lock:
    """An exclusive flock on the state directory's lock file, given up after `timeout` seconds of waiting."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.descriptor = -1

    def __enter__(self) -> Lock:
        _directory(os.path.dirname(self.path))
        self.descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(self.descriptor)
                    raise SetupError(
                        f"{self.path}: still locked after {self.timeout:g}s; fix: find its holder (fuser {self.path})"
                    ) from None
                time.sleep(0.005)

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.descriptor)


def write_file(path: str, text: str) -> None:
    """Replace `path` at once: a temporary file in the same directory under a name no reader picks up, then a
    rename. Nothing is written when the file already holds `text`.

    No fsync: the rename alone shows readers a whole file, and after a crash every one of these files is stale
    (the jobs are gone) and swept; an fsync per file, on a node whose disk a job is filling with checkpoints,
    could hold up the job's start for seconds."""
    data = text.encode()
    try:
        with open(path, "rb") as current:
            if current.read() == data:
                return
    except FileNotFoundError:
        pass
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.hpcobs-{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)
        os.rename(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: str) -> None:
    try:  # noqa: SIM105 (contextlib.suppress would import contextlib at every job start)
        os.unlink(path)
    except FileNotFoundError:
        pass


def _lines(path: str) -> list[str]:
    """The non-blank lines of a mapping file ([] when missing): a blank line would give dcgm-exporter an empty job."""
    try:
        with open(path, encoding="utf-8", errors="replace") as mapping:
            return [line.strip() for line in mapping if line.strip()]
    except FileNotFoundError:
        return []


def _json(path: str) -> dict | None:
    """The JSON object in a file; None when the file is missing or holds no JSON object (then it is not ours)."""
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read()
    except (FileNotFoundError, ValueError):
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _names(directory: str, accept: Callable[[str], bool]) -> list[str]:
    """The directory's entries that are not directories and whose name `accept`s, sorted."""
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if accept(entry.name) and not entry.is_dir())


def set_dcgm_lines(directory: str, job_id: str, gpus: list[str]) -> None:
    """Make `job_id` a line of exactly the mapping files named in `gpus` (creating them), leaving other jobs'
    lines in place. Files are emptied, never removed (see the module doc)."""
    for name in sorted(set(_names(_directory(directory), is_dcgm_name)) | set(gpus)):
        path = os.path.join(directory, name)
        lines = _lines(path)
        if name in gpus and job_id not in lines:
            write_file(path, "".join(f"{line}\n" for line in [*lines, job_id]))
        elif name not in gpus and job_id in lines:
            write_file(path, "".join(f"{line}\n" for line in lines if line != job_id))


def set_amd_files(directory: str, job: dict, gpus: list[str], others: list[dict]) -> None:
    """Give the job record `job` the AMD files of `gpus`; a file of the job on another GPU passes to the newest of
    the `others` (job records) holding that GPU, or is removed when none does."""
    for name in sorted(set(_names(_directory(directory), is_number)) | set(gpus)):
        path = os.path.join(directory, name)
        if name in gpus:
            write_file(path, json_text(amd_payload(job, name)))
            continue
        holder = _json(path)
        if holder is None or holder.get("SLURM_JOB_ID") != job["job"]:
            continue
        holders = [record for record in others if name in record["amd"]]
        if holders:
            newest = max(holders, key=lambda record: (record["started"], int(record["job"])))
            write_file(path, json_text(amd_payload(newest, name)))
        else:
            _remove(path)


def _record_path(settings: Settings, job_id: str) -> str:
    return os.path.join(_directory(settings.records_dir), f"{job_id}.json")


def _record_ids(settings: Settings) -> list[str]:
    listed = os.listdir(_directory(settings.records_dir))
    names = (name.removesuffix(".json") for name in listed if name.endswith(".json"))
    return [job_id for job_id in names if is_number(job_id)]


def record_of(settings: Settings, job_id: str) -> dict | None:
    """The job's record; None when there is none, or it cannot be read as one."""
    record = _json(_record_path(settings, job_id))
    return record if record is not None and record.get("job") == job_id and set(record) >= RECORD_KEYS else None


def amd_neighbours(settings: Settings, job_id: str) -> list[dict]:
    """The records of the other jobs on the node, when AMD files need them (to pass a shared GPU on)."""
    if not settings.amd_mapping_dir:
        return []
    found = (record_of(settings, other) for other in _record_ids(settings) if other != job_id)
    return [record for record in found if record is not None]


class Steps:
    """Runs independent steps, so that one failing output does not stop the others; collects one-line problems."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def run(self, what: str, step: Callable[..., Result], *args: object) -> Result | None:
        """step(*args), or None after noting its problem."""
        try:
            return step(*args)
        except SetupError as error:
            self.problems.append(f"{what}: {error}")
        except OSError as error:
            self.problems.append(
                f"{what}: {error.filename or ''}: {_reason(error)}; fix: check that the directory set in "
                f"{CONFIG_NAME} is on a writable filesystem and root may write there"
            )
        return None


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _directory(path: str) -> str:
    """`path`, created if missing: the directories usually live on /run, which is empty after a boot."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    return path


def prolog(settings: Settings, environ: dict[str, str]) -> list[str]:
    """Write the job's files; the problems met, one line each."""
    job_id = job_id_from(environ)
    steps = Steps()
    owner = owner_from(environ)
    if settings.query_scontrol and not all(owner[key] for key in ("account", "job_name", "qos")):
        queried = steps.run("scontrol", scontrol_details, settings.slurm_bin_dir, job_id) or {}
        owner.update({key: owner[key] or value for key, value in queried.items()})
    owner["job_name"] = owner["job_name"][:JOB_NAME_LIMIT]
    slurm_gpus = steps.run("GPUs", slurm_gpu_ids, environ.get("SLURM_JOB_GPUS", "")) or []
    dcgm, amd = steps.run("GPU names", exporter_gpus, settings, slurm_gpus) or ([], [])
    with Lock(settings.lock_path, settings.lock_timeout):
        # A rerun keeps the first start time, so that it rewrites nothing: the prolog is idempotent.
        previous = record_of(settings, job_id)
        started = previous["started"] if previous else int(time.time())
        record = {"job": job_id, **owner, "slurm_gpus": slurm_gpus, "dcgm": dcgm, "amd": amd, "started": started}
        steps.run("job record", write_file, _record_path(settings, job_id), json_text(record))
        if settings.textfile_dir:
            steps.run("job info", write_job_info, settings.textfile_dir, settings.metric_prefix, record)
        if settings.dcgm_mapping_dir:
            steps.run("dcgm mapping", set_dcgm_lines, settings.dcgm_mapping_dir, job_id, dcgm)
        if settings.amd_mapping_dir:
            others = amd_neighbours(settings, job_id)
            steps.run("AMD mapping", set_amd_files, settings.amd_mapping_dir, record, amd, others)
    return steps.problems


def write_job_info(directory: str, prefix: str, record: dict) -> None:
    write_file(
        os.path.join(_directory(directory), f"{JOB_INFO_PREFIX}{record['job']}{JOB_INFO_SUFFIX}"),
        job_info_text(prefix, record),
    )


def remove_job(settings: Settings, job_id: str, others: list[dict]) -> list[str]:
    """Empty the job's files (the caller holds the lock), passing its AMD files to the newest of `others` on
    the same GPU. Its record goes last and only when all else worked, so that a failure leaves it for the sweep."""
    steps = Steps()
    if settings.dcgm_mapping_dir:
        steps.run("dcgm mapping", set_dcgm_lines, settings.dcgm_mapping_dir, job_id, [])
    if settings.amd_mapping_dir:
        steps.run("AMD mapping", set_amd_files, settings.amd_mapping_dir, {"job": job_id}, [], others)
    if settings.textfile_dir:
        steps.run("job info", _remove_textfiles, settings.textfile_dir, job_id)
    if not steps.problems:
        steps.run("job record", _remove, _record_path(settings, job_id))
    return steps.problems


def _remove_textfiles(directory: str, job_id: str) -> None:
    """The job-info file and the training metrics the job wrote beside it (docs/contracts.md#training-metrics)."""
    training = f"hpcobs_training_{job_id}_"
    for name in os.listdir(_directory(directory)):
        if job_of_info_file(name) == job_id or (name.startswith(training) and name.endswith(JOB_INFO_SUFFIX)):
            _remove(os.path.join(directory, name))


def epilog(settings: Settings, environ: dict[str, str]) -> list[str]:
    """Empty the job's files; the problems met. Slurm's GPU list is not needed: every file is checked for the job."""
    job_id = job_id_from(environ)
    with Lock(settings.lock_path, settings.lock_timeout):
        return remove_job(settings, job_id, amd_neighbours(settings, job_id))


def jobs_with_files(settings: Settings) -> set[str]:
    """Every job id with a record, a mapping line, an AMD file or a job-info file on this node."""
    jobs = set(_record_ids(settings))
    if settings.dcgm_mapping_dir:
        for name in _names(_directory(settings.dcgm_mapping_dir), is_dcgm_name):
            jobs.update(filter(is_number, _lines(os.path.join(settings.dcgm_mapping_dir, name))))
    if settings.amd_mapping_dir:
        for name in _names(_directory(settings.amd_mapping_dir), is_number):
            holder = str((_json(os.path.join(settings.amd_mapping_dir, name)) or {}).get("SLURM_JOB_ID", ""))
            if is_number(holder):
                jobs.add(holder)
    if settings.textfile_dir:
        jobs.update(filter(None, map(job_of_info_file, os.listdir(_directory(settings.textfile_dir)))))
    return jobs


def jobs_on_node(bin_dir: str, node: str) -> set[str]:
    """The ids of the jobs Slurm has on the node in any state before the end of their epilog (squeue's default
    states include COMPLETING)."""
    import subprocess

    command = [os.path.join(bin_dir, "squeue"), "--noheader", "--nodelist", node, "--format", "%A"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupError(f"{command[0]}: {_reason(error)}; fix: set slurm_bin_dir in {CONFIG_NAME}") from None
    ids = done.stdout.split()
    if done.returncode or not all(map(is_number, ids)):
        problem = (done.stderr.strip().splitlines() or ["output is not a list of job ids"])[0]
        raise SetupError(f"squeue --nodelist {node}: {problem}; fix: check slurmctld and the node name (--node)")
    return set(ids)


def sweep(settings: Settings, node: str) -> tuple[list[str], list[str]]:
    """Empty the files of every job Slurm no longer has on `node`: (job ids swept, problems).

    The lock is taken before asking Slurm: a prolog that wrote before that ran for a job Slurm already listed,
    and one still waiting for the lock writes after the sweep."""
    with Lock(settings.lock_path, settings.lock_timeout):
        running = jobs_on_node(settings.slurm_bin_dir, node)
        gone = sorted(jobs_with_files(settings) - running, key=int)
        # A swept job's AMD files pass only to a job still running, never to another swept one.
        heirs = [record for record in amd_neighbours(settings, "") if record["job"] in running]
        problems = [f"job {job_id}: {problem}" for job_id in gone for problem in remove_job(settings, job_id, heirs)]
    return gone, problems


def report(action: str, job_id: str, problems: list[str]) -> None:
    """Each problem on stderr and in syslog (slurmd discards the Prolog's output)."""
    import syslog

    syslog.openlog("hpcobs-slurm", syslog.LOG_PID, syslog.LOG_DAEMON)
    for problem in problems:
        line = f"hpcobs {action}: job {job_id}: {problem}"
        print(line, file=sys.stderr)
        syslog.syslog(syslog.LOG_ERR, line)


def main(action: str, arguments: list[str]) -> int:
    """Run `action` ('prolog' or 'epilog') for the job in the environment; the exit status for slurmd: 0 unless
    strict mode is on and something failed. By hand: `--check`, and for the epilog `--sweep [--node NAME]`."""
    # Files 0644 and directories 0755 whatever slurmd's umask: the exporters reading them may not run as root.
    os.umask(0o022)
    if arguments:
        return by_hand(action, arguments)
    # Label values must be UTF-8: bytes that are not (a job name is the user's) become U+FFFD.
    environ = {key.decode(errors="replace"): value.decode(errors="replace") for key, value in os.environb.items()}
    path = config_path(environ)
    strict = False
    try:
        values = read_config(path)
        strict = strict_requested(values)
        settings = Settings(path, values)
        problems = (prolog if action == "prolog" else epilog)(settings, environ)
    except SetupError as error:
        problems = [str(error)]
    except OSError as error:
        problems = [f"{error.filename or ''}: {_reason(error)}; fix: check the directories set in {path}"]
    except Exception as error:  # a bug here must not fail jobs either
        problems = [f"internal error: {type(error).__name__}: {error}; fix: report it with this line"]
    if problems:
        report(action, environ.get("SLURM_JOB_ID", "?"), problems)
    return 1 if problems and strict else 0


def by_hand(action: str, arguments: list[str]) -> int:
    """The administrator's commands: exit 0 when all went well, 1 when some job could not be swept, 2 on a
    configuration or Slurm problem."""
    import argparse

    parser = argparse.ArgumentParser(prog=action, description=f"hpcobs Slurm {action} (docs/slurm.md)")
    parser.add_argument("--check", action="store_true", help="check the configuration and print its values")
    if action == "epilog":
        parser.add_argument("--sweep", action="store_true", help="empty the files of jobs Slurm no longer has here")
        short_hostname = os.uname().nodename.split(".")[0]
        parser.add_argument("--node", default=short_hostname, help="Slurm's name of this node (default: %(default)s)")
    options = parser.parse_args(arguments)
    if not options.check and not getattr(options, "sweep", False):
        parser.error("give --check" + (" or --sweep" if action == "epilog" else ""))
    path = config_path(dict(os.environ))
    try:
        settings = Settings(path, read_config(path))
        if options.check:
            print("\n".join(f"{key} = {value}".rstrip() for key, value in settings.values.items()))
            return 0
        swept, problems = sweep(settings, options.node)
    except (SetupError, OSError) as error:
        print(error, file=sys.stderr)
        return 2
    print(f"swept {len(swept)} jobs no longer on {options.node}: {' '.join(swept) or '-'}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0
