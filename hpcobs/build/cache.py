"""Successful validation results kept between builds, keyed by a hash of everything that decides them.

An entry is only ever a success: a failure is never stored, so it always runs again. Entries live outside
out/, in a directory any run may delete. Each entry is written to a temp file and renamed into place, and
holds its key and a checksum of its content: a truncated, corrupted or misplaced entry reads as absent and
the next success rewrites it. A directory that cannot be written only makes the build slower.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

# Part of every key, so that entries of another layout are never read: change it when the stored value changes.
FORMAT = "hpcobs-cache-1"


def default_directory() -> Path:
    """$HPCOBS_CACHE_DIR, else $XDG_CACHE_HOME/hpcobs, else ~/.cache/hpcobs."""
    if os.environ.get("HPCOBS_CACHE_DIR"):
        return Path(os.environ["HPCOBS_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores relative values
    return base / "hpcobs"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Cache:
    """A directory of entries; get/put are safe from several threads and several processes at once."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self.hits = self.misses = self.stored = 0

    @staticmethod
    def key(material: Any) -> str:
        """The key of a result decided by material (JSON-serialisable: names, versions, file digests)."""
        return digest(_canonical([FORMAT, material]))

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, key: str) -> Any | None:
        """The value stored under key, or None when there is none or the entry does not check out."""
        try:
            entry = json.loads(self._path(key).read_bytes())
            found = entry["key"] == key and entry["check"] == digest(_canonical([key, entry["value"]]))
        except (OSError, ValueError, TypeError, KeyError):  # missing, truncated, not JSON, not our shape
            found = False
        self._count("hits" if found else "misses")
        return entry["value"] if found else None

    def put(self, key: str, value: Any) -> None:
        """Store value under key, atomically; an unwritable directory is not an error (the cache only saves time)."""
        path = self._path(key)
        entry = _canonical({"key": key, "value": value, "check": digest(_canonical([key, value]))})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(entry)
            os.replace(temp, path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if isinstance(exc, OSError):
                return
            raise
        self._count("stored")

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def summary(self) -> str:
        return f"cache {self.directory}: {self.hits} hits, {self.misses} misses, {self.stored} stored"
