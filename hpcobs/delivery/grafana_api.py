"""The Grafana HTTP API calls `build.py deploy` makes, through grafana-client: each call knows its path and the
permission it needs, a step of the deploy is retried with backoff on 5xx, timeouts and refused connections, and
any other failure becomes one line naming what failed, what Grafana said and the fix (docs/deploy.md).

Only `build.py deploy` imports this module (hpcobs.delivery.deploy does so when the command runs): a build never loads
grafana-client. The token is handed to grafana-client and never kept in a message; hpcobs.delivery.deploy also
scrubs it from everything it prints, in case a proxy or Grafana echoes it back.
"""

from __future__ import annotations

import functools
import itertools
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import niquests
from grafana_client import GrafanaApi
from grafana_client.client import (
    GrafanaClientError,
    GrafanaException,
    GrafanaServerError,
    GrafanaTimeoutError,
    GrafanaUnauthorizedError,
)

from hpcobs.delivery.endpoint import PROVISIONED, Endpoint, Failure

Result = TypeVar("Result")
# Waits between attempts double from --backoff up to this: a Grafana restart takes seconds, and a deploy that
# waits minutes for one is better stopped and rerun.
MAX_BACKOFF_SECONDS = 10.0
# Grafana's largest page of search results (docs: folder_dashboard_search, `limit`).
SEARCH_PAGE = 5000
_URL_FIX = "check that --url is Grafana's root URL, with its sub-path if it is served under one (https://host/grafana)"


class CallError(Exception):
    """A request that failed: the request, the permission it needs, and what grafana-client or niquests raised."""

    def __init__(self, method: str, path: str, permission: str, cause: Exception):
        super().__init__(f"{method} {path}")
        self.method, self.path, self.permission, self.cause = method, path, permission, cause

    @property
    def transient(self) -> bool:
        """Worth another attempt: Grafana or the network may be back in a moment. A TLS failure is not."""
        if isinstance(self.cause, niquests.exceptions.SSLError):
            return False
        return isinstance(self.cause, GrafanaServerError | GrafanaTimeoutError | niquests.exceptions.ConnectionError)


