"""Where a command's wall time went, step by step: what `build.py --profile` prints on stderr."""

from __future__ import annotations

import os
import time


class Timings:
    """Consecutive steps: each lap is the time since the previous one. Details are lines under a step
    (tool runs overlap in the pool, so their times are not added up)."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self._rows: list[tuple[float | None, str]] = []
        startup = _since_process_start()
        if startup is not None:
            self._rows.append((startup, "start-up: Python and imports"))

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self._rows.append((now - self._last, step))
        self._last = now

    def detail(self, line: str) -> None:
        self._rows.append((None, line))

    def report(self) -> list[str]:
        total = sum(seconds for seconds, _ in self._rows if seconds is not None)
        rows = [f"{seconds:8.2f}  {step}" if seconds is not None else f"{'':10}{step}" for seconds, step in self._rows]
        return ["profile (wall seconds):", *rows, f"{total:8.2f}  total"]


def _since_process_start() -> float | None:
    """Seconds since this process started, from /proc (Linux); None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as uptime:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return max(0.0, float(uptime.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return None
