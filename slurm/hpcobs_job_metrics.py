"""hpcobs job-metrics: serves what each job wrote into its own metrics directory, and nothing it claims of others.

The prolog gives each job `<job_metrics_dir>/<job id>`, owned by the job's user (hpcobs_slurm.py). node_exporter's
textfile collector reading those directories through a glob would serve, of two files holding the same series,
the first in path order: a job could replace another job's training series on a shared node (docs/exporters.md,
"node_exporter textfile collector"). This reader serves a sample only when its job label (`hpc_job`, the training
contract's; `slurm_job_id`, NCCL Inspector's) names the directory it was read from, and reports what it refused
per job (docs/contracts.md, "The jobs' metrics reader").

Run as an unprivileged user (`job-metrics --listen HOST:PORT`), with the prolog's configuration beside it: every
scrape reads the directories afresh, as node_exporter did. Standard library only, like the prolog.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import hpcobs_slurm

# A job must not make the node's scrape slow or large: its directory is read up to these bounds. A training job
# writes one file per rank on the node and NCCL Inspector one per GPU, each well under a megabyte.
FILE_BYTES = 1 << 20
FILES_PER_JOB = 32
# Entries of any kind a job directory may hold before it is refused whole (listing a million names takes seconds).
ENTRIES_PER_JOB = 1024
JOB_LABELS = ("hpc_job", "slurm_job_id")
TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
# The samples of a histogram or summary family carry these suffixes (the text format's naming).
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
SELF_PREFIX = "hpcobs_job_metrics_"
REFUSED_LINES = SELF_PREFIX + "refused_lines"
REFUSED_FILES = SELF_PREFIX + "refused_files"
SELF_HELP = {
    REFUSED_LINES: "Lines of a job's metrics files not served in this scrape, by reason (hpcobs job-metrics).",
    REFUSED_FILES: "Files in a job's metrics directory not read in this scrape, by reason (hpcobs job-metrics).",
}
# node_exporter's textfile collector too gives a family without HELP one naming its origin.
FALLBACK_HELP = "Metric read from a job's own metrics directory (hpcobs job-metrics)."
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*")
# The text format escapes backslash, double quote and newline in label values, backslash and newline in HELP, and
# nothing else: another escape fails `promtool check metrics` (expfmt's parser), so the line is refused.
LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\[\\"n])*)"[ \t]*(?:,|$)')
HELP_TEXT = re.compile(r"(?:[^\\]|\\[\\n])*")
ESCAPE = re.compile(r"\\(.)")
UNESCAPED = {"\\": "\\", '"': '"', "n": "\n"}


class Sample:
    """One sample line as written, with what identifies its series."""

    def __init__(self, name: str, labels: list[tuple[str, str]], value: str) -> None:
        self.name = name
        self.labels = labels  # (name, value as escaped in the file): served byte for byte
        self.value = value
        self.key = (name, frozenset((label, unescape(raw)) for label, raw in labels))

    def text(self) -> str:
        if not self.labels:
            return f"{self.name} {self.value}"
        labels = ",".join(f'{label}="{raw}"' for label, raw in self.labels)
        return f"{self.name}{{{labels}}} {self.value}"


class Refusals:
    """What one job's directory had that was not served: lines and files, by reason."""

    def __init__(self) -> None:
        self.lines: Counter[str] = Counter()
        self.files: Counter[str] = Counter()


def unescape(raw: str) -> str:
    return ESCAPE.sub(lambda match: UNESCAPED[match[1]], raw)


def parse_sample(line: str) -> Sample | None:
    """The sample on `line`, or None when the line is not one the text format allows without a timestamp
    (node_exporter's textfile collector refuses timestamps too)."""
    match = SAMPLE.fullmatch(line)
    if not match or match[4] is not None or "_" in match[3]:
        return None
    try:
        float(match[3])
    except ValueError:
        return None
    labels: list[tuple[str, str]] = []
    text = match[2] or ""
    position = 0
    while text[position:].strip():
        label = LABEL.match(text, position)
        if not label or label[1].startswith("__"):
            return None
        labels.append((label[1], label[2]))
        position = label.end()
    if len({name for name, _ in labels}) != len(labels):
        return None
    return Sample(match[1], labels, match[3])


