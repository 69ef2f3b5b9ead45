"""Benchmark of the Slurm prolog and epilog (not a test): wall time of each run, as slurmd would start them.

    python benchmarks/prolog.py [--runs 1000] [--gpus 8] [--dir /run/...]

Each run is the real `slurm/prolog` or `slurm/epilog` in a fresh process (the interpreter's start-up included),
with the environment slurmd gives it, for a job holding `--gpus` GPUs of a node where another job already shares
its first GPU, against directories under `--dir` (a temporary directory by default; give one on tmpfs to measure
a /run installation). Prolog and epilog alternate, job after job, so every run does its full work. The table
gives the median, 95th and 99th percentile and the maximum, next to a bare `python3 -IS -c pass`: the floor
that no Python prolog goes below. Results go to docs/slurm.md by hand, with the machine they were measured on.
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = "/usr/bin/python3"


def timed(command: list[str], environment: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    elapsed = time.perf_counter() - began
    if done.returncode or done.stderr:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return elapsed


def summary(name: str, seconds: list[float]) -> str:
    milliseconds = sorted(value * 1000 for value in seconds)
    cuts = statistics.quantiles(milliseconds, n=100)
    return (
        f"| {name} | {len(milliseconds)} | {statistics.median(milliseconds):.1f} | {cuts[94]:.1f} | {cuts[98]:.1f} "
        f"| {milliseconds[-1]:.1f} |"
    )


def node_environment(root: Path, vendor: str) -> dict[str, str]:
    """A node under `root` writing job-info files and the mapping of `vendor` (NVIDIA: dcgm-exporter's, AMD: the
    AMD exporter's); the environment its jobs' scripts get, but for the job id and GPUs."""
    root.mkdir()
    mapping = {"NVIDIA": "dcgm_mapping_dir", "AMD": "amd_mapping_dir"}
    settings: dict[str, Path | str] = {"textfile_dir": root / "textfile", "state_dir": root / "state"}
    settings |= {key: root / key if vendor == name else "" for name, key in mapping.items()}
    config = root / "hpcobs-slurm.conf"
    config.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
    return {
        "HPCOBS_SLURM_CONF": str(config),
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_ACCOUNT": "ml",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "bench",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="prolog runs per node, and as many epilog runs")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the benchmarked job")
    parser.add_argument("--dir", type=Path, help="where the nodes' directories go (default: a temporary one)")
    options = parser.parse_args()
    gpus = ",".join(map(str, range(options.gpus)))
    rows: dict[str, list[float]] = {"python3 -IS -c pass": []}
    with tempfile.TemporaryDirectory(prefix="hpcobs-prolog-", dir=options.dir) as directory:
        for vendor in ("NVIDIA", "AMD"):
            slurm = node_environment(Path(directory) / vendor, vendor)
            timed([str(ROOT / "slurm" / "prolog")], {**slurm, "SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0"})
            for job in range(2, options.runs + 2):
                environment = {**slurm, "SLURM_JOB_ID": str(job), "SLURM_JOB_GPUS": gpus}
                rows["python3 -IS -c pass"].append(timed([PYTHON, "-IS", "-c", "pass"], environment))
                for action in ("prolog", "epilog"):
                    seconds = timed([str(ROOT / "slurm" / action)], environment)
                    rows.setdefault(f"{action}, {vendor} node", []).append(seconds)
    print(f"{options.runs} jobs of {options.gpus} GPUs per node, load average {os.getloadavg()[0]:.2f} at the end")
    print("| run | runs | median ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|")
    for name, measured in rows.items():
        print(summary(name, measured))


if __name__ == "__main__":
    main()
