"""The files `simulate` writes, whole or not at all.

Each file is written to a temporary file beside it, synced, and renamed over it only once every file of
the run is complete: a full disk, a permission error, a crash or an interrupt leaves no half-written file
(and a failure removes the temporary files). `-` is standard output and an existing device or pipe (e.g.
/dev/null) is written in place: neither can be replaced by a rename.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shlex
import stat
import sys
from collections.abc import Iterator
from typing import TextIO

# The fix for the errors a filesystem gives when a write fails.
_FIXES: dict[int | None, str] = {
    errno.ENOSPC: "free some space or write elsewhere",
    errno.EDQUOT: "free some space or write elsewhere",
    errno.EFBIG: "the file is too large for this filesystem or limit: write elsewhere or simulate less",
    errno.EROFS: "the filesystem is read-only: write elsewhere",
    errno.EACCES: "choose a place you can write",
    errno.EPERM: "choose a place you can write",
    errno.ENOENT: "check that the directory exists and takes new files",
    errno.EPIPE: "the reader of standard output stopped: write to a file",
}


class WriteError(Exception):
    """A file could not be written: one line naming the flag, the path, the system's reason and a fix."""

    def __init__(self, flag: str, path: str, error: OSError):
        left = "" if in_place(path) else "; the previous file, if any, is untouched"
        self.line = (
            f"simulate: {flag} {shlex.quote(path)}: could not write ({error.strerror or error}); "
            f"{_FIXES.get(error.errno, 'check the path and try again')}{left}"
        )
        super().__init__(self.line)


def in_place(path: str) -> bool:
    """True for stdout and for an existing device or pipe, which are written directly."""
    if path == "-":
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:  # missing, or not reachable: a new file, which fails when written
        return False


class _Output(io.TextIOWrapper):
    """A text stream whose write errors name the flag and path it was asked for."""

    def __init__(self, binary, flag: str, path: str):
        super().__init__(binary, encoding="utf-8", newline="\n")
        self.flag, self.path = flag, path

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except OSError as exc:
            raise WriteError(self.flag, self.path, exc) from exc


class _Target:
    """One file being written: a temporary file beside it, or the stream itself when written in place."""

    def __init__(self, flag: str, path: str):
        self.flag, self.path = flag, path
        self.stream: _Output | None = None
        # A symlink keeps pointing at the file it names: the temporary file goes beside that file.
        self.final = None if in_place(path) else os.path.realpath(path)
        self.temp = None
        if self.final is not None:
            folder, name = os.path.split(self.final)
            self.temp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")

    def open(self) -> _Output:
        try:
            if self.path == "-":
                binary = sys.stdout.buffer
            elif self.temp is None:
                # Closed by finish() or discard(): the stream outlives this call.
                binary = open(self.path, "wb")  # noqa: SIM115
            else:
                binary = os.fdopen(os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb")
        except OSError as exc:
            raise WriteError(self.flag, self.path, exc) from exc
        self.stream = _Output(binary, self.flag, self.path)
        return self.stream

    def finish(self) -> None:
        """Everything on disk (or handed to the reader), still under the temporary name."""
        stream = self.stream
        if stream is None:  # never opened: nothing was written
            return
        try:
            stream.flush()
            if self.temp is not None:
                os.fsync(stream.fileno())
            if self.path == "-":
                stream.detach()  # stdout stays open for the rest of the program
            else:
                stream.close()
        except OSError as exc:
            raise WriteError(self.flag, self.path, exc) from exc

    def commit(self) -> None:
        if self.temp is not None and self.final is not None:
            try:
                os.replace(self.temp, self.final)
            except OSError as exc:
                raise WriteError(self.flag, self.path, exc) from exc
            self.temp = None

    def discard(self) -> None:
        """Close the stream and remove the temporary file, from whatever point the write stopped at."""
        if self.stream is not None:
            with contextlib.suppress(ValueError, OSError):  # detached or closed already, or the disk is full
                if self.path == "-":
                    self.stream.detach()
                else:
                    self.stream.close()
        if self.temp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temp)


@contextlib.contextmanager
def replacing(*targets: tuple[str, str | None]) -> Iterator[list[TextIO | None]]:
    """Streams for (flag, path) pairs (None for a path not asked for). When the block completes, every file
    is finished and then renamed into place; when anything fails, every temporary file is removed."""
    opened: list[_Target] = []
    try:
        streams: list[TextIO | None] = []
        for flag, path in targets:
            if path is None:
                streams.append(None)
                continue
            opened.append(_Target(flag, path))  # known before its file exists, so that it is removed
            streams.append(opened[-1].open())
        yield streams
        for target in opened:
            target.finish()
        for target in opened:
            target.commit()
    finally:
        for target in opened:
            target.discard()
