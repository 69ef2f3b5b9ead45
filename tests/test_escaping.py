"""Config strings only ever fill literals (hpcobs/lang/escape.py, docs/validation.md).

Each helper is checked against its target's own rules (Go's url.QueryEscape vectors, Alertmanager's matcher
parser, Go's template lexer, the PromQL parser, RE2, Grafana's provisioning expansion). Then the property:
random hostile strings in every free-string setting are either refused when the config loads, or build an
output whose PromQL expressions, Alertmanager matchers and templates have exactly the default build's
structure, with the string back intact where it lands.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property

import promql_parser as pp
import pytest
import re2
import yaml

from hpcobs.authoring.rules import render_template
from hpcobs.build import pipeline
from hpcobs.errors import UserError
from hpcobs.lang import escape
from hpcobs.settings import config as config_module
from tests.test_dashboards import prometheus_expressions, substitute

SEED = 20240610
SAMPLES = 50
# Pieces random strings are made of: what breaks out of a literal, a template, a URL or a list.
PIECES = (
    '"',
    "\\",
    "'",
    "`",
    "{",
    "}",
    "{{",
    "}}",
    "{{ $labels.node }}",
    "$labels",
    "$node",
    "${x}",
    "[[x]]",
    "\n",
    "\t",
    "\r",
    ",",
    "=~",
    "!=",
    "=",
    "|",
    ".*",
    "(",
    ")",
    "[",
    "]",
    "é",
    "日本",
    "🚀",
    "\u2028",
    "\x01",
    " ",
    "%",
    "&",
    "?",
    "#",
    "/",
    ":",
    "+",
    "<",
    ">",
    "a",
    "Z",
    "0",
    "-",
    "_",
    '\\"',
    "\\n",
    "}}{{",
    '"}',
    'x", alertname=~".*',
)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RE2 = re2.Options()
_RE2.log_errors = False


def _load_yaml(text: str):
    return yaml.load(text, Loader=_YAML_LOADER)


def random_string(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))


# ----------------------------------------------------------------------------------------- target models

_SPACE = r"[ \t\n\f\r]*"  # RE2's \s
_AM_MATCHER = re.compile(rf"{_SPACE}([a-zA-Z_:][a-zA-Z0-9_:]*){_SPACE}(=~|=|!=|!~){_SPACE}(.*?){_SPACE}", re.S)


def am_parse_matchers(text: str) -> list[tuple[str, str, str]]:
    """Alertmanager 0.25's labels.ParseMatchers (pkg/labels/parse.go), line for line."""
    text = text.removeprefix("{").removesuffix("}")
    tokens, token, inside, escaped = [], "", False, False
    for ch in text:
        if ch == ",":
            if not inside:
                tokens.append(token)
                token = ""
                continue
        elif ch == '"':
            if not escaped:
                inside = not inside
            else:
                escaped = False
        elif ch == "\\":
            escaped = not escaped
        else:
            escaped = False
        token += ch
    if token.strip(" \t\n\f\r"):
        tokens.append(token.strip(" \t\n\f\r"))
    return [am_parse_matcher(t) for t in tokens]


def am_parse_matcher(text: str) -> tuple[str, str, str]:
    """Alertmanager 0.25's labels.ParseMatcher: OpenMetrics unescaping of \\\\, \\" and \\n inside quotes."""
    match = _AM_MATCHER.fullmatch(text)
    if match is None:
        raise ValueError(f"bad matcher format: {text}")
    label, op, raw = match.groups()
    quoted = raw.startswith('"')
    raw = raw[1:] if quoted else raw
    value, escaped = [], False
    for i, ch in enumerate(raw):
        if escaped:
            escaped = False
            value.append({"n": "\n", '"': '"', "\\": "\\"}.get(ch, "\\" + ch))
        elif ch == "\\":
            if i < len(raw) - 1:
                escaped = True
            else:
                value.append("\\")
        elif ch == '"':
            if not quoted or i < len(raw) - 1:
                raise ValueError(f"matcher value contains unescaped double quote: {text}")
            quoted = False
        else:
            value.append(ch)
    if quoted:
        raise ValueError(f"matcher value contains unescaped double quote: {text}")
    return label, op, "".join(value)


