"""The site matrix: the configurations real sites write, each built and its every promtool test run.

tests/sites/*.yaml are site files as sites write them (a first-line comment says which site each stands for):
scrape intervals from 5 s to 2 m, evaluation intervals of their own, each dcgm-exporter family alone, AMD only,
no job info, each optional exporter disabled alone and all together, a cluster label of the site's own, collection
sharded over two vmagents (docs/scale-out.md). Beside
them, two fleets built from the catalogue: every dcgm-exporter family in one cluster, with and without AMD nodes,
Slurm's native metrics and jontk's job info. All builds share one promtool pool and the suite's cache.
"""

from pathlib import Path

import pytest
import yaml

from hpcobs.exporters import catalogue
from tests.conftest import built_sites

SITE_FILES = Path(__file__).parent / "sites"
GPU_RULES = "prometheus/rules/gpu.rules.yaml"
FAMILIES = list(catalogue.load()["dcgm"].versions)
EVERY_FAMILY = f"exporters:\n  dcgm:\n    versions: {FAMILIES}\n"
# 3.x-4.5 (Hostname), 4.6-4.8 (hostname), 4.9 (renamed, SI) and 4.10+ side by side in the GPU rules.
EVERY_SPELLING = (
    '"Hostname"',
    '"hostname"',
    "DCGM_FI_DEV_GPU_UTIL{",
    "DCGM_FI_DEV_GPU_UTIL_RATIO{",
    "DCGM_FI_DEV_XID_ERRORS{",
    "DCGM_FI_DEV_XID_ERROR{",
)
# Site -> its file's text, strings its GPU rules must hold, strings no file it generates may hold.
SITES = {
    path.stem: (path.read_text(encoding="utf-8"), (), ("DCGM_",) if path.stem == "amd-only" else ())
    for path in sorted(SITE_FILES.glob("*.yaml"))
} | {
    "every-dcgm-family": (EVERY_FAMILY, EVERY_SPELLING, ()),
    "every-dcgm-family+amd+slurm-native+jontk": (
        EVERY_FAMILY + "  amd: {enabled: true, metric_prefix: amd_}\n  slurm: {flavour: native}\n"
        "  job_info: {source: jontk}\n",
        EVERY_SPELLING,
        (),
    ),
}
INTERVALS = ("5s", "10s", "15s", "30s", "1m", "2m")
OPTIONAL_EXPORTERS = ("lustre", "falco", "tetragon", "nccl_inspector", "training")


@pytest.fixture(scope="module")
def site_builds(tmp_path_factory, private_cache_dir):
    return built_sites(tmp_path_factory, private_cache_dir, {site: text for site, (text, _, _) in SITES.items()})


@pytest.mark.parametrize("site", SITES)
def test_a_site_builds_and_passes_every_rule_test(site_builds, site):
    """Every rule, alert and dashboard builds, every domain's promtool tests pass at the site's intervals, and
    nothing reads a series the fleet does not have."""
    _, in_gpu_rules, nowhere = SITES[site]
    files, errors = site_builds[site]
    assert all(spelling in files[GPU_RULES] for spelling in in_gpu_rules)
    assert not [path for path, text in files.items() for name in nowhere if name in text]
    assert any(path.endswith(".tests.yaml") for path in files)
    assert not errors, "\n".join(errors)


def test_a_sharded_site_writes_its_collectors_and_central_ruler(site_builds):
    """sharded-vmagent.yaml: two vmagent shard directories and the central vmalert's, each file validated above
    with the rest of the build (docs/scale-out.md)."""
    files, _ = site_builds["sharded-vmagent"]
    pieces = ("shard-0/scrape.yml", "shard-1/scrape.yml", "central/vmalert.flags", "placement.yaml")
    assert {f"scale-out/{piece}" for piece in pieces} <= set(files)


def test_a_site_on_a_remote_hostengine_reads_the_node_from_instance(site_builds):
    """With node_from: instance no GPU rule reads dcgm-exporter's hostname (every node "localhost" there, as its
    series in the rule tests say), and the alert on a shared hostname, which cannot happen then, is not built."""
    files, _ = site_builds["remote-hostengine-15s"]
    assert '"instance"' in files[GPU_RULES]
    assert '"Hostname"' not in files[GPU_RULES] and '"hostname"' not in files[GPU_RULES]
    assert "ExporterGpuNodeNameShared" not in files["prometheus/rules/exporters.rules.yaml"]
    assert "ExporterGpuNodeNameShared" in site_builds["h100-10s"][0]["prometheus/rules/exporters.rules.yaml"]


def _site(stem: str) -> dict:
    return yaml.safe_load((SITE_FILES / f"{stem}.yaml").read_text(encoding="utf-8"))


def test_the_matrix_covers_what_sites_vary():
    """Each site file says which site it stands for; together they cover every interval from 5 s to 2 m, an
    evaluation interval of its own, each dcgm-exporter family alone (a new family needs a site), AMD only, the
    node read from instance (a standalone nv-hostengine), no job info, each optional exporter disabled alone and
    all together, and a cluster label of the site's own."""
    sites = {path.stem: _site(path.stem) for path in SITE_FILES.glob("*.yaml")}
    assert all((SITE_FILES / f"{stem}.yaml").read_text().startswith("# ") for stem in sites)
    assert {site.get("scrape_interval", "30s") for site in sites.values()} >= set(INTERVALS)
    assert any(site.get("evaluation_interval") not in (None, site.get("scrape_interval")) for site in sites.values())
    exporters = [site.get("exporters", {}) for site in sites.values()]
    alone = {tuple(e["dcgm"]["versions"]) for e in exporters if "versions" in e.get("dcgm", {})}
    assert {(family,) for family in FAMILIES} <= alone
    assert any(e.get("dcgm", {}).get("enabled") is False and e.get("amd", {}).get("enabled") for e in exporters)
    assert any(e.get("dcgm", {}).get("node_from") == "instance" for e in exporters)
    assert any(e.get("job_info", {}).get("enabled") is False for e in exporters)
    disabled = [{name for name, value in e.items() if value.get("enabled") is False} for e in exporters]
    assert {(name,) for name in OPTIONAL_EXPORTERS} <= {tuple(d & set(OPTIONAL_EXPORTERS)) for d in disabled}
    assert set(OPTIONAL_EXPORTERS) in disabled
    assert any(site.get("cluster", {}).get("label", "cluster") != "cluster" for site in sites.values())
