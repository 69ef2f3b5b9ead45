"""The week benchmark (issue 28, not a test): a simulated fleet's days with faults at the Llama 3 mix, the generated
alerts evaluated by Prometheus over them, the notifications a real Alertmanager running the generated config sends,
and the scorecard (hpcobs.proof.scorecard): per fault class detection and pages per incident, false pages per day
with their causes, notifications per job owner per day.

    PYTHONPATH=. python benchmarks/week.py --nodes 4 --gpus-per-node 4 --days 1 --rate raised
    PYTHONPATH=. python benchmarks/week.py --nodes 128 --gpus-per-node 8 --days 7 --rate real   # the issue's week

plan -> simulation of what the alerts read (week_workload.week, alert_groups) -> history in Prometheus with the
records replayed (hpcobs.proof.replay.history) -> alerts and notifications on a clock compressed by --k
(hpcobs.proof.replay.replay; the window takes duration / k of wall time) -> scorecard. The JSON goes to
benchmarks/results/week-<nodes>x<gpus>-<days>d-<rate>.json (deterministic apart from `seconds`), the Markdown
tables to stdout; docs/benchmarks.md ("The week's scorecard") has the measured runs.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml
from week_workload import RAISED_RATE, alert_groups, week

from hpcobs.proof import replay, scorecard
from hpcobs.proof.simulate.week import DAY, REAL_RATE
from hpcobs.settings import config as config_module

ROOT = Path(__file__).resolve().parent.parent
RULE_FILES = sorted((ROOT / "out" / "prometheus" / "rules").glob("*.rules.yaml"))
ALERTMANAGER_YML = ROOT / "out" / "alertmanager" / "alertmanager.yml"
RESULTS = Path(__file__).resolve().parent / "results"
RATES = {"real": REAL_RATE, "raised": RAISED_RATE}
# A day in 2 minutes: Alertmanager's 30 s group_wait becomes 42 ms, still well above a post's few milliseconds.
K = 720


def rate_of(text: str) -> float:
    """real, raised, or N x the real rate (e.g. 400x): a small cluster's day needs more than `raised` for faults."""
    return RATES[text] if text in RATES else float(text.removesuffix("x")) * REAL_RATE


def run(nodes: int, gpus_per_node: int, days: float, rate: str, seed: int, k: float) -> dict:
    """The scorecard of one run, with its parameters and the wall time of each stage."""
    config = config_module.load()
    seconds: dict[str, float] = {}
    sim, plan = week(config, seed, nodes, gpus_per_node, days, rate_of(rate))  # lazy: history simulates
    with tempfile.TemporaryDirectory(prefix="hpcobs-week-") as folder:
        began = time.monotonic()
        prometheus = replay.history(sim, alert_groups(config), Path(folder))
        seconds["history"] = time.monotonic() - began
        try:
            start = sim.window.start
            end = start + sim.window.duration - sim.window.step
            began = time.monotonic()
            found = replay.replay(prometheus, RULE_FILES, ALERTMANAGER_YML, start, end, k)
            seconds["replay"] = time.monotonic() - began
        finally:
            prometheus.stop()
    kinds = scorecard.receiver_kinds(yaml.safe_load(ALERTMANAGER_YML.read_text(encoding="utf-8")))
    card = scorecard.score(plan, found.timelines, found.notifications, kinds, start, sim.window.duration / DAY)
    return {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "days": days,
        "rate": rate,
        "faults_per_gpu_day": rate_of(rate),
        "seed": seed,
        "k": k,
        "receivers": kinds,
        "lag_seconds": round(found.lag, 1),
        "seconds": {stage: round(s, 1) for stage, s in seconds.items()},
        **card,
    }


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
    args = parser.parse_args()
    result = run(args.nodes, args.gpus_per_node, args.days, args.rate, args.seed, args.k)
    out = args.out or RESULTS / f"week-{args.nodes}x{args.gpus_per_node}-{args.days:g}d-{args.rate}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"\n{out}: {result['seconds']}")


if __name__ == "__main__":
    main()
