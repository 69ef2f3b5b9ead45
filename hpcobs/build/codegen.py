"""Write the settings files generated from declarations: the thresholds content declares (THRESHOLDS of its
modules) into config/schema.json, the `thresholds:` section of config/default.yaml, the thresholds table of
docs/configuration.md and hpcobs/settings/thresholds.py; the catalogue's profiles and version families into the
schema's enums (hpcobs.settings.schema_codegen renders each file).

Run `python -m hpcobs.build.codegen` after declaring, changing or removing a threshold or a catalogue version
family; tests/test_thresholds.py fails while a file is stale. It lives in the build because finding the
declarations imports content, which only the build and the layers above it may; settings then read only the
files written here.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

import hpcobs.alerts as alerts
import hpcobs.dashboards as dashboards
import hpcobs.recording_rules as recording_rules
import hpcobs.security as security
from hpcobs.paths import ROOT
from hpcobs.settings import config, schema_codegen
from hpcobs.settings.declare import Threshold

CONTENT = (alerts, dashboards, recording_rules, security)
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"
THRESHOLDS_MODULE = ROOT / "hpcobs" / "settings" / "thresholds.py"


def declared() -> dict[str, tuple[Threshold, ...]]:
    """Every content module's THRESHOLDS, by its path in the source tree ("alerts/gpu.py"), in path order."""
    found: dict[str, tuple[Threshold, ...]] = {}
    owners: dict[str, str] = {}
    for package in CONTENT:
        for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda info: info.name):
            module = importlib.import_module(f"{package.__name__}.{module_info.name}")
            thresholds = tuple(getattr(module, "THRESHOLDS", ()))
            if not thresholds:
                continue
            path = module.__name__.removeprefix("hpcobs.").replace(".", "/") + ".py"
            for threshold in thresholds:
                if threshold.name in owners:
                    raise ValueError(f"threshold {threshold.name} is declared in {owners[threshold.name]} and {path}")
                owners[threshold.name] = path
            found[path] = thresholds
    return found


def generated() -> dict[Path, str]:
    """Each generated file as it must be, from the declarations and the file's hand-written parts."""
    thresholds = declared()
    current_schema = json.loads(config.SCHEMA.read_text(encoding="utf-8"))
    return {
        config.SCHEMA: schema_codegen.schema(current_schema, thresholds),
        config.DEFAULT_CONFIG: schema_codegen.default_config(
            config.DEFAULT_CONFIG.read_text(encoding="utf-8"), thresholds
        ),
        CONFIGURATION_DOC: schema_codegen.configuration_doc(CONFIGURATION_DOC.read_text(encoding="utf-8"), thresholds),
        THRESHOLDS_MODULE: schema_codegen.thresholds_module(thresholds),
    }


def main() -> int:
    for path, text in generated().items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
