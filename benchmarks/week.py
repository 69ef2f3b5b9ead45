"""The week benchmark (issue 28, not a test): a simulated fleet's days with faults at the Llama 3 mix, the generated
alerts evaluated by Prometheus over them, the notifications a real Alertmanager running the generated config sends,
and the scorecard (hpcobs.proof.scorecard): per fault class detection and pages per incident, false pages per day
with their causes, notifications per job owner per day.

    PYTHONPATH=. python benchmarks/week.py --nodes 4 --gpus-per-node 4 --days 1 --rate raised
    PYTHONPATH=. python benchmarks/week.py --nodes 128 --gpus-per-node 8 --days 7 --rate real --scrape-interval 1m \
        --k 2880                                                                                # the issue's week
    PYTHONPATH=. python benchmarks/week.py --smoke       # CI: 1 day of 128 GPUs, fails unless the direction holds

plan -> simulation of what the alerts read (week_workload.week, alert_groups) -> history in Prometheus with the
records replayed (hpcobs.proof.replay.history) -> alerts and notifications on a clock compressed by --k
(hpcobs.proof.replay.replay; the window takes duration / k of wall time) -> scorecard. The JSON goes to
benchmarks/results/week-<nodes>x<gpus>-<days>d-<rate>.json (deterministic apart from `seconds`), the Markdown
tables to stdout; docs/benchmarks.md ("The week's scorecard") has the measured runs. `--scrape-interval` builds the
rules and the Alertmanager config for a site scraping at that interval (a site file setting only that) instead of
reading out/'s: the week runs at 1m, half the samples of the default 30s.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml
from week_workload import RAISED_RATE, alert_groups, week

from hpcobs.build import outdir, pipeline
from hpcobs.proof import replay, scorecard
from hpcobs.proof.simulate.week import DAY, REAL_RATE
from hpcobs.settings import config as config_module
from hpcobs.settings.config import Config

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out"
RESULTS = Path(__file__).resolve().parent / "results"
RATES = {"real": REAL_RATE, "raised": RAISED_RATE}
# A day in 2 minutes: Alertmanager's 30 s group_wait becomes 42 ms, still well above a post's few milliseconds.
K = 720
# CI's smoke run (issue 28): the week's cluster for one day, faults at the raised rate.
SMOKE = {"nodes": 16, "gpus_per_node": 8, "days": 1.0, "rate": "raised"}


def rate_of(text: str) -> float:
    """real, raised, or N x the real rate (e.g. 400x): a small cluster's day needs more than `raised` for faults."""
    return RATES[text] if text in RATES else float(text.removesuffix("x")) * REAL_RATE


def run(
    nodes: int, gpus_per_node: int, days: float, rate: str, seed: int, k: float, scrape_interval: str | None = None
) -> dict:
    """The scorecard of one run, with its parameters and the wall time of each stage."""
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="hpcobs-week-") as folder:
        config, out = built(Path(folder), scrape_interval)
        rule_files = sorted((out / "prometheus" / "rules").glob("*.rules.yaml"))
        alertmanager_yml = out / "alertmanager" / "alertmanager.yml"
        sim, plan = week(config, seed, nodes, gpus_per_node, days, rate_of(rate))  # lazy: history simulates
        began, stages = time.monotonic(), {}
        prometheus = replay.history(sim, alert_groups(config), Path(folder), stages)
        seconds["history"] = time.monotonic() - began
        seconds |= {f"history {stage}": s for stage, s in stages.items()}
        try:
            start = sim.window.start
            end = start + sim.window.duration - sim.window.step
            began = time.monotonic()
            found = replay.replay(
                prometheus, rule_files, alertmanager_yml, start, end, k, restarts=replay.restarts(sim)
            )
            seconds["replay"] = time.monotonic() - began
        finally:
            prometheus.stop()
        alertmanager = yaml.safe_load(alertmanager_yml.read_text(encoding="utf-8"))
    kinds = scorecard.receiver_kinds(alertmanager)
    card = scorecard.score(
        plan, found.timelines, found.notifications, kinds, start, sim.window.duration / DAY, jobs=sim.cluster.jobs
    )
    return {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "days": days,
        "rate": rate,
        "faults_per_gpu_day": rate_of(rate),
        "seed": seed,
        "scrape_interval": config["scrape_interval"],
        "k": k,
        "receivers": kinds,
        "lag_seconds": round(found.lag, 1),
        "seconds": {stage: round(s, 1) for stage, s in seconds.items()},
        **card,
    }


