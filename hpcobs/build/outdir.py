"""Publish out/ atomically, and compare it with a fresh build (docs/output.md).

A build is written to a staging directory beside out/, validated there, then exchanged with out/ in
one rename. Until then out/ is untouched; whatever happens, the staging directory is removed.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hpcobs.errors import UserError

# hpcobs only ever replaces a directory that holds this file, so it never deletes what it did not write.
MARKER = ".hpcobs-output"
MARKER_TEXT = (
    "Written by hpcobs (python build.py): every build replaces this whole directory, so keep nothing else here.\n"
)

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]


class PublishError(Exception):
    """The filesystem refused (disk full, read-only, permission denied): one line, exit 1."""


def publish(out: Path, files: dict[str, str], validate: Callable[[Path], None]) -> None:
    """Replace out/ by files (validated first), atomically, under a lock; a symlinked out/ keeps its link."""
    target = _target(out)
    existed = target.is_dir()
    try:
        with _locked(target.parent, out):
            _remove_debris(target)
            _refuse_foreign(out, target)
            swap_in(staged(target, files, validate), target)
    except OSError as exc:
        state = "is missing; run the build again to restore it" if existed and not target.is_dir() else "is unchanged"
        raise PublishError(f"build error: {exc.filename or target}: {exc.strerror or exc}; {out} {state}") from None


def _target(out: Path) -> Path:
    """The directory to replace: out/, or the directory a symlinked out/ points to (the link stays)."""
    target = Path(os.path.realpath(out))
    if os.path.lexists(target) and not target.is_dir():
        raise UserError(f"build error: --out {out}: is not a directory; choose a new or empty directory")
    return target


def _refuse_foreign(out: Path, target: Path) -> None:
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise UserError(
            f"build error: --out {out}: is not empty and was not written by hpcobs (it has no {MARKER}), "
            "so it is left alone; choose a new or empty directory, or empty this one yourself"
        )


@contextmanager
def _locked(directory: Path, out: Path) -> Iterator[None]:
    """An exclusive flock on the directory holding out/: builds into one out/ take turns. Locking the
    directory itself leaves no lock file behind, and the kernel drops the lock when a build dies."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another build into {out} to finish", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_debris(target: Path) -> None:
    """Remove what a killed build left beside out/ (run under the lock, so no live build owns it). A build
    killed between the two renames of the fallback swap left no out/ but its previous tree aside: restore it."""
    name = glob.escape(target.name)
    news = [path for path in target.parent.glob(f".{name}.new-*") if _left_by_a_build(path)]
    olds = [path for path in target.parent.glob(f".{name}.old-*") if _left_by_a_build(path)]
    olds.sort(key=lambda path: path.lstat().st_mtime)
    if olds and not os.path.lexists(target):
        os.rename(olds.pop(), target)
    for path in news + olds:
        _remove(path)


def _left_by_a_build(path: Path) -> bool:
    """A real directory, as every build makes. A symlink or a file under a debris name was put there by someone
    else: it is neither followed (lstat), nor restored as out/, nor removed."""
    return stat.S_ISDIR(path.lstat().st_mode)


def staged(out: Path, files: dict[str, str], validate: Callable[[Path], None]) -> Path:
    """Write files and the marker to a staging dir beside out/, sync and validate them; return the staging dir."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        write_tree(staging, {**files, MARKER: MARKER_TEXT})
        _sync_tree(staging)
        validate(staging)
    except BaseException:
        _remove(staging)
        raise
    return staging


def swap_in(staging: Path, out: Path) -> None:
    """Put staging in place of out/ in one step; staging then holds the previous tree, which is removed."""
    try:
        if out.is_dir():
            _exchange(staging, out)
        else:
            os.rename(staging, out)
    finally:
        _remove(staging)


def _exchange(staging: Path, out: Path) -> None:
    try:
        _rename_exchange(staging, out)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS):
            raise
        _two_renames(staging, out)


def _rename_exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): both names stay valid at every instant, each naming a complete tree."""
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", str(a))
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a), None, str(b))


def _two_renames(staging: Path, out: Path) -> None:
    """For filesystems without RENAME_EXCHANGE (NFS, some FUSE): out/ is moved aside, then staging moved in.
    An error between the two moves the old tree back; a kill leaves it aside for the next build to restore."""
    aside = out.parent / f".{out.name}.old-{os.urandom(6).hex()}"
    os.rename(out, aside)
    try:
        os.rename(staging, out)
    except BaseException:
        os.rename(aside, out)
        raise
    _remove(aside)


def _remove(path: Path) -> None:
    """Best effort: what cannot be removed now is debris the next build removes under its lock."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except BaseException:
        # A signal must not cut a removal short; the command line ignores any further signal, so this finishes.
        shutil.rmtree(path, ignore_errors=True)
        raise


def write_tree(root: Path, files: dict[str, str]) -> None:
    """Write files under root: directories 0755 and files 0644 whatever the umask, for readers running as
    other users (Grafana, Prometheus)."""
    for relative in files:
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise ValueError(f"generated path {relative!r} would land outside the output directory")
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            os.fchmod(handle.fileno(), 0o644)
            handle.write(text)
    for directory, _, _ in os.walk(root):
        os.chmod(directory, 0o755)


def _sync_tree(root: Path) -> None:
    """fsync every file and directory, so a power cut after the swap cannot expose empty files."""
    for directory, _, names in os.walk(root):
        for name in [*names, "."]:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def differences(out: Path, files: dict[str, str]) -> list[str]:
    """`path: missing|stale|unexpected` for every file where out/ differs from the fresh build (marker included)."""
    current = read_tree(out)
    fresh = {path: text.encode("utf-8") for path, text in {**files, MARKER: MARKER_TEXT}.items()}
    lines = []
    for path in sorted(set(current) | set(fresh)):
        if path not in current:
            lines.append(f"{path}: missing from out/")
        elif path not in fresh:
            lines.append(f"{path}: in out/ but no longer generated")
        elif current[path] != fresh[path]:
            lines.append(f"{path}: differs from a fresh build")
    return lines
