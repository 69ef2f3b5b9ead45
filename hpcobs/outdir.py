"""Write out/ atomically and compare it with a fresh build.

A build is written to a temporary sibling directory, validated there, then swapped in. Until the
swap the old out/ is untouched; a failed build leaves it as it was and removes its own temp dir.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)


def staged(out: Path, files: dict[str, str], validate: Callable[[Path], None]) -> Path:
    """Write files to a temp dir beside out/ and validate them there; return the temp dir."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        write_tree(tmp, files)
        validate(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def swap_in(tmp: Path, out: Path) -> None:
    """Replace out/ by tmp: rename the old one aside, rename the new one in, then drop the old one."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.rename(out, old)
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old)


def read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def differences(out: Path, files: dict[str, str]) -> list[str]:
    """`path: missing|stale|unexpected` for every file where out/ differs from the fresh build."""
    current = read_tree(out)
    fresh = {path: text.encode("utf-8") for path, text in files.items()}
    lines = []
    for path in sorted(set(current) | set(fresh)):
        if path not in current:
            lines.append(f"{path}: missing from out/")
        elif path not in fresh:
            lines.append(f"{path}: in out/ but no longer generated")
        elif current[path] != fresh[path]:
            lines.append(f"{path}: differs from a fresh build")
    return lines
