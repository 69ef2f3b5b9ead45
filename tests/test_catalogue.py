"""The catalogue is well formed, every raw metric that rules and dashboards read is in it, and the config and the
docs name its version families and profiles."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from hpcobs.authoring.dashboard import every_panel
from hpcobs.errors import UserError
from hpcobs.exporters import catalogue, releases
from hpcobs.exporters.sources import PROFILES, Sources
from hpcobs.lang import lint
from hpcobs.settings import config as config_module

ROOT = Path(__file__).resolve().parent.parent


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
            for panel in every_panel(dashboard):
                for target in panel.get("targets", []):
                    if target["datasource"]["type"] == "prometheus":  # Loki's are LogQL
                        yield path, target["expr"]
            for variable in dashboard["templating"]["list"]:
                if variable["type"] == "query":
                    yield path, variable["query"]


def test_every_catalogue_file_loads():
    exporters = catalogue.load()
    assert {
        "dcgm",
        "amd",
        "node_exporter",
        "slurm_sckyzo",
        "slurm_native",
        "slurm_jontk",
        "job_info",
        "lustre",
        "falco",
        "tetragon",
        "nccl_inspector",
        "training",
    } <= set(exporters)
    for exporter in exporters.values():
        for metric in exporter.all_metrics():
            assert metric.source and metric.help, (exporter.id, metric.signal)


def test_the_catalogue_schema_is_a_valid_json_schema():
    """load() validates every file with one validator and does not check the schema itself each time."""
    jsonschema.Draft202012Validator.check_schema(catalogue._EXPORTER)


def test_a_malformed_catalogue_file_is_named_with_its_key(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text(
        "exporter: bad\ntitle: t\nsource: s\nhost: {regex: '(.+)', label: instance}\n"
        "metrics: [{signal: x, name: x, type: gauge, unit: furlongs, help: h, source: s}]\n"
    )
    monkeypatch.setattr(catalogue, "HERE", tmp_path)
    with pytest.raises(catalogue.CatalogueError, match=r"^bad\.yaml: metrics\.0\.unit: 'furlongs' is not one of"):
        catalogue.load.__wrapped__()


def test_every_release_tag_of_a_family_reads_as_that_family():
    """The tags of releases_by_version (the exporter's git tags and release notes) map to their own family, as
    written by the image reference or as their exporter version alone, unless that number is also a DCGM release of
    another family (exporter 4.6.0 and DCGM 4.6.0 both exist): then both readings are named."""
    covered = catalogue.load()["dcgm"].releases
    assert [family.name for family in covered.families] == list(catalogue.load()["dcgm"].versions)
    shared = []
    for family in covered.families:
        for tag in family.tags:
            assert covered.family(tag) == family.name, tag
            assert covered.family(f"{tag}-ubuntu22.04") == family.name, tag
            exporter_version = tag.rpartition("-")[2]
            try:
                assert covered.family(exporter_version) == family.name, tag
            except ValueError as refused:
                assert f"dcgm-exporter {exporter_version} is {family.name}, DCGM " in str(refused), refused
                shared.append(exporter_version)
    assert shared == ["4.6.0", "4.7.0", "4.7.1", "4.8.0", "4.8.1", "4.8.2", "4.8.3"]  # 4.8.4 is a tag itself


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"tags": ["4.5.3-4.8.3"]}, "3.x-4.5: tag '4.5.3-4.8.3': its exporter version 4.8.3 is not in this family"),
        ({"tags": ["4.6.0-4.8.1"]}, "3.x-4.5: tag '4.6.0-4.8.1': its dcgm version 4.6.0 is not in this family"),
        ({"tags": ["4.5.3-4.8.2-ubi9"]}, "3.x-4.5: tag '4.5.3-4.8.2-ubi9' is not <DCGM version>-<exporter version>"),
        ({"exporter": {"first": "3.0.0", "last": "4.9"}}, "4.6-4.8: its exporter range starts inside the previous"),
    ],
)
def test_release_ranges_and_tags_that_disagree_are_refused_by_the_loader(entry, problem):
    raw = yaml.safe_load((catalogue.HERE / "dcgm.yaml").read_text(encoding="utf-8"))["releases_by_version"]
    raw["3.x-4.5"].update(entry)
    with pytest.raises(ValueError, match=re.escape(problem)):
        releases.parse(raw)


def test_a_build_reads_the_catalogue_once_on_demand_and_never_imports_the_simulator():
    """Importing the CLI reads no catalogue file; generating everything reads them once; the rule-test series
    share their label and port facts with the simulator through hpcobs.exporters.labels, not by importing it."""
    code = (
        "import sys\n"
        "import hpcobs.cli\n"
        "from hpcobs.build import pipeline\n"
        "from hpcobs.exporters import catalogue\n"
        "from hpcobs.settings import config\n"
        "hpcobs.cli.parser().parse_args(['build', '--out', 'x'])\n"
        "print(catalogue.load.cache_info().misses)\n"
        "pipeline.generate(config.load())\n"
        "print(catalogue.load.cache_info().misses)\n"
        "print(sorted(name for name in sys.modules if name.startswith('hpcobs.proof.simulate')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["0", "1", "[]", ""]


def test_dcgm_versions_resolve_names_units_and_host_labels():
    dcgm = catalogue.load()["dcgm"]
    families = ("3.x-4.5", "4.6-4.8", "4.9", "4.10+")
    assert [dcgm.host_label(v) for v in families] == ["Hostname", "hostname", "hostname", "hostname"]
    util = [dcgm.metric("gpu_utilization", v) for v in families]
    assert [(m.name, m.unit) for m in util] == [("DCGM_FI_DEV_GPU_UTIL", "percent")] * 2 + [
        ("DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio")
    ] * 2
    assert dcgm.metric("pcie_tx_rate", "4.9").name == "DCGM_FI_PROF_PCIE_TX_BYTES"
    assert dcgm.metric("pcie_tx_rate", "4.10+").name == "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"
    assert dcgm.metric("fb_capacity", "4.6-4.8") is None
    assert dcgm.info_labels("4.9")[-1] == "DCGM_FI_SYSTEM_DRIVER_VERSION"


def test_every_raw_metric_read_is_in_the_catalogue(generated, config):
    known = Sources(config).metric_names()
    known |= {m.name for m in catalogue.load()["prometheus"].all_metrics()}
    recorded = recorded_names(generated)
    for path, expr in expressions(generated):
        unknown = lint.metric_names(expr) - known - recorded
        assert not unknown, f"{path}: {expr} reads {unknown}, neither in the catalogue nor recorded"


def test_site_overrides_and_prefixes_reach_the_names(tmp_path):
    from hpcobs.settings import config as config_module

    site = tmp_path / "site.yaml"
    site.write_text(
        "exporters:\n  amd:\n    enabled: true\n    metric_prefix: amd_\n"
        "  dcgm:\n    metric_names: {row_remap_pending: MY_REMAP_PENDING}\n"
    )
    sources = Sources(config_module.load(site))
    assert sources["amd"].name(sources["amd"].exporter.signals()[0]).startswith("amd_")
    assert sources["dcgm"].name("row_remap_pending", "4.6-4.8") == "MY_REMAP_PENDING"


def _fenced_block(text: str, after: str) -> str:
    """The first fenced code block of a Markdown text after the line that starts with `after`."""
    rest = text[text.index(f"\n{after}") :]
    return rest.split("```")[1].partition("\n")[2]


def test_the_readme_names_the_dcgm_families_of_the_catalogue(tmp_path):
    """The README's example site file is valid and its example refusal is what loading that mistake prints: every
    family of the catalogue and the releases it covers."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = tmp_path / "example.yaml"
    example.write_text(_fenced_block(readme, "`python build.py --config site.yaml` merges"), encoding="utf-8")
    config_module.load(example)
    site = tmp_path / "site.yaml"
    site.write_text("exporters:\n  dcgm:\n    versions: ['4.x']\n    selectr: 'job=\"x\"'\n", encoding="utf-8")
    with pytest.raises(UserError) as refused:
        config_module.load(site)
    printed = {line.replace(str(site), "site.yaml") for line in refused.value.lines}
    assert printed == set(_fenced_block(readme, "A bad file is refused").splitlines())
    assert catalogue.load()["dcgm"].releases.coverage() in readme


def test_the_docs_name_the_catalogues_families_profiles_and_files():
    """docs/exporters.md: a row per dcgm family and per other catalogue file; docs/configuration.md: the value of
    each profile a role may pick (hpcobs.exporters.sources.PROFILES)."""
    exporters_doc = (ROOT / "docs" / "exporters.md").read_text(encoding="utf-8")
    versions_table = exporters_doc.partition("## dcgm-exporter versions")[2].partition("\n## ")[0]
    families = list(catalogue.load()["dcgm"].versions)
    assert re.findall(r"^\| `([^`]+)` \|", versions_table, re.MULTILINE) == families
    # One table: family, releases of each numbering, what differs, source; each row names its first and last tag.
    assert "| family | dcgm-exporter releases | DCGM releases | what differs | source |" in versions_table
    for family in catalogue.load()["dcgm"].releases.families:
        row = next(line for line in versions_table.splitlines() if line.startswith(f"| `{family.name}` |"))
        assert f"`{family.tags[0]}`" in row and f"`{family.tags[-1]}`" in row, family.name
    listed = re.findall(r"`(\w+)\.yaml`", exporters_doc.partition("## Other exporters")[2])
    assert sorted(listed) == sorted(set(catalogue.load()) - {"dcgm"})
    roles = {
        row.split("`")[1]: set(re.findall(r"`([^`]+)`", row))
        for row in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines()
        if row.startswith("| `")
    }
    for role, (_, profiles) in PROFILES.items():
        assert set(profiles) <= roles[role], f"docs/configuration.md: the {role} row must name {sorted(profiles)}"