def go_template(text: str) -> tuple[str, list[str]]:
    """How Go's text/template lexes a template: (the text it prints, with \\0 for each action that is not a
    plain string literal, and those actions). A `}}` inside a quoted string does not close an action."""
    out, actions, pos = [], [], 0
    while (start := text.find("{{", pos)) >= 0:
        out.append(text[pos:start])
        i = start + 2
        while not text.startswith("}}", i):
            assert i < len(text), f"unclosed action in {text!r}"
            if text[i] == '"':
                i += 1
                while text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
            elif text[i] == "`":
                i = text.index("`", i + 1)
            i += 1
        body, pos = text[start + 2 : i].strip(), i + 2
        if re.fullmatch(r'"(?:[^"\\]|\\.)*"', body):
            out.append(json.loads(body))
        else:
            out.append("\0")
            actions.append(body)
    out.append(text[pos:])
    return "".join(out), actions


def grafana_expand(value: str, env: dict[str, str] | None = None) -> str:
    """Grafana's provisioning expansion (os.Expand with `$$` kept as `$`): $NAME and ${NAME} from env."""
    env = env or {}
    return re.sub(
        r"\$(\$|\{[^}]*\}|[A-Za-z0-9_]+|)",
        lambda m: "$" if m.group(1) == "$" else env.get(m.group(1).strip("{}"), ""),
        value,
    )


# A PromQL string literal as the lexer reads it, left to right: double-quoted and single-quoted with
# backslash escapes, backquoted raw.
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', re.S)
_MATCHER = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*({_LITERAL.pattern})", re.S)


@cache
def _literal_value(literal: str) -> str:
    return pp.parse(literal).val


def promql_matchers(expr: str) -> list[tuple[str, str, str]]:
    """(label, op, value) of every matcher, each literal decoded by the PromQL parser. (Parsing the whole
    expression would also compile its regexes with Rust's regex crate, stricter than Prometheus' RE2.)"""
    return [(label, op, _literal_value(literal)) for label, op, literal in _MATCHER.findall(expr)]


def shape(expr: str) -> tuple:
    """The parsed expression with every string literal and matcher value left out, node by node in
    depth-first order (each node's kind fixes how many children follow). Literals are all made "x" where the lexer
    finds them, so a value that broke out of its quotes shows as extra structure; each must be a valid
    literal on its own."""
    for literal in _LITERAL.findall(expr):
        _literal_value(literal)
    return _shape(_LITERAL.sub('"x"', expr))


@cache
def _shape(expr: str) -> tuple:
    nodes = []

    def visit(node):
        kind = type(node).__name__
        if isinstance(node, pp.VectorSelector):
            matchers = node.matchers
            nodes.append(
                (
                    kind,
                    node.name,
                    [(m.name, str(m.op)) for m in matchers.matchers],
                    [[(m.name, str(m.op)) for m in group] for group in matchers.or_matchers],
                    str(node.offset),
                    str(node.at),
                )
            )
        elif isinstance(node, pp.MatrixSelector):
            nodes.append((kind, str(node.range)))
        elif isinstance(node, pp.Call):
            nodes.append((kind, node.func.name, len(node.args)))
        elif isinstance(node, pp.AggregateExpr):
            nodes.append((kind, str(node.op), str(node.modifier), node.param is not None))
        elif isinstance(node, pp.BinaryExpr):
            modifier = node.modifier
            nodes.append(
                (kind, str(node.op))
                + (
                    (str(modifier.card), str(modifier.matching), modifier.group_labels, modifier.return_bool)
                    if modifier
                    else ()
                )
            )
        elif isinstance(node, pp.SubqueryExpr):
            nodes.append((kind, str(node.range), str(node.step), str(node.offset), str(node.at)))
        elif isinstance(node, pp.NumberLiteral):
            nodes.append((kind, node.val))
        else:  # StringLiteral (its value left out), ParenExpr, UnaryExpr
            nodes.append((kind,))

    pp.walk(pp.parse(expr), visit)
    return tuple(nodes)


