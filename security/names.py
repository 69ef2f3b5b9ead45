"""The Falco rules and Tetragon tracing policies hpcobs ships, defined once: their names, Falco priorities and tags,
the hooks the policies attach to, and the grammar of the site values that reach them (docs/security-content.md).

Everything that names one of them reads it from here: the generators (hpcobs.security.falco, hpcobs.security.tetragon),
the alerts and panels that count their matches, the simulator's security scenarios and the tests. The alerts select
three of them by name, and a site may rename those, so their names are config keys: the first entry of
thresholds.security_outbound_rules, security_checkpoint_rules and security_checkpoint_policies is the name the
shipped rule or policy carries (further entries name a site's own rules, which the alerts also read). The other
names are written below, once.

This module reads no context and no catalogue: the simulator, which must not depend on the build, uses it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcobs.lang.promql import one_of
from hpcobs.lang.sensor_values import network
from hpcobs.settings import declare
from hpcobs.settings.thresholds import Thresholds

# Falco's priorities, most severe first: a rule's position here is the number Falco's native metrics write in the
# `priority` label of falcosecurity_falco_rules_matches_total (falcosecurity/falco falco_common.h, priority_type).
FALCO_PRIORITIES = ("EMERGENCY", "ALERT", "CRITICAL", "ERROR", "WARNING", "NOTICE", "INFORMATIONAL", "DEBUG")

# Destinations that are never "outbound": the host itself.
LOCAL_DESTINATIONS = ("0.0.0.0/32", "127.0.0.0/8", "::/128", "::1/128")
# Mining-pool ports of Falco's sandbox ruleset (falcosecurity/rules falco-sandbox_rules.yaml, list miner_ports),
# without those ordinary services also use (25 SMTP, 8000, 8001, 8008, 8080, 8118, 8888 HTTP and proxies): the
# upstream rule pairs every port with a pool domain, which hpcobs' rules do not resolve (Falco would look them up).
MINER_PORTS = (
    3333, 3334, 3335, 3336, 3357, 4444, 5555, 5556, 5588, 5730, 6099, 6666, 7777, 7778, 8333, 8899,
    9332, 9999, 14433, 14444, 45560, 45700,
)  # fmt: skip
# The URI schemes miners name their pool with (the sandbox rule "Detect crypto miners using the Stratum protocol").
STRATUM_SCHEMES = ("stratum+tcp", "stratum+ssl", "stratum2+tcp", "stratum2+ssl")

# The names the alerts select; the first of each is the one the shipped rule or policy carries.
THRESHOLDS = (
    declare.names(
        "security_outbound_rules",
        ["Unexpected outbound connection destination"],
        "Falco rules reporting an unexpected outbound connection (SecurityUnexpectedOutbound); the first is the name "
        "of the rule hpcobs ships (docs/security-content.md#names).",
    ),
    declare.names(
        "security_checkpoint_rules",
        ["Checkpoint read by foreign process"],
        "Falco rules reporting a checkpoint read by a process outside its job (SecurityCheckpointForeignRead); the "
        "first names the shipped rule.",
    ),
    declare.names(
        "security_checkpoint_policies",
        ["hpcobs-checkpoint-guard"],
        "Tetragon tracing policies guarding checkpoint files (SecurityCheckpointForeignRead); the first names the "
        "shipped policy, so it must be a Kubernetes object name (refused otherwise).",
    ),
)


@dataclass(frozen=True)
class FalcoRule:
    """A rule of out/falco/hpcobs_rules.yaml. `unselected_reason` says why no alert or panel selects it by name or
    by priority; it is None exactly when one does (tests/test_security_content.py checks both ways)."""

    key: str
    name: str
    priority: str
    tags: tuple[str, ...]
    unselected_reason: str | None = None

    @property
    def priority_number(self) -> str:
        """The `priority` label value of its matches in Falco's native metrics."""
        return str(FALCO_PRIORITIES.index(self.priority))


@dataclass(frozen=True)
class TetragonPolicy:
    """A TracingPolicy of out/tetragon/: `hook` is the `hook` label of its events in Tetragon's metrics,
    `enforcement` the action it takes when the site enforces (security.tetragon_enforce)."""

    key: str
    name: str
    hook: str
    enforcement: str
    unselected_reason: str | None = None

    @property
    def function(self) -> str:
        return self.hook.removeprefix("kprobe:")


