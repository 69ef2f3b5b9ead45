"""The Falco rules file (hpcobs.targets.falco writes it): the rules whose matches the security alerts and panels count
(docs/security-content.md), named, prioritised and tagged as hpcobs.security.names defines them.

The file is self-contained: its own lists and macros (prefixed hpcobs_), none from Falco's default ruleset, so it
loads alone or beside any other rules file. The site's values are lists, which a site can also extend from its own
rules file (`override: {items: append}`) without rebuilding.

A process is part of a Slurm job when its cgroup path names the job (security.job_cgroups; Slurm moves every
process of a job into the job's cgroup, and a process cannot leave it) or when slurmstepd is among its ancestors:
never by its name, which the process chooses (PyTorch 2.3 and 2.4 rename the main thread pt_main_thread). Paths are
fd.name and fs.path.*, which Falco resolves to absolute paths against the process' working directory or the
directory descriptor of openat, so a relative spelling of a checkpoint or a binary matches like an absolute one.

Values are written quoted after hpcobs.security.names.literal has checked them, and field values that are words
are quoted too, so that every unquoted dotted word of a condition is a field (tests/test_security_content.py checks
each against Falco's field list) and every other unquoted word an operator, a list or a macro.
"""

from __future__ import annotations

from typing import Any

from hpcobs.authoring.context import Context
from hpcobs.lang import sensor_values

from . import names as security_content
from .names import FalcoRule

# Falco 0.41.0's engine: the schema (schemas/falco) and field list the rules are checked against are its own.
ENGINE_VERSION = "0.50.0"
OPEN = '("open", "openat", "openat2")'


def _quoted(value: str) -> str:
    return f'"{sensor_values.literal(value)}"'


def _list(name: str, items: list[str] | tuple[int, ...]) -> dict[str, Any]:
    """A list whose items Falco pastes into the conditions that name it, as they are: strings quoted."""
    return {"list": name, "items": [item if isinstance(item, int) else _quoted(item) for item in items]}


def _macro(name: str, condition: str) -> dict[str, Any]:
    return {"macro": name, "condition": condition}


def _any_of(field: str, operator: str, values: list[str] | tuple[str, ...]) -> str:
    return "(" + " or ".join(f"{field} {operator} {_quoted(value)}" for value in values) + ")"


def lists_and_macros(ctx: Context) -> list[dict[str, Any]]:
    security = ctx.config["security"]
    return [
        _list("hpcobs_slurmstepd", security["slurmstepd"]),
        _list("hpcobs_allowed_destinations", security_content.allowed_networks(security)),
        _list("hpcobs_checkpoint_dirs", security["checkpoint_dirs"]),
        _list("hpcobs_checkpoint_readers", security["checkpoint_readers"]),
        _list("hpcobs_protected_dirs", security["protected_dirs"]),
        _list("hpcobs_package_managers", security["package_managers"]),
        _list("hpcobs_miner_ports", security_content.MINER_PORTS),
        _macro(
            "hpcobs_job_process",
            "("
            + _any_of("thread.cgroups", "contains", security["job_cgroups"])
            + " or proc.aexepath in (hpcobs_slurmstepd))",
        ),
        # Falco's default `outbound` macro, with the site's allowed networks instead of RFC 1918: a successful or
        # in-progress connect, or a first datagram to a new peer, over IPv4 or IPv6.
        _macro(
            "hpcobs_outbound",
            '((evt.type = "connect" or (evt.type in ("sendto", "sendmsg") and fd.l4proto != "tcp" '
            'and fd.connected = "false" and fd.name_changed = "true")) '
            'and (fd.typechar = "4" or fd.typechar = "6") '
            "and not fd.snet in (hpcobs_allowed_destinations) "
            'and (evt.rawres >= 0 or evt.res = "EINPROGRESS"))',
        ),
        _macro(
            "hpcobs_checkpoint_open",
            f'(evt.type in {OPEN} and fd.typechar = "f" and fd.num >= 0 and fd.name pmatch (hpcobs_checkpoint_dirs))',
        ),
        _macro(
            "hpcobs_package_manager",
            "(proc.exepath in (hpcobs_package_managers) or proc.aexepath in (hpcobs_package_managers))",
        ),
        # fs.path.* are set only when the call succeeded.
        _macro(
            "hpcobs_protected_change",
            f'((evt.type in {OPEN} and evt.is_open_write = "true" and fd.typechar = "f" and fd.num >= 0 '
            "and fd.name pmatch (hpcobs_protected_dirs)) "
            'or (evt.type in ("unlink", "unlinkat", "mkdir", "mkdirat", "chmod", "fchmod", "fchmodat") '
            "and fs.path.name pmatch (hpcobs_protected_dirs)) "
            'or (evt.type in ("rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat") '
            "and (fs.path.source pmatch (hpcobs_protected_dirs) or fs.path.target pmatch (hpcobs_protected_dirs))))",
        ),
    ]


