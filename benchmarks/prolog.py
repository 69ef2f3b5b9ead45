"""Benchmark of the Slurm prolog and epilog (not a test): wall time of each run, as slurmd would start them.

    python benchmarks/prolog.py [--runs 1000] [--gpus 8] [--dir /run/...]
    python benchmarks/prolog.py --sweep 1000,2000,4000,8000


Each run is the real `slurm/prolog` or `slurm/epilog` in a fresh process (the interpreter's start-up included),
with the environment slurmd gives it, for a job holding `--gpus` GPUs of a node where another job already shares
its first GPU, against directories under `--dir` (a temporary directory by default; give one on tmpfs to measure
a /run installation). Prolog and epilog alternate, job after job, so every run does its full work. The table
gives the median, 95th and 99th percentile and the maximum, next to a bare `python3 -IS -c pass`: the floor
that no Python prolog goes below. Results go to docs/slurm.md by hand, with the machine they were measured on.

`--sweep N,...` measures `epilog --sweep` instead, on a node where N jobs that Slurm no longer has left a job-info
file each: its time must grow linearly with N (each directory is listed a fixed number of times), not with N².
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"


def timed(command: list[str], environment: dict[str, str], stdout: bool = False) -> float:
    """Seconds `command` took; it must succeed silently (but on stdout, when allowed)."""
    began = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    if done.returncode or done.stderr or (done.stdout and not stdout):
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return elapsed


def summary(name: str, seconds: list[float]) -> str:
    milliseconds = sorted(value * 1000 for value in seconds)
    cuts = statistics.quantiles(milliseconds, n=100)
    return (
        f"| {name} | {len(milliseconds)} | {statistics.median(milliseconds):.1f} | {cuts[94]:.1f} | {cuts[98]:.1f} "
        f"| {milliseconds[-1]:.1f} |"
    )


def install(root: Path, settings: dict[str, Path | str]) -> Path:
    """The scripts installed under `root` as docs/slurm.md installs them, with `settings` beside them."""
    scripts = root / "hpcobs"
    scripts.mkdir(mode=0o755, parents=True)
    for name in ("prolog", "epilog", "hpcobs_slurm.py"):
        shutil.copy(ROOT / "slurm" / name, scripts / name)
    (scripts / "hpcobs-slurm.conf").write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
    return scripts


def node_environment(root: Path, vendor: str) -> tuple[Path, dict[str, str]]:
    """A node under `root` writing job-info files, a metrics directory per job and the mapping of `vendor` (NVIDIA:
    dcgm-exporter's, AMD: the AMD exporter's): its scripts' directory, and the environment its jobs' scripts get,
    but for the job id and GPUs."""
    mapping = {"NVIDIA": "dcgm_mapping_dir", "AMD": "amd_mapping_dir"}
    settings: dict[str, Path | str] = {"textfile_dir": root / "textfile", "state_dir": root / "state"}
    settings |= {"job_metrics_dir": root / "jobs"}
    settings |= {key: root / key if vendor == name else "" for name, key in mapping.items()}
    return install(root, settings), {
        "SLURM_JOB_UID": "1001",
        "SLURM_JOB_GID": "1001",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_ACCOUNT": "ml",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "bench",
    }


def sweep(sizes: list[int], directory: Path | None) -> None:
    """The sweep's wall time for each number of stale job-info files, and the time per file."""
    print("| stale jobs | sweep s | ms per job |\n|---|---|---|")
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="hpcobs-sweep-", dir=directory) as temporary:
            root = Path(temporary)
            (root / "bin").mkdir()
            (root / "bin" / "squeue").write_text("#!/bin/sh\ntrue\n")
            (root / "bin" / "squeue").chmod(0o755)
            scripts, _ = node_environment(root, "NVIDIA")
            config = scripts / "hpcobs-slurm.conf"
            config.write_text(config.read_text() + f"slurm_bin_dir = {root / 'bin'}\n")
            (root / "textfile").mkdir()
            for job in range(1000, 1000 + size):
                (root / "textfile" / f"hpcobs_job_{job}.prom").write_text("")
            seconds = timed([str(scripts / "epilog"), "--sweep", "--node", "n1"], {}, stdout=True)
            if any((root / "textfile").iterdir()):
                raise SystemExit("the sweep left job-info files")
            print(f"| {size} | {seconds:.2f} | {seconds / size * 1000:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="prolog runs per node, and as many epilog runs")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the benchmarked job")
    parser.add_argument("--dir", type=Path, help="where the nodes' directories go (default: a temporary one)")
    parser.add_argument("--sweep", help="comma-separated numbers of stale jobs: measure epilog --sweep instead")
    options = parser.parse_args()
    if options.sweep:
        sweep([int(size) for size in options.sweep.split(",")], options.dir)
        return
    gpus = ",".join(map(str, range(options.gpus)))
    rows: dict[str, list[float]] = {"python3 -IS -c pass": []}
    with tempfile.TemporaryDirectory(prefix="hpcobs-prolog-", dir=options.dir) as directory:
        for vendor in ("NVIDIA", "AMD"):
            scripts, slurm = node_environment(Path(directory) / vendor, vendor)
            timed([str(scripts / "prolog")], {**slurm, "SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0"})
            for job in range(2, options.runs + 2):
                environment = {**slurm, "SLURM_JOB_ID": str(job), "SLURM_JOB_GPUS": gpus}
                rows["python3 -IS -c pass"].append(timed([PYTHON, "-IS", "-c", "pass"], environment))
                for action in ("prolog", "epilog"):
                    seconds = timed([str(scripts / action)], environment)
                    rows.setdefault(f"{action}, {vendor} node", []).append(seconds)
    print(f"{options.runs} jobs of {options.gpus} GPUs per node, load average {os.getloadavg()[0]:.2f} at the end")
    print("| run | runs | median ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|")
    for name, measured in rows.items():
        print(summary(name, measured))


if __name__ == "__main__":
    main()
