"""Which dashboard JSON each preview image was drawn from: a digest file beside the images (uid -> sha256 of the
built dashboard), so a test can tell committed images older than the dashboards they show without comparing
pixels (a picture of live data differs on every run)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FILE = "digests.json"


def digest(dashboard: Path) -> str:
    return hashlib.sha256(dashboard.read_bytes()).hexdigest()


def record(images: Path, drawn: list[Path]) -> None:
    """Record the dashboards just drawn into `images`, keeping the entries of those not drawn this time."""
    digests = recorded(images)
    digests.update({path.stem: digest(path) for path in drawn})
    (images / FILE).write_text(json.dumps(dict(sorted(digests.items())), indent=2) + "\n", encoding="utf-8")


def recorded(images: Path) -> dict[str, str]:
    path = images / FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def stale(images: Path, dashboards: list[Path]) -> list[str]:
    """The uids of `dashboards` whose image in `images` is missing or was drawn from other JSON."""
    digests = recorded(images)
    return [
        path.stem
        for path in dashboards
        if digests.get(path.stem) != digest(path) or not (images / f"{path.stem}.png").exists()
    ]