def built(folder: Path, scrape_interval: str | None) -> tuple[Config, Path]:
    """The config and the generated tree the run reads: out/ as committed, or a fresh build for a site that sets
    only `scrape_interval`."""
    if scrape_interval is None:
        return config_module.load(), OUT
    (folder / "site.yaml").write_text(yaml.safe_dump({"scrape_interval": scrape_interval}), encoding="utf-8")
    config = config_module.load(folder / "site.yaml")
    outdir.write_tree(folder / "out", pipeline.generate(config))
    return config, folder / "out"


def direction(result: dict) -> list[str]:
    """What the smoke run requires, whatever the rules' current values: every placed fault with a signal detected,
    and no page to a pager or chat without a cause. The problems found (none: it holds). A class with a signal
    counts as `injected` only the faults placed (hpcobs.proof.scorecard: its incidents); `unplaced` is beside it."""
    problems = [
        f"{c['class']}: {c['detected']} of {c['injected']} placed faults detected"
        for c in result["classes"]
        if c["signal"] and c["detected"] < c["injected"]
    ]
    if not any(c["signal"] and c["injected"] > 0 for c in result["classes"]):
        problems.append("no fault with a signal was placed: nothing was checked")
    problems += [
        f"{kind} page at {page['at']} to {page['receiver']} without a cause"
        for kind, found in result["false_pages"].items()
        for page in found["pages"]
        if not page["cause"]
    ]
    return problems


def markdown(result: dict) -> str:
    """The scorecard's tables as docs/benchmarks.md shows them."""
    lines = [
        "| class | injected | unplaced | detected | detect median / p95 (s) | pages per incident: pager / chat / "
        "job owner | most pages | repeats per incident |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in result["classes"]:
        if not c["signal"]:
            lines.append(f"| {c['class']} | {c['injected']} | {c['unplaced']} | no signal | — | — | — | — |")
            continue
        times = c["detect_seconds"]
        ppi, most, rpi = c["pages_per_incident"], c["most_pages"], c["repeats_per_incident"]
        lines.append(
            f"| {c['class']} | {c['injected']} | {c['unplaced']} | {c['detected']} | "
            + (f"{times['median']:g} / {times['p95']:g}" if times else "—")
            + " | "
            + (" / ".join(f"{ppi[k]:g}" for k in scorecard.KINDS) if ppi else "—")
            + " | "
            + (" / ".join(str(most[k]) for k in scorecard.KINDS) if most else "—")
            + " | "
            + (" / ".join(f"{rpi[k]:g}" for k in scorecard.KINDS) if rpi else "—")
            + " |"
        )
    lines += [
        "",
        "| false page | per day | repeats per day | at (s) | receiver | alerts | caused by |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, found in result["false_pages"].items():
        lines.append(f"| {kind} | {found['per_day']} | {found['repeats_per_day']} | | | | |")
        for page in found["pages"]:
            alerts = ", ".join(" ".join(f"{k}={v}" for k, v in a.items()) for a in page["alerts"])
            cause = page["cause"]
            why = f"{cause['event']} {cause['entity']}: {cause['why']}" if cause else "nothing"
            at = f"{page['at']} (repeat)" if page["repeat"] else page["at"]
            lines.append(f"| | | | {at} | {page['receiver']} | {alerts} | {why} |")
    owners = result["job_owner_notifications_per_day"]
    lines += ["", f"Job owner notifications per day: {owners or 'none'}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--days", type=float, default=1)
    parser.add_argument("--rate", default="raised", help="real, raised (50x real) or Nx (N x real)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--k", type=float, default=K, help="replay time runs k times faster than wall time")
    parser.add_argument("--out", type=Path, help="the JSON's path (default: benchmarks/results/week-<size>.json)")
    parser.add_argument(
        "--scrape-interval", help="build the rules and config for a site scraping at this interval (e.g. 1m)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI: 1 day of 16 x 8 GPUs at the raised rate (overrides the size options); exit 1 unless every placed "
        "fault with a signal is detected and no pager or chat page lacks a cause",
    )
    args = parser.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
    result = run(args.nodes, args.gpus_per_node, args.days, args.rate, args.seed, args.k, args.scrape_interval)
    interval = f"-{args.scrape_interval}" if args.scrape_interval else ""
    name = f"week-{args.nodes}x{args.gpus_per_node}-{args.days:g}d-{args.rate}{interval}.json"
    out = args.out or RESULTS / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"\n{out}: {result['seconds']}")
    if args.smoke and (problems := direction(result)):
        sys.exit("smoke run failed:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
