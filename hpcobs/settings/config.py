"""Load the cluster config: defaults merged with an optional site file, validated by config/schema.json.

Errors name the file that holds the bad value, the key path and what is expected, one line each:
    config error: site.yaml: exporters.dcgm.versions[0]: '4.x' is neither a family nor a dcgm-exporter or DCGM ...
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

from hpcobs.errors import UserError
from hpcobs.exporters import catalogue
from hpcobs.paths import ROOT
from hpcobs.settings import config_checks

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

    def site_sets(self, *path: str) -> bool:
        """Whether the site file, not config/default.yaml, gives the value at `path`: a default that stands for
        the site's own (grafana.url's http://grafana:3000) is no value to act on."""
        return len(self.origin) > 1 and _holds(_read_yaml(Path(self.origin[-1])), list(path))


try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]


class _Loader(_SafeLoader):
    """Safe YAML, parsed by libyaml when available. Refuses a key given twice in one mapping (plain YAML keeps
    the last one silently, so half of a doubled `exporters:` block would vanish), and documents that are
    recursive through aliases, nested deeper than any config, or too large to walk once aliases are
    expanded (a "billion laughs")."""

    MAX_DEPTH = 32
    MAX_VALUES = 100_000

    def construct_document(self, node):
        self._measure(node, {}, [])
        return super().construct_document(node)

    def _measure(self, node, sizes: dict[int, int], within: list) -> int:
        """How many values the node stands for once its aliases are expanded."""
        if id(node) in sizes:
            return sizes[id(node)]
        if node in within:
            self._refuse(node, "an alias refers to a mapping or list that contains it; remove the recursion")
        if len(within) >= self.MAX_DEPTH:
            self._refuse(node, f"nested deeper than {self.MAX_DEPTH} levels; flatten it")
        children = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else node.value
            if isinstance(node, yaml.SequenceNode)
            else []
        )
        size = 1 + sum(self._measure(child, sizes, within + [node]) for child in children)
        if size > self.MAX_VALUES:
            self._refuse(
                node, f"aliases expand this to more than {self.MAX_VALUES:,} values; write the repeated parts out"
            )
        sizes[id(node)] = size
        return size

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    self._refuse(key_node, f"key {key!r} is given twice in one mapping; keep one")
                seen.add(key)
        return super().construct_mapping(node, deep)

    @staticmethod
    def _refuse(node, problem: str):
        raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"config error: {path}: file not found; pass an existing YAML file to --config") from None
    except OSError as exc:
        raise UserError(f"config error: {path}: cannot read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"config error: {path}{where}: invalid YAML ({problem}); fix the syntax at that line") from None


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


_ABSENT = object()


def _at(doc: Any, path: list[Any], absent: Any = None) -> Any:
    """The value at `path`, or `absent` where `doc` does not hold it."""
    node = doc
    for part in path:
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if isinstance(node, dict) and part in node or in_list:
            node = node[part]
        else:
            return absent
    return node


def _holds(doc: Any, path: list[Any]) -> bool:
    return _at(doc, path, _ABSENT) is not _ABSENT


def _explain(error: jsonschema.ValidationError) -> list[tuple[list[Any], list[Any], str]]:
    """One (key path, path that a file must hold to be blamed, message) per problem."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        out = []
        for key in sorted(set(error.instance) - set(allowed), key=str):
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
        scalar = not isinstance(error.instance, (dict, list))
        quote = "; put it in quotes" if error.validator_value == "string" and scalar else ""
        if error.schema.get("format") == "duration" and isinstance(error.instance, (int, float)):
            quote = "; write it with its unit, e.g. 30s"
        if error.instance is None and "enabled" in error.schema.get("properties", {}):
            quote = "; to leave it out, write {enabled: false}"  # an exporter, a datasource: null is not "off"
        return [(path, path, f"{error.instance!r} is not of type {error.validator_value}{quote}")]
    if error.validator == "format":
        if "propertyNames" in error.schema_path:
            path = path + [error.instance]
        return [(path, path, str(error.cause) if error.cause else error.message)]
    if error.validator in ("minLength", "minItems", "minProperties"):
        expected = error.schema.get("x-expected", "at least one value")
        return [(path, path, f"{error.instance!r} is empty; write {expected}")]
    expected = error.schema.get("x-expected")
    if error.validator in ("pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and expected:
        return [(path, path, f"{error.instance!r} is not {expected}")]
    if error.validator == "pattern":
        return [(path, path, f"{error.instance!r} is not matching {error.validator_value}")]
    return [(path, path, error.message)]


def validate(doc: Any, sources: list[tuple[Path, Any]]) -> None:
    """Raise UserError listing every problem, schema and config_checks alike, blaming the last file that sets
    the key (for a conflict between keys, any of them: the site file that set one is where to fix it; when that
    is a list replacing an earlier file's, the line says so).
    A key the schema already refuses gets no second line from the checks that assume it valid."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=config_checks.FORMATS)
    found = [(path, [held], message) for error in validator.iter_errors(doc) for path, held, message in _explain(error)]
    refused = [path for path, _, _ in found]
    checked = [(path, [path], message) for path, message in config_checks.problems(doc)]
    checked += [(path, [path, *others], message) for path, others, message in config_checks.conflicts(doc)]
    found += [
        (path, held, message)
        for path, held, message in checked
        if not any(key[: len(r)] == r for key in held for r in refused)
    ]
    # A line each, except the keys left to an earlier file that refer into a list a later one replaced: one line
    # per list and key, naming every value that no longer exists.
    lines: dict[str | tuple[Path, str, Path, str], list[Any]] = {}
    for path, held, message in sorted(found, key=lambda f: (list(map(str, f[0])), f[2])):
        blamed, blamed_doc = next(
            ((p, d) for p, d in reversed(sources) if any(_holds(d, key) for key in held)), sources[-1]
        )
        replaced = _replaced_list(sources, blamed_doc, path, held)
        if replaced is None:
            lines.setdefault(f"config error: {blamed}: {_key_path(path)}: {message}", [])
        else:
            lines.setdefault((blamed, *replaced), []).append(_at(doc, path))
    if lines:
        raise UserError(
            [line if isinstance(line, str) else _left_behind(*line, values) for line, values in lines.items()]
        )


def _replaced_list(
    sources: list[tuple[Path, Any]], doc: Any, path: list[Any], held: list[list[Any]]
) -> tuple[str, Path, str] | None:
    """When `doc` leaves `path` to an earlier file and replaced that file's list at another held key (lists
    replace, so `path` still names values of the list it dropped): that list's key, the earlier file, and the
    first key of `path` that `doc` does not set."""
    if _holds(doc, path):
        return None
    origin, origin_doc = next(((p, d) for p, d in reversed(sources) if _holds(d, path)), (None, None))
    replaced = [key for key in held[1:] if isinstance(_at(doc, key), list) and isinstance(_at(origin_doc, key), list)]
    if origin is None or not replaced:
        return None
    unset = next(path[:n] for n in range(1, len(path) + 1) if not _holds(doc, path[:n]))
    return _key_path(replaced[0]), origin, _key_path(unset)


def _left_behind(blamed: Path, replaced: str, origin: Path, unset: str, values: list[Any]) -> str:
    """One line for every value that `unset`, left to `origin`, names in the list `blamed` replaced."""
    distinct = list(dict.fromkeys(repr(value) for value in values))
    names, exist, them = ("name", "exist", "them") if len(distinct) > 1 else ("names", "exists", "it")
    return (
        f"config error: {blamed}: {replaced}: this list replaced the one of {origin} (lists replace, mappings "
        f"merge), but {unset} of {origin} still {names} {', '.join(distinct)}, which no longer {exist}; "
        f"list {them} too, or set {unset} as well"
    )


def refusal(config: Config, problems: list[tuple[list[Any], str]]) -> UserError:
    """Problems of a loaded config that only the build can find (config_checks.unrouted_teams), as the config
    errors of a load: one line each, blaming the last file that sets the key."""
    docs = [
        (Path(origin), _read_yaml(DEFAULT_CONFIG if index == 0 else Path(origin)))
        for index, origin in enumerate(config.origin)
    ]
    return UserError(
        [
            f"config error: {next((p for p, d in reversed(docs) if _holds(d, path)), docs[-1][0])}: "
            f"{_key_path(path)}: {message}"
            for path, message in problems
        ]
    )


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
            raise UserError(
                f"config error: {site_path}: top level must be a mapping of keys, got {type(site_doc).__name__}"
            )
        sources.append((site_path, site_doc))
        merged = merge(default_doc, site_doc)
    validate(merged, sources)
    # Rule groups evaluate at the scrape interval unless the site sets its own.
    merged = {**merged, "evaluation_interval": merged.get("evaluation_interval", merged["scrape_interval"])}
    return Config(data=_as_families(merged), origin=tuple(str(p) for p, _ in sources))


def _as_families(doc: dict[str, Any]) -> dict[str, Any]:
    """Each exporter's `versions` as the families its releases belong to, each once, in order: everything after
    loading reads families only, so a site that writes a release builds the same bytes as one that writes its
    family."""
    out = copy.deepcopy(doc)
    for role, settings in out["exporters"].items():
        covered = catalogue.load()[role].releases if role in catalogue.load() else None
        if covered is not None and "versions" in settings:
            settings["versions"] = list(dict.fromkeys(covered.family(v) for v in settings["versions"]))
    return out
