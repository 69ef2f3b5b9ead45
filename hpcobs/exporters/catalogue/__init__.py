"""The exporter catalogue: every raw metric hpcobs reads, with exporter, versions, type, unit, labels, source.

One YAML file per exporter beside this module, read once, on the first load(). Content never spells a raw
metric name: it asks the catalogue for (exporter, signal) and gets the name for the deployed version (see
hpcobs.exporters.sources).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jsonschema

from hpcobs.exporters import releases
from hpcobs.lang.render import load_yaml
from hpcobs.lang.units import UNITS

HERE = Path(__file__).resolve().parent
# The value of a config's `node_from` that reads the node from the label the exporter itself names it with
# (`host`, `host_by_version`); the catalogue's `node_from` lists the other labels a site may choose.
HOST_LABEL = "hostname"


_SPELLING = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "unit"],
    "properties": {"name": {"type": "string"}, "unit": {"enum": list(UNITS)}},
}
_METRIC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["signal", "name", "type", "unit", "help", "source"],
    "properties": {
        "signal": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "name": {"type": "string", "pattern": "^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "type": {"enum": ["counter", "gauge", "info", "untyped", "histogram"]},
        "unit": {"enum": list(UNITS)},
        "labels": {"type": "array", "items": {"type": "string"}},
        "optional": {"type": "boolean"},
        "sparse": {"type": "boolean"},
        "renamed": {"type": "object", "additionalProperties": _SPELLING},
        "only_from": {"type": "string"},
        "canonical": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "help": {"type": "string"},
        "source": {"type": "string"},
    },
}
_SPAN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["first"],
    "properties": {"first": {"type": "string"}, "last": {"type": "string"}},
}
_RELEASES = {
    "type": "object",
    "additionalProperties": False,
    "required": ["exporter", "dcgm", "tags", "source"],
    "properties": {
        "exporter": _SPAN,
        "dcgm": _SPAN,
        "tags": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "source": {"type": "string"},
    },
}
_EXPORTER = {
    "type": "object",
    "additionalProperties": False,
    "required": ["exporter", "title", "source", "host", "metrics"],
    "properties": {
        "exporter": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "title": {"type": "string"},
        "source": {"type": "string"},
        "versions": {"type": "object", "additionalProperties": {"type": "string"}},
        "host_by_version": {"type": "object", "additionalProperties": {"type": "string"}},
        "releases_by_version": {"type": "object", "additionalProperties": _RELEASES},
        "host": {
            "type": "object",
            "additionalProperties": False,
            "required": ["regex"],
            "properties": {"label": {"type": "string"}, "regex": {"type": "string"}},
        },
        "node_from": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["label", "regex"],
                "properties": {"label": {"type": "string"}, "regex": {"type": "string"}},
            },
        },
        "job_label": {"type": ["string", "null"]},
        "canonical_labels": {
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["label", "regex"],
                        "properties": {"label": {"type": "string"}, "regex": {"type": "string"}},
                    },
                ]
            },
        },
        "driver_label_by_version": {"type": "object", "additionalProperties": {"type": "string"}},
        "default_series_per_gpu": {"type": "object", "additionalProperties": {"type": "integer"}},
        "name_prefix_config": {"type": "string"},
        "gpu_labels": {"type": "array", "items": {"type": "string"}},
        "info_labels_by_version": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        "xid_classes": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
        "metrics": {"type": "array", "minItems": 1, "items": _METRIC},
    },
}


class CatalogueError(Exception):
    """A catalogue data file is malformed (a bug in hpcobs, not user input)."""


@dataclass(frozen=True)
class Metric:
    """One raw metric as a given exporter version exposes it."""

    exporter: str
    signal: str
    name: str
    type: str
    unit: str
    labels: tuple[str, ...]
    optional: bool
    help: str
    source: str
    # Series exist only for things in a state or after an event (a rule's first match, a drained node):
    # a handful at a time, whatever the fleet size.
    sparse: bool = False


@dataclass(frozen=True)
class Exporter:
    id: str
    title: str
    source: str
    versions: tuple[str, ...]
    host_regex: str
    job_label: str | None
    name_prefix_config: str | None
    raw: dict = field(repr=False, compare=False)
    # The releases each version family covers (releases_by_version), for exporters with families.
    releases: releases.Releases | None = field(default=None, repr=False, compare=False)

    def signals(self) -> list[str]:
        return [m["signal"] for m in self.raw["metrics"]]

    def signals_for(self, canonical: str) -> list[str]:
        """This exporter's signals that measure a canonical quantity, in order of preference."""
        return [m["signal"] for m in self.raw["metrics"] if m.get("canonical") == canonical]

    def node_from_choices(self) -> tuple[str, ...]:
        """Where a site may take the node from: the exporter's own host label, or another label it names."""
        return (HOST_LABEL, *self.raw.get("node_from", {}))

    def canonical_labels(self, version: str | None = None, node_from: str = HOST_LABEL) -> dict[str, str | dict]:
        """Raw label holding each canonical label (node, hpc_job, gpu...) on this exporter's series, or
        {label, regex} when the canonical value is a part of a raw label. `node_from` picks the label the node
        is read from (node_from_choices)."""
        if node_from == HOST_LABEL:
            host, regex = self.host_label(version), self.host_regex
        else:
            host, regex = self.raw["node_from"][node_from]["label"], self.raw["node_from"][node_from]["regex"]
        out: dict[str, str | dict] = {"node": host if regex == "(.+)" else {"label": host, "regex": regex}}
        if self.job_label:
            out["hpc_job"] = self.job_label
        out.update(self.raw.get("canonical_labels", {}))
        if "driver_label_by_version" in self.raw:
            out["driver"] = self.raw["driver_label_by_version"][self._version(version)]
        return out

    def xids(self, xid_class: str) -> tuple[int, ...]:
        return tuple(self.raw["xid_classes"][xid_class])

    def host_label(self, version: str | None = None) -> str:
        if self.versions:
            return self.raw["host_by_version"][self._version(version)]
        return self.raw["host"]["label"]

    def info_labels(self, version: str | None = None) -> tuple[str, ...]:
        by_version = self.raw.get("info_labels_by_version")
        return tuple(by_version[self._version(version)]) if by_version else ()

    def _version(self, version: str | None) -> str:
        if not self.versions:
            if version is not None:
                raise KeyError(f"{self.id} has no versions, got {version!r}")
            return ""
        if version not in self.versions:
            raise KeyError(f"{self.id} version {version!r} unknown; known: {list(self.versions)}")
        return version

    def metric(self, signal: str, version: str | None = None) -> Metric | None:
        """The metric for this signal in this version, or None when that version does not expose it."""
        entry = next((m for m in self.raw["metrics"] if m["signal"] == signal), None)
        if entry is None:
            raise KeyError(f"exporter {self.id!r} has no signal {signal!r}; known: {self.signals()}")
        version = self._version(version)
        order = list(self.versions)
        if "only_from" in entry and order.index(version) < order.index(entry["only_from"]):
            return None
        name, unit = entry["name"], entry["unit"]
        for since in order[: order.index(version) + 1] if order else []:
            if since in entry.get("renamed", {}):
                name, unit = entry["renamed"][since]["name"], entry["renamed"][since]["unit"]
        labels = tuple(self.raw.get("gpu_labels", ())) + tuple(entry.get("labels", ()))
        return Metric(
            self.id,
            signal,
            name,
            entry["type"],
            unit,
            labels,
            bool(entry.get("optional", False)),
            entry["help"],
            entry["source"],
            bool(entry.get("sparse", False)),
        )

    def all_metrics(self) -> list[Metric]:
        """Every spelling of every signal across versions (for lints and docs)."""
        out = {}
        for signal in self.signals():
            for version in self.versions or (None,):
                metric = self.metric(signal, version)
                if metric is not None:
                    out[(metric.name, metric.unit)] = metric
        return list(out.values())


