"""The catalogue is well formed and every raw metric that rules and dashboards read is in it."""
import json

import yaml

from hpcobs import catalogue, lint
from hpcobs.sources import Sources


def recorded_names(generated):
    names = set()
    for path, text in generated.items():
        if path.startswith("prometheus/rules/"):
            for group in yaml.safe_load(text)["groups"]:
                names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def expressions(generated):
    for path, text in generated.items():
        if path.startswith("prometheus/rules/"):
            for group in yaml.safe_load(text)["groups"]:
                for rule in group["rules"]:
                    yield path, rule["expr"]
        elif path.startswith("grafana/dashboards/"):
            dashboard = json.loads(text)
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    yield path, target["expr"]
            for variable in dashboard["templating"]["list"]:
                if variable["type"] == "query":
                    yield path, variable["query"]


def test_every_catalogue_file_loads():
    exporters = catalogue.load()
    assert {"dcgm", "amd", "node_exporter", "slurm_sckyzo", "slurm_native", "slurm_jontk", "job_info", "lustre",
            "falco", "tetragon", "nccl_inspector", "training"} <= set(exporters)
    for exporter in exporters.values():
        for metric in exporter.all_metrics():
            assert metric.source and metric.help, (exporter.id, metric.signal)


def test_dcgm_versions_resolve_names_units_and_host_labels():
    dcgm = catalogue.load()["dcgm"]
    assert [dcgm.host_label(v) for v in dcgm.versions] == ["Hostname", "hostname", "hostname", "hostname"]
    util = [dcgm.metric("gpu_utilization", v) for v in dcgm.versions]
    assert [(m.name, m.unit) for m in util] == [("DCGM_FI_DEV_GPU_UTIL", "percent")] * 2 + [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio")] * 2
    assert dcgm.metric("pcie_tx_rate", "4.9").name == "DCGM_FI_PROF_PCIE_TX_BYTES"
    assert dcgm.metric("pcie_tx_rate", "4.10+").name == "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
    assert dcgm.metric("fb_capacity", "4.6-4.8") is None
    assert dcgm.info_labels("4.9")[-1] == "DCGM_FI_SYSTEM_DRIVER_VERSION"


def test_every_raw_metric_read_is_in_the_catalogue(generated, config):
    known = {m.name for source in Sources(config) for v in source.versions
             for s in source.exporter.signals() if (m := source.metric(s, v))}
    known |= {m.name for m in catalogue.load()["prometheus"].all_metrics()}
    recorded = recorded_names(generated)
    for path, expr in expressions(generated):
        unknown = lint.metric_names(expr) - known - recorded
        assert not unknown, f"{path}: {expr} reads {unknown}, neither in the catalogue nor recorded"


def test_site_overrides_and_prefixes_reach_the_names(tmp_path):
    from hpcobs import config as config_module
    site = tmp_path / "site.yaml"
    site.write_text("exporters:\n  amd:\n    enabled: true\n    metric_prefix: amd_\n"
                    "  dcgm:\n    metric_names: {row_remap_pending: MY_REMAP_PENDING}\n")
    sources = Sources(config_module.load(site))
    assert sources["amd"].name(sources["amd"].exporter.signals()[0]).startswith("amd_")
    assert sources["dcgm"].name("row_remap_pending", "4.6-4.8") == "MY_REMAP_PENDING"
