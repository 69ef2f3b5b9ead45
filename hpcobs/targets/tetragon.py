"""out/tetragon/hpcobs-<policy>.yaml: one Tetragon TracingPolicy per file, as security/tetragon.py defines them,
checked against the CRD's schema."""

from __future__ import annotations

from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets.base import Check, Model, Target

FOLDER = "tetragon"
# Tetragon's TracingPolicy CRD, closed like the PrometheusRule's, with the object name the API server requires of it.
TRACING_POLICY_SCHEMA = "tetragon/tracingpolicy.v1alpha1.openapi.json#closed-named"


def files(model: Model) -> dict[str, str]:
    """A file per policy, named by its key: the policy's name is the site's to choose (a config key), a path is not."""
    return {
        f"{FOLDER}/hpcobs-{key}.yaml": yaml_text(document, GENERATED)
        for key, document in model.tetragon_policies.items()
    }


TARGET = Target(
    name="Tetragon policies",
    paths=(f"{FOLDER}/",),
    files=files,
    checks=(Check(".yaml", TRACING_POLICY_SCHEMA),),
    diff="files",
    docs="output.md#tetragon-policies",
)