# ----------------------------------------------------------------------------------------- each helper

TRICKY = [
    "",
    "plain",
    'a"b',
    "a\\b",
    "a\\",
    '\\"',
    'x", mountpoint!="/never',
    "line\nbreak\r\t",
    "{{ $labels.x }}",
    "}}{{",
    "日本 🚀 é",
    "\u2028\x01\x7f",
    "a,b=~c",
    "$node ${x} [[x]]",
    "'`",
]


@pytest.mark.parametrize("value", TRICKY)
def test_promql_string_holds_the_value_exactly(value):
    matcher = escape.promql_matcher("job", "=", value)
    assert promql_matchers(f"up{{{matcher}}}") == [("job", "=", value)]
    assert [(m.name, m.value) for m in pp.parse(f"up{{{matcher}}}").matchers.matchers] == [("job", value)]
    assert shape(f'label_replace(up, {escape.promql_string(value)}, "", "a", "")') == shape(
        'label_replace(up, "", "", "a", "")'
    )


def test_promql_matcher_refuses_what_cannot_be_escaped():
    for label, op in (('job="x",a', "="), ("job", "=="), ("", "=")):
        with pytest.raises(ValueError):
            escape.promql_matcher(label, op, "v")


def test_regex_alternation_matches_exactly_the_names():
    names = ["a.b", "a|b", "(x)", "[y]", "c*", "d+?", "^e$", "f{2}", "back\\slash", "日本", "dot.", ""]
    pattern = re2.compile(f"(?:{escape.regex_alternation(names)})", _RE2)
    probes = {"axb", "a", "b", "x", "y", "c", "cc", "d", "e", "ff", "backslash", "back\\\\slash", "日", "dotx"}
    assert all(pattern.fullmatch(n) for n in names)
    assert not [p for p in probes if pattern.fullmatch(p)]


@pytest.mark.parametrize("value", TRICKY)
def test_alertmanager_matcher_parses_back_to_one_matcher(value):
    assert am_parse_matchers(escape.alertmanager_matcher("team", "=", value)) == [("team", "=", value)]


@pytest.mark.parametrize("value", TRICKY)
def test_go_template_text_prints_itself_and_runs_nothing(value):
    printed, actions = go_template(escape.go_template_text(value))
    assert (printed, actions) == (value, [])
    # Still text when code appends an action right after it.
    printed, actions = go_template(escape.go_template_text(value) + "{{ $labels.node }}")
    assert (printed, actions) == (value + "\0", ["$labels.node"])


# Go's own vectors for url.QueryEscape (net/url url_test.go, queryEscapeTests), which `urlquery` calls.
GO_QUERY_ESCAPE = [
    ("", ""),
    ("abc", "abc"),
    ("one two", "one+two"),
    ("10%", "10%25"),
    (
        " ?&=#+%!<>#\"{}|\\^[]`☺\t:/@$'()*,;",
        "+%3F%26%3D%23%2B%25%21%3C%3E%23%22%7B%7D%7C%5C%5E%5B%5D%60%E2%98%BA%09%3A%2F%40%24%27%28%29%2A%2C%3B",
    ),
]


@pytest.mark.parametrize("value, encoded", GO_QUERY_ESCAPE)
def test_url_query_is_gos_query_escape(value, encoded):
    assert escape.url_query(value) == encoded
    assert render_template("?v={{ $labels.x | urlquery }}&w={{ $labels.x }}", {"x": value}) == f"?v={encoded}&w={value}"


@pytest.mark.parametrize("value", TRICKY)
def test_grafana_provisioning_value_survives_expansion(value):
    assert grafana_expand(escape.grafana_provisioning(value), {"x": "EXPANDED", "node": "EXPANDED"}) == value


def test_render_template_prints_escaped_text_and_refuses_stray_braces():
    template = escape.go_template_text("https://h/{{ .x }}{") + "/d?var-n={{ $labels.n | urlquery }}"
    assert render_template(template, {"n": "a b"}) == "https://h/{{ .x }}{/d?var-n=a+b"
    with pytest.raises(ValueError):
        render_template("https://h/{{ .x }}", {})


