"""What the commands reading a site's Prometheus share (doctor, preview): its root URL checked, and the error its
HTTP API answers."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse

from hpcobs.errors import UserError


def root_url(url: str, command: str) -> str:
    """`url` without its trailing slash, or one line for `command` when it is not an http(s) URL with a host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(
            f"{command} error: --prometheus {url}: not an http(s) URL with a host; write e.g. http://prometheus:9090"
        )
    return url.rstrip("/")


def api_error(exc: urllib.error.HTTPError) -> str | None:
    """The error a Prometheus API answer carries (bad_data, execution, timeout), or None: no Prometheus API there."""
    try:
        body = json.load(exc)
    except ValueError:
        return None
    return f"{body.get('errorType')}: {body.get('error')}" if isinstance(body, dict) and "error" in body else None
