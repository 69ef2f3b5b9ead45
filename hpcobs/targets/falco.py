"""out/falco/hpcobs_rules.yaml: the Falco rules file, its lists, macros and rules as security/falco.py defines them,
checked against the schema Falco checks rules files with (its --rule-schema)."""

from __future__ import annotations

from hpcobs.lang.render import GENERATED, yaml_text
from hpcobs.targets.base import Check, Model, Target

# The file's name in out/falco/ and where Falco loads it from (a rules.d directory of its config).
RULES_FILE = "hpcobs_rules.yaml"
PATH = f"falco/{RULES_FILE}"


def files(model: Model) -> dict[str, str]:
    """No file when there is no rule (exporters.falco disabled: hpcobs.build.enabled)."""
    return {PATH: yaml_text(list(model.falco_rules), GENERATED)} if model.falco_rules else {}


TARGET = Target(
    name="Falco rules",
    paths=(PATH,),
    files=files,
    checks=(Check(schema="falco/rule_schema.json"),),
    diff="files",
    docs="output.md#falco-rules",
)