class JobFiles:
    """The parsed files of one job directory: samples and HELP/TYPE lines, in file-name then line order."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.samples: list[Sample] = []
        self.helps: dict[str, set[str]] = {}
        self.types: dict[str, set[str]] = {}
        self.refusals = Refusals()

    def add(self, text: str) -> None:
        for raw in text.split("\n"):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                self._metadata(line)
                continue
            sample = parse_sample(line)
            if sample is None:
                self.refusals.lines["malformed"] += 1
            else:
                self.samples.append(sample)

    def _metadata(self, line: str) -> None:
        words = line[1:].split(None, 2)
        if len(words) < 2 or words[0] not in ("HELP", "TYPE"):
            return  # a comment
        name, rest = words[1], words[2] if len(words) == 3 else ""
        valid = rest in TYPES if words[0] == "TYPE" else HELP_TEXT.fullmatch(rest)
        if not NAME.fullmatch(name) or not valid:
            self.refusals.lines["malformed"] += 1
        else:
            (self.helps if words[0] == "HELP" else self.types).setdefault(name, set()).add(rest)

    def family_of(self, name: str) -> str:
        """The family a sample name belongs to, by this job's TYPE lines: a histogram's `x_bucket` is `x`'s."""
        for kind, suffixes in SUFFIXES.items():
            for suffix in suffixes:
                base = name.removesuffix(suffix)
                if base != name and self.types.get(base) == {kind}:
                    return base
        return name

    def served(self) -> list[tuple[str, Sample]]:
        """(family, sample) of every sample served: the job's own, once, in a family the job declares one way."""
        seen: set[tuple] = set()
        kept = []
        for sample in self.samples:
            family = self.family_of(sample.name)
            jobs = [unescape(raw) for label, raw in sample.labels if label in JOB_LABELS]
            if family.startswith(SELF_PREFIX):
                reason = "reserved_name"
            elif not jobs or any(job != self.job_id for job in jobs):
                reason = "other_job"
            elif len(self.types.get(family, ())) > 1 or len(self.helps.get(family, ())) > 1:
                reason = "conflicting_metadata"
            elif sample.key in seen:
                reason = "duplicate"
            else:
                seen.add(sample.key)
                kept.append((family, sample))
                continue
            self.refusals.lines[reason] += 1
        return kept