def test_dashboard_urls_encode_every_label(generated):
    """Label values go into the dashboard link's query through urlquery, never raw."""
    seen = 0
    for path, text in generated.items():
        if path.endswith(".rules.yaml"):
            for group in _load_yaml(text)["groups"]:
                for rule in group["rules"]:
                    url = rule.get("annotations", {}).get("dashboard_url", "")
                    actions = go_template(url.partition("?")[2])[1]
                    seen += len(actions)
                    assert all(re.fullmatch(r"\$labels\.\w+ \| urlquery", a) for a in actions), url
    assert seen > 50


# ----------------------------------------------------------------------------------------- the property


@dataclass(frozen=True)
class Setting:
    """A free-string setting: where it goes in the site file (`keys`, as config errors name them), how a
    random string is put there (between `prefix` and `suffix`, for URLs, paths and addresses), and where it
    must land."""

    name: str
    keys: tuple[str, ...]
    put: Callable[[dict, str], None]
    lands: str  # promql | alternation | template | alertmanager | yaml | provisioning | nowhere
    prefix: str = ""
    suffix: str = ""


def _index(items: list, test: Callable[[dict], bool]) -> int:
    return next(i for i, item in enumerate(items) if test(item))


def _settings(default: dict) -> list[Setting]:
    am = default["alertmanager"]
    receivers, routes = am["receivers"], am["routes"]
    rx = {name: _index(receivers, lambda r, n=name: r["name"] == n) for name in [r["name"] for r in receivers]}
    network_route = _index(routes, lambda r: r["receiver"] == "network")
    # The team of the pager route: gpu-ops keeps its plain route, and a team without one is refused at load.
    pager_route = _index(routes, lambda r: r["receiver"] == "gpu-ops-pager")

    def at(*path):
        def put(doc, value):
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value

        return put

    def selector(*roles):
        def put(doc, value):
            for role in roles:
                doc["exporters"][role]["selector"] = "job=" + json.dumps(value, ensure_ascii=False)

        return put

    def rename(old, *extra_keys):
        def put(doc, value):
            doc["alertmanager"]["receivers"][rx[old]]["name"] = value
            for route in doc["alertmanager"]["routes"]:
                route["receiver"] = value if route["receiver"] == old else route["receiver"]
            if doc["alertmanager"]["default_receiver"] == old:
                doc["alertmanager"]["default_receiver"] = value

        return Setting(f"receiver name ({old})", (f"alertmanager.receivers[{rx[old]}].name", *extra_keys), put, "yaml")

    def names(key):
        return Setting(
            f"thresholds.{key}",
            (f"thresholds.{key}",),
            lambda doc, value: doc["thresholds"].__setitem__(key, [value, value[::-1]]),
            "alternation",
        )

    def receiver_field(receiver, field, lands, prefix="", suffix=""):
        def put(doc, value):
            doc["alertmanager"]["receivers"][rx[receiver]][field] = prefix + value + suffix

        return Setting(
            f"alertmanager.receivers[].{field}",
            (f"alertmanager.receivers[{rx[receiver]}].{field}",),
            put,
            lands,
            prefix,
            suffix,
        )

    def framed(name, path, lands, prefix="", suffix=""):
        return Setting(name, (name,), lambda doc, value: at(*path)(doc, prefix + value + suffix), lands, prefix, suffix)

    out = [
        Setting("cluster.name", ("cluster.name",), at("cluster", "name"), "promql"),
        Setting(
            "thresholds.storage_shared_mountpoints",
            ("thresholds.storage_shared_mountpoints",),
            at("thresholds", "storage_shared_mountpoints"),
            "promql",
        ),
        *[
            names(key)
            for key in (
                "security_outbound_rules",
                "security_checkpoint_rules",
                "security_checkpoint_policies",
                "security_tetragon_enforcement_actions",
            )
        ],
        framed("runbooks.base_url", ("runbooks", "base_url"), "template", "https://runbooks.example.org/"),
        framed("grafana.url", ("grafana", "url"), "template", "http://grafana.example.org/"),
        *[
            framed(
                f"grafana.datasources.{kind}.url",
                ("grafana", "datasources", kind, "url"),
                "provisioning",
                f"http://{kind}.example.org:9000/",
            )
            for kind in default["grafana"]["datasources"]
        ],
        rename("network", f"alertmanager.routes[{network_route}].receiver"),
        rename("default", "alertmanager.default_receiver"),
        receiver_field("gpu-ops", "slack_channel", "template"),
        receiver_field("default", "email_to", "template", suffix="@example.org"),
        receiver_field("job-owner", "webhook_url", "yaml", "http://job-owner.example.org:8080/"),
        receiver_field("gpu-ops", "slack_api_url_file", "yaml", "/etc/alertmanager/secrets/"),
        receiver_field("gpu-ops-pager", "pagerduty_routing_key_file", "yaml", "/etc/alertmanager/secrets/"),
        receiver_field("job-owner", "webhook_credentials_file", "yaml", "/etc/alertmanager/secrets/"),
        framed("alertmanager.smtp_from", ("alertmanager", "smtp_from"), "template", suffix="@example.org"),
        framed("alertmanager.smtp_smarthost", ("alertmanager", "smtp_smarthost"), "yaml", suffix=":25"),
        Setting(
            "alertmanager.routes[].match",
            (f"alertmanager.routes[{pager_route}].match",),
            lambda doc, value: doc["alertmanager"]["routes"][pager_route]["match"].__setitem__("team", value),
            "alertmanager",
        ),
    ]
    # Roles sharing a selector by default keep sharing it (which targets share an `up` is logic, not escaping).
    by_selector: dict[str, list[str]] = {}
    for role, settings in default["exporters"].items():
        by_selector.setdefault(settings["selector"], []).append(role)
    for roles in by_selector.values():
        enabled = any(default["exporters"][r]["enabled"] for r in roles)
        out.append(
            Setting(
                f"exporters.{'+'.join(roles)}.selector",
                tuple(f"exporters.{r}.selector" for r in roles),
                selector(*roles),
                "promql" if enabled else "nowhere",
            )
        )
    return out


