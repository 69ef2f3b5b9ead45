"""The Training dashboard is the job view an on-call engineer lands on (issue 30): a header saying whose job it is
and how it is doing, the newest running job by default, and logs of the job's nodes only."""

import json
import re

import pytest
from grafana_foundation_sdk.models.dashboard import VariableSort

from hpcobs.authoring.dashboard import every_panel
from hpcobs.delivery import preview
from hpcobs.settings.names import DashboardUid

TRAINING = f"grafana/dashboards/HPC/{DashboardUid.TRAINING}.json"
# A cluster as Prometheus answers the dashboard's variable queries: job 11 ran earlier in the range and ended (its
# label values are still listed over the range); 9, 10 and 100 hold GPUs now; job 100 runs on two nodes.
ENDED, RUNNING, NEWEST = "11", ("9", "10", "100"), "100"
JOB_NODES = ("gpu007", "gpu012")
# The job's ranks and step times, slowest first as the rank variable's sort_desc returns them.
RANK_STEP_SECONDS = (("7", "1.9"), ("12", "1.1"), ("3", "1.0"))


class Cluster:
    def get(self, path, params):
        if path == "/api/v1/query" and "hpcobs_training_step_seconds_total" in params["query"]:
            series = [
                {"cluster": "gpu-prod", "hpc_job": NEWEST, "rank": r, "node": JOB_NODES[0]}
                for r, _ in RANK_STEP_SECONDS
            ]
            return {
                "result": [{"metric": s, "value": [params["time"], v]} for s, (_, v) in zip(series, RANK_STEP_SECONDS)]
            }
        if path == "/api/v1/query":
            assert "job:gpus_allocated:count" in params["query"]
            series = [{"__name__": "job:gpus_allocated:count", "cluster": "gpu-prod", "hpc_job": j} for j in RUNNING]
            return {"result": [{"metric": s, "value": [params["time"], "8"]} for s in series]}
        label = re.fullmatch(r"/api/v1/label/(\w+)/values", path).group(1)
        return {
            "cluster": ["gpu-prod"],
            "account": ["llm"],
            "user": ["alice"],
            "hpc_job": sorted([*RUNNING, ENDED]),
            "node": list(JOB_NODES),
        }[label]


@pytest.fixture(scope="module")
def training(generated):
    return json.loads(generated[TRAINING])


@pytest.fixture(scope="module")
def resolved(training):
    return preview.resolve(training, Cluster(), preview.Window(1_700_000_000, 1_700_021_600))


def _header(training):
    """The panels of the first row, in order."""
    (first, *rest) = training["panels"]
    following = next(i for i, panel in enumerate(rest) if panel["type"] == "row")
    return first, rest[:following]


def test_the_first_row_is_the_job_header(training):
    row, panels = _header(training)
    assert row["title"] == "Job $hpc_job" and not row.get("collapsed")
    exprs = {panel["title"]: " ".join(t["expr"] for t in panel["targets"]) for panel in panels}
    alerts = exprs.pop("Firing alerts")
    assert 'hpc_job="$hpc_job"' in alerts.split(" * on ")[0], "the alerts are this job's"
    owner = next(p for p in panels if "job:slurm_job_info:max" in exprs.get(p["title"], ""))
    assert all(f"{{{{{label}}}}}" in owner["targets"][0]["legendFormat"] for label in ("user", "account", "partition"))
    wanted = {
        "GPUs": "job:gpus_allocated:count",
        "nodes": "gpu:job:info",
        "start": "slurm_job_start_time_seconds",
        "state": "job:slurm_job_info:max",
        "efficiency": "job:gpu_utilization:avg",
        "idle GPUs": "job:gpus_allocated_idle:count",
    }
    missing = [what for what, series in wanted.items() if not any(series in expr for expr in exprs.values())]
    assert not missing, missing
    every = {panel["title"]: panel for panel in panels}
    assert every["Job started"]["fieldConfig"]["defaults"]["unit"].startswith("dateTime")
    steps = every["Mean GPU utilisation of the job"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [step["color"] for step in steps] == ["red", "orange", "green"], "graded like every utilisation"
    assert all(panel["description"] and panel["fieldConfig"]["defaults"].get("unit") for panel in panels)


def test_the_job_variable_defaults_to_the_newest_running_job(training, resolved):
    job = next(v for v in training["templating"]["list"] if v["name"] == "hpc_job")
    assert job["query"].startswith("query_result("), "jobs running now, not every job seen over the range"
    assert job["sort"] == VariableSort.NUMERICAL_DESC
    assert resolved.shown["hpc_job"] == NEWEST


def test_the_logs_read_the_job_s_nodes_only_even_at_all(training, resolved):
    assert resolved.shown["node"] == "All"
    (log_query,) = [t["expr"] for p in every_panel(training) if p["type"] == "logs" for t in p["targets"]]
    substituted = preview.substituted(log_query, resolved.query)
    assert f'host=~"({"|".join(JOB_NODES)})"' in substituted, substituted


def test_secondary_rows_are_collapsed(training):
    collapsed = {row["title"] for row in training["panels"] if row["type"] == "row" and row.get("collapsed")}
    assert {"NCCL detail", "Logs and traces"} <= collapsed