class Grafana:
    """One Grafana, through grafana-client, with the token as a service account (Bearer) token."""

    def __init__(
        self,
        endpoint: Endpoint,
        token: str,
        timeout: float,
        retries: int,
        backoff: float,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.endpoint, self.timeout, self.retries, self.backoff, self.sleep = endpoint, timeout, retries, backoff, sleep
        self.api = GrafanaApi(
            auth=token,
            host=f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host,
            port=endpoint.port,
            url_path_prefix=endpoint.sub_path,
            protocol=endpoint.scheme,
            timeout=timeout,
            user_agent="hpcobs-deploy",
        )
        if endpoint.on_this_machine:
            # An http(s)_proxy from the environment would receive the token, unless no_proxy happens to list this
            # host, and could only reach its own loopback, not this machine's. Other hosts keep the proxy.
            self.api.client.s.trust_env = False

    # Each call: the method and path grafana-client requests (for error lines), the RBAC action Grafana checks
    # (the HTTP API reference lists it per endpoint), and whether Grafana's JSON 404 means "absent".

    def health(self) -> dict:
        """GET /api/health, which needs no token: is --url Grafana, and which version."""
        answer = self._call("GET", "/health", "none", lambda: self.api.client.GET("/health"))
        if not isinstance(answer, dict) or "database" not in answer:
            raise Failure(f"{self.endpoint.url}/api/health did not answer like Grafana; {_URL_FIX}", fatal=True)
        return answer

    def folder(self, uid: str) -> dict | None:
        return self._call("GET", f"/folders/{uid}", "folders:read", lambda: self.api.folder.get_folder(uid), True)

    def create_folder(self, uid: str, title: str) -> None:
        self._call("POST", "/folders", "folders:create", lambda: self.api.folder.create_folder(title, uid=uid))

    def rename_folder(self, uid: str, title: str, version: int) -> None:
        self._call(
            "PUT",
            f"/folders/{uid}",
            "folders:write",
            lambda: self.api.folder.update_folder(uid, title=title, version=version),
        )

    def datasource(self, uid: str) -> dict | None:
        return self._call(
            "GET",
            f"/datasources/uid/{uid}",
            "datasources:read",
            lambda: self.api.datasource.get_datasource_by_uid(uid),
            True,
        )

    def create_datasource(self, body: dict) -> None:
        self._call("POST", "/datasources", "datasources:create", lambda: self.api.datasource.create_datasource(body))

    def update_datasource(self, uid: str, body: dict) -> None:
        self._call(
            "PUT",
            f"/datasources/uid/{uid}",
            "datasources:write",
            lambda: self.api.datasource.update_datasource_by_uid(uid, body),
        )

    def dashboard(self, uid: str) -> dict | None:
        """{"dashboard": the JSON model as stored, "meta": folderUid, provisioned, ...}, or None."""
        return self._call(
            "GET",
            f"/dashboards/uid/{uid}",
            "dashboards:read",
            lambda: self.api.dashboard.get_dashboard(uid),
            True,
        )

    def save_dashboard(self, body: dict, creating: bool) -> None:
        self._call(
            "POST",
            "/dashboards/db",
            "dashboards:create" if creating else "dashboards:write",
            lambda: self.api.dashboard.update_dashboard(body),
        )

    def delete_dashboard(self, uid: str) -> bool:
        """False when it was already gone (deleted by an earlier attempt whose answer was lost)."""
        answer = self._call(
            "DELETE",
            f"/dashboards/uid/{uid}",
            "dashboards:delete",
            lambda: self.api.dashboard.delete_dashboard(uid),
            True,
        )
        return answer is not None

    def search_dashboards(self, tag: str) -> Iterator[dict]:
        """Every dashboard carrying the tag, page by page."""
        for page in itertools.count(1):
            hits = self._call(
                "GET",
                f"/search?type=dash-db&tag={tag}&page={page}",
                "dashboards:read",
                functools.partial(
                    self.api.search.search_dashboards, tag=tag, type_="dash-db", limit=SEARCH_PAGE, page=page
                ),
            )
            if not isinstance(hits, list):
                raise Failure(f"GET /api/search answered {type(hits).__name__}, not a list; {_URL_FIX}", fatal=True)
            yield from hits
            if len(hits) < SEARCH_PAGE:
                return

    def _call(self, method: str, path: str, permission: str, request: Callable[[], Any], absent_ok: bool = False):
        try:
            return request()
        except GrafanaClientError as exc:
            # Grafana's own 404 is JSON; a proxy's or a wrong sub-path's is an HTML page.
            if absent_ok and exc.status_code == 404 and isinstance(exc.response, dict):
                return None
            raise CallError(method, f"/api{path}", permission, exc) from None
        except (GrafanaException, niquests.exceptions.RequestException) as exc:
            raise CallError(method, f"/api{path}", permission, exc) from None

    def attempt(self, step: Callable[[], Result]) -> Result:
        """Run one step of the deploy (it reads before it writes), again after a transient failure: an attempt
        whose write went through but whose answer was lost then finds its own result and writes nothing."""
        for done in range(1, self.retries + 2):
            try:
                return step()
            except CallError as error:
                if not error.transient or done > self.retries:
                    raise self.explain(error, done) from None
                self.sleep(min(self.backoff * 2 ** (done - 1), MAX_BACKOFF_SECONDS))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def explain(self, error: CallError, attempts: int) -> Failure:
        """The failure as one line (the report names the object): request, Grafana's answer, fix."""
        cause, request = error.cause, f"{error.method} {error.path}"
        times = f"{attempts} attempt{'s' if attempts > 1 else ''}"
        if isinstance(cause, GrafanaUnauthorizedError):
            return Failure(
                f"Grafana refused the token (401 {_message(cause)}) on {request}: it is invalid, "
                "expired or revoked; create a service account token with the Editor role, Admin to manage "
                "datasources too (docs/deploy.md#token)",
                fatal=True,
            )
        if isinstance(cause, GrafanaServerError):
            return Failure(
                f"Grafana answered {cause.status_code} ({_message(cause)}) to {request}, {times}; "
                "see Grafana's log, then rerun (deploy converges)",
                fatal=True,
            )
        if isinstance(cause, GrafanaTimeoutError):
            return Failure(
                f"no answer to {request} within {self.timeout:g} s, {times}; a write may or may not have "
                "been applied: rerun once Grafana answers (deploy converges), or raise --timeout",
                fatal=True,
            )
        if isinstance(cause, niquests.exceptions.SSLError):
            return Failure(
                f"cannot connect to {self.endpoint.url} over TLS ({_network_reason(cause)}); give Grafana a "
                "certificate this machine trusts",
                fatal=True,
            )
        if isinstance(cause, niquests.exceptions.ConnectionError):
            return Failure(
                f"cannot connect to {self.endpoint.url} ({_network_reason(cause)}), {times}; check "
                f"{self.endpoint.source} and that Grafana is up and reachable from here",
                fatal=True,
            )
        if isinstance(cause, GrafanaClientError):
            return Failure(_client_error(cause, error.permission, request))
        return Failure(f"{request} failed ({_network_reason(cause)}); {_URL_FIX}", fatal=True)


def _message(exc: GrafanaException) -> str:
    """Grafana's error message: the `message` of its JSON body, else the start of whatever it answered."""
    body = exc.response
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    text = " ".join(str(body or exc.message).split())
    if text.lower().startswith(("<!doctype html", "<html")):
        return "a web page, not Grafana's API"
    return text[:120] + ("..." if len(text) > 120 else "")


def _status(exc: GrafanaException) -> str:
    body = exc.response
    return str(body.get("status", "")) if isinstance(body, dict) else ""


# What Grafana's 4xx answers mean for a deploy, and the fix: (HTTP status, fragment of Grafana's `status` or
# `message`, explanation). The messages are Grafana's own (pkg/api/apierrors, pkg/services/dashboards/errors.go,
# pkg/api/datasources.go); the first match wins.
_CLIENT_ERRORS = (
    (
        403,
        "read-only",
        "it is read-only in Grafana, provisioned from a file there; change it in that provisioning file, or "
        "remove it there to let deploy manage it",
    ),
    (
        409,
        "with the same name",
        "another folder or datasource in Grafana already has this name under another uid; rename that one, or set "
        "this one's uid in the config (grafana.folder_uid, grafana.datasources.<kind>.uid) to deploy into it",
    ),
    (409, "same uid", "another folder or dashboard already has this uid; choose another uid in the config"),
    (409, "someone else", "it changed in Grafana while deploy ran; rerun deploy"),
    (
        412,
        "version-mismatch",
        "it changed in Grafana after this deploy read it; rerun deploy, which reads it again and replaces it",
    ),
    (
        412,
        "name-exists",
        "another dashboard in the folder has the same title; rename or move that one (deploy never overwrites a "
        "dashboard it does not own)",
    ),
    (412, "plugin-dashboard", "a plugin provides this dashboard; remove the plugin's dashboard first"),
    (400, "folder not found", "the folder was deleted while deploy ran; rerun deploy, which creates it again"),
    (400, "provisioned", PROVISIONED),
)


def _client_error(exc: GrafanaClientError, permission: str, request: str) -> str:
    status, message = exc.status_code, _message(exc)
    answer = f"Grafana answered {status} ({message}) to {request}"
    for code, fragment, meaning in _CLIENT_ERRORS:
        if status == code and (fragment in _status(exc) or fragment in message.lower()):
            return f"{answer}: {meaning}"
    if status == 403:
        marker = "Permissions needed:"
        needed = message.split(marker, 1)[1].strip().rstrip(".") if marker in message else permission
        role = (
            "the Admin role (Editors cannot manage datasources), or pass --skip-datasources"
            if needed.startswith("datasources")
            else "the Editor role, or a role granting it"
        )
        return f"permission denied (403) on {request}: the token's service account lacks {needed}; give it {role}"
    if status == 404 and request.startswith("GET"):
        return f"{answer}: {_URL_FIX}"
    if status == 404:
        return f"{answer}: it was deleted while deploy ran (rerun deploy), or {_URL_FIX}"
    return f"{answer}; fix what Grafana names, then rerun"


def _network_reason(exc: Exception) -> str:
    """The reason ("Connection refused") out of niquests' nested retry message, else the exception's first
    words."""
    text = str(exc)
    reason = re.search(r"\[Errno -?\d+\] ([^'\")]+)|\[SSL: [A-Z_]+\] ([^'\"(]+)", text)
    if reason:
        return (reason.group(1) or reason.group(2)).strip()
    for known in ("Name or service not known", "Failed to resolve", "certificate verify failed", "timed out"):
        if known in text:
            return known
    return f"{type(exc).__name__}: {' '.join(text.split())[:120]}"
