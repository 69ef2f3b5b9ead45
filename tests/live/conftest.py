"""Fixtures that start real Prometheus and VictoriaMetrics servers on loopback and always stop them."""

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from hpcobs.proof.servers import Prometheus, VictoriaMetrics


def pytest_collection_modifyitems(items):
    """Every test of this folder is a live one (`make test-live`), marked or not."""
    for item in items:
        if Path(item.fspath).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def prometheus_factory():
    """start(openmetrics=None, rule_files=(), **options) -> a running Prometheus with that history and those
    rules; stopped at the end of the session."""
    started: list[Prometheus] = []

    def start(openmetrics: Path | None = None, rule_files: Sequence[Path] = (), **options) -> Prometheus:
        prometheus = Prometheus(rule_files, **options)
        started.append(prometheus)
        if openmetrics is not None:
            prometheus.load_openmetrics(openmetrics)
        return prometheus.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def victoria_factory():
    """start(jsonl=None, **options) -> a running VictoriaMetrics with that history imported; stopped at the
    end of the session."""
    started: list[VictoriaMetrics] = []

    def start(jsonl: Path | Iterable[str | dict] | None = None, **options) -> VictoriaMetrics:
        victoria = VictoriaMetrics(**options)
        started.append(victoria)
        victoria.start()
        if jsonl is not None:
            victoria.import_jsonl(jsonl)
        return victoria

    yield start
    for server in started:
        server.stop()


def raw_names_read(config, groups) -> set[str]:
    """Raw catalogue metric names that these rule groups read (what a simulation must emit for them)."""
    from hpcobs.exporters.sources import Sources
    from hpcobs.lang import lint

    return {n for g in groups for r in g.rules for n in lint.metric_names(r.expr)} & Sources(config).metric_names()
