"""The node dashboard (issue 30): everything about ONE node, the target of every node link; the GPU cluster and
network dashboards no longer carry a one-node row of their own."""

import json
import re

import pytest

from dashboards import common, node
from hpcobs.authoring.context import Context
from hpcobs.authoring.dashboard import every_panel
from hpcobs.settings.names import DashboardUid

DASHBOARDS = "grafana/dashboards/"


@pytest.fixture(scope="module")
def by_uid(generated):
    return {d["uid"]: d for p, t in generated.items() if p.startswith(DASHBOARDS) for d in [json.loads(t)]}


@pytest.fixture(scope="module")
def node_dashboard(by_uid):
    return by_uid[DashboardUid.NODE]


def _panels(dashboard):
    return [p for p in every_panel(dashboard) if p["type"] != "row"]


def _links(panel):
    """Every data link of a panel: on all its cells, and on a column's cells (overrides)."""
    field_config = panel.get("fieldConfig", {})
    yield from (link["url"] for link in field_config.get("defaults", {}).get("links", []))
    for override in field_config.get("overrides", []):
        for prop in override["properties"]:
            if prop["id"] == "links":
                yield from (link["url"] for link in prop["value"])


def test_every_query_reads_the_selected_node(node_dashboard):
    for panel in _panels(node_dashboard):
        for target in panel["targets"]:
            # node="$node" on records, the exporter's host label on raw series (node_exporter's instance, port
            # and all), the log host label on Loki.
            assert re.search(r'\w+="\$node"|=~"\(\$node\)', target["expr"]), f"{panel['title']}: {target['expr']}"


def test_the_first_row_is_on_call_and_the_secondary_rows_are_collapsed(node_dashboard):
    rows = [p for p in node_dashboard["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == [
        "On call: node $node",
        "GPUs of node $node",
        "InfiniBand ports of node $node",
        "Filesystems of node $node",
        "Logs of node $node",
    ]
    assert [r["title"] for r in rows if r.get("collapsed")] == ["Filesystems of node $node", "Logs of node $node"]
    first = node_dashboard["panels"][1]
    assert first["title"] == "Firing alerts" and first["gridPos"]["y"] == 1
    assert 'node="$node"' in first["targets"][0]["expr"]
    on_call = {p["title"] for p in node_dashboard["panels"] if 1 <= p["gridPos"]["y"] < rows[1]["gridPos"]["y"]}
    assert {
        "Slurm state and drain reason of node $node",
        "Unhealthy GPUs of node $node",
        "InfiniBand ports not ACTIVE on node $node",
        "Jobs on node $node",
    } <= on_call


def test_its_alert_annotations_are_the_nodes(node_dashboard):
    annotation = node_dashboard["annotations"]["list"][-1]
    assert annotation["expr"].endswith('node="$node"}')


def test_variables(node_dashboard):
    variables = {v["name"]: v for v in node_dashboard["templating"]["list"]}
    assert not variables["node"].get("multi")
    assert variables["gpu"]["multi"] and variables["gpu"]["includeAll"]
    assert {"cluster", "log_selector", "log_node_label"} <= set(variables)
    assert node_dashboard["time"]["from"] == "now-6h"


def test_jobs_link_to_their_training_view(node_dashboard):
    for title in ("Jobs on node $node", "Jobs on the node's GPUs", "Firing alerts"):
        panel = next(p for p in _panels(node_dashboard) if p["title"] == title)
        assert any(f"/d/{DashboardUid.TRAINING}?" in url and "${__data.fields.hpc_job}" in url for url in _links(panel))


def test_every_node_link_opens_the_node_dashboard(by_uid):
    node_links = [
        (uid, panel["title"], url)
        for uid, dashboard in by_uid.items()
        for panel in _panels(dashboard)
        for url in _links(panel)
        if "var-node=" in url
    ]
    assert {uid for uid, _, _ in node_links} >= {DashboardUid.GPU_CLUSTER, DashboardUid.NETWORK_STORAGE}
    for uid, title, url in node_links:
        assert url.startswith(f"/d/{DashboardUid.NODE}?"), f"{uid} / {title}: {url}"


def test_the_one_node_rows_moved_here(by_uid):
    for uid in (DashboardUid.GPU_CLUSTER, DashboardUid.NETWORK_STORAGE):
        dashboard = by_uid[uid]
        assert not {"node", "gpu"} & {v["name"] for v in dashboard["templating"]["list"]}, uid
        assert not [p["title"] for p in every_panel(dashboard) if "$node" in p["title"]], uid
        assert "$node" not in json.dumps(dashboard["panels"]), uid


def test_port_states_are_words_not_codes(node_dashboard):
    ports = next(p for p in _panels(node_dashboard) if p["title"] == "InfiniBand ports of node $node")
    text = json.dumps(ports)
    assert "ACTIVE" in text and "LinkUp" in text
    assert not re.search(r"\(\d+ = ", text)


@pytest.mark.parametrize(
    "sinfo, state",
    [
        ("allocated", "alloc"),
        ("mixed", "mixed"),
        ("idle", "idle"),
        ("drained", "drain"),
        ("drained*", "drain"),
        ("draining", "draining"),
        ("down*", "down"),
        ("maint", "maint"),
    ],
)
def test_sinfo_states_become_the_shared_words(config, sinfo, state):
    """The state regex of the status line (Go's and Python's regexps both take the first alternative that matches,
    anchored at both ends by label_replace)."""
    pattern = re.search(r'"status", "([^"]+)"', node._slurm_state_now(Context(config))).group(1)
    assert re.fullmatch(pattern, sinfo).group(1) == state
    assert state in {value for value, _, _ in common.SLURM_NODE_STATE}
