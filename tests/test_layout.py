"""The package layout the architecture promises: content installed inside the hpcobs namespace, the simulator
independent of the build's context."""

import subprocess
import sys

from tests.conftest import ROOT


def run_python(code: str, cwd) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_content_is_installed_as_hpcobs_packages_not_top_level_modules(tmp_path):
    """Outside the checkout (no source folder on sys.path), only the hpcobs.* names exist."""
    code = (
        "import importlib.util\n"
        "import hpcobs.alerts, hpcobs.dashboards, hpcobs.recording_rules\n"
        "print([importlib.util.find_spec(name) for name in ('alerts', 'dashboards', 'recording_rules')])\n"
        "print(hpcobs.alerts.__name__, hpcobs.alerts.MODULES[0].__name__)\n"
    )
    assert run_python(code, tmp_path).splitlines() == ["[None, None, None]", "hpcobs.alerts hpcobs.alerts.gpu"]


def test_the_simulator_does_not_depend_on_the_build_context():
    code = (
        "import sys, hpcobs.proof.simulate\n"
        "print(sorted(name for name in sys.modules if name in ('hpcobs.authoring.context', 'hpcobs.build.pipeline')))\n"
    )
    assert run_python(code, ROOT).strip() == "[]"