_PROCESS = "process=%proc.exepath pid=%proc.pid user=%user.name uid=%user.uid command=%proc.cmdline"
_JOB = "cgroups=%thread.cgroups"

# (condition, desc, output) of each rule, by security_content key.
_RULES = {
    "outbound": (
        "hpcobs_outbound and hpcobs_job_process",
        "A process of a Slurm job (by cgroup or by descent from slurmstepd, never by name) connected to a "
        "destination outside hpcobs_allowed_destinations (the site's networks and the host itself), over IPv4 "
        "or IPv6: data or model weights may be leaving the cluster.",
        "Slurm job process connected outside the allowed destinations "
        f"(connection=%fd.name ip=%fd.sip port=%fd.sport proto=%fd.l4proto {_PROCESS} {_JOB})",
    ),
    "checkpoint": (
        "hpcobs_checkpoint_open and not hpcobs_job_process and not proc.exepath in (hpcobs_checkpoint_readers)",
        "A process outside every Slurm job opened a file under a checkpoint directory (hpcobs_checkpoint_dirs), "
        "to read or to write, whatever the path spelling: Falco resolves relative paths and openat's directory "
        "descriptor. Programs of hpcobs_checkpoint_readers (backups, data movers) are allowed. A process of "
        "another job is not reported: file permissions keep users' checkpoints apart.",
        f"Checkpoint opened by a process outside the Slurm jobs (file=%fd.name flags=%evt.arg.flags {_PROCESS} "
        f"parent=%proc.pexepath {_JOB})",
    ),
    "binaries": (
        "hpcobs_protected_change and not hpcobs_package_manager",
        "A binary or library directory of a compute node (hpcobs_protected_dirs) changed: a file opened for "
        "writing, created, removed, renamed, linked or its mode changed, by a process that is not a package "
        "manager (hpcobs_package_managers) or one of its children.",
        "Binary or library directory modified outside the package manager (file=%fd.name path=%fs.path.name "
        f"source=%fs.path.source target=%fs.path.target syscall=%evt.type {_PROCESS} parent=%proc.pexepath {_JOB})",
    ),
    "miner": (
        "hpcobs_outbound and (fd.sport in (hpcobs_miner_ports) or "
        + " or ".join(f"proc.cmdline contains {_quoted(scheme)}" for scheme in security_content.STRATUM_SCHEMES)
        + ")",
        "A process of any kind connected outside the allowed destinations to a mining-pool port, or while its "
        "command line names a stratum pool URI: the pattern of a crypto miner.",
        f"Crypto-miner pattern: connection to a mining-pool port or stratum URI (connection=%fd.name port=%fd.sport "
        f"{_PROCESS} {_JOB})",
    ),
}


def rule(definition: FalcoRule) -> dict[str, Any]:
    condition, desc, output = _RULES[definition.key]
    return {
        "rule": definition.name,
        "desc": desc,
        "condition": condition,
        "output": output,
        "priority": definition.priority,
        "tags": list(definition.tags),
    }


def document(ctx: Context) -> list[dict[str, Any]]:
    """The rules file's items in load order: the engine version, the lists and macros, then the rules."""
    rules = [rule(definition) for definition in security_content.falco_rules(ctx.thresholds)]
    return [{"required_engine_version": ENGINE_VERSION}, *lists_and_macros(ctx), *rules]
