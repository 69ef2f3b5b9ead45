"""Streaming a long simulated history into Prometheus through promtool, in pieces it reads cheaply.

`promtool tsdb create-blocks-from openmetrics` holds the whole document in memory, parses it once for its time span,
then again for every 2-hour block range the span covers, keeping the samples of that range (cmd/promtool/backfill.go
`createBlocks`, Prometheus v2.42.0, commit 225c61122d88b01d1f0eaaee0e05b6f3e0567ac0). The simulator writes series
after series, each over the whole window, so one document of a week is held whole and read 85 times. Here the
stream is cut two ways:

- into one document per block range, so promtool reads each sample once;
- in time, into chunks: a chunk's documents are handed over complete (`ready`) once they hold about `limit` bytes
  each, and promtool takes them while the simulator writes the next chunks (`Loader`: promtool and the simulator
  run side by side). Every chunk adds a block per range, so `limit` sets the blocks a range has (the range's
  bytes / limit), which queries merge, and with CHUNKS_AHEAD the disk the documents take (CHUNKS_AHEAD + 1
  chunks: ranges x limit each).

A family's `# TYPE`/`# HELP` header opens every document its samples go to, once (a family cut between chunks gets
it again in the next). A sample goes to exactly one document: the one of the block range holding its timestamp.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from hpcobs.proof.simulate import Simulation, Stats, write

BLOCK_SECONDS = 2 * 3600  # tsdb.DefaultBlockDuration: promtool's block ranges, aligned to multiples of it
# promtool reads about half as fast as the simulator writes (the 1,024-GPU week, 2026-12-05: some 110 MB/s against
# 200 MB/s of a core): two of a chunk's documents are loaded at once, so that promtool has both cores while the
# simulator waits for its next chunk.
PROMTOOLS_AT_ONCE = 2
# The simulator's time per chunk varies threefold with the families it writes (a 1,024-GPU day, 2026-12-04): with one
# chunk handed over at a time, promtool sat idle for 13% of the backfill while a slow chunk was written, and the
# simulator waited while a fast one loaded. Two chunks may wait or load while the next is written.
CHUNKS_AHEAD = 2


class OneAhead:
    """Runs each job in a background thread while the caller prepares the next one (the simulator writing the
    next chunk while promtool or VictoriaMetrics takes the last); one job at a time, errors raised on wait."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending: Future | None = None

    def submit(self, job: Callable[..., Any], *args: Any) -> None:
        self.wait()
        self.pending = self.pool.submit(job, *args)

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()


class Loader:
    """Loads documents with `load`, PROMTOOLS_AT_ONCE at a time in the order handed over, the next chunk's documents
    starting as soon as a promtool is free. `take` returns once at most `ahead` chunks are still waiting or loading
    (what bounds the documents on disk); `wait` until all are loaded. A failed load is raised by either."""

    def __init__(self, load: Callable[[Path], None], ahead: int) -> None:
        self.load, self.ahead = load, ahead
        self.pool = ThreadPoolExecutor(max_workers=PROMTOOLS_AT_ONCE)
        self.chunks: deque[list[Future]] = deque()

    def take(self, paths: list[Path]) -> None:
        self.chunks.append([self.pool.submit(self.load, path) for path in paths])
        while len(self.chunks) > self.ahead:
            self._oldest()

    def wait(self) -> None:
        while self.chunks:
            self._oldest()

    def close(self) -> None:
        """Drop what has not started (after a failure) and wait for what has."""
        self.pool.shutdown(cancel_futures=True)

    def _oldest(self) -> None:
        for loading in self.chunks.popleft():
            loading.result()


