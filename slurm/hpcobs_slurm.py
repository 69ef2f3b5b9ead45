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
- The job's own metrics directory, owned by the job's user: where the job writes its training metrics, apart
  from every file root writes (docs/slurm.md#security).
- A record of the job in the state directory: what the epilog and `epilog --sweep` need to know later.

`epilog --sweep` empties the files of jobs Slurm no longer has on the node (a node that crashed never ran their
epilog). Every change happens under one lock, through a temporary file renamed into place. A monitoring failure
is logged (stderr and syslog) and never fails the job unless the configuration sets strict mode.

Root runs this on nodes where users have shells (docs/slurm.md#security): it trusts no path a user could change.
Its configuration is the file beside it; every directory it writes, reads or runs a command from is checked to
be writable by root alone; temporary files are created new under random names; every file read is opened without
following links or waiting, checked to be a small regular file, and refused otherwise.

Standard library only. This runs at every job start, so the common path imports nothing that takes time: re and
json alone (with the enum, functools and collections they pull in) would double the prolog's wall time. They,
subprocess and argparse are imported where needed: reading a JSON file, asking scontrol or squeue, by hand.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and collections.abc would add to every job start, for annotations only
    from collections.abc import Callable
    from typing import TypeVar

    Result = TypeVar("Result")

HERE = os.path.dirname(os.path.realpath(__file__))
CONFIG_NAME = "hpcobs-slurm.conf"

# Every key of the configuration file, with its default (an empty directory or map turns that output off).
DEFAULTS = {
    "textfile_dir": "/var/lib/prometheus/node-exporter",
    "dcgm_mapping_dir": "/run/dcgm-job-map",
    "amd_mapping_dir": "",
    "job_metrics_dir": "/run/hpcobs-jobs",
    "metric_prefix": "hpcobs_",
    "state_dir": "/run/hpcobs-slurm",
    "gpu_map": "",
    "slurm_bin_dir": "/usr/bin",
    "query_scontrol": "no",
    "strict": "no",
    "lock_timeout_seconds": "10",
}
PATH_KEYS = (
    "textfile_dir",
    "dcgm_mapping_dir",
    "amd_mapping_dir",
    "job_metrics_dir",
    "state_dir",
    "gpu_map",
    "slurm_bin_dir",
)
FLAGS = {"yes": True, "true": True, "no": False, "false": False}
MAX_LOCK_TIMEOUT = 300.0
# Every file the scripts read is one they write, a few hundred bytes; anything larger was put there by someone else.
FILE_LIMIT = 1 << 16
# Modes: what the exporters read is world-readable; what only the scripts read is root's alone.
PUBLIC, PRIVATE = 0o755, 0o700

DIGITS = "0123456789"
METRIC_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:" + DIGITS)
JOB_INFO_PREFIX, JOB_INFO_SUFFIX = "hpcobs_job_", ".prom"
# `scontrol show job -o` prints its fields in a fixed order, free text unquoted: the job name, then the owner
# fields (Slurm's slurm_sprint_job_info), comment and working directory further on. The owner fields are found by
# their whole sequence with the job's own uid; a free text that imitates that sequence makes the record ambiguous,
# and it is refused rather than guessed.
SCONTROL_JOB = r"JobId=([0-9]+) (?:(?:ArrayJobId|ArrayTaskId|HetJobId|HetJobOffset)=\S* )*JobName="
SCONTROL_OWNER = (
    r" UserId=\S*\({uid}\) GroupId=\S*\([0-9]+\) MCS_label=\S* Priority=[0-9]+ Nice=-?[0-9]+ "
    r"Account=(\S*) QOS=(\S*)(?=\s|$)"
)

# The job-info labels after hpc_job, in the contract's order (hpcobs/exporters/catalogue/job_info.yaml).
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
        self.job_metrics_dir = values["job_metrics_dir"]
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


def config_path() -> str:
    """hpcobs-slurm.conf beside the scripts, whatever the environment: root runs them, and a path from the
    environment would let whoever sets it choose root's configuration, and with it the commands root runs."""
    return os.path.join(HERE, CONFIG_NAME)


def read_config(path: str) -> dict[str, str]:
    """`key = value` lines; blank lines and lines starting with '#' are skipped; a missing key keeps its default.
    The file, the scripts and every directory above them must be writable by root alone."""
    try:
        for what in (path, os.path.realpath(__file__)):
            check_trusted(what, "file")
        data = read_small(path)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        text = data.decode("utf-8")
    except SetupError as error:
        raise SetupError(f"config error: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise SetupError(
            f"config error: {path}: cannot be read ({reason(error)}); fix: install {CONFIG_NAME} beside the scripts"
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


def scontrol_details(bin_dir: str, job_id: str, uid: str) -> dict[str, str]:
    """Account, job name and QOS from `scontrol show job -o` (one slurmctld round trip). The output is read whole,
    never split into lines: a job name may hold any separator, newlines and U+2028 included."""
    import re
    import subprocess

    command = [trusted_command(bin_dir, "scontrol"), "show", "job", "-o", job_id]
    try:
        # Bytes, decoded by hand: text mode would turn a carriage return in the job name into a newline.
        done = subprocess.run(command, capture_output=True, timeout=SLURM_COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupError(f"{command[0]}: {reason(error)}; fix: set slurm_bin_dir, or query_scontrol = no") from None
    output = done.stdout.decode(errors="replace")
    start = re.match(SCONTROL_JOB, output)
    if done.returncode or not start or start[1] != job_id:
        problem = (done.stderr.decode(errors="replace").strip().splitlines() or ["the job is not in its output"])[0]
        raise SetupError(f"scontrol show job {job_id}: {problem}; fix: check slurmctld, or set query_scontrol = no")
    owner_pattern = SCONTROL_OWNER.format(uid=uid if is_number(uid) else "[0-9]+")
    owners = list(re.finditer(owner_pattern, output[start.end() :]))
    if len(owners) != 1:
        raise SetupError(
            f"scontrol show job {job_id}: {len(owners)} sequences of owner fields, where a job has one: a job name, "
            "comment or directory imitates them, so job name and QOS are left empty; fix: none needed (only this "
            "job's labels are affected), or rename the job"
        )
    owner = owners[0]
    return {
        "job_name": output[start.end() : start.end() + owner.start()],
        "account": _set_or_empty(owner[1]),
        "qos": _set_or_empty(owner[2]),
    }


def _set_or_empty(value: str) -> str:
    return "" if value == "(null)" else value


def read_gpu_map(path: str) -> dict[int, str]:
    """A site's table from Slurm GPU ids to exporter GPU names: lines `<slurm id> <exporter gpu>`, '#' comments."""
    table: dict[int, str] = {}
    try:
        check_trusted(path, "file")
        data = read_small(path)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    except SetupError as error:
        raise SetupError(f"gpu_map: {error}") from None
    except OSError as error:
        raise SetupError(f"gpu_map: {path}: {reason(error)}; fix: write the file or leave gpu_map empty") from None
    for number, raw in enumerate(data.decode(errors="replace").split("\n"), start=1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2 or not is_number(fields[0]) or not is_dcgm_name(fields[1]):
            raise SetupError(
                f"gpu_map: {path}: line {number}: {raw.strip()!r} is not '<slurm gpu id> <exporter gpu>'; "
                "fix: write e.g. '4 1.2' (Slurm GPU 4 is GPU 1, GPU instance 2)"
            )
        table[int(fields[0])] = fields[1]
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


def check_trusted(path: str, kind: str) -> None:
    """Refuse `path` (a "file" or a "directory") unless it, and every directory above it, can be changed by root
    (or the user running this) alone: where another user can write, they can plant links, FIFOs and files under
    the names root reads, writes or runs. A sticky directory above, such as /tmp, is allowed: there no user can
    rename or remove what another owns."""
    real = os.path.realpath(path)
    status = os.stat(real)
    if not (stat.S_ISDIR if kind == "directory" else stat.S_ISREG)(status.st_mode):
        raise SetupError(f"{real}: not a {kind}; fix: remove it, or set the configuration to a {kind} root owns")
    if status.st_uid not in (0, os.geteuid()):
        raise SetupError(f"{real}: owned by uid {status.st_uid}, not root; fix: chown root: {real}")
    if status.st_mode & 0o022:
        raise SetupError(f"{real}: writable by others than root (mode {_mode(status)}); fix: chmod go-w {real}")
    parent = real
    while parent != "/":
        parent = os.path.dirname(parent)
        status = os.stat(parent)
        if status.st_mode & 0o022 and not status.st_mode & stat.S_ISVTX:
            raise SetupError(
                f"{real}: in {parent}, writable by others than its owner (mode {_mode(status)}); "
                f"fix: chmod go-w {parent}, or move the {kind} to a directory only root writes"
            )


def _mode(status: os.stat_result) -> str:
    return f"{stat.S_IMODE(status.st_mode):04o}"


# The directories already checked by this process, with the mode they were given.
_CHECKED: set[str] = set()


def trusted_directory(path: str, mode: int = PUBLIC) -> str:
    """`path`, created if missing (the directories usually live on /run, empty after a boot) and checked once by
    `check_trusted`. A PRIVATE directory is made so when it was not (an older installation's state directory)."""
    if path not in _CHECKED:
        os.makedirs(path, mode=mode, exist_ok=True)
        check_trusted(path, "directory")
        if mode == PRIVATE and stat.S_IMODE(os.stat(path).st_mode) != PRIVATE:
            os.chmod(path, PRIVATE)
        _CHECKED.add(path)
    return path


def trusted_command(bin_dir: str, name: str) -> str:
    """The path of a Slurm command root may run: checked by `check_trusted`, as its directory."""
    path = os.path.join(bin_dir, name)
    try:
        check_trusted(path, "file")
    except OSError as error:
        raise SetupError(f"{path}: {reason(error)}; fix: set slurm_bin_dir in {CONFIG_NAME}") from None
    return path


class Lock:
    """An exclusive flock on the state directory's lock file, given up after `timeout` seconds of waiting. The
    state directory is root's alone (PRIVATE): no other user can open the file, so none can hold the lock."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self.descriptor = -1

    def __enter__(self) -> Lock:
        trusted_directory(os.path.dirname(self.path), PRIVATE)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        self.descriptor = _open(self.path, flags, 0o600)
        try:
            status = os.fstat(self.descriptor)
            _check_regular(self.path, status, 0)
            if status.st_mode & 0o077:
                os.fchmod(self.descriptor, 0o600)
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return self
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SetupError(
                            f"{self.path}: still locked after {self.timeout:g}s; fix: find its holder "
                            f"(fuser {self.path})"
                        ) from None
                    time.sleep(0.005)
        except BaseException:
            os.close(self.descriptor)
            raise

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.descriptor)


def _open(path: str, flags: int, mode: int = 0o600) -> int:
    """os.open, a link at `path` told as the problem it is (O_NOFOLLOW refuses it with ELOOP)."""
    try:
        return os.open(path, flags, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise SetupError(f"{path}: a symbolic link; fix: remove it (the scripts never use links)") from None
        raise


def _check_regular(path: str, status: os.stat_result, limit: int) -> None:
    """Refuse anything but a regular file of one name (a hard link could be any file), owned by root or this
    user, of at most `limit` bytes when a limit is given."""
    if not stat.S_ISREG(status.st_mode):
        raise SetupError(f"{path}: not a regular file; fix: remove it (the scripts write regular files only)")
    if status.st_nlink != 1 or status.st_uid not in (0, os.geteuid()):
        raise SetupError(f"{path}: a hard link or another user's file; fix: remove it (the scripts write their own)")
    if limit and status.st_size > limit:
        raise SetupError(f"{path}: {status.st_size} bytes, more than the scripts write ({limit}); fix: remove it")


def read_small(path: str) -> bytes | None:
    """The bytes of the file at `path`, None when there is none. Opened without following a link and without
    waiting (a FIFO or a device would hold the lock forever), then refused unless it is a small regular file."""
    try:
        descriptor = _open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        _check_regular(path, os.fstat(descriptor), FILE_LIMIT)
        chunks = []
        while chunk := os.read(descriptor, FILE_LIMIT + 1):
            chunks.append(chunk)
            if sum(map(len, chunks)) > FILE_LIMIT:
                raise SetupError(f"{path}: grew past {FILE_LIMIT} bytes while read; fix: remove it")
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def write_file(path: str, text: str, mode: int = 0o644) -> None:
    """Replace `path` at once: a new file under a random name in the same directory, which no reader picks up,
    then a rename. Nothing is written when the file already holds `text`.

    O_EXCL and the random name: the file created is always a new one of root's, never one prepared in advance.
    No fsync: the rename alone shows readers a whole file, and after a crash every one of these files is stale
    (the jobs are gone) and swept; an fsync per file, on a node whose disk a job is filling with checkpoints,
    could hold up the job's start for seconds."""
    data = text.encode()
    if read_small(path) == data:
        return
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.hpcobs-{os.urandom(8).hex()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    descriptor = os.open(temporary, flags, mode)
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
    text = (read_small(path) or b"").decode(errors="replace")
    return [line.strip() for line in text.split("\n") if line.strip()]


def _json(path: str) -> dict | None:
    """The JSON object in a file; None when the file is missing or holds no JSON object (then it is not ours)."""
    data = read_small(path)
    if data is None:
        return None
    import json

    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _names(directory: str, accept: Callable[[str], bool]) -> list[str]:
    """The directory's entries whose name `accept`s, sorted: one listing, whatever reads them next."""
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if accept(entry.name))


def set_dcgm_lines(directory: str, job_id: str, gpus: list[str]) -> None:
    """Make `job_id` a line of exactly the mapping files named in `gpus` (creating them), leaving other jobs'
    lines in place. Files are emptied, never removed (see the module doc)."""
    for name in sorted(set(_names(trusted_directory(directory), is_dcgm_name)) | set(gpus)):
        path = os.path.join(directory, name)
        lines = _lines(path)
        if name in gpus and job_id not in lines:
            write_file(path, "".join(f"{line}\n" for line in [*lines, job_id]))
        elif name not in gpus and job_id in lines:
            write_file(path, "".join(f"{line}\n" for line in lines if line != job_id))


def drop_dcgm_lines(directory: str, jobs: set[str]) -> None:
    """Remove the lines of `jobs` from every mapping file: one pass over the directory, whatever the number."""
    for name in _names(trusted_directory(directory), is_dcgm_name):
        path = os.path.join(directory, name)
        lines = _lines(path)
        if not jobs.isdisjoint(lines):
            write_file(path, "".join(f"{line}\n" for line in lines if line not in jobs))


def set_amd_files(directory: str, job: dict, gpus: list[str], others: list[dict]) -> None:
    """Give the job record `job` the AMD files of `gpus`; a file of the job on another GPU passes to the newest of
    the `others` (job records) holding that GPU, or is removed when none does."""
    for name in sorted(set(_names(trusted_directory(directory), is_number)) | set(gpus)):
        path = os.path.join(directory, name)
        if name in gpus:
            write_file(path, json_text(amd_payload(job, name)))
        elif _amd_holder(path) == job["job"]:
            _pass_amd_file(path, name, others)


def release_amd_files(directory: str, jobs: set[str], heirs: list[dict]) -> None:
    """Pass every AMD file held by one of `jobs` to the newest of `heirs` on its GPU, or remove it: one pass."""
    for name in _names(trusted_directory(directory), is_number):
        path = os.path.join(directory, name)
        if _amd_holder(path) in jobs:
            _pass_amd_file(path, name, heirs)


def _amd_holder(path: str) -> str:
    return str((_json(path) or {}).get("SLURM_JOB_ID", ""))


def _pass_amd_file(path: str, gpu: str, heirs: list[dict]) -> None:
    holders = [record for record in heirs if gpu in record["amd"]]
    if holders:
        newest = max(holders, key=lambda record: (record["started"], int(record["job"])))
        write_file(path, json_text(amd_payload(newest, gpu)))
    else:
        _remove(path)


def make_job_metrics_dir(base: str, job_id: str, environ: dict[str, str]) -> None:
    """`<base>/<job id>`, owned by the job's user: the one place the job writes metrics (docs/contracts.md), apart
    from every file root writes. Readable by all, for job-metrics, which serves it as an unprivileged user."""
    uid, gid = environ.get("SLURM_JOB_UID", ""), environ.get("SLURM_JOB_GID", "")
    if not (is_number(uid) and is_number(gid)):
        raise SetupError(
            f"SLURM_JOB_UID, SLURM_JOB_GID: {uid!r}, {gid!r} are not ids; fix: run this as slurmd's Prolog, which "
            "sets them, or leave job_metrics_dir empty"
        )
    path = os.path.join(trusted_directory(base), job_id)
    try:  # noqa: SIM105 (contextlib.suppress would import contextlib at every job start)
        os.mkdir(path, PUBLIC)
    except FileExistsError:
        pass
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SetupError(f"{path}: not a directory; fix: remove it") from None
        raise
    try:
        os.fchown(descriptor, int(uid), int(gid))
    finally:
        os.close(descriptor)


def remove_job_metrics(base: str, jobs: set[str]) -> None:
    """Remove the metrics directories of `jobs` with everything in them. Their users wrote them: every entry is
    removed through its directory's descriptor, never by a path, so a link planted inside leads nowhere."""
    descriptor = os.open(trusted_directory(base), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for job_id in sorted(jobs, key=int):
            _remove_entry(descriptor, job_id)
    finally:
        os.close(descriptor)


def _remove_entry(parent: int, name: str) -> None:
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        os.unlink(name, dir_fd=parent)
        return
    try:
        with os.scandir(descriptor) as entries:
            names = [entry.name for entry in entries]
        for entry in names:
            _remove_entry(descriptor, entry)
    finally:
        os.close(descriptor)
    os.rmdir(name, dir_fd=parent)


def _record_path(settings: Settings, job_id: str) -> str:
    return os.path.join(trusted_directory(settings.records_dir, PRIVATE), f"{job_id}.json")


def _record_ids(settings: Settings) -> list[str]:
    names = _names(trusted_directory(settings.records_dir, PRIVATE), lambda name: name.endswith(".json"))
    return [job_id for job_id in (name.removesuffix(".json") for name in names) if is_number(job_id)]


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
        """step(*args), or None after noting its problem, whatever it was."""
        try:
            return step(*args)
        except SetupError as error:
            self.problems.append(f"{what}: {error}")
        except OSError as error:
            self.problems.append(
                f"{what}: {error.filename or ''}: {reason(error)}; fix: check that the directory set in "
                f"{CONFIG_NAME} is on a writable filesystem and root may write there"
            )
        except Exception as error:  # a bug, or what no check foresaw: the next step still runs
            self.problems.append(f"{what}: internal error: {type(error).__name__}: {error}; fix: report this line")
        return None


def reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def prolog(settings: Settings, environ: dict[str, str]) -> list[str]:
    """Write the job's files; the problems met, one line each."""
    job_id = job_id_from(environ)
    steps = Steps()
    owner = owner_from(environ)
    if settings.query_scontrol and not all(owner[key] for key in ("account", "job_name", "qos")):
        uid = environ.get("SLURM_JOB_UID", "")
        queried = steps.run("scontrol", scontrol_details, settings.slurm_bin_dir, job_id, uid) or {}
        owner.update({key: owner[key] or value for key, value in queried.items()})
    owner["job_name"] = owner["job_name"][:JOB_NAME_LIMIT]
    slurm_gpus = steps.run("GPUs", slurm_gpu_ids, environ.get("SLURM_JOB_GPUS", "")) or []
    dcgm, amd = steps.run("GPU names", exporter_gpus, settings, slurm_gpus) or ([], [])
    with Lock(settings.lock_path, settings.lock_timeout):
        # A rerun keeps the first start time, so that it rewrites nothing: the prolog is idempotent.
        previous = steps.run("job record", record_of, settings, job_id)
        started = previous["started"] if previous else int(time.time())
        record = {"job": job_id, **owner, "slurm_gpus": slurm_gpus, "dcgm": dcgm, "amd": amd, "started": started}
        steps.run("job record", write_file, _record_path(settings, job_id), json_text(record), 0o600)
        if settings.textfile_dir:
            steps.run("job info", write_job_info, settings.textfile_dir, settings.metric_prefix, record)
        if settings.job_metrics_dir:
            steps.run("job metrics", make_job_metrics_dir, settings.job_metrics_dir, job_id, environ)
        if settings.dcgm_mapping_dir:
            steps.run("dcgm mapping", set_dcgm_lines, settings.dcgm_mapping_dir, job_id, dcgm)
        if settings.amd_mapping_dir:
            others = steps.run("AMD mapping", amd_neighbours, settings, job_id) or []
            steps.run("AMD mapping", set_amd_files, settings.amd_mapping_dir, record, amd, others)
    return steps.problems


def write_job_info(directory: str, prefix: str, record: dict) -> None:
    write_file(
        os.path.join(trusted_directory(directory), f"{JOB_INFO_PREFIX}{record['job']}{JOB_INFO_SUFFIX}"),
        job_info_text(prefix, record),
    )


def remove_jobs(settings: Settings, jobs: set[str], heirs: list[dict]) -> list[str]:
    """Empty the files of `jobs` (the caller holds the lock), passing their AMD files to the newest of `heirs` on
    the same GPU: one pass over each directory, whatever the number of jobs. The records go last and only when
    all else worked, so that a failure leaves them for the sweep."""
    steps = Steps()
    if settings.dcgm_mapping_dir:
        steps.run("dcgm mapping", drop_dcgm_lines, settings.dcgm_mapping_dir, jobs)
    if settings.amd_mapping_dir:
        steps.run("AMD mapping", release_amd_files, settings.amd_mapping_dir, jobs, heirs)
    if settings.textfile_dir:
        steps.run("job info", remove_job_info, settings.textfile_dir, jobs)
    if settings.job_metrics_dir:
        steps.run("job metrics", remove_job_metrics, settings.job_metrics_dir, jobs)
    if not steps.problems:
        for job_id in sorted(jobs, key=int):
            steps.run("job record", _remove, _record_path(settings, job_id))
    return steps.problems


def remove_job_info(directory: str, jobs: set[str]) -> None:
    for name in _names(trusted_directory(directory), lambda name: job_of_info_file(name) in jobs):
        _remove(os.path.join(directory, name))


def epilog(settings: Settings, environ: dict[str, str]) -> list[str]:
    """Empty the job's files; the problems met. Slurm's GPU list is not needed: every file is checked for the job."""
    job_id = job_id_from(environ)
    with Lock(settings.lock_path, settings.lock_timeout):
        steps = Steps()
        heirs = steps.run("AMD mapping", amd_neighbours, settings, job_id) or []
        return steps.problems + remove_jobs(settings, {job_id}, heirs)


def jobs_with_files(settings: Settings) -> set[str]:
    """Every job id with a record, a mapping line, an AMD file, a job-info file or a metrics directory here."""
    jobs = set(_record_ids(settings))
    if settings.dcgm_mapping_dir:
        for name in _names(trusted_directory(settings.dcgm_mapping_dir), is_dcgm_name):
            jobs.update(filter(is_number, _lines(os.path.join(settings.dcgm_mapping_dir, name))))
    if settings.amd_mapping_dir:
        for name in _names(trusted_directory(settings.amd_mapping_dir), is_number):
            holder = _amd_holder(os.path.join(settings.amd_mapping_dir, name))
            if is_number(holder):
                jobs.add(holder)
    if settings.textfile_dir:
        jobs.update(filter(None, map(job_of_info_file, _names(trusted_directory(settings.textfile_dir), bool))))
    if settings.job_metrics_dir:
        jobs.update(_names(trusted_directory(settings.job_metrics_dir), is_number))
    return jobs


def jobs_on_node(bin_dir: str, node: str) -> set[str]:
    """The ids of the jobs Slurm has on the node in any state before the end of their epilog (squeue's default
    states include COMPLETING)."""
    import subprocess

    command = [trusted_command(bin_dir, "squeue"), "--noheader", "--nodelist", node, "--format", "%A"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupError(f"{command[0]}: {reason(error)}; fix: set slurm_bin_dir in {CONFIG_NAME}") from None
    ids = done.stdout.split()
    if done.returncode or not all(map(is_number, ids)):
        problem = (done.stderr.strip().splitlines() or ["output is not a list of job ids"])[0]
        raise SetupError(f"squeue --nodelist {node}: {problem}; fix: check slurmctld and the node name (--node)")
    return set(ids)


def sweep(settings: Settings, node: str) -> tuple[list[str], list[str]]:
    """Empty the files of every job Slurm no longer has on `node`: (job ids swept, problems).

    The lock is taken before asking Slurm: a prolog that wrote before that ran for a job Slurm already listed,
    and one still waiting for the lock writes after the sweep. Each directory is listed a fixed number of times,
    whatever the number of jobs: the sweep's time is linear in the files it finds (benchmarks/prolog.py)."""
    with Lock(settings.lock_path, settings.lock_timeout):
        running = jobs_on_node(settings.slurm_bin_dir, node)
        gone = jobs_with_files(settings) - running
        # A swept job's AMD files pass only to a job still running, never to another swept one.
        heirs = [record for record in amd_neighbours(settings, "") if record["job"] in running]
        problems = remove_jobs(settings, gone, heirs) if gone else []
    return sorted(gone, key=int), problems


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
    path = config_path()
    strict = False
    try:
        values = read_config(path)
        strict = strict_requested(values)
        settings = Settings(path, values)
        problems = (prolog if action == "prolog" else epilog)(settings, environ)
    except SetupError as error:
        problems = [str(error)]
    except OSError as error:
        problems = [f"{error.filename or ''}: {reason(error)}; fix: check the directories set in {path}"]
    except Exception as error:  # a bug here must not fail jobs either
        problems = [f"internal error: {type(error).__name__}: {error}; fix: report it with this line"]
    if problems:
        report(action, environ.get("SLURM_JOB_ID", "?"), problems)
    return 1 if problems and strict else 0


def by_hand(action: str, arguments: list[str]) -> int:
    """The administrator's commands: exit 0 when all went well, 1 when some job could not be swept, 2 on a
    configuration, directory or Slurm problem."""
    import argparse

    parser = argparse.ArgumentParser(prog=action, description=f"hpcobs Slurm {action} (docs/slurm.md)")
    parser.add_argument("--check", action="store_true", help="check the configuration and directories, print values")
    if action == "epilog":
        parser.add_argument("--sweep", action="store_true", help="empty the files of jobs Slurm no longer has here")
        short_hostname = os.uname().nodename.split(".")[0]
        parser.add_argument("--node", default=short_hostname, help="Slurm's name of this node (default: %(default)s)")
    options = parser.parse_args(arguments)
    if not options.check and not getattr(options, "sweep", False):
        parser.error("give --check" + (" or --sweep" if action == "epilog" else ""))
    path = config_path()
    try:
        settings = Settings(path, read_config(path))
        if options.check:
            check_directories(settings)
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


def check_directories(settings: Settings) -> None:
    """What a prolog would refuse, found before a job meets it: every configured directory (created if missing),
    the GPU map and the Slurm commands the configuration makes root run."""
    for key in ("textfile_dir", "dcgm_mapping_dir", "amd_mapping_dir", "job_metrics_dir"):
        if settings.values[key]:
            trusted_directory(settings.values[key])
    trusted_directory(settings.state_dir, PRIVATE)
    trusted_directory(settings.records_dir, PRIVATE)
    if settings.gpu_map:
        read_gpu_map(settings.gpu_map)
    if settings.query_scontrol:
        trusted_command(settings.slurm_bin_dir, "scontrol")
