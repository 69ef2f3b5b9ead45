"""Benchmark of the build (not a test): cold build, warm build, one threshold changed, and `check`.

    python benchmarks/build.py [--runs 3] [--before DIR]

Every run is `python build.py ...` in a fresh process, with promtool and amtool, into a temp dir; the
table gives the median of the runs' wall seconds, and their CPU seconds (the build and its tools, from the
child's rusage) after a slash:

- cold build: an empty cache directory (HPCOBS_CACHE_DIR) for each run, as on a CI runner without one;
- warm build: the cache of a previous build of the same config, nothing changed;
- one threshold changed: the warm cache, and a site file setting `thresholds.storage_full_ratio` to a value
  no run used before (the storage alerts, their rule tests and the storage dashboard change);
- check: `build.py check` of an up-to-date out/.

--before DIR measures another checkout too (same Python, same tools), each run alternating with this one's
so that both see the same load; a version without the cache reruns everything in every row. The 1-minute
load average is printed with each row: the machine is shared, so numbers taken under load are longer.
Results go to docs/benchmarks.md by hand, with the machine they were measured on.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THRESHOLD = "storage_full_ratio"


def timed(tree: Path, args: list[str], cache: Path) -> tuple[float, float]:
    """Wall and CPU seconds of `build.py args` from tree (it must succeed)."""
    began = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(tree / "build.py"), *args],
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HPCOBS_CACHE_DIR": str(cache)},
    )
    errors = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - began
    process.returncode = os.waitstatus_to_exitcode(status)
    process.stderr.close()
    if process.returncode:
        raise SystemExit(f"{tree}/build.py {' '.join(args)} failed:\n{errors}")
    return wall, usage.ru_utime + usage.ru_stime


class Tree:
    """One checkout being measured, with its scratch space: a warm cache and an up-to-date out/."""

    def __init__(self, tree: Path, scratch: Path):
        self.tree, self.scratch = tree, scratch
        self.warm_cache, self.out = scratch / "warm-cache", scratch / "out"
        timed(tree, ["--out", str(self.out)], self.warm_cache)
        self.threshold_runs = 0

    def cold(self) -> tuple[float, float]:
        return timed(self.tree, ["--out", str(self.out)], Path(tempfile.mkdtemp(dir=self.scratch)))

    def warm(self) -> tuple[float, float]:
        return timed(self.tree, ["--out", str(self.out)], self.warm_cache)

    def threshold(self) -> tuple[float, float]:
        self.threshold_runs += 1
        site = self.scratch / f"site-{self.threshold_runs}.yaml"
        site.write_text(f"thresholds:\n  {THRESHOLD}: {0.9 - self.threshold_runs / 1000}\n")
        return timed(self.tree, ["--config", str(site), "--out", str(self.scratch / "site-out")], self.warm_cache)

    def check(self) -> tuple[float, float]:
        return timed(self.tree, ["check", "--out", str(self.out)], self.warm_cache)


STEPS = {
    "cold build": ("`python build.py` (empty cache)", Tree.cold),
    "warm build": ("`python build.py` (nothing changed)", Tree.warm),
    "one threshold changed": (f"`python build.py --config site.yaml` (`{THRESHOLD}`)", Tree.threshold),
    "check": ("`python build.py check`", Tree.check),
}


def cell(samples: list[tuple[float, float]]) -> str:
    return f"{statistics.median(wall for wall, _ in samples):.1f} / {statistics.median(cpu for _, cpu in samples):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout of hpcobs to measure alongside this one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcobs-bench-") as scratch:
        trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
        for name in trees:
            (Path(scratch) / name).mkdir()
        measured = {name: Tree(tree, Path(scratch) / name) for name, tree in trees.items()}
        order = [name for name in ("before", "after") if name in measured]
        print(f"| step | command | {' | '.join(f'{name}: wall / CPU s' for name in order)} | load (1 min) |")
        print(f"|---|---|{'---|' * len(order)}---|")
        for step, (command, measure) in STEPS.items():
            samples = {name: [] for name in order}
            loads = []
            for _ in range(args.runs):
                for name in order:
                    loads.append(os.getloadavg()[0])
                    samples[name].append(measure(measured[name]))
            cells = " | ".join(cell(samples[name]) for name in order)
            print(f"| {step} | {command} | {cells} | {min(loads):.1f}-{max(loads):.1f} |", flush=True)
    print(f"\n{args.runs} runs each, medians; {os.cpu_count()} cores; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