def _blamed(error: UserError, settings: list[Setting]) -> set[str]:
    """The settings whose keys the error lines name (either key a prefix of the other)."""

    def related(a, b):
        return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))

    keys = [line.split(": ", 3)[2] for line in error.lines if line.count(": ") >= 3]
    return {s.name for s in settings for k in keys for own in s.keys if related(k, own)}


@dataclass
class Build:
    rules: dict  # (file, group, rule) -> rule dict
    tests: dict  # (file, test, place) -> PromQL text (series, expected labels, expressions)
    dashboards: dict  # (file, index) -> PromQL, Grafana variables substituted
    alertmanager: dict
    provisioning: dict

    @cached_property
    def rule_matchers(self) -> set[tuple[str, str, str]]:
        return {m for r in self.rules.values() for m in promql_matchers(r["expr"])}

    @cached_property
    def test_matchers(self) -> set[tuple[str, str, str]]:
        return {m for e in self.tests.values() for m in promql_matchers(e)}

    @cached_property
    def dashboard_matchers(self) -> set[tuple[str, str, str]]:
        return {m for e in self.dashboards.values() for m in promql_matchers(e)}


def _parse_build(files: dict[str, str]) -> Build:
    rules, tests, dashboards = {}, {}, {}
    for path, text in files.items():
        # The rule files beside the tests hold byte-for-byte copies of deployed rules (test_rules.py proves it).
        if path.startswith("prometheus/rules/"):
            for g, group in enumerate(_load_yaml(text)["groups"]):
                for r, rule in enumerate(group["rules"]):
                    rules[(path, g, r)] = rule
        elif path.endswith(".tests.yaml"):
            for t, test in enumerate(_load_yaml(text)["tests"]):
                for k, series in enumerate(test["input_series"]):
                    tests[(path, t, f"series {k}")] = series["series"]
                for k, check in enumerate(test.get("promql_expr_test", [])):
                    tests[(path, t, f"expr {k}")] = check["expr"]
                    for j, sample in enumerate(check["exp_samples"]):
                        tests[(path, t, f"expr {k} sample {j}")] = sample["labels"]
        elif path.startswith("grafana/dashboards/"):
            dashboard = json.loads(text)
            for i, (_, expr) in enumerate(prometheus_expressions(dashboard)):
                dashboards[(path.rsplit("/", 1)[-1], i)] = substitute(expr, dashboard)
    return Build(
        rules,
        tests,
        dashboards,
        _load_yaml(files["alertmanager/alertmanager.yml"]),
        _load_yaml(files["grafana/provisioning/datasources/hpcobs.yaml"]),
    )


