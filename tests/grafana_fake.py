"""A fake Grafana on a loopback port for tests/test_deploy.py: the part of Grafana's HTTP API that grafana-client
calls for a deploy (health, folders, dashboards by uid, search, datasources), in memory, with Grafana's response
shapes and error bodies, faults to inject, and every request recorded.

Where the shapes and messages come from (Grafana's HTTP API reference, grafana.com/docs/grafana/latest/
developers/http_api/, pages dashboard, folder, folder_dashboard_search and data_source; and Grafana's source):

- dashboards: pkg/services/dashboards/errors.go. An error with a `status` answers {"message", "status"}
  ("Dashboard not found"/not-found 404, "The dashboard has been changed by someone else"/version-mismatch 412,
  "A dashboard with the same name in the folder already exists"/name-exists 412), one without answers
  {"message"} ("Cannot save provisioned dashboard" 400); pkg/api/apierrors/dashboard.go answers an unknown
  folderUid on save with 400 "folder not found".
- Save semantics are those of Grafana up to 10 (pkg/services/dashboards/database): a dashboard's title is unique
  in its folder; without `overwrite` a version other than the stored one is refused (412); with it, a dashboard
  sharing the title is taken over, uid included. A new dashboard gets version 1, each save one more.
- folders: pkg/api/apierrors/folder.go: GET of an unknown uid 404 {"message": "folder not found", "status":
  "not-found"}; 409 "a folder/dashboard with the same uid already exists" and "a folder or dashboard in the
  general folder with the same name already exists"; 412 version-mismatch on PUT.
- datasources: pkg/api/datasources.go: 404 "Data source not found", 403 "Cannot update read-only data source",
  409 "data source with the same name already exists", 409 "Datasource has already been updated by someone
  else. Please reload and try again"; POST/PUT answer {"datasource", "id", "message", "name"}.
- auth: the API-key client of pkg/services/authn answers a bad token 401 {"message": "Invalid API key",
  "messageId": "api-key.invalid", "statusCode": 401, "traceID": ""}; the RBAC middleware answers 403
  {"accessErrorId", "message": "You'll need additional permissions to perform this action. Permissions
  needed: <action>", "title": "Access denied"} (forbidden() below builds it for a fault).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

UNAUTHORIZED = {"message": "Invalid API key", "messageId": "api-key.invalid", "statusCode": 401, "traceID": ""}
DASHBOARD_NOT_FOUND = {"message": "Dashboard not found", "status": "not-found"}
WRITES = ("POST", "PUT", "DELETE", "PATCH")
CREATED_AT = "2025-01-01T00:00:00Z"


def forbidden(permission: str) -> dict:
    """The body of Grafana's 403 when the token's role lacks an RBAC action."""
    return {
        "accessErrorId": "ACE4138425561",
        "message": f"You'll need additional permissions to perform this action. Permissions needed: {permission}",
        "title": "Access denied",
    }


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query string
    authorization: str | None
    body: Any


@dataclass
class Fault:
    """Requests matching `method` and the `path` regex (without the query) after the first `skip` of them: wait
    `delay` seconds, then answer `status` with `body` (a value, or a function of the request), or normally
    when `status` is None; `times` of them, or every one when None."""

    method: str
    path: str
    status: int | None = None
    body: Any = None
    skip: int = 0
    times: int | None = None
    delay: float = 0.0
    seen: int = 0

    def applies(self, method: str, path: str) -> bool:
        if method != self.method or not re.fullmatch(self.path, path):
            return False
        self.seen += 1
        active = self.seen - self.skip
        return active > 0 and (self.times is None or active <= self.times)


@dataclass
class Answer:
    status: int
    body: Any
    content_type: str = "application/json"


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


@dataclass
class FakeGrafana:
    """In-memory Grafana state behind a ThreadingHTTPServer on 127.0.0.1. Use as a context manager."""

    token: str
    version: str = "11.6.0"
    folders: dict[str, dict] = field(default_factory=dict)
    dashboards: dict[str, dict] = field(default_factory=dict)
    datasources: dict[str, dict] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True

    def __enter__(self) -> FakeGrafana:
        # A short poll: shutdown() waits for the serving loop to look, half a second by default.
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def fail(self, method: str, path: str, status: int | None = None, body: Any = None, **options: Any) -> Fault:
        fault = Fault(method, path, status, body, **options)
        with self.lock:
            self.faults.append(fault)
        return fault

    def writes(self) -> list[Request]:
        return [request for request in self.requests if request.method in WRITES]

    def forget_requests(self) -> None:
        with self.lock:
            self.requests.clear()

    # Seeding, as if someone had created these in Grafana.

    def add_folder(self, uid: str, title: str) -> None:
        with self.lock:
            self.folders[uid] = {"id": next(self._ids), "uid": uid, "title": title, "version": 1}

    def add_dashboard(self, model: dict, folder_uid: str = "", provisioned: bool = False) -> None:
        with self.lock:
            stored = {**model, "id": next(self._ids), "version": 1}
            self.dashboards[model["uid"]] = {"model": stored, "folderUid": folder_uid, "provisioned": provisioned}

    def add_datasource(self, settings: dict, read_only: bool = False) -> None:
        with self.lock:
            self.datasources[settings["uid"]] = self._datasource_dto(
                {**settings, "id": next(self._ids), "version": 1, "readOnly": read_only}
            )

    # The API.

    def answer(self, method: str, target: str, authorization: str | None, body: Any) -> Answer:
        parts = urlsplit(target)
        path, query = parts.path, parse_qs(parts.query)
        request = Request(method, target, authorization, body)
        with self.lock:
            self.requests.append(request)
            fault = next((f for f in self.faults if f.applies(method, path)), None)
        if fault is not None:
            time.sleep(fault.delay)
            if fault.status is not None:
                return Answer(fault.status, fault.body(request) if callable(fault.body) else fault.body)
        if not path.startswith("/api/"):
            # Grafana serves its web page for other paths: what a wrong sub-path in --url reaches.
            return Answer(404, "<!DOCTYPE html><html><body>Page not found</body></html>", "text/html; charset=UTF-8")
        if path != "/api/health" and authorization != f"Bearer {self.token}":
            return Answer(401, UNAUTHORIZED)
        for route_method, pattern, handler in _ROUTES:
            match = re.fullmatch(pattern, path)
            if match and route_method == method:
                with self.lock:
                    return handler(self, {k: unquote(v) for k, v in match.groupdict().items()}, query, body)
        return Answer(404, {"message": "Not found"})

    def _health(self, params: dict, query: dict, body: Any) -> Answer:
        return Answer(200, {"commit": "0123456789", "database": "ok", "version": self.version})

    def _folder_dto(self, folder: dict) -> dict:
        return {
            **folder,
            "orgId": 1,
            "url": f"/dashboards/f/{folder['uid']}/{_slug(folder['title'])}",
            "hasAcl": False,
            "canSave": True,
            "canEdit": True,
            "canAdmin": True,
            "canDelete": True,
            "createdBy": "sa-hpcobs-deploy",
            "created": CREATED_AT,
            "updatedBy": "sa-hpcobs-deploy",
            "updated": CREATED_AT,
        }

    def _get_folder(self, params: dict, query: dict, body: Any) -> Answer:
        folder = self.folders.get(params["uid"])
        if folder is None:
            return Answer(404, {"message": "folder not found", "status": "not-found"})
        return Answer(200, self._folder_dto(folder))

    def _create_folder(self, params: dict, query: dict, body: dict) -> Answer:
        title, uid = (body.get("title") or "").strip(), body.get("uid") or f"f{next(self._ids)}"
        if not title:
            return Answer(400, {"message": "folder title cannot be empty"})
        if uid in self.folders or uid in self.dashboards:
            return Answer(409, {"message": "a folder/dashboard with the same uid already exists"})
        root_titles = {_slug(f["title"]) for f in self.folders.values()} | {
            _slug(d["model"]["title"]) for d in self.dashboards.values() if not d["folderUid"]
        }
        if _slug(title) in root_titles:
            return Answer(
                409, {"message": "a folder or dashboard in the general folder with the same name already exists"}
            )
        self.folders[uid] = {"id": next(self._ids), "uid": uid, "title": title, "version": 1}
        return Answer(200, self._folder_dto(self.folders[uid]))

    def _update_folder(self, params: dict, query: dict, body: dict) -> Answer:
        folder = self.folders.get(params["uid"])
        if folder is None:
            return Answer(404, {"message": "folder not found", "status": "not-found"})
        if not body.get("overwrite") and body.get("version") != folder["version"]:
            return Answer(412, {"message": "the folder has been changed by someone else", "status": "version-mismatch"})
        folder.update(title=body.get("title", folder["title"]), version=folder["version"] + 1)
        return Answer(200, self._folder_dto(folder))

    def _delete_folder(self, params: dict, query: dict, body: Any) -> Answer:
        folder = self.folders.pop(params["uid"], None)
        if folder is None:
            return Answer(404, {"message": "folder not found", "status": "not-found"})
        # Grafana deletes the folder's dashboards with it.
        for uid in [uid for uid, entry in self.dashboards.items() if entry["folderUid"] == params["uid"]]:
            del self.dashboards[uid]
        return Answer(200, {"message": "Folder deleted", "id": folder["id"]})

    def _get_dashboard(self, params: dict, query: dict, body: Any) -> Answer:
        entry = self.dashboards.get(params["uid"])
        if entry is None:
            return Answer(404, DASHBOARD_NOT_FOUND)
        model, folder = entry["model"], self.folders.get(entry["folderUid"])
        meta = {
            "type": "db",
            "canSave": True,
            "canEdit": True,
            "canAdmin": True,
            "canStar": True,
            "canDelete": True,
            "slug": _slug(model["title"]),
            "url": f"/d/{model['uid']}/{_slug(model['title'])}",
            "expires": "0001-01-01T00:00:00Z",
            "created": CREATED_AT,
            "updated": CREATED_AT,
            "updatedBy": "sa-hpcobs-deploy",
            "createdBy": "sa-hpcobs-deploy",
            "version": model["version"],
            "hasAcl": False,
            "isFolder": False,
            "folderId": folder["id"] if folder else 0,
            "folderUid": entry["folderUid"],
            "folderTitle": folder["title"] if folder else "General",
            "folderUrl": f"/dashboards/f/{entry['folderUid']}/" if folder else "",
            "provisioned": entry["provisioned"],
            "provisionedExternalId": "hpcobs/authoring/dashboard.json" if entry["provisioned"] else "",
        }
        return Answer(200, {"dashboard": json.loads(json.dumps(model)), "meta": meta})

    def _save_dashboard(self, params: dict, query: dict, body: dict) -> Answer:
        model, folder_uid = dict(body["dashboard"]), body.get("folderUid") or ""
        overwrite, title = bool(body.get("overwrite")), (body["dashboard"].get("title") or "").strip()
        if len(body.get("message") or "") > 500:
            return Answer(400, {"message": "message too long, max 500 characters"})
        if not title:
            return Answer(400, {"message": "Dashboard title cannot be empty", "status": "empty-name"})
        if folder_uid and folder_uid not in self.folders:
            return Answer(400, {"message": "folder not found"})
        uid = model.get("uid") or f"d{next(self._ids)}"
        existing = self.dashboards.get(uid)
        if existing and existing["provisioned"]:
            return Answer(400, {"message": "Cannot save provisioned dashboard"})
        if existing and model.get("version", 0) != existing["model"]["version"] and not overwrite:
            return Answer(
                412, {"message": "The dashboard has been changed by someone else", "status": "version-mismatch"}
            )
        namesake = next(
            (
                other_uid
                for other_uid, other in self.dashboards.items()
                if other_uid != uid
                and other["folderUid"] == folder_uid
                and _slug(other["model"]["title"]) == _slug(title)
            ),
            None,
        )
        if namesake and not overwrite:
            return Answer(
                412, {"message": "A dashboard with the same name in the folder already exists", "status": "name-exists"}
            )
        if namesake:
            uid, existing = namesake, self.dashboards[namesake]
        version = existing["model"]["version"] + 1 if existing else 1
        dashboard_id = existing["model"]["id"] if existing else next(self._ids)
        stored = {**model, "id": dashboard_id, "uid": uid, "version": version}
        self.dashboards[uid] = {"model": stored, "folderUid": folder_uid, "provisioned": False}
        slug = _slug(title)
        return Answer(
            200,
            {
                "id": dashboard_id,
                "uid": uid,
                "url": f"/d/{uid}/{slug}",
                "status": "success",
                "version": version,
                "slug": slug,
            },
        )

    def _delete_dashboard(self, params: dict, query: dict, body: Any) -> Answer:
        entry = self.dashboards.get(params["uid"])
        if entry is None:
            return Answer(404, DASHBOARD_NOT_FOUND)
        if entry["provisioned"]:
            return Answer(400, {"message": "provisioned dashboard cannot be deleted"})
        del self.dashboards[params["uid"]]
        title = entry["model"]["title"]
        return Answer(200, {"title": title, "message": f"Dashboard {title} deleted", "id": entry["model"]["id"]})

    def _search(self, params: dict, query: dict, body: Any) -> Answer:
        tags, kind = query.get("tag", []), query.get("type", [""])[0]
        limit, page = int(query.get("limit", ["1000"])[0]), int(query.get("page", ["1"])[0])
        hits = []
        for uid, entry in self.dashboards.items():
            model = entry["model"]
            if kind not in ("", "dash-db") or not set(tags) <= set(model.get("tags", [])):
                continue
            folder = self.folders.get(entry["folderUid"])
            hit = {
                "id": model["id"],
                "uid": uid,
                "orgId": 1,
                "title": model["title"],
                "uri": f"db/{_slug(model['title'])}",
                "url": f"/d/{uid}/{_slug(model['title'])}",
                "slug": "",
                "type": "dash-db",
                "tags": model.get("tags", []),
                "isStarred": False,
                "sortMeta": 0,
            }
            if folder:
                hit |= {
                    "folderId": folder["id"],
                    "folderUid": folder["uid"],
                    "folderTitle": folder["title"],
                    "folderUrl": f"/dashboards/f/{folder['uid']}/{_slug(folder['title'])}",
                }
            hits.append(hit)
        hits.sort(key=lambda hit: hit["title"].lower())
        return Answer(200, hits[(page - 1) * limit : page * limit])

    @staticmethod
    def _datasource_dto(settings: dict) -> dict:
        defaults = {
            "orgId": 1,
            "typeLogoUrl": "",
            "access": "proxy",
            "url": "",
            "user": "",
            "database": "",
            "basicAuth": False,
            "basicAuthUser": "",
            "withCredentials": False,
            "isDefault": False,
            "jsonData": {},
            "secureJsonFields": {},
            "readOnly": False,
        }
        return {
            **defaults,
            **{k: v for k, v in settings.items() if k in defaults or k in ("id", "uid", "name", "type", "version")},
        }

    def _get_datasource(self, params: dict, query: dict, body: Any) -> Answer:
        found = self.datasources.get(params["uid"])
        return Answer(200, found) if found else Answer(404, {"message": "Data source not found"})

    def _create_datasource(self, params: dict, query: dict, body: dict) -> Answer:
        if any(ds["name"] == body.get("name") for ds in self.datasources.values()):
            return Answer(409, {"message": "data source with the same name already exists"})
        uid = body.get("uid") or f"ds{next(self._ids)}"
        if uid in self.datasources:
            return Answer(409, {"message": "data source with the same uid already exists"})
        created = self._datasource_dto({**body, "uid": uid, "id": next(self._ids), "version": 1})
        self._only_default(created)
        self.datasources[uid] = created
        return Answer(
            200, {"datasource": created, "id": created["id"], "message": "Datasource added", "name": created["name"]}
        )

    def _update_datasource(self, params: dict, query: dict, body: dict) -> Answer:
        found = self.datasources.get(params["uid"])
        if found is None:
            return Answer(404, {"message": "Data source not found"})
        if found["readOnly"]:
            return Answer(403, {"message": "Cannot update read-only data source"})
        if any(ds["name"] == body.get("name") and uid != params["uid"] for uid, ds in self.datasources.items()):
            return Answer(
                409, {"message": "Failed to update datasource: data source with the same name already exists"}
            )
        if body.get("version") and body["version"] < found["version"]:
            return Answer(
                409, {"message": "Datasource has already been updated by someone else. Please reload and try again"}
            )
        # Grafana's update replaces every setting; what the body leaves out is reset. Secrets stay.
        updated = self._datasource_dto(
            {**body, "id": found["id"], "uid": found["uid"], "version": found["version"] + 1, "readOnly": False}
        )
        updated["secureJsonFields"] = found["secureJsonFields"]
        self._only_default(updated)
        self.datasources[params["uid"]] = updated
        return Answer(
            200, {"datasource": updated, "id": updated["id"], "message": "Datasource updated", "name": updated["name"]}
        )

    def _delete_datasource(self, params: dict, query: dict, body: Any) -> Answer:
        found = self.datasources.get(params["uid"])
        if found is None:
            return Answer(404, {"message": "Data source not found"})
        if found["readOnly"]:
            return Answer(403, {"message": "Cannot delete read-only data source"})
        del self.datasources[params["uid"]]
        return Answer(200, {"message": "Data source deleted", "id": found["id"]})

    def _only_default(self, datasource: dict) -> None:
        """Grafana keeps one default datasource: making one the default unsets the others."""
        if datasource["isDefault"]:
            for other in self.datasources.values():
                other["isDefault"] = False


Handler = Callable[[FakeGrafana, dict, dict, Any], Answer]
_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", r"/api/health", FakeGrafana._health),
    ("GET", r"/api/folders/(?P<uid>[^/]+)", FakeGrafana._get_folder),
    ("POST", r"/api/folders", FakeGrafana._create_folder),
    ("PUT", r"/api/folders/(?P<uid>[^/]+)", FakeGrafana._update_folder),
    ("DELETE", r"/api/folders/(?P<uid>[^/]+)", FakeGrafana._delete_folder),
    ("GET", r"/api/search/?", FakeGrafana._search),
    ("GET", r"/api/dashboards/uid/(?P<uid>[^/]+)", FakeGrafana._get_dashboard),
    ("DELETE", r"/api/dashboards/uid/(?P<uid>[^/]+)", FakeGrafana._delete_dashboard),
    ("POST", r"/api/dashboards/db", FakeGrafana._save_dashboard),
    ("GET", r"/api/datasources/uid/(?P<uid>[^/]+)", FakeGrafana._get_datasource),
    ("POST", r"/api/datasources", FakeGrafana._create_datasource),
    ("PUT", r"/api/datasources/uid/(?P<uid>[^/]+)", FakeGrafana._update_datasource),
    ("DELETE", r"/api/datasources/uid/(?P<uid>[^/]+)", FakeGrafana._delete_datasource),
)


def _handler(grafana: FakeGrafana) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without this, Nagle's algorithm holds the second until the
        # client's delayed ACK, some 40 ms a request.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            answer = grafana.answer(self.command, self.path, self.headers.get("Authorization"), body)
            data = (answer.body if isinstance(answer.body, str) else json.dumps(answer.body)).encode()
            try:
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except ConnectionError:
                pass  # the client timed out and left: what a fault with a delay is for

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
