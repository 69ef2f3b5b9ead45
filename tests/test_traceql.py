"""Every TraceQL query the dashboards open in Tempo parses with Grafana's own grammar (@grafana/lezer-traceql, the
parser of Grafana's Tempo query editor, run by node from tests/traceql/: `npm ci --prefix tests/traceql`), filters
only on what the training helper sets on its spans, and names only variables its dashboard has."""

import http.server
import json
import re
import threading
from urllib.parse import parse_qs, unquote, urlsplit

import hpcobs_training
import pytest

from dashboards import training
from hpcobs.authoring import traceql
from hpcobs.build import pipeline
from hpcobs.delivery import preview
from hpcobs.settings import config as config_module
from tests.test_dashboard_training import RANK_STEP_SECONDS, TRAINING, Cluster
from tests.test_dashboards import DASHBOARDS, panels
from tests.test_logql import parse as parse_with

TRACEQL = ("traceql", "lezer-traceql")
EXPLORE = re.compile(r"/explore\?[^\s)\"]+")
# A Grafana variable as a link names it: $name, ${name}, ${name:format}, a data link's ${__data.fields.<label>}.
VARIABLE = re.compile(r"\$\{([A-Za-z_][\w.]*)(?::\w+)?\}|\$([A-Za-z_]\w*)")
DATA_FIELD = "__data.fields."
BUILTIN = {"__from", "__to"}
# A condition of a span selector: a scoped attribute or the name intrinsic, its operator and its value.
CONDITION = re.compile(r"(?:(resource|span)\.([\w.]+)|\b(name))\s*(=~|!~|!=|>=|<=|=|>|<)\s*(\"(?:[^\"\\]|\\.)*\"|\w+)")


def parse(queries: list[str]) -> list[str | None]:
    return parse_with(queries, *TRACEQL)


