"""What an output target is (docs/architecture.md#add-an-output-target): a format a build writes into out/, declared
once: the paths it owns, its files rendered from the build's model, the checks each file gets, the section of
`build.py diff` that compares them and the page that documents them. hpcobs.targets.registry lists them; the build,
its validation and the diff loop over that list and know no path of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

# Annotations only: the simulator reads a target's file names, and must not load the dashboard builders for them.
if TYPE_CHECKING:
    from hpcobs.authoring.dashboard import DashboardSpec
    from hpcobs.authoring.logs import LogGroup
    from hpcobs.authoring.rules import Group, LinkBases
    from hpcobs.settings.config import Config

# The tools hpcobs.build.validate runs on a file, by the name its messages give them.
Tool = Literal[
    "promtool check rules",
    "promtool test rules",
    "promtool check config",
    "amtool check-config",
    "amtool template render",
]
# Where `build.py diff` compares a target's files (hpcobs.delivery.semantic_diff, docs/review.md): a section of
# their own, "files" leaf by leaf, or "rule copies", counted and never read (they follow the rule files).
DiffSection = Literal["dashboards", "rules", "alertmanager", "provisioning", "files", "rule copies"]


@dataclass(frozen=True)
class Model:
    """What the build hands every target: the content built from one config, not yet written in any format."""

    config: Config
    links: LinkBases
    rule_groups: Mapping[str, Sequence[Group]]  # by domain: recording groups first, then alerting, in module order
    dashboards: Sequence[DashboardSpec]
    inhibitions: Sequence[dict[str, Any]]  # Alertmanager inhibition rules, which name alerts
    log_groups: Sequence[LogGroup]  # Loki ruler groups
    falco_rules: Sequence[dict[str, Any]]  # the Falco rules file's items, in load order
    tetragon_policies: Mapping[str, dict[str, Any]]  # TracingPolicy documents by policy key

    @cached_property
    def every_group(self) -> list[dict[str, Any]]:
        """Every rule group as the rule files write it, all domains in build order."""
        return [group.to_dict(self.links) for groups in self.rule_groups.values() for group in groups]


@dataclass(frozen=True)
class Check:
    """What validates a target's files whose path ends with `ending`: a JSON schema of schemas/ (`file#variant`,
    a variant hpcobs.build.validate.schema derives from the file), a tool, or both."""

    ending: str = ""
    schema: str | None = None
    tool: Tool | None = None


@dataclass(frozen=True)
class Target:
    """One output format. `paths` are what it owns under out/: a folder (ending in /) or a file; every file it
    writes is under one of them, and no other target's is."""

    name: str
    paths: tuple[str, ...]
    files: Callable[[Model], dict[str, str]]  # path -> text
    checks: tuple[Check, ...]
    diff: DiffSection
    docs: str  # the section of docs/ that describes its files: `page.md#anchor`
    # Where its files hold a copy of out/prometheus/rules' groups (keys from the top): promtool checks that copy
    # in a rule file of its own, and the diff counts it as a rule copy and compares the rest.
    rule_groups_at: tuple[str, ...] = ()

    def owns(self, path: str) -> bool:
        return any(path == owned or (owned.endswith("/") and path.startswith(owned)) for owned in self.paths)

    def checks_of(self, path: str) -> list[Check]:
        return [check for check in self.checks if path.endswith(check.ending)]

    def copied_groups(self, document: Any) -> Any:
        """What the document holds where this target keeps its copy of the rule groups (None where nothing is)."""
        for key in self.rule_groups_at:
            document = document.get(key) if isinstance(document, dict) else None
        return document if self.rule_groups_at else None