_ENFORCEMENT_ALERT = (
    "no alert selects it by name: in enforce mode (security.tetragon_enforce) its {action} counts in "
    "SecurityTetragonEnforcement, which reads every policy's enforcing actions, and its events show on the "
    "Security dashboard's Tetragon panels, by policy; {why}"
)


def falco_rules(thresholds: Thresholds) -> tuple[FalcoRule, ...]:
    return (
        FalcoRule(
            "outbound",
            thresholds.security_outbound_rules[0],
            "NOTICE",
            ("network", "mitre_exfiltration", "TA0010"),
        ),
        FalcoRule(
            "checkpoint",
            thresholds.security_checkpoint_rules[0],
            "WARNING",
            ("filesystem", "mitre_collection", "hpcobs"),
        ),
        FalcoRule(
            "binaries",
            "Binary or library modified on a compute node",
            "CRITICAL",
            ("filesystem", "mitre_persistence", "T1554"),
        ),
        # Named like the rule of Falco's sandbox ruleset it replaces (disabled there, as it needs pool domains
        # resolved), so searches and silences written for that name keep working. Falco keeps the last definition
        # of a name: load hpcobs_rules.yaml after falco-sandbox_rules.yaml, or leave that file out.
        FalcoRule(
            "miner",
            "Detect outbound connections to common miner pool ports",
            "CRITICAL",
            ("network", "mitre_impact", "T1496"),
        ),
    )


def tetragon_policies(thresholds: Thresholds) -> tuple[TetragonPolicy, ...]:
    return (
        TetragonPolicy(
            "checkpoint-guard", thresholds.security_checkpoint_policies[0], "kprobe:security_file_open", "Override"
        ),
        TetragonPolicy(
            "outbound-connect",
            "hpcobs-outbound-connect",
            "kprobe:security_socket_connect",
            "Override",
            _ENFORCEMENT_ALERT.format(
                action="denied connect (override)",
                why="SecurityUnexpectedOutbound reads the Falco rule reporting the same connections, whose output "
                "names the destination, the process and the user",
            ),
        ),
        TetragonPolicy(
            "gpu-device-ioctl",
            "hpcobs-gpu-device-ioctl",
            "kprobe:security_file_ioctl",
            "Override",
            _ENFORCEMENT_ALERT.format(
                action="denied ioctl (override)",
                why="a GPU used outside any job is an investigation lead (a monitoring agent missing from "
                "security.gpu_agents is the usual cause), not a page",
            ),
        ),
        TetragonPolicy(
            "block-miners",
            "hpcobs-block-miners",
            "kprobe:tcp_connect",
            "Sigkill",
            _ENFORCEMENT_ALERT.format(
                action="kill (signal)",
                why="the Falco miner rule, at priority CRITICAL, pages through SecurityFalcoCritical",
            ),
        ),
    )


def falco_rule(thresholds: Thresholds, key: str) -> FalcoRule:
    return next(rule for rule in falco_rules(thresholds) if rule.key == key)


def tetragon_policy(thresholds: Thresholds, key: str) -> TetragonPolicy:
    return next(policy for policy in tetragon_policies(thresholds) if policy.key == key)


@dataclass(frozen=True)
class SensorReads:
    """The events of one fault each sensor reports, as matchers (label -> PromQL match) on its series: Falco's rule
    matches, Tetragon's policy events. The fault's alert and its panel read both, so a site running only one
    sensor is paged and sees the fault alike."""

    falco: dict[str, str]
    tetragon: dict[str, str]


def checkpoint_foreign_reads(thresholds: Thresholds) -> SensorReads:
    """A checkpoint opened by a process outside its job: the checkpoint rules and policies of config."""
    return SensorReads(
        falco={"rule_name": one_of(thresholds.security_checkpoint_rules)},
        tetragon={"policy": one_of(thresholds.security_checkpoint_policies)},
    )


def allowed_networks(security: dict) -> list[str]:
    """The destinations that are not "outbound": the host itself, then the site's networks (config `security:`)."""
    return [network(value) for value in (*LOCAL_DESTINATIONS, *security["allowed_destinations"])]
