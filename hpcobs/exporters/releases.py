"""The releases a version family of an exporter covers, and the family of a release string a site writes.

A site knows its dcgm-exporter by the image tag it runs (`4.2.3-4.1.1`: DCGM 4.2.3, exporter 4.1.1; the exporter
version alone from `4.8.4` on, with an optional `-ubuntu22.04`-style variant), by the exporter's version (`4.1.1`)
or by DCGM's (`4.2`, `4.2.3`), not by hpcobs' family names. The catalogue's `releases_by_version` gives, per family,
the range of exporter and of DCGM versions it covers and the release tags seen in the exporter's history; this module
maps a string to its family, or refuses it in one line that lists every family and what it covers.

A bare version can name both an exporter and a DCGM release (exporter 4.8.0 is in the oldest family, DCGM 4.8 in the
newest): when its readings fall in different families it is refused, naming both, rather than guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A version of two or three numbers; a tag is one version, or a DCGM version and an exporter version, then a variant.
_VERSION = r"[0-9]+\.[0-9]+(?:\.[0-9]+)?"  # ASCII digits: \d also takes other scripts
# Matched whole (fullmatch): `$` would let a trailing line break through.
_TAG = re.compile(rf"(?P<first>{_VERSION})(?:-(?P<second>{_VERSION}))?(?:-(?P<variant>[a-z][a-z0-9.]*))?")
_LATEST = 10**9  # stands for "every later number" at the end of a range or of a shorter version


def config_format(exporter_id: str) -> str:
    """The `format` config/schema.json gives the items of an exporter's `versions` (checked by
    hpcobs.settings.config_checks)."""
    return f"{exporter_id}-release"


def _numbers(version: str, fill: int) -> tuple[int, ...]:
    """A version as three numbers, the missing ones filled: "4.5" is 4.5.0 as a start and 4.5.x as an end."""
    parts = [int(part) for part in version.split(".")]
    return tuple(parts + [fill] * (3 - len(parts)))


@dataclass(frozen=True)
class Span:
    """A range of versions, both ends included; an end of fewer numbers takes its whole series ("4.5": every
    4.5.x); no last: and every later version."""

    first: str
    last: str | None

    def bounds(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return _numbers(self.first, 0), _numbers(self.last, _LATEST) if self.last else (_LATEST,) * 3

    def meets(self, version: str) -> bool:
        """Whether any release the version names ("4.2" names 4.2.0, 4.2.3, ...) lies in this range."""
        start, end = self.bounds()
        return _numbers(version, 0) <= end and start <= _numbers(version, _LATEST)

    def __str__(self) -> str:
        if self.last is None:
            return f"{self.first} and later"
        last = self.last if self.last.count(".") == 2 else f"{self.last}.x"
        return last if self.first == self.last else f"{self.first} to {last}"


@dataclass(frozen=True)
class Family:
    name: str
    exporter: Span
    dcgm: Span
    tags: tuple[str, ...]  # the release tags of this family in the exporter's history, oldest first
    source: str

    def covers(self) -> str:
        tags = ", ".join(self.tags) if len(self.tags) <= 3 else f"{self.tags[0]} to {self.tags[-1]}"
        later = " and later" if self.exporter.last is None else ""
        return f"{self.name} = dcgm-exporter {self.exporter}, DCGM {self.dcgm} (tags {tags}{later})"


class Releases:
    """Every family of one exporter with the releases it covers, in the catalogue's order (oldest first)."""

    def __init__(self, families: list[Family]):
        self.families = families
        self._by_name = {family.name: family for family in families}
        self._by_tag = {tag: family.name for family in families for tag in family.tags}

    def coverage(self) -> str:
        return "; ".join(family.covers() for family in self.families)

    def family(self, release: str) -> str:
        """The family of a family name, a release tag, an exporter or a DCGM version; ValueError "problem; fix"."""
        if release in self._by_name:
            return release
        match = _TAG.fullmatch(release)
        if match is None:
            return self._refuse(f"{release!r} is neither a family nor a dcgm-exporter or DCGM release")
        first, second = match["first"], match["second"]
        bare = release[: match.start("variant") - 1] if match["variant"] else release
        if bare in self._by_tag:
            return self._by_tag[bare]
        if second is not None:
            return self._pair(release, dcgm=first, exporter=second)
        readings = {
            f"dcgm-exporter {first}": self.within("exporter", first),
            f"DCGM {first}": self.within("dcgm", first),
        }
        families = sorted({name for names in readings.values() for name in names}, key=self._order)
        if len(families) == 1:
            return families[0]
        if not families:
            return self._refuse(f"{release!r} is a release no family covers")
        read = ", ".join(f"{what} is {' or '.join(names)}" for what, names in readings.items() if names)
        return self._refuse(f"{release!r} names releases of several families ({read})")

    def _pair(self, release: str, dcgm: str, exporter: str) -> str:
        by_exporter, by_dcgm = self.within("exporter", exporter), self.within("dcgm", dcgm)
        shared = [name for name in by_exporter if name in by_dcgm]
        if len(shared) == 1:
            return shared[0]
        if not by_exporter or not by_dcgm:
            unknown = f"dcgm-exporter {exporter}" if not by_exporter else f"DCGM {dcgm}"
            return self._refuse(f"{release!r}: {unknown} is a release no family covers")
        return self._refuse(
            f"{release!r} pairs DCGM {dcgm} ({' or '.join(by_dcgm)}) with dcgm-exporter {exporter} "
            f"({' or '.join(by_exporter)}), which no release does"
        )

    def within(self, kind: str, version: str) -> list[str]:
        """The families whose range of this kind (exporter, dcgm) holds a release the version names."""
        return [family.name for family in self.families if getattr(family, kind).meets(version)]

    def _order(self, name: str) -> int:
        return [family.name for family in self.families].index(name)

    def _refuse(self, problem: str) -> str:
        raise ValueError(
            f"{problem}; write a family, an image tag (4.2.3-4.1.1), a dcgm-exporter version (4.1.1) or a DCGM "
            f"version (4.2): {self.coverage()}"
        )


def parse(raw: dict[str, dict]) -> Releases:
    """The catalogue's `releases_by_version`, each tag checked to lie in its own family's ranges and no range
    shared by two families (raising ValueError naming the family)."""
    families = [
        Family(
            name,
            Span(entry["exporter"]["first"], entry["exporter"].get("last")),
            Span(entry["dcgm"]["first"], entry["dcgm"].get("last")),
            tuple(entry["tags"]),
            entry["source"],
        )
        for name, entry in raw.items()
    ]
    for kind in ("exporter", "dcgm"):
        spans = [getattr(family, kind).bounds() for family in families]
        for family, (start, _), (_, previous_end) in zip(families[1:], spans[1:], spans):
            if start <= previous_end:
                raise ValueError(f"{family.name}: its {kind} range starts inside the previous family's")
    releases = Releases(families)
    for family in families:
        for tag in family.tags:
            match = _TAG.fullmatch(tag)
            if match is None or match["variant"]:
                raise ValueError(f"{family.name}: tag {tag!r} is not <DCGM version>-<exporter version> or a version")
            readings = [("dcgm", match["first"]), ("exporter", match["second"])] if match["second"] else []
            for kind, version in readings or [("exporter", match["first"])]:
                if releases.within(kind, version) != [family.name]:
                    raise ValueError(f"{family.name}: tag {tag!r}: its {kind} version {version} is not in this family")
    return releases
