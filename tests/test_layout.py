"""The package layout the architecture promises: content installed inside the hpcobs namespace, the layers of
pyproject.toml's import contract kept and drawn in docs/architecture.md, no import cycle, the simulator
independent of the build's context."""

import ast
import re
import shutil
import subprocess
import sys
import tomllib

import grimp
import pytest

from tests.conftest import ROOT

CONTENT = ("alerts", "dashboards", "recording_rules", "security")
# The engine's layers above the content, which wire it into the build: the only ones that may import it.
ABOVE_CONTENT = ("cli", "build", "delivery", "proof")


def run_python(code: str, cwd) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_content_is_installed_as_hpcobs_packages_not_top_level_modules(tmp_path):
    """Outside the checkout (no source folder on sys.path), only the hpcobs.* names exist."""
    code = (
        "import importlib.util\n"
        "import hpcobs.alerts, hpcobs.dashboards, hpcobs.recording_rules, hpcobs.security\n"
        f"print([importlib.util.find_spec(name) for name in {CONTENT!r}])\n"
        "print(hpcobs.alerts.__name__, hpcobs.alerts.MODULES[0].__name__)\n"
    )
    assert run_python(code, tmp_path).splitlines() == ["[None, None, None, None]", "hpcobs.alerts hpcobs.alerts.gpu"]


def test_the_simulator_does_not_depend_on_the_build_context():
    code = (
        "import sys, hpcobs.proof.simulate\n"
        "print(sorted(name for name in sys.modules if name in ('hpcobs.authoring.context', 'hpcobs.build.pipeline')))\n"
    )
    assert run_python(code, ROOT).strip() == "[]"


def contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


@pytest.mark.lint
def test_the_import_contract_is_kept():
    """import-linter's layers and forbidden contracts (pyproject.toml): each broken import is listed with its chain."""
    lint_imports = shutil.which("lint-imports", path=str(ROOT / ".venv" / "bin")) or shutil.which("lint-imports")
    assert lint_imports, "lint-imports not found: pip install -e '.[test]'"
    done = subprocess.run([lint_imports, "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr


def _strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm over every module of the graph: the groups of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_no_module_imports_itself_through_others():
    """No import cycle anywhere, within a layer either (a package imports its modules: those edges are not
    imports between modules and are left out)."""
    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(*contract()["root_packages"], cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    for module in list(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if module.startswith(f"{imported}.") or imported.startswith(f"{module}."):
                graph.remove_import(importer=module, imported=imported)
    assert _strongly_connected(graph) == []


def test_only_the_layers_above_the_content_import_it():
    """import-linter reads the content folders as the top-level packages they are in the source tree, so it cannot
    see the engine import them by their installed names (hpcobs.alerts): read those imports here."""
    content = re.compile(rf"hpcobs\.({'|'.join(CONTENT)})(\.|$)")
    importers = set()
    for path in (ROOT / "hpcobs").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(content.match(name) for name in names):
                importers.add(path.relative_to(ROOT / "hpcobs").parts[0].removesuffix(".py"))
    assert importers <= set(ABOVE_CONTENT), importers - set(ABOVE_CONTENT)


def test_the_architecture_page_draws_the_contract_s_layers():
    """docs/architecture.md's layer table has a row per layer of the contract, top to bottom, named as there, and
    every engine package is in it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    # A | inside a table cell is written \| in Markdown, code spans included.
    rows = [row.replace("\\|", "|") for row in re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)]
    (layers,) = [c["layers"] for c in contract()["contracts"] if c["type"] == "layers"]
    assert [row for row in rows if row not in CONTENT and row != "content"] == layers
    packages = {path.parent.name for path in (ROOT / "hpcobs").glob("*/__init__.py")}
    modules = {path.stem for path in (ROOT / "hpcobs").glob("*.py") if path.stem != "__init__"}
    drawn = {name.strip() for row in rows for name in row.split("|")}
    assert packages | modules <= drawn, (packages | modules) - drawn
