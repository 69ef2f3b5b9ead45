"""Benchmark of the simulator (not a test): samples/s and peak memory of `build.py simulate`.

    python benchmarks/simulate.py [--nodes 128 1024] [--hours 1] [--format vm]

Each run is a separate process writing to /dev/null; peak memory is its maximum resident set size.
Results go to docs/benchmarks.md by hand, with the machine they were measured on.
"""

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(nodes: int, gpus_per_node: int, hours: float, fmt: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    began = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "build.py"),
            "simulate",
            "--nodes",
            str(nodes),
            "--gpus-per-node",
            str(gpus_per_node),
            "--hours",
            str(hours),
            "--format",
            fmt,
            "--out",
            "/dev/null",
            "--seed",
            "1",
            # A benchmark measures large runs on purpose: lift the simulator's default size bound.
            "--max-samples",
            str(10**12),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.monotonic() - began
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    samples = next(
        int(w.replace(",", ""))
        for line in out.stderr.splitlines() + out.stdout.splitlines()
        for w, nxt in zip(line.split(), line.split()[1:])
        if nxt.startswith("samples")
    )
    return {
        "gpus": nodes * gpus_per_node,
        "format": fmt,
        "samples": samples,
        "seconds": seconds,
        "samples_per_second": samples / seconds,
        "peak_mib": max(peak_kib, before) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--format", default="vm")
    args = parser.parse_args()
    print("| GPUs | format | samples | seconds | samples/s | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for nodes in args.nodes:
        r = run(nodes, args.gpus_per_node, args.hours, args.format)
        print(
            f"| {r['gpus']:,} | {r['format']} | {r['samples']:,} | {r['seconds']:.1f} | "
            f"{r['samples_per_second']:,.0f} | {r['peak_mib']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
