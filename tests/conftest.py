import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcobs.authoring.ruletest import selector_text
from hpcobs.build import outdir, pipeline, tools, validate
from hpcobs.build.cache import Cache
from hpcobs.settings import config as config_module

ROOT = Path(__file__).resolve().parent.parent
# Lines a test wants in the run's summary (what it measured), printed even when it passes. A test records them
# as user properties named MEASUREMENT (`record_property`): reports reach the process that prints the summary,
# also from pytest-xdist workers (this conftest, at the root of the tests, is the one that process loads).
MEASUREMENT = "measurement"
SUMMARY: list[str] = []


# The slowest modules, slowest first. pytest-xdist (--dist loadfile) hands whole modules to the workers in
# collection order, where these come late: one started last keeps a worker busy while the other one idles.
SLOWEST_FIRST = (
    "test_sites.py",
    "test_threshold_boundaries.py",
    "test_rules.py",
    "test_escaping.py",
    "test_fleet_bench.py",
    "test_threshold_panels.py",
    "test_demo_live.py",
    "test_replay_live.py",
    "test_new_site_live.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: place for place, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.fspath).name, len(rank)))


def pytest_runtest_logreport(report):
    SUMMARY.extend(value for name, value in report.user_properties if name == MEASUREMENT and report.when == "call")


def pytest_terminal_summary(terminalreporter):
    if SUMMARY:
        terminalreporter.section("measurements")
        for line in SUMMARY:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    """Every build in the suite, in this process or a child, shares one validation cache of its own: never a
    developer's (a stale or foreign entry must not decide a test), and repeated builds stay fast. pytest-xdist
    workers share it too (their temp directories have a common parent; entries are written atomically)."""
    with pytest.MonkeyPatch.context() as patch:
        base = tmp_path_factory.getbasetemp()
        directory = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "hpcobs-cache"
        directory.mkdir(exist_ok=True)
        patch.setenv("HPCOBS_CACHE_DIR", str(directory))
        yield directory


@pytest.fixture(scope="session")
def config():
    return config_module.load()


@pytest.fixture(scope="session")
def generated(config):
    """Every generated file (path -> text) for the default config."""
    return pipeline.generate(config)


@pytest.fixture(scope="session")
def generated_tree(generated, tmp_path_factory):
    """The generated files written to a temporary out/ (not the committed one)."""
    root = tmp_path_factory.mktemp("out")
    outdir.write_tree(root, generated)
    return root


def run_build(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "build.py"), *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def built_sites(
    tmp_path_factory, cache_dir: Path, sites: dict[str, str]
) -> dict[str, tuple[dict[str, str], list[str]]]:
    """Each site file's generated files and the promtool/amtool failures on them: every build's tool runs share
    one pool, and files equal to another build's come from the cache."""
    builds = {}
    for name, site_text in sites.items():
        folder = tmp_path_factory.mktemp("site")
        (folder / "site.yaml").write_text(site_text)
        files = pipeline.generate(config_module.load(folder / "site.yaml"))
        outdir.write_tree(folder / "out", files)
        builds[name] = (folder / "out", files)
    errors = validate.trees_tool_errors(dict(builds.values()), Cache(cache_dir))
    return {name: (files, errors[root]) for name, (root, files) in builds.items()}


def firing_over_simulated(
    generated: dict[str, str], tmp_path: Path, folder: str, alert: str, sim, series, by: str, at: int, expected
) -> tools.Result:
    """promtool on the built `alert` over simulated `series`: at `at` seconds the firing alerts, counted by the
    label `by`, are exactly one for each value in `expected`."""
    step = sim.window.step
    test = {
        "rule_files": [f"{alert}.rules.yaml"],
        "evaluation_interval": f"{step}s",
        "tests": [
            {
                "interval": f"{step}s",
                "input_series": [{"series": selector_text(s.name, s.labels), "values": s.values} for s in series],
                "promql_expr_test": [
                    {
                        "expr": f'count by ({by}) (ALERTS{{alertname="{alert}", alertstate="firing"}})',
                        "eval_time": f"{at}s",
                        "exp_samples": [{"labels": f'{{{by}="{value}"}}', "value": 1} for value in expected],
                    }
                ],
            }
        ],
    }
    files = {
        f"{folder}{alert}.rules.yaml": generated[f"{folder}{alert}.rules.yaml"],
        f"{folder}{alert}.simulated.tests.yaml": yaml.safe_dump(test),
    }
    outdir.write_tree(tmp_path, files)
    return tools.test_rules(tmp_path / folder / f"{alert}.simulated.tests.yaml")
