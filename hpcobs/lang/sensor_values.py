"""The grammar of the site values that reach Falco conditions, Tetragon selectors and Kubernetes object names:
the config checks them when it is loaded, the generators pass them through `literal` and `network`
(docs/security-content.md)."""

from __future__ import annotations

import ipaddress
import posixpath
import re

# What the Kubernetes API server accepts as an object name (DNS-1123 subdomain, at most 253 characters): the name of
# every TracingPolicy, the checkpoint guard's included (the first of thresholds.security_checkpoint_policies).
OBJECT_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def object_name_problem(value: str) -> str | None:
    if len(value) <= 253 and re.match(OBJECT_NAME, value):
        return None
    return (
        f"{value!r} is the name of the shipped Tetragon TracingPolicy, and Kubernetes refuses it; use lower-case "
        "letters, digits, - and . (at most 253), e.g. hpcobs-checkpoint-guard, and list other names after it"
    )


# What a site value may hold where it lands in a Falco condition (inside double quotes, or pasted from a list) or a
# Tetragon selector value: no quote, backslash, space, comma, parenthesis or glob character, so that it reads the
# same in each of them without escaping.
_LITERAL = re.compile(r"[A-Za-z0-9/._+@:~-]+")


def literal(value: str) -> str:
    """A site value checked for the characters every sensor language reads literally; the one function the
    generators pass site values through. The config was checked against the same grammar when loaded
    (path_problem, cidr_problem, cgroup_fragment_problem), so this refuses only what bypassed that."""
    if not _LITERAL.fullmatch(value):
        raise ValueError(f"{value!r} holds a character Falco or Tetragon would not read literally")
    return value


def network(value: str) -> str:
    """A CIDR in the one spelling Falco and Tetragon both parse (host bits zero, IPv6 compressed)."""
    return literal(str(ipaddress.ip_network(value, strict=True)))


_PATH_HINT = (
    "write an absolute path of letters, digits and . _ - + @ : ~ (no spaces, quotes or globs), "
    "without a trailing / and without . or .. parts, e.g. /checkpoints"
)


def path_problem(value: str) -> str | None:
    """Why a path cannot be a file or directory of the sensors' rules ("problem; fix"), or None."""
    if not _LITERAL.fullmatch(value) or not value.startswith("/"):
        return f"{value!r} is not a plain absolute path; {_PATH_HINT}"
    if value != "/" and (posixpath.normpath(value) != value or value.startswith("//")):
        return f"{value!r} is not in its normal form; {_PATH_HINT}"
    if value == "/":
        return "'/' would select every file; name the directories themselves, e.g. /checkpoints"
    return None


def cidr_problem(value: str) -> str | None:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        kind = "has host bits set" if "host bits" in str(error) else "is not an IPv4 or IPv6 network"
        return f"{value!r} {kind}; write a network as address/prefix length, e.g. 10.0.0.0/8 or fd00::/8"
    return None


def cgroup_fragment_problem(value: str) -> str | None:
    """A part of a cgroup path holding a /: one word alone (job_) would also match outside Slurm's tree."""
    if not _LITERAL.fullmatch(value) or "/" not in value or ".." in value.split("/"):
        return (
            f"{value!r} is not a cgroup path fragment; write the part of a job's cgroup path that names it, "
            "with a / in it, of letters, digits and . _ - + @ : ~, e.g. slurmstepd.scope/job_"
        )
    return None