def _strings(value, where=()):
    """(path of keys, string) of every string in a built dashboard."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*where, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*where, index))


def _tempo_queries(url: str) -> list[str]:
    panes = json.loads(parse_qs(urlsplit(url).query)["panes"][0])
    return [q["query"] for pane in panes.values() for q in pane["queries"] if q["datasource"]["type"] == "tempo"]


@pytest.fixture(scope="module")
def traceql_queries(generated):
    """(dashboard, where, TraceQL as written, with Grafana's values decoded as Explore reads them): every Tempo
    query of every Explore link (dashboard links, data links, Markdown) and of every panel target on Tempo."""
    found = []
    for path, text in sorted(generated.items()):
        if not path.startswith(DASHBOARDS):
            continue
        dashboard = json.loads(text)
        for where, string in _strings(dashboard):
            for url in EXPLORE.findall(string):
                found += [(dashboard, where, query) for query in _tempo_queries(url)]
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                if target.get("datasource", panel.get("datasource", {}))["type"] == "tempo":
                    found.append((dashboard, ("panel", panel["title"]), target["query"]))
    return found


def sample(query: str) -> str:
    """The query as Tempo receives it for a job 4242 and a rank 7 (Explore decodes the percent-encoded values)."""
    return unquote(VARIABLE.sub(lambda m: "4242" if (m[1] or m[2]) == "hpc_job" else "7", query))


def test_every_traceql_query_parses(traceql_queries):
    # The training dashboard: slow steps of $rank, of every rank, of a rank cell's rank, and the job's spans.
    assert len({query for _, _, query in traceql_queries}) >= 4, traceql_queries
    verdicts = parse([sample(query) for _, _, query in traceql_queries])
    errors = [
        f"{dashboard['uid']} {where}: {query}\n    {error}"
        for (dashboard, where, query), error in zip(traceql_queries, verdicts)
        if error
    ]
    assert not errors, "TraceQL that Grafana cannot parse:\n" + "\n".join(errors)


def test_the_parser_rejects_broken_traceql(traceql_queries):
    """The check is not vacuous: broken variants of a real dashboard query and classic mistakes fail."""
    real = sample(traceql_queries[0][2])
    broken = [
        real.replace("}", "", 1),  # unbalanced brace
        real.replace("&&", "and", 1),  # SQL's conjunction
        '{ resource.hpc_job = "4242" && }',  # a dangling conjunction
        '{ resource.hpc_job == "4242" }',  # not TraceQL's equality
        '{ resource.hpc_job = "4242 }',  # unterminated string
        "",
    ]
    verdicts = parse([real, "{ span.hpcobs.slow = true } | select(span.hpcobs.step)", *broken])
    assert verdicts[:2] == [None, None]
    assert all(verdicts[2:]), dict(zip(broken, verdicts[2:]))


def conditions(query: str) -> list[tuple[str, str, str]]:
    """(attribute as `scope.name` or `name`, operator, value) of each condition of a query."""
    return [(f"{m[1]}.{m[2]}" if m[1] else m[3], m[4], m[5]) for m in CONDITION.finditer(query)]


def test_every_query_filters_on_what_the_dashboard_declares_the_helper_sets(traceql_queries):
    declared = {training.JOB_ATTRIBUTE, training.RANK_ATTRIBUTE, training.SLOW_ATTRIBUTE, traceql.NAME}
    used = {attribute for _, _, query in traceql_queries for attribute, _, _ in conditions(query)}
    assert used <= declared, used - declared
    names = {
        value for _, _, query in traceql_queries for attribute, _, value in conditions(query) if attribute == "name"
    }
    assert names == {json.dumps(training.STEP_SPAN)}
    assert all(conditions(query) for _, _, query in traceql_queries)


def test_every_link_variable_exists_in_its_dashboard(traceql_queries):
    """A dashboard variable the dashboard has; a data link's row value a label column the link sits on."""
    wrong = []
    for dashboard, where, query in traceql_queries:
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        for match in VARIABLE.finditer(query):
            name = match[1] or match[2]
            if name.startswith(DATA_FIELD):
                override = _containing_override(dashboard, where)
                if override is None or name.removeprefix(DATA_FIELD) not in override["matcher"]["options"]["names"]:
                    wrong.append((dashboard["uid"], where, name))
            elif name not in variables | BUILTIN:
                wrong.append((dashboard["uid"], where, name))
    assert not wrong


def _containing_override(dashboard: dict, where: tuple) -> dict | None:
    """The field override a data link at `where` belongs to (…, "overrides", i, "properties", …)."""
    node: object = dashboard
    for key in where:
        if key == "properties" and isinstance(node, dict) and "matcher" in node:
            return node
        node = node[key]  # type: ignore[index]
    return None


def test_the_rank_cell_links_its_rows_rank(traceql_queries):
    cell = [query for _, where, query in traceql_queries if "overrides" in where]
    assert cell and all("${__data.fields.rank:percentencode}" in query for query in cell), cell


def test_the_rank_variable_defaults_to_the_slowest_rank(generated):
    """Grafana selects a variable's first option when the dashboard opens: the ranks keep sort_desc's order."""
    dashboard = json.loads(generated[TRAINING])
    shown = preview.resolve(dashboard, Cluster(), preview.Window(1_700_000_000, 1_700_021_600)).shown
    slowest, _ = RANK_STEP_SECONDS[0]
    assert shown["rank"] == slowest != min(rank for rank, _ in RANK_STEP_SECONDS)


def test_without_tempo_no_link_opens_it(tmp_path):
    """Nor the rank cell's, an override's data link; the rank variable, which only the links read, goes too."""
    site = tmp_path / "site.yaml"
    site.write_text("grafana:\n  datasources:\n    tempo: {enabled: false}\n", encoding="utf-8")
    dashboard = json.loads(pipeline.generate(config_module.load(site))[TRAINING])
    assert not [string for _, string in _strings(dashboard) if "tempo" in string]
    assert "rank" not in {variable["name"] for variable in dashboard["templating"]["list"]}


def test_literals_are_escaped_and_variables_percent_encoded():
    """A literal's quotes and backslashes are escaped; a variable's value is percent-encoded into the link, so a
    `&` or `#` in it cannot end the URL's parameter."""
    query = traceql.spans([(training.JOB_ATTRIBUTE, training.JOB), ("name", 'a "quoted" \\ step')])
    assert query == '{ resource.hpc_job = "${hpc_job:percentencode}" && name = "a \\"quoted\\" \\\\ step" }'
    assert parse([query.replace("${hpc_job:percentencode}", "4242")]) == [None]


# --------------------------------------------------------------------------------------------- the helper's spans

HELPER_CONSTANTS = ("STEP_SPAN", "RESOURCE_ATTRIBUTES", "SPAN_ATTRIBUTES")


@pytest.fixture
def helper():
    if not all(hasattr(hpcobs_training, name) for name in HELPER_CONSTANTS):
        pytest.skip("this hpcobs_training has no traces yet (STEP_SPAN, RESOURCE_ATTRIBUTES, SPAN_ATTRIBUTES)")
    return hpcobs_training


def test_the_declared_names_are_the_helpers(helper):
    assert training.STEP_SPAN == helper.STEP_SPAN
    for attribute in (training.JOB_ATTRIBUTE, training.RANK_ATTRIBUTE):
        scope, name = attribute.split(".", 1)
        assert scope == "resource" and name in helper.RESOURCE_ATTRIBUTES
    scope, name = training.SLOW_ATTRIBUTE.split(".", 1)
    assert scope == "span" and name in helper.SPAN_ATTRIBUTES


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP traces endpoint on loopback keeping each request's body."""

    bodies: list[bytes] = []

    def do_POST(self):
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def _attributes(pairs) -> dict:
    return {pair.key: getattr(pair.value, pair.value.WhichOneof("value")) for pair in pairs}


def test_the_helper_emits_what_the_queries_filter_on(helper, tmp_path):
    """A rank's slow step, as the helper sends it over OTLP, meets the conditions of the dashboard's slow-steps
    query of its job and rank: resource hpc_job and rank, the step span's name, hpcobs.slow; phases its children."""
    export = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    _Receiver.bodies = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    durations = [0.001] * 20 + [0.05]
    tracker = helper.Tracker(
        job="4242",
        rank=7,
        local_rank=3,
        node="gpu001",
        textfile_dir=tmp_path,
        environ={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint},
        traces=True,
        sample_share=0.0,
    )
    try:
        for seconds in [0.001] * 20 + [0.05]:
            with tracker.step(tokens=1, flops=1):
                with tracker.phase("data"):
                    threading.Event().wait(seconds)
                with tracker.phase("forward"):
                    pass
    finally:
        tracker.close()
        server.shutdown()
    spans = []
    for body in _Receiver.bodies:
        request = export.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                spans += [(resource, span) for span in scope.spans]
    # A fast step may be kept too when the machine stalls it; the slow one (the 21st) must be.
    slow = [(r, span) for r, span in spans if _attributes(span.attributes).get("hpcobs.step") == len(durations)]
    assert len(slow) == 1, [span.name for _, span in spans]
    resource, step = slow[0]
    query = sample(
        traceql.spans(
            [
                (training.JOB_ATTRIBUTE, training.JOB),
                (training.RANK_ATTRIBUTE, training.RANK),
                (traceql.NAME, training.STEP_SPAN),
                (training.SLOW_ATTRIBUTE, True),
            ]
        )
    )
    met = {"resource": resource, "span": _attributes(step.attributes), "name": step.name}
    for attribute, _, value in conditions(query):
        scope, _, name = attribute.partition(".")
        got = met[scope] if scope == "name" else met[scope].get(name)
        assert json.dumps(got) == value, (attribute, got, value)
    children = {span.name for _, span in spans if span.parent_span_id == step.span_id}
    assert children == {"data", "forward"}
