"""The repository stands alone: no file points a reader to design notes or reference files kept outside it.

Facts taken from such notes are written here in our own words, or cite docs/ or the public upstream source
(docs/architecture.md says where each kind of fact lives). out/ is generated from the sources checked here.
"""

import subprocess
import tempfile
from pathlib import Path

from tests.conftest import ROOT

# The notes the project was first written from, by path and by file name; none of them ships with the repository.
OUTSIDE_REFERENCES = (
    "DESIGN.md",
    "../shared",
    "shared/reference",
    "shared/seed",
    "gpu-exporters.md",
    "other-exporters.md",
    "dashboards-as-code-anchors.md",
    "hpc-job-monitoring-anchors.md",
)
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()


def checked_files() -> list[str]:
    """Every file git would list (tracked, or new and not ignored), outside the generated out/. git reads the
    tree through an empty repository of its own, so a release tarball, which has no .git, is checked the same."""
    with tempfile.TemporaryDirectory() as empty:
        subprocess.run(["git", "init", "-q", "--bare", empty], capture_output=True, check=True, timeout=60)
        listing = subprocess.run(
            ["git", "--git-dir", empty, "--work-tree", str(ROOT), "ls-files", "-z", "--others", "--exclude-standard"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    return sorted(
        {
            path
            for path in listing.split("\0")
            if path and not path.startswith("out/") and path != THIS_FILE and (ROOT / path).is_file()
        }
    )


def references(path: str) -> list[str]:
    """`path:line: text` for each line of a text file that names an outside reference; nothing for binary files."""
    content = (ROOT / path).read_bytes()
    if b"\0" in content:
        return []
    return [
        f"{path}:{number}: {line.strip()}"
        for number, line in enumerate(content.decode("utf-8", errors="replace").splitlines(), start=1)
        if any(reference in line for reference in OUTSIDE_REFERENCES)
    ]


def test_the_checked_files_include_code_docs_and_catalogue():
    """The listing works and reaches every kind of file a citation could hide in (the engine's build package
    too, which a `build/` ignore pattern for packaging would hide)."""
    expected = {
        "build.py",
        "README.md",
        "hpcobs/exporters/catalogue/dcgm.yaml",
        "hpcobs/build/pipeline.py",
        "docs/architecture.md",
    }
    assert expected <= set(checked_files())


def test_no_file_cites_notes_outside_the_repository():
    hits = [hit for path in checked_files() for hit in references(path)]
    assert not hits, f"{len(hits)} lines cite notes that are not in the repository:\n" + "\n".join(hits)
