"""Benchmark of the generated rule tests (not a test): promtool CPU time and rule evaluations per test file.

    python benchmarks/rule_tests.py [--out DIR] [--repeat 3]

DIR is a build made with `python build.py --no-tool-checks --out DIR` (default: one is made in a temp dir).
Each `promtool test rules` runs alone, one after the other; its CPU time (user + system, median of the
repeats) is read from the child's rusage. Evaluations: promtool evaluates every rule it loads at every
evaluation step of every test, from 0 to the test's last eval_time; the columns split them into the
tested domain's own rules, other domains' recording rules and other domains' alerting rules.
Results go to docs/benchmarks.md by hand, with the machine they were measured on.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcobs.render import load_yaml

ROOT = Path(__file__).resolve().parent.parent
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(duration: str) -> float:
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION.findall(duration))


def promtool_cpu(test_file: Path) -> float:
    """CPU seconds of one `promtool test rules` run (it must pass)."""
    process = subprocess.Popen(["promtool", "test", "rules", test_file.name], cwd=test_file.parent,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    errors = process.stderr.read().decode()
    process.stderr.close()
    if process.returncode:
        raise SystemExit(f"promtool test rules {test_file} failed:\n{errors}")
    return usage.ru_utime + usage.ru_stime


def evaluations(test_file: Path) -> dict[str, int]:
    """Rule evaluations promtool performs for this file, by kind of rule loaded."""
    spec = load_yaml(test_file.read_text(encoding="utf-8"))
    interval = seconds(spec.get("evaluation_interval", "1m"))
    steps = 0
    for test in spec["tests"]:
        times = [seconds(t["eval_time"]) for t in test.get("alert_rule_test", []) + test.get("promql_expr_test", [])]
        steps += int(max(times, default=0) // interval) + 1
    own_file = (test_file.parent.parent / "rules" / test_file.name.replace(".tests.", ".rules.")).resolve()
    counts = {"own": 0, "other recording": 0, "other alerting": 0}
    for rule_file in spec["rule_files"]:
        path = (test_file.parent / rule_file).resolve()
        own = path == own_file
        for group in load_yaml(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                kind = "own" if own else "other alerting" if "alert" in rule else "other recording"
                counts[kind] += steps
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="a --no-tool-checks build (default: build one in a temp dir)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out
        if out is None:
            out = Path(scratch) / "out"
            subprocess.run([sys.executable, str(ROOT / "build.py"), "--no-tool-checks", "--out", str(out)],
                           check=True, stdout=subprocess.DEVNULL)
        rows = []
        for test_file in sorted((out / "prometheus/tests").glob("*.tests.yaml")):
            cpu = statistics.median(promtool_cpu(test_file) for _ in range(args.repeat))
            rows.append((test_file.name, cpu, evaluations(test_file)))
    print("| test file | promtool CPU (s) | evaluations: own rules | other recording | other alerting |")
    print("|---|---|---|---|---|")
    for name, cpu, counts in sorted(rows, key=lambda row: -row[1]):
        print(f"| {name} | {cpu:.2f} | {counts['own']:,} | {counts['other recording']:,} | {counts['other alerting']:,} |")
    total = {k: sum(row[2][k] for row in rows) for k in rows[0][2]}
    print(f"| total | {sum(row[1] for row in rows):.2f} | {total['own']:,} | {total['other recording']:,} | "
          f"{total['other alerting']:,} |")


if __name__ == "__main__":
    main()
