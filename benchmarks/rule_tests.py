"""Benchmark of the generated rule tests (not a test): promtool CPU time and rule evaluations per domain.

    python benchmarks/rule_tests.py [--out DIR] [--repeat 3]

DIR is a build made with `python build.py --no-tool-checks --out DIR` (default: one is made in a temp dir).
Each domain's `promtool test rules prometheus/tests/<domain>/*.tests.yaml` runs alone, one after the other, as
the build runs it; its CPU time (user + system, median of the repeats) is read from the child's rusage.
Evaluations: promtool evaluates every rule a test file loads at every evaluation step of every test, from 0
to the test's last eval_time; the columns split them into the tested rules and the records they read.
Results go to docs/benchmarks.md by hand, with the machine they were measured on.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hpcobs.build import tools
from hpcobs.lang.render import load_yaml

ROOT = Path(__file__).resolve().parent.parent


def promtool_cpu(folder: Path) -> float:
    """CPU seconds of one `promtool test rules` run over a domain's test files (they must pass)."""
    files = sorted(path.name for path in folder.glob("*.tests.yaml"))
    process = subprocess.Popen(
        ["promtool", "test", "rules", *files], cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output = process.stdout.read().decode()
    process.stdout.close()
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"promtool test rules {folder} failed:\n{output}")
    return usage.ru_utime + usage.ru_stime


def evaluations(test_file: Path) -> dict[str, int]:
    """Rule evaluations promtool performs for this file: of the rule tested, of the records it reads."""
    spec = load_yaml(test_file.read_text(encoding="utf-8"))
    steps = tools.evaluation_steps(spec)
    tested = test_file.name.removesuffix(".tests.yaml").replace(".", ":")
    counts = {"tested": 0, "read": 0}
    for rule_file in spec["rule_files"]:
        for group in load_yaml((test_file.parent / rule_file).read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                counts["tested" if rule.get("record", rule.get("alert")) == tested else "read"] += steps
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
            subprocess.run(
                [sys.executable, str(ROOT / "build.py"), "--no-tool-checks", "--out", str(out)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        rows = []
        for folder in sorted(p for p in (out / "prometheus/tests").iterdir() if p.is_dir()):
            cpu = statistics.median(promtool_cpu(folder) for _ in range(args.repeat))
            counts = [evaluations(f) for f in folder.glob("*.tests.yaml")]
            rows.append((folder.name, len(counts), cpu, {k: sum(c[k] for c in counts) for k in ("tested", "read")}))
    print("| domain | test files | promtool CPU (s) | evaluations: tested rules | records they read |")
    print("|---|---|---|---|---|")
    for name, files, cpu, counts in sorted(rows, key=lambda row: -row[2]):
        print(f"| {name} | {files} | {cpu:.2f} | {counts['tested']:,} | {counts['read']:,} |")
    print(
        f"| total | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows):.2f} | "
        f"{sum(r[3]['tested'] for r in rows):,} | {sum(r[3]['read'] for r in rows):,} |"
    )


if __name__ == "__main__":
    main()
