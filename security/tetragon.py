"""Tetragon TracingPolicies (cilium.io/v1alpha1, checked against the CRD of Tetragon v1.5.0; hpcobs.targets.tetragon
writes one file each) whose events and actions the security alerts and panels count (docs/security-content.md),
named and hooked as hpcobs.security.names defines them.

Tetragon cannot see Slurm's cgroups: it knows a job's processes as slurmstepd and its descendants
(matchBinaries In slurmstepd with followChildren, which only follows processes started after the policy was
loaded). So the guards for checkpoints and GPU devices list, before the selector that reports, selectors that
match job processes and the site's allowed programs and drop their events (NoPost); Tetragon applies the first
selector that matches. Each policy reports only (Post) unless security.tetragon_enforce is set: then it denies the
call with EPERM (Override on a security_* hook, which the kernel lets BPF override since 5.7) or kills the process
(Sigkill, for tcp_connect, which cannot be overridden).

Paths are matched as Tetragon resolves them from the kernel's struct file: absolute, symbolic links followed,
whatever spelling the process used.
"""

from __future__ import annotations

from typing import Any

from hpcobs.authoring.context import Context
from hpcobs.lang import sensor_values

from . import names as security_content
from .names import TetragonPolicy

EPERM = -1
_MESSAGES = {
    "checkpoint-guard": "hpcobs: checkpoint opened by a process outside the Slurm jobs",
    "outbound-connect": "hpcobs: Slurm job process connecting outside the allowed destinations",
    "gpu-device-ioctl": "hpcobs: GPU device used by a process outside the Slurm jobs",
    "block-miners": "hpcobs: connection to a mining-pool port outside the allowed destinations",
}


def _values(values: list[str]) -> list[str]:
    return [sensor_values.literal(value) for value in values]


def _binaries(paths: list[str], follow_children: bool = False) -> list[dict[str, Any]]:
    match: dict[str, Any] = {"operator": "In", "values": _values(paths)}
    if follow_children:
        match["followChildren"] = True
    return [match]


def _action(policy: TetragonPolicy, enforce: bool) -> dict[str, Any]:
    """The reporting selector's actions: none (Tetragon posts the event) unless enforcing."""
    if not enforce:
        return {}
    action: dict[str, Any] = {"action": policy.enforcement}
    if policy.enforcement == "Override":
        action["argError"] = EPERM
    return {"matchActions": [action]}


def _prefix(values: list[str]) -> list[dict[str, Any]]:
    return [{"index": 0, "operator": "Prefix", "values": _values(values)}]


def _outside_jobs(ctx: Context, allowed: list[str], prefixes: list[str]) -> list[dict[str, Any]]:
    """Selectors on a file argument under these prefixes: two that drop the events of job processes and of the
    allowed programs (the second only if there are any), then the reporting one, whose actions the caller adds."""
    owners = [_binaries(ctx.config["security"]["slurmstepd"], follow_children=True)]
    if allowed:
        owners.append(_binaries(allowed))
    dropped = [
        {"matchActions": [{"action": "NoPost"}], "matchArgs": _prefix(prefixes), "matchBinaries": binaries}
        for binaries in owners
    ]
    return [*dropped, {"matchArgs": _prefix(prefixes)}]


def _kprobe(ctx: Context, policy: TetragonPolicy) -> dict[str, Any]:
    security = ctx.config["security"]
    enforce = bool(security["tetragon_enforce"])
    file_arg = [{"index": 0, "type": "file"}]
    if policy.key == "checkpoint-guard":
        # The directory's contents: Prefix compares strings, and /checkpoints would also match /checkpoints-old.
        under = [f"{directory}/" for directory in security["checkpoint_dirs"]]
        args, selectors = file_arg, _outside_jobs(ctx, security["checkpoint_readers"], under)
    elif policy.key == "gpu-device-ioctl":
        args = [*file_arg, {"index": 1, "type": "uint32"}]
        selectors = _outside_jobs(ctx, security["gpu_agents"], security["gpu_devices"])
    elif policy.key == "outbound-connect":
        args = [{"index": 0, "type": "socket"}, {"index": 1, "type": "sockaddr"}]
        selectors = [
            {
                "matchBinaries": _binaries(security["slurmstepd"], follow_children=True),
                "matchArgs": [
                    {"index": 1, "operator": "Family", "values": ["AF_INET", "AF_INET6"]},
                    # A sockaddr holds one address, which Tetragon's address operators call the source.
                    {"index": 1, "operator": "NotSAddr", "values": security_content.allowed_networks(security)},
                ],
            }
        ]
    elif policy.key == "block-miners":
        args = [{"index": 0, "type": "sock"}]
        selectors = [
            {
                "matchArgs": [
                    {"index": 0, "operator": "DPort", "values": [str(port) for port in security_content.MINER_PORTS]},
                    {"index": 0, "operator": "NotDAddr", "values": security_content.allowed_networks(security)},
                ]
            }
        ]
    else:
        raise ValueError(f"no Tetragon hook written for policy {policy.key!r}")
    selectors[-1].update(_action(policy, enforce))
    return {
        "call": policy.function,
        "syscall": False,
        "args": args,
        "message": _MESSAGES[policy.key],
        "tags": ["hpcobs"],
        "selectors": selectors,
    }


def policy_document(ctx: Context, policy: TetragonPolicy) -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v1alpha1",
        "kind": "TracingPolicy",
        "metadata": {"name": policy.name},
        "spec": {"kprobes": [_kprobe(ctx, policy)]},
    }


def documents(ctx: Context) -> dict[str, dict[str, Any]]:
    """Every policy's TracingPolicy, by the policy's key."""
    return {policy.key: policy_document(ctx, policy) for policy in security_content.tetragon_policies(ctx.thresholds)}