def _load_file(path: Path, validator: jsonschema.protocols.Validator) -> Exporter:
    raw = load_yaml(path.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(validator.iter_errors(raw))
    if error is not None:
        raise CatalogueError(f"{path.name}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
    signals = [m["signal"] for m in raw["metrics"]]
    duplicated = sorted({s for s in signals if signals.count(s) > 1})
    if duplicated:
        raise CatalogueError(f"{path.name}: duplicated signals {duplicated}")
    versions = tuple(raw.get("versions", {}))
    if versions and set(raw.get("host_by_version", {})) != set(versions):
        raise CatalogueError(f"{path.name}: host_by_version must name every version {list(versions)}")
    if versions and list(raw.get("releases_by_version", {})) != list(versions):
        raise CatalogueError(f"{path.name}: releases_by_version must name every version {list(versions)}, in order")
    try:
        covered = releases.parse(raw["releases_by_version"]) if versions else None
    except ValueError as exc:
        raise CatalogueError(f"{path.name}: releases_by_version: {exc}") from None
    if not versions and "label" not in raw["host"]:
        raise CatalogueError(f"{path.name}: host.label is required when there are no versions")
    for metric in raw["metrics"]:
        for since in list(metric.get("renamed", {})) + ([metric["only_from"]] if "only_from" in metric else []):
            if since not in versions:
                raise CatalogueError(f"{path.name}: {metric['signal']}: unknown version {since!r}")
    return Exporter(
        raw["exporter"],
        raw["title"],
        raw["source"],
        versions,
        raw["host"]["regex"],
        raw.get("job_label"),
        raw.get("name_prefix_config"),
        raw,
        covered,
    )


@cache
def load() -> dict[str, Exporter]:
    """All exporters, by id."""
    exporters = {}
    # One validator for every file: jsonschema.validate() would check the schema itself again for each.
    validator = jsonschema.Draft202012Validator(_EXPORTER)
    for path in sorted(HERE.glob("*.yaml")):
        exporter = _load_file(path, validator)
        if exporter.id in exporters:
            raise CatalogueError(f"{path.name}: exporter id {exporter.id!r} defined twice")
        exporters[exporter.id] = exporter
    return exporters


def up_name() -> str:
    """`up`, which Prometheus writes for every target it scrapes (1 answered, 0 failed): profile "prometheus"."""
    metric = load()["prometheus"].metric("up")
    if metric is None:
        raise KeyError("the catalogue's prometheus profile has no `up`")
    return metric.name
