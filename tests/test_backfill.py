"""Cutting the simulator's OpenMetrics for promtool (hpcobs.proof.backfill): chunks of one document per block range
hold every sample of the single-file write exactly once, each under its family's header."""

import io
from collections import Counter
from datetime import UTC, datetime

import pytest

from hpcobs.proof import backfill
from hpcobs.proof.simulate import Simulation, write


@pytest.fixture(scope="module")
def sim(config):
    """5 hours starting 40 minutes into a block range: every series crosses two or three block boundaries."""
    start = datetime(2026, 3, 2, 0, 40, tzinfo=UTC)
    return Simulation(config, nodes=2, gpus_per_node=2, hours=5, seed=3, scenarios="xid79", start=start)


def _samples(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_chunks_hold_every_sample_once_in_the_document_of_its_block_range(sim, tmp_path):
    whole = io.StringIO()
    write(sim, "openmetrics", whole)
    chunks: list[list] = []
    cut = backfill.OpenMetricsChunks(tmp_path, 200_000, chunks.append)
    write(sim, "openmetrics", cut)  # type: ignore[arg-type]
    documents = [path.read_text() for chunk in chunks for path in chunk]
    assert len(chunks) > 2 and len(documents) > 3 * len(chunks) - 1  # several chunks, 3 or 4 block ranges each
    assert Counter(s for d in documents for s in _samples(d)) == Counter(_samples(whole.getvalue()))
    for document in documents:
        assert document.endswith("# EOF\n") and document.count("# EOF") == 1
        assert len({int(float(s.rsplit(" ", 1)[1])) // backfill.BLOCK_SECONDS for s in _samples(document)}) == 1
        family, headers = "", []
        for line in document.splitlines()[:-1]:
            if line.startswith("# TYPE "):
                family = line.split()[2]
                headers.append(family)
            elif not line.startswith("#"):
                assert line.startswith(family), line  # under its own family's header
        assert len(headers) == len(set(headers))  # a family is declared once per document


def test_a_series_is_cut_where_a_block_range_ends():
    def lines(times):
        return "".join(f'm{{a="1"}} 1 {t}\n' for t in times)

    pieces = backfill.by_block(lines(range(7080, 14640, 60)))
    assert pieces == [(0, lines([7080, 7140])), (1, lines(range(7200, 14400, 60))), (2, lines(range(14400, 14640, 60)))]


def test_pieces_evaluate_at_every_instant_once_within_one_span():
    for start, end, step, span in [(7000, 22000, 30, 7200), (100, 1000, 60, 86400), (7200, 7200, 60, 7200)]:
        found = backfill.pieces(start, end, step, span)
        instants = [t for first, last in found for t in range(int(first), int(last) + 1, step)]
        assert instants == list(range(start, end + 1, step))
        assert all(first // span == last // span for first, last in found)


def test_the_loader_keeps_at_most_ahead_chunks_unloaded_and_raises_a_failed_load(tmp_path):
    loaded: list = []
    loader = backfill.Loader(loaded.append, ahead=1)
    chunks = [[tmp_path / f"{c}-{d}" for d in range(3)] for c in range(4)]
    for number, chunk in enumerate(chunks):
        loader.take(chunk)
        assert set(p for c in chunks[:number] for p in c) <= set(loaded)  # all but the last chunk handed over
    loader.wait()
    loader.close()
    assert sorted(loaded) == sorted(p for c in chunks for p in c)

    def fail(path):
        raise OSError(f"promtool failed on {path.name}")

    loader = backfill.Loader(fail, ahead=1)
    loader.take(chunks[0])
    with pytest.raises(OSError, match="promtool failed"):
        loader.take(chunks[1])
    loader.close()
