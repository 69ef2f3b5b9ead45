"""Load the cluster config: defaults merged with an optional site file, validated by config/schema.json.

Errors name the file that holds the bad value, the key path and what is expected, one line each:
    config error: site.yaml: exporters.dcgm.versions[0]: '4.x' is not one of ['3.x-4.5', ...]
"""
from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from .errors import UserError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "config" / "default.yaml"
SCHEMA = ROOT / "config" / "schema.json"


@dataclass(frozen=True)
class Config:
    """The validated, merged configuration; `data` is plain YAML data, `origin` the files it came from."""

    data: dict[str, Any]
    origin: tuple[str, ...]

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, *path: str) -> Any:
        node: Any = self.data
        for key in path:
            node = node[key]
        return node


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"config error: {path}: file not found; pass an existing YAML file to --config")
    except OSError as exc:
        raise UserError(f"config error: {path}: cannot read ({exc.strerror})")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"config error: {path}{where}: invalid YAML ({problem}); fix the syntax at that line")


def merge(base: Any, override: Any) -> Any:
    """Mappings merge key by key; anything else in the override replaces the base value."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)


def _key_path(path: list[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _holds(doc: Any, path: list[Any]) -> bool:
    node = doc
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return False
    return True


def _explain(error: jsonschema.ValidationError) -> list[tuple[list[Any], list[Any], str]]:
    """One (key path, path that a file must hold to be blamed, message) per problem."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        out = []
        for key in sorted(set(error.instance) - set(allowed)):
            guess = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f"did you mean '{guess[0]}'?" if guess else f"expected one of {allowed}"
            out.append((path + [key], path + [key], f"unknown key; {hint}"))
        return out
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [(path + [missing], path, "missing required key; add it")]
    if error.validator == "enum":
        return [(path, path, f"{error.instance!r} is not one of {error.validator_value}")]
    if error.validator == "type":
        return [(path, path, f"{error.instance!r} is not of type {error.validator_value}")]
    if error.validator == "pattern":
        expected = error.schema.get("x-expected", f"matching {error.validator_value}")
        return [(path, path, f"{error.instance!r} is not {expected}")]
    return [(path, path, error.message)]


def validate(doc: Any, sources: list[tuple[Path, Any]]) -> None:
    """Raise UserError listing every schema problem, blaming the last file that sets the key."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    lines = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        for path, held, message in _explain(error):
            blamed = next((p for p, d in reversed(sources) if _holds(d, held)), sources[-1][0])
            lines.append(f"config error: {blamed}: {_key_path(path)}: {message}")
    if lines:
        raise UserError(sorted(set(lines), key=lines.index))


def load(site: str | Path | None = None) -> Config:
    """Defaults, merged with the site file when one is given, validated."""
    default_doc = _read_yaml(DEFAULT_CONFIG)
    sources: list[tuple[Path, Any]] = [(Path("config/default.yaml"), default_doc)]
    merged = default_doc
    if site is not None:
        site_path = Path(site)
        site_doc = _read_yaml(site_path)
        if site_doc is None:
            site_doc = {}
        if not isinstance(site_doc, dict):
            raise UserError(f"config error: {site_path}: top level must be a mapping of keys, got {type(site_doc).__name__}")
        sources.append((site_path, site_doc))
        merged = merge(default_doc, site_doc)
    validate(merged, sources)
    return Config(data=merged, origin=tuple(str(p) for p, _ in sources))