@pytest.fixture(scope="module")
def default_data(config):
    return config.data


@pytest.fixture(scope="module")
def reference(generated):
    build = _parse_build(generated)
    return build, {
        "rules": {k: shape(r["expr"]) for k, r in build.rules.items()},
        "tests": {k: shape(e) for k, e in build.tests.items()},
        "dashboards": {k: shape(e) for k, e in build.dashboards.items()},
        "templates": {
            k: {a: go_template(t)[1] for a, t in r.get("annotations", {}).items()} for k, r in build.rules.items()
        },
    }


def _samples(default: dict, settings: list[Setting], tmp_path):
    """(accepted values by setting, files) for each sample; refused settings are put back to the default."""
    rng = random.Random(SEED)
    site = tmp_path / "site.yaml"
    for _ in range(SAMPLES):
        values = {s.name: random_string(rng) for s in settings}
        # Selectors stay distinct: exporters sharing one share an `up` alert, which is logic, not escaping.
        selectors = [name for name in values if name.startswith("exporters.")]
        while len({values[name] for name in selectors}) < len(selectors):
            values.update({name: random_string(rng) for name in selectors})
        active = {s.name for s in settings}
        while True:
            doc = copy.deepcopy(default)
            for s in settings:
                if s.name in active:
                    s.put(doc, values[s.name])
            site.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
            try:
                files = pipeline.generate(config_module.load(site))
            except UserError as error:
                blamed = _blamed(error, settings) & active
                assert blamed, f"refused for a reason naming no setting tried: {error}"
                active -= blamed
                continue
            break
        yield {name: values[name] for name in active}, files


def _check_structure(build: Build, ref: dict) -> None:
    for part in ("rules", "tests", "dashboards"):
        exprs = {k: (r["expr"] if part == "rules" else r) for k, r in getattr(build, part).items()}
        assert exprs.keys() == ref[part].keys(), f"{part}: expressions added or lost"
        for key, expr in exprs.items():
            assert shape(expr) == ref[part][key], f"{part} {key}: structure changed: {expr}"
    for key, rule in build.rules.items():
        for name, text in rule.get("annotations", {}).items():
            assert go_template(text)[1] == ref["templates"][key][name], f"{key} {name}: template actions changed"


def _check_alertmanager(build: Build, reference_build: Build) -> None:
    def matchers(am):
        routes = [m for r in am["route"]["routes"] for m in r["matchers"]]
        inhibit = [m for r in am["inhibit_rules"] for side in ("source_matchers", "target_matchers") for m in r[side]]
        return routes + inhibit

    got, want = matchers(build.alertmanager), matchers(reference_build.alertmanager)
    assert len(got) == len(want)
    for text, default_text in zip(got, want):
        parsed, default_parsed = am_parse_matchers(text), am_parse_matchers(default_text)
        assert [m[:2] for m in parsed] == [m[:2] for m in default_parsed], text