class OpenMetricsChunks:
    """A text stream taking OpenMetrics as the simulator writes it (a family header, then each series' samples in
    time order, one write per series) and cutting it into chunks, each a list of complete documents, one per block
    range, of about `limit` bytes each, handed to `ready` once written. `close` (or `# EOF`) hands over the last."""

    def __init__(self, folder: Path, limit: int, ready: Callable[[list[Path]], None]):
        self.folder, self.limit, self.ready = folder, limit, ready
        self.header = ""
        self.documents: dict[int, TextIO] = {}  # block range (its start / BLOCK_SECONDS) -> the open document
        self.headed: set[int] = set()  # the block ranges whose document has the current family's header
        self.size = self.chunks = self.written = 0

    def write(self, text: str) -> int:
        if text == "# EOF\n":
            self.close()
        elif text.startswith("# TYPE "):
            self.header, self.headed = text, set()
        else:
            if self.size >= self.limit * len(self.documents):
                self.close()
            for block, piece in by_block(text):
                document = self._document(block)
                if block not in self.headed:
                    document.write(self.header)
                    self.headed.add(block)
                document.write(piece)
            self.size += len(text)
        return len(text)

    def close(self) -> None:
        """End the chunk's documents and hand them over (nothing if none was written)."""
        if not self.documents:
            return
        paths = []
        for document in self.documents.values():
            document.write("# EOF\n")
            document.close()
            paths.append(Path(document.name))
        self.documents, self.headed, self.size = {}, set(), 0
        self.ready(paths)

    def _document(self, block: int) -> TextIO:
        if block not in self.documents:
            if not self.documents:
                self.chunks += 1
            path = self.folder / f"chunk{self.chunks}-{block}.om"
            self.documents[block] = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed by close)
            self.written += 1
        return self.documents[block]


def by_block(text: str) -> list[tuple[int, str]]:
    """Sample lines (`name{labels} value timestamp`, timestamps ascending) cut where a block range ends: (block
    range, its lines) in order."""
    pieces = []
    while text:
        block = int(_stamp(text, 0) // BLOCK_SECONDS)
        cut = _first_at_or_after(text, (block + 1) * BLOCK_SECONDS)
        pieces.append((block, text[:cut]))
        text = text[cut:]
    return pieces


def _first_at_or_after(text: str, t: float) -> int:
    """Where the first line with a timestamp >= t starts (len(text) if none), the first line being before t: a
    binary search over line starts, `low` always a line before t, `high` a line at or after t (or the end)."""
    low, high = 0, len(text)
    while (following := text.index("\n", low) + 1) < high:
        middle = text.rfind("\n", following - 1, max((low + high) // 2, following)) + 1
        low, high = (middle, high) if _stamp(text, middle) < t else (low, middle)
    return high


def _stamp(text: str, line: int) -> float:
    """The timestamp of the line starting at `line`."""
    end = text.index("\n", line)
    return float(text[text.rindex(" ", line, end) + 1 : end])


def pieces(start: float, end: float, step: float, span: float) -> list[tuple[float, float]]:
    """The instants start, start + step, ... up to end, as (first, last) of each run cut where a multiple of `span`
    (Unix time) begins: range queries that together evaluate at exactly those instants, each within one span (a
    block range for what promtool loads; a day keeps a query under Prometheus's 11,000 points)."""
    found: list[tuple[float, float]] = []
    first = start
    while first <= end:
        following = (first // span + 1) * span  # where the next span begins
        last = min(end, start + ((following - start - 1e-9) // step) * step)
        found.append((first, last))
        first = last + step
    return found


def simulation(
    load_openmetrics: Callable[[Path], object], sim: Simulation, names: set[str], folder: Path, limit: int
) -> Stats:
    """Backfill the simulation's series named `names` with `load_openmetrics` (a Prometheus not started yet: its
    `load_openmetrics`; servers imports this module), chunk by chunk (documents of about `limit` bytes), the
    simulator writing the next chunk while promtool takes the last ones; `folder` holds the documents in between."""

    def load(path: Path) -> None:
        load_openmetrics(path)
        path.unlink()

    loader = Loader(load, CHUNKS_AHEAD)
    try:
        stats = write(sim, "openmetrics", OpenMetricsChunks(folder, limit, loader.take), names=names)  # type: ignore[arg-type]
        loader.wait()
    finally:
        loader.close()
    return stats
