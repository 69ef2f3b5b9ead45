"""What `build.py deploy` and its Grafana client share: the checked Grafana URL and the failure of one step."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from hpcobs.errors import UserError
from hpcobs.targets.provisioning import PROVISIONING_DIR

# Why a dashboard Grafana reports as provisioned is not deployed, whether deploy or Grafana finds it so.
PROVISIONED = (
    f"it is provisioned from files in this Grafana; deploy through one way only, files (out/{PROVISIONING_DIR}) or "
    "build.py deploy"
)


@dataclass(frozen=True)
class Endpoint:
    """Where Grafana answers: scheme, host, port and the sub-path it is served under ("" or "grafana/"); `source`
    names where the URL was given (--url, or grafana.url of the site file), for the lines that ask to fix it."""

    scheme: str
    host: str
    port: int | None
    sub_path: str
    source: str = "--url"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{host}{port}/{self.sub_path}".rstrip("/")

    @property
    def on_this_machine(self) -> bool:
        return _loopback(self.host)

    @classmethod
    def parse(cls, url: str, insecure: bool, source: str = "--url") -> Endpoint:
        """The URL given by `source`, refused in one line (exit 2) before any connection when it would leak the
        token."""
        example = "write e.g. https://grafana.example.org"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise UserError(f"deploy error: {source}: {exc}; {example}") from None
        if parts.username is not None or parts.password is not None:
            # Not echoed: it holds a password.
            raise UserError(
                f"deploy error: {source} holds credentials (user:password@); remove them and pass a service "
                "account token with --token-file or --token-env"
            )
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"deploy error: {source} {url}: not an http(s) URL with a host; {example}")
        if parts.query or parts.fragment or "?" in url or "#" in url:
            raise UserError(f"deploy error: {source} {url}: has a query or fragment; pass Grafana's root URL only")
        if parts.scheme == "http" and not insecure and not _loopback(parts.hostname):
            raise UserError(
                f"deploy error: {source} {url}: plain http to {parts.hostname}, which is not this machine, would "
                "send the token unencrypted; use https, or pass --insecure if that network is trusted"
            )
        path = parts.path.strip("/")
        return cls(parts.scheme, parts.hostname, port, f"{path}/" if path else "", source)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or bool(mapped and mapped.is_loopback)


class Failure(Exception):
    """One step of the deploy failed; `line` says what, what Grafana answered, and the fix. `fatal`: nothing
    after it can succeed (token refused, Grafana down, unreachable or not Grafana), so the deploy stops."""

    def __init__(self, line: str, fatal: bool = False):
        super().__init__(line)
        self.line = line
        self.fatal = fatal
