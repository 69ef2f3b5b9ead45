"""YAML is the same bytes, and reads back the same, whether PyYAML goes through libyaml or pure Python."""

import math
import random
import string

import yaml

from hpcobs.lang import render

# Characters and pieces that make emitters choose quoting, escapes, block styles or complex keys.
SPECIAL = [
    "\r",
    "\x0b",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\xad",
    "\xa0",
    "é",
    "中",
    "😀",
    "\x00",
    "\x7f",
    "\x9f",
    "\ufffe",
    "\n",
    "\n\n",
    "  ",
    ": ",
    " #",
    "- ",
    "---",
    "...",
    "yes",
    "null",
    "0x1f",
    "1e3",
    "'",
    '"',
    "~",
    "<<",
    "&a",
    "*a",
    "!!str",
    "|",
    ">",
    "{{ $labels.node }}",
]
ORDINARY = string.ascii_letters + string.digits + string.punctuation + "   \t"


class PythonDumper(yaml.SafeDumper):
    pass


PythonDumper.add_representer(str, render._str)


def python_text(data):
    return yaml.dump(
        data,
        Dumper=PythonDumper,
        sort_keys=True,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,
        indent=2,
    )


def random_text(rng):
    """Mostly ordinary text, with now and then a special piece: data goes through libyaml only when all of
    its strings are ordinary, so most strings must be."""
    return "".join(
        rng.choice(SPECIAL) if rng.random() < 0.03 else rng.choice(ORDINARY)
        for _ in range(rng.choice([0, 1, 3, 8, 20, 60, 130, 300]))
    )


def random_data(rng, depth=0):
    kind = rng.random()
    if depth > 3 or kind < 0.4:
        return rng.choice(
            [random_text(rng), random_text(rng), rng.randint(-5, 5), rng.random(), None, True, math.inf, 10**30, 1e-20]
        )
    if kind < 0.75:
        return {random_text(rng): random_data(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [random_data(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def test_yaml_text_writes_what_the_pure_python_emitter_writes():
    rng = random.Random(11)
    for _ in range(500):
        data = {"groups": random_data(rng)}
        text = render.yaml_text(data)
        assert text == python_text(data), repr(data)
        assert render.load_yaml(text) == yaml.safe_load(text)


def test_yaml_text_goes_through_libyaml_for_ordinary_text(monkeypatch):
    """Otherwise the build pays the pure-Python emitter again (about two thirds of its Python time)."""
    if not render.LIBYAML:
        return
    used = []
    monkeypatch.setattr(yaml, "dump", lambda data, Dumper, **kw: used.append(Dumper) or "")
    render.yaml_text(
        {
            "groups": [
                {
                    "name": "g",
                    "rules": [{"expr": 'sum by (node) (up{job="x"})', "record": "a:b:c"}],
                    "annotations": {"description": "Line one.\nLine two, é 中."},
                }
            ]
        }
    )
    render.yaml_text({"text": "ends with blank lines\n\n"})
    assert [issubclass(dumper, yaml.CSafeDumper) for dumper in used] == [True, False]
