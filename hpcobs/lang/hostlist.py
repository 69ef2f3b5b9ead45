"""Slurm hostlist expressions (`gpu[001-064,070],login1`), as `scontrol show hostnames` expands them: a bracket
holds comma-separated numbers and ranges, a range keeps the zero padding of its lower bound, several brackets in a
name multiply, commas outside brackets separate names (Slurm src/common/hostlist.c, `hostlist_create`)."""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
# One expanded list may not exceed this: a typo like gpu[1-99999999] should fail, not fill the memory.
LIMIT = 100_000


def expand(expression: str) -> list[str]:
    """The names an expression stands for, in order; ValueError ("problem; fix") for a malformed one."""
    names: list[str] = []
    for part in _top_level_parts(expression):
        names += _expand_one(part)
        if len(names) > LIMIT:
            raise ValueError(f"{expression!r} expands to more than {LIMIT} names; check its ranges")
    return names


def _top_level_parts(expression: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for character in expression:
        depth += {"[": 1, "]": -1}.get(character, 0)
        if depth not in (0, 1):
            raise ValueError(f"{expression!r} has unbalanced brackets; write e.g. gpu[001-064]")
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += character
    if depth:
        raise ValueError(f"{expression!r} has an unclosed bracket; write e.g. gpu[001-064]")
    return [*parts, current]


def _expand_one(name: str) -> list[str]:
    bracket = _BRACKET.search(name)
    if bracket is None:
        if not name or "]" in name:
            raise ValueError(f"{name!r} is not a host name or a hostlist expression; write e.g. gpu[001-064]")
        return [name]
    head, tail = name[: bracket.start()], name[bracket.end() :]
    rests = _expand_one(tail) if tail else [""]
    return [head + number + rest for number in _numbers(bracket.group(1), name) for rest in rests]


def _numbers(ranges: str, name: str) -> list[str]:
    out: list[str] = []
    for item in ranges.split(","):
        found = _RANGE.fullmatch(item)
        if found is None:
            raise ValueError(f"{name!r}: {item!r} is not a number or a range; write e.g. [001-064,070]")
        low, high = found.group(1), found.group(2) or found.group(1)
        if int(high) < int(low):
            raise ValueError(f"{name!r}: the range {item!r} runs backwards; write the lower bound first")
        if int(high) - int(low) >= LIMIT:
            raise ValueError(f"{name!r}: the range {item!r} has more than {LIMIT} numbers; check its bounds")
        out += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return out
