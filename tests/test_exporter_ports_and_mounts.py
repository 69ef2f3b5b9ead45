"""What node_exporter and the Slurm exporter report beside what the rules mean (issue 26, points 7, 8 and 12): the
simulator emits it as the exporter does, and the rules, run by real promtool over the simulated series, do not
count it as a fault (docs/exporters.md)."""

from datetime import UTC, datetime

import pytest
import yaml

from hpcobs.build import pipeline, tools
from hpcobs.lang.promql import duration
from hpcobs.proof.simulate import Simulation
from hpcobs.proof.simulate.model import NFS_SCRATCH
from hpcobs.proof.simulate.node import STORAGE_RAIL
from hpcobs.settings import config as config_module
from tests.conftest import ROOT

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A site naming its compute rails (mlx5_0..7), with a RoCE storage rail beside them.
NAMED_RAILS = ROOT / "tests" / "sites" / "h100-10s.yaml"


def simulated(config, hours: float = 1.5) -> Simulation:
    return Simulation(config, nodes=3, gpus_per_node=8, hours=hours, scenarios="healthy", seed=5, start=EPOCH)


def node_exporter_series(sim: Simulation, signal: str) -> dict[tuple[str, str, str], list]:
    """(instance, device, port) -> values of one node_exporter signal."""
    name = sim.sources["node_exporter"].name(signal)
    return {
        (labels.get("instance", ""), labels.get("device", ""), labels.get("port", "")): values
        for family in sim.families({name})
        for labels, values in family.series
    }


def records_over_simulation(
    tmp_path, config, sim: Simulation, rule_file: str, prefix: str, checks: dict[str, list]
) -> str:
    """promtool's verdict on the built `rule_file` over the node_exporter families whose signal starts with
    `prefix`: each record in `checks` must have exactly the samples given at the end of the run."""
    files = pipeline.generate(config)
    (tmp_path / "rules.yml").write_text(files[f"prometheus/rules/{rule_file}"])
    names = {m.name for m in sim.sources["node_exporter"].metrics() if m.signal.startswith(prefix)}
    inputs = [{"series": s.text(), "values": s.values} for s in sim.input_series(names)]
    at = duration((sim.window.steps - 1) * sim.window.step)
    tests = [{"expr": expr, "eval_time": at, "exp_samples": expected} for expr, expected in checks.items()]
    (tmp_path / "test.yml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": config["evaluation_interval"],
                "tests": [{"interval": config["scrape_interval"], "input_series": inputs, "promql_expr_test": tests}],
            },
            width=10**9,
        )
    )
    result = tools.test_rules(tmp_path / "test.yml")
    return "" if result.ok else result.output[-3000:]


# -- point 7: InfiniBand ports that are not compute rails ----------------------------------------------------


@pytest.mark.parametrize("site", [None, NAMED_RAILS], ids=["default", "named-rails"])
def test_unused_ports_and_storage_rails_are_emitted_and_are_no_fault(tmp_path, site):
    config = config_module.load(site)
    sim = simulated(config)
    states, downs, rates = (node_exporter_series(sim, s) for s in ("ib_state", "ib_link_downed", "ib_rate"))
    unused = [key for key, values in states.items() if set(values) == {1}]
    assert unused and all(set(downs[key]) == {0} for key in unused), "an unused port: DOWN since boot, no link lost"
    storage = [key for key in states if key[1] == STORAGE_RAIL]
    if site:
        assert storage and all(set(states[k]) == {4} and max(rates[k]) < 5e10 for k in storage)
    else:
        assert not storage, "a site that has not named its rails is simulated without a storage rail"
    problem = records_over_simulation(
        tmp_path,
        config,
        sim,
        "network.rules.yaml",
        "ib_",
        {"node:ib_ports_not_active:count": [], "node:ib_ports_below_nominal_rate:count": []},
    )
    assert not problem, problem


# -- point 8: shared filesystems alert once ---------------------------------------------------------------------


def test_a_full_shared_filesystem_every_client_reports_pages_once(tmp_path, config):
    sim = Simulation(
        config, nodes=3, gpus_per_node=8, hours=1, scenarios="shared_fs_full:start=5m:duration=20m", seed=5, start=EPOCH
    )
    avail = node_exporter_series(sim, "fs_avail")
    scratch = {key: values for key, values in avail.items() if key[1] == NFS_SCRATCH[0]}
    assert len(scratch) == 3 and len({tuple(v) for v in scratch.values()}) == 1, "one filesystem, one view"
    firing = 'ALERTS{alertstate="firing",alertname=~"StorageSharedFilesystemFull|StorageFilesystemFull"}'
    problem = records_over_simulation(
        tmp_path,
        config,
        sim,
        "storage.rules.yaml",
        "fs_",
        {
            f"count by (alertname, mountpoint) ({firing})": [
                {"labels": '{alertname="StorageSharedFilesystemFull",mountpoint="/scratch"}', "value": 1}
            ]
        },
    )
    assert not problem, problem