def read_job(base: int, job_id: str) -> JobFiles:
    """The `*.prom` files of the job's directory, opened through descriptors without following links or waiting."""
    job = JobFiles(job_id)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        directory = os.open(job_id, flags, dir_fd=base)
    except FileNotFoundError:
        return job  # the epilog removed it since the listing: the job ended
    except OSError:
        # With O_DIRECTORY, Linux refuses a link with ENOTDIR, as it refuses a file: lstat tells them apart.
        try:
            link = stat.S_ISLNK(os.stat(job_id, dir_fd=base, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return job
        job.refusals.files["link" if link else "unreadable"] += 1
        return job
    try:
        names = []
        with os.scandir(directory) as entries:
            for count, entry in enumerate(entries, start=1):
                if count > ENTRIES_PER_JOB:
                    job.refusals.files["too_many"] += 1
                    return job
                if entry.name.endswith(".prom"):
                    names.append(entry.name)
        names.sort()
        if len(names) > FILES_PER_JOB:
            job.refusals.files["too_many"] += len(names) - FILES_PER_JOB
        for name in names[:FILES_PER_JOB]:
            text, refusal = read_file(directory, name)
            if refusal:
                job.refusals.files[refusal] += 1
            else:
                job.add(text)
    finally:
        os.close(directory)
    return job


def read_file(directory: int, name: str) -> tuple[str, str]:
    """(text, "") of a regular file of at most FILE_BYTES of UTF-8, else ("", the reason it is refused)."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
    except FileNotFoundError:
        return "", ""  # removed since the listing (the epilog): nothing to serve, nothing refused
    except OSError as error:
        return "", "link" if error.errno == errno.ELOOP else "unreadable"
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            return "", "not_regular"
        if status.st_size > FILE_BYTES:
            return "", "too_large"
        data = os.read(descriptor, FILE_BYTES + 1)
        if len(data) > FILE_BYTES:
            return "", "too_large"
        return data.decode(), ""
    except (OSError, UnicodeDecodeError):
        return "", "unreadable"
    finally:
        os.close(descriptor)


def exposition(base_path: str) -> str:
    """The text served for one scrape of `base_path` (the configuration's job_metrics_dir)."""
    try:
        hpcobs_slurm.check_trusted(base_path, "directory")
    except FileNotFoundError:
        return ""  # no job has run since boot: the prolog makes the directory
    base = os.open(base_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(base) as entries:
            job_ids = sorted((entry.name for entry in entries if hpcobs_slurm.is_number(entry.name)), key=int)
        jobs = [read_job(base, job_id) for job_id in job_ids]
    finally:
        os.close(base)
    families: dict[str, list[Sample]] = {}
    helps: dict[str, set[str]] = {}
    types: dict[str, set[str]] = {}
    for job in jobs:
        for family, sample in job.served():
            families.setdefault(family, []).append(sample)
            helps.setdefault(family, set()).update(job.helps.get(family, {""}))
            types.setdefault(family, set()).update(job.types.get(family, {"untyped"}))
    # Jobs that disagree on a family's HELP or TYPE (none counts as one) each keep their samples; the family gets
    # neither's line, so that no job's metadata is served for another's series. Untyped, each sample name is a
    # family of its own (a histogram's `_bucket` and `_count` then are two).
    output: dict[str, tuple[str, str, list[Sample]]] = {}
    for family, samples in families.items():
        help_text = next(iter(helps[family])) if len(helps[family]) == 1 else ""
        kind = next(iter(types[family])) if len(types[family]) == 1 else "untyped"
        if kind != "untyped":
            output[family] = (help_text, kind, samples)
            continue
        for sample in samples:
            text = help_text if sample.name == family else ""
            output.setdefault(sample.name, (text, kind, []))[2].append(sample)
    lines = []
    for family, (help_text, kind, samples) in output.items():
        lines.append(f"# HELP {family} {help_text or FALLBACK_HELP}")
        if kind != "untyped":
            lines.append(f"# TYPE {family} {kind}")
        lines += [sample.text() for sample in samples]
    for name, counts in (
        (REFUSED_LINES, [job.refusals.lines for job in jobs]),
        (REFUSED_FILES, [job.refusals.files for job in jobs]),
    ):
        refusals = [
            f'{name}{{hpc_job="{job.job_id}",reason="{reason}"}} {count}'
            for job, counted in zip(jobs, counts)
            for reason, count in sorted(counted.items())
        ]
        if refusals:
            lines += [f"# HELP {name} {SELF_HELP[name]}", f"# TYPE {name} gauge", *refusals]
    return "".join(f"{line}\n" for line in lines)


class Handler(BaseHTTPRequestHandler):
    """GET /metrics: one fresh reading of the jobs' directories. Nothing else is served."""

    base_path = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        try:
            body, status, content_type = exposition(self.base_path).encode(), 200, CONTENT_TYPE
        except (hpcobs_slurm.SetupError, OSError) as error:
            problem = f"job-metrics: {hpcobs_slurm.reason(error) if isinstance(error, OSError) else error}"
            print(problem, file=sys.stderr, flush=True)
            body, status, content_type = f"{problem}\n".encode(), 500, "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        """Quiet: a scrape every few seconds is no news; problems are printed where they happen."""


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a scrape left hanging never keeps the reader from stopping


def listen_address(text: str) -> tuple[str, int]:
    """HOST:PORT (an empty host: every address; [v6] in brackets) as http.server takes it."""
    host, colon, port = text.rpartition(":")
    if not colon or not hpcobs_slurm.is_number(port) or not 0 < int(port) < 65536:
        raise hpcobs_slurm.SetupError(f"--listen: {text!r} is not HOST:PORT; fix: write e.g. --listen :9500")
    return host.removeprefix("[").removesuffix("]"), int(port)


def main(arguments: list[str]) -> int:
    """Serve until stopped; exit 2 with one line on a bad flag, configuration or address."""
    import argparse

    parser = argparse.ArgumentParser(prog="job-metrics", description="hpcobs jobs' metrics reader (docs/slurm.md)")
    parser.add_argument("--listen", default=":9500", help="HOST:PORT to serve /metrics on (default: %(default)s)")
    options = parser.parse_args(arguments)
    path = hpcobs_slurm.config_path()
    try:
        address = listen_address(options.listen)
        settings = hpcobs_slurm.Settings(path, hpcobs_slurm.read_config(path))
        if not settings.job_metrics_dir:
            raise hpcobs_slurm.SetupError(
                f"config error: {path}: job_metrics_dir: empty; fix: set it to the prolog's jobs' directory"
            )
        Handler.base_path = settings.job_metrics_dir
        Server.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        server = Server(address, Handler)
    except hpcobs_slurm.SetupError as error:
        print(f"job-metrics: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"job-metrics: --listen {options.listen}: {hpcobs_slurm.reason(error)}", file=sys.stderr)
        return 2
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
