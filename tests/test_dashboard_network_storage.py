"""Issue 30 on the network & storage dashboard: the on-call first row says what is wrong, where and whose jobs it
hurts; no graph grows with the fleet or picks its top N at every step; one unit family for bandwidth; states as
words, not codes."""

import json
import re

import pytest
from hpcobs.dashboards import common

from hpcobs.lang import lint
from hpcobs.settings.names import DashboardUid

PATH = f"grafana/dashboards/HPC/{DashboardUid.NETWORK_STORAGE}.json"
# Labels whose values grow with the fleet: a range query keeping one of them draws a line per node, job, OST or port.
FLEET_LABELS = ("node", "hpc_job", "target", "device", "port")
BANDWIDTH_UNITS = {"Bps", "binBps", "bytes", "decbytes"}
OTHER_BANDWIDTH_UNITS = {"bps", "binbps", "KBs", "MBs", "GBs", "Kbits", "Mbits", "Gbits", "Kibits", "Mibits", "Gibits"}
A_CODE_HEADER = re.compile(r"\(\s*\d+\s*=")
A_UNIT_HEADER = re.compile(r"\((?:[KMGT]i?)?[bB](?:/s|ps)\)|/s$|\((?:ticks|errors|ops)/s\)")


@pytest.fixture(scope="module")
def rows(generated):
    """Row title -> the panels under it (a collapsed row's included), in order."""
    out: dict[str, list[dict]] = {}
    current = ""
    for panel in json.loads(generated[PATH])["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            out[current] = list(panel.get("panels", []))
        else:
            out.setdefault(current, []).append(panel)
    return out


@pytest.fixture(scope="module")
def judged(rows):
    return [panel for panels in rows.values() for panel in panels]


def _exprs(panel):
    return " ".join(target["expr"] for target in panel.get("targets", []))


def _headers(panel):
    renamed = [t["options"].get("renameByName", {}) for t in panel.get("transformations", []) if t["id"] == "organize"]
    return [header for names in renamed for header in names.values()]


def _override(panel, name, prop):
    for override in panel["fieldConfig"].get("overrides", []):
        if name in override["matcher"]["options"].get("names", []):
            for item in override["properties"]:
                if item["id"] == prop:
                    return item["value"]
    return None


def test_the_first_row_says_what_is_wrong_where_and_whose_jobs(rows):
    title, first = next(iter(rows.items()))
    by_title = {panel["title"]: panel for panel in first}
    alerts = by_title["Firing alerts"]
    assert 'ALERTS{alertstate="firing", alertname=~"(Ib|Storage).*"' in _exprs(alerts)

    ports = next(p for p in first if "port:ib_not_active:state{" in _exprs(p))
    words = {entry["text"] for entry in _override(ports, "State", "mappings")[0]["options"].values()}
    assert {"DOWN", "INIT", "ACTIVE"} <= words
    physical = {entry["text"] for entry in _override(ports, "Physical state", "mappings")[0]["options"].values()}
    assert {"Polling", "LinkUp"} <= physical
    assert _override(ports, "node", "links")

    jobs = next(p for p in first if "node:ib_ports_not_active:count{" in _exprs(p))
    kept = jobs["transformations"][0]["options"]["include"]["pattern"]
    assert all(label in kept for label in ("node", "hpc_job", "user")), kept
    assert _override(jobs, "node", "links") and _override(jobs, "hpc_job", "links")

    assert any("fs:lustre_ost_used:ratio{" in _exprs(p) for p in first), "no OST in trouble on the first screen"
    assert title and all(panel["gridPos"]["y"] < 16 for panel in first)


def _range_targets(panels):
    for panel in panels:
        if panel.get("datasource", {}).get("type") != "prometheus":
            continue
        for target in panel.get("targets", []):
            if not target.get("instant"):
                yield panel["title"], target


def _one_entity(expr):
    """A query of one node or one job ($node, $hpc_job pinned) may draw its GPUs, ports or ranks."""
    return re.search(r'(node|hpc_job)="\$(node|hpc_job)"', expr) is not None


def test_no_range_query_draws_a_line_per_node_job_ost_or_port(judged):
    growing = []
    for title, target in _range_targets(judged):
        if _one_entity(target["expr"]):
            continue
        legend = target.get("legendFormat", "")
        names = lint.metric_names(target["expr"])
        per_entity = [n for n in names if n.split(":")[0] in ("node", "job", "port") and ":" in n]
        bare = per_entity and not re.search(r"\b(sum|avg|min|max|count|quantile)\b", target["expr"])
        if any(f"{{{{{label}}}}}" in legend for label in FLEET_LABELS) or bare:
            growing.append(f"{title}: {target['expr'][:100]}")
    assert not growing, "\n".join(growing)


def test_no_topk_or_bottomk_in_a_range_query(judged):
    found = [title for title, target in _range_targets(judged) if re.search(r"\b(topk|bottomk)\b", target["expr"])]
    assert not found, found


def _units(panel):
    defaults = panel["fieldConfig"]["defaults"].get("unit")
    overrides = [
        item["value"]
        for override in panel["fieldConfig"].get("overrides", [])
        for item in override["properties"]
        if item["id"] == "unit"
    ]
    return [unit for unit in (defaults, *overrides) if unit]


def test_bandwidth_is_one_unit_family_with_units_in_fields_not_headers(judged):
    units = {unit for panel in judged for unit in _units(panel)}
    assert units & BANDWIDTH_UNITS and not units & OTHER_BANDWIDTH_UNITS, units
    in_headers = [(p["title"], h) for p in judged for h in _headers(p) if A_UNIT_HEADER.search(h)]
    assert not in_headers, in_headers
    rescaled = [p["title"] for p in judged if re.search(r"[*/]\s*(8|1e9|1e6)\b", _exprs(p))]
    assert not rescaled, f"bandwidth rescaled in the query instead of by its unit: {rescaled}"


def test_states_are_words_not_codes(judged):
    coded = [(p["title"], h) for p in judged for h in [p["title"], *_headers(p)] if A_CODE_HEADER.search(h)]
    assert not coded, coded
    for panel in (p for p in judged if "ib_not_active:" in _exprs(p)):
        for header in _headers(panel):
            if header in ("State", "Physical state"):
                words = {entry["text"] for entry in _override(panel, header, "mappings")[0]["options"].values()}
                mapping = common.IB_PORT_STATE if header == "State" else common.IB_PHYSICAL_STATE
                assert words == {text for _, text, _ in mapping}, (panel["title"], header)


def test_secondary_rows_are_collapsed(generated):
    rows = [p for p in json.loads(generated[PATH])["panels"] if p["type"] == "row"]
    collapsed = {row["title"] for row in rows if row.get("collapsed")}
    assert {"NCCL", "Lustre and NFS I/O", "Filesystem fill"} <= collapsed, collapsed
    assert not rows[0].get("collapsed")


@pytest.mark.parametrize(
    ("expr", "kept_by_a_condition"),
    [
        ("x != 4 and on (node, port) y", True),  # the ports not ACTIVE, one series each
        ("x and on (node, port) (y != 4) and on (node, port) z", True),
        ("x and on (node) y", False),
        ("x > bool 0 and on (node) y", False),
    ],
)
def test_a_selection_kept_by_a_comparison_is_counted_as_sparse(expr, kept_by_a_condition):
    """The budget counts the per-port records of the on-call row for the faulty share of the fleet only."""
    assert lint.counts_a_condition(expr) is kept_by_a_condition
