import subprocess
import sys
from pathlib import Path

import pytest

from hpcobs import config as config_module
from hpcobs import outdir, pipeline

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory):
    """Every build in the suite, in this process or a child, shares one validation cache of its own: never a
    developer's (a stale or foreign entry must not decide a test), and repeated builds stay fast."""
    with pytest.MonkeyPatch.context() as patch:
        directory = tmp_path_factory.mktemp("hpcobs-cache")
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
    return subprocess.run([sys.executable, str(ROOT / "build.py"), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