def _check_landing(setting: Setting, value: str, build: Build) -> None:
    """The string is back intact where it lands."""
    am = build.alertmanager
    receivers = am["receivers"]
    full = setting.prefix + value + setting.suffix
    if setting.lands == "nowhere":  # a disabled exporter's selector
        return
    if setting.name == "cluster.name":
        assert ("cluster", "=", value) in build.test_matchers
    elif setting.name == "thresholds.storage_shared_mountpoints":
        assert ("mountpoint", "!~", value) in build.rule_matchers
    elif setting.name.startswith("exporters."):
        assert ("job", "=", value) in build.rule_matchers | build.dashboard_matchers
    elif setting.lands == "alternation":
        configured = {value, value[::-1]}
        regexes = {
            m[2]
            for m in build.rule_matchers | build.dashboard_matchers
            if m[0] in ("rule_name", "policy", "action") and m[1] == "=~"
        }
        probes = configured | {p for n in configured for p in (n + "x", "x" + n, n[:-1], n[1:], *re.split(r"[|.*]", n))}
        matched = [{p for p in probes if re2.compile(f"(?:{r})", _RE2).fullmatch(p)} for r in regexes]
        assert configured in matched, f"no matcher selects exactly {configured!r}"
    elif setting.name in ("runbooks.base_url", "grafana.url"):
        annotation, tail = {"runbooks.base_url": ("runbook_url", "/"), "grafana.url": ("dashboard_url", "/d/")}[
            setting.name
        ]
        # An alert whose view the build does not write has no dashboard_url (tests/test_dashboard_links.py).
        links = [r["annotations"][annotation] for r in build.rules.values() if annotation in r.get("annotations", {})]
        assert links and all(go_template(link)[0].startswith(full + tail) for link in links)
    elif setting.lands == "provisioning":
        kind = setting.name.split(".")[2]
        provisioned = next(d for d in build.provisioning["datasources"] if d["type"] == kind)
        assert grafana_expand(provisioned["url"], {"x": "EXPANDED", "node": "EXPANDED"}) == full
    elif setting.name.startswith("receiver name"):
        assert value in [r["name"] for r in receivers]
        assert value in [am["route"]["receiver"], *[r["receiver"] for r in am["route"]["routes"]]]
    elif setting.name.endswith(("slack_channel", "email_to")):
        block, field = (
            ("slack_configs", "channel") if setting.name.endswith("slack_channel") else ("email_configs", "to")
        )
        assert (full, []) in [go_template(c[field]) for r in receivers for c in r.get(block, [])]
    elif setting.name == "alertmanager.smtp_from":  # on every e-mail block (the subtree has no `global`)
        assert (full, []) in [go_template(c["from"]) for r in receivers for c in r.get("email_configs", [])]
    elif setting.name == "alertmanager.smtp_smarthost":
        assert full in [c["smarthost"] for r in receivers for c in r.get("email_configs", [])]
    elif setting.lands == "yaml":  # webhook URL and secret file paths: YAML values, nothing expands them
        configs = [c for r in receivers for block in r.values() if isinstance(block, list) for c in block]
        written = (
            {c.get("url") for c in configs}
            | {c.get("api_url_file") for c in configs}
            | {c.get("routing_key_file") for c in configs}
            | {c.get("http_config", {}).get("authorization", {}).get("credentials_file") for c in configs}
        )
        assert full in written
    else:
        assert setting.name == "alertmanager.routes[].match", setting.name
        assert ("team", "=", value) in [am_parse_matcher(m) for r in am["route"]["routes"] for m in r["matchers"]]


def test_random_strings_only_fill_literals(default_data, reference, tmp_path):
    """Every free-string setting, ~50 random hostile strings each: refused at load, or the same structure."""
    reference_build, ref = reference
    settings = _settings(default_data)
    accepted = {s.name: 0 for s in settings}
    for values, files in _samples(default_data, settings, tmp_path):
        build = _parse_build(files)
        _check_structure(build, ref)
        _check_alertmanager(build, reference_build)
        for setting in settings:
            if setting.name in values:
                accepted[setting.name] += 1
                _check_landing(setting, values[setting.name], build)
    # A setting refusing every random string is validated, not escaped (docs/validation.md says which).
    escaped = {s.name for s in settings if s.lands in ("promql", "alternation", "template", "alertmanager")}
    assert {name for name in escaped if accepted[name] == 0} <= VALIDATED_ONLY, accepted
    print("accepted random strings per setting:", json.dumps(accepted, indent=1))  # shown with pytest -s


# Escaped settings that validation happens to refuse outright for every random string (none today).
VALIDATED_ONLY: set[str] = set()
