"""A threshold is declared once, in the content module that reads it: the schema, the defaults and their comments,
the configuration table and the typed thresholds are generated from the declarations (and the schema's enums of
version families and profiles from the catalogue), up to date, and what the build reads."""

import pytest
import yaml

from hpcobs.build import codegen
from hpcobs.paths import ROOT
from hpcobs.settings.config import DEFAULT_CONFIG
from hpcobs.settings.thresholds import Thresholds


@pytest.mark.parametrize("path", codegen.generated(), ids=lambda path: str(path.relative_to(ROOT)))
def test_the_generated_settings_files_are_up_to_date(path):
    assert path.read_text(encoding="utf-8") == codegen.generated()[path], (
        f"{path.relative_to(ROOT)} is stale: run `python -m hpcobs.build.codegen`"
    )


def test_the_defaults_are_the_declared_ones():
    declared = {threshold.name: threshold.default for ts in codegen.declared().values() for threshold in ts}
    defaults = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))["thresholds"]
    assert defaults == declared
    assert {name: type(value) for name, value in defaults.items()} == {k: type(v) for k, v in declared.items()}


def test_every_configured_threshold_is_a_typed_field(config):
    thresholds = Thresholds.from_config(config["thresholds"])
    assert set(config["thresholds"]) == set(Thresholds.__dataclass_fields__)
    assert thresholds.security_outbound_rules == tuple(config["thresholds"]["security_outbound_rules"])
    with pytest.raises(AttributeError):
        thresholds.gpu_temprature_celsius  # noqa: B018  (a misspelt threshold fails, it is not a silent default)


def test_a_threshold_declared_twice_is_refused(monkeypatch):
    from hpcobs.alerts import gpu, network

    monkeypatch.setattr(network, "THRESHOLDS", (*network.THRESHOLDS, gpu.THRESHOLDS[0]))
    with pytest.raises(ValueError, match="gpu_fell_off_bus_for is declared in alerts/gpu.py and alerts/network.py"):
        codegen.declared()
