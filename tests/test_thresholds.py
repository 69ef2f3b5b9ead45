"""The typed thresholds are the schema's: generated from it, up to date, and what the build reads."""

import json

import pytest

from hpcobs.settings import schema_codegen
from hpcobs.settings.thresholds import Thresholds


def test_the_thresholds_module_is_generated_from_the_current_schema():
    schema = json.loads(schema_codegen.SCHEMA.read_text(encoding="utf-8"))
    assert schema_codegen.MODULE.read_text(encoding="utf-8") == schema_codegen.thresholds_module(schema), (
        "hpcobs/settings/thresholds.py is stale: run `python -m hpcobs.settings.schema_codegen`"
    )


def test_every_configured_threshold_is_a_typed_field(config):
    thresholds = Thresholds.from_config(config["thresholds"])
    assert set(config["thresholds"]) == set(Thresholds.__dataclass_fields__)
    assert thresholds.security_outbound_rules == tuple(config["thresholds"]["security_outbound_rules"])
    with pytest.raises(AttributeError):
        thresholds.gpu_temprature_celsius  # noqa: B018  (a misspelt threshold fails, it is not a silent default)
