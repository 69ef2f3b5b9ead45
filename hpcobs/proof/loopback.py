"""The generated Alertmanager config with every notifying receiver rewritten to a webhook on loopback, and the sink
that receives those webhooks: nothing leaves the machine (no Slack, PagerDuty or SMTP), and each notification is
kept with the alerts in it. The demo (hpcobs.proof.demo) and the alert replay (hpcobs.proof.replay) run on these.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Notification:
    """One webhook post: the receiver it was for, when it arrived (time.time()), its payload's alerts (labels,
    status, startsAt, endsAt as Alertmanager's webhook sends them) and its groupKey (the same for every
    notification of one aggregation group)."""

    receiver: str
    received: float
    alerts: tuple[dict, ...]
    group_key: str


def loopback_document(source: Path, sink: Sink) -> dict:
    """The Alertmanager config at `source` with each notifying receiver's integrations replaced by one webhook to
    the sink (path = receiver name); receivers with none (the inhibit-only and blackhole ones) stay silent.
    Resolved notifications are not asked for: what is counted is what pages. Template paths are made absolute,
    as the copy lives elsewhere."""
    config = yaml.safe_load(source.read_text(encoding="utf-8"))
    for receiver in config.get("receivers", []):
        integrations = [key for key in receiver if key.endswith("_configs")]
        if integrations:
            for key in integrations:
                del receiver[key]
            receiver["webhook_configs"] = [{"url": f"{sink.url}/{receiver['name']}", "send_resolved": False}]
            sink.receivers.add(receiver["name"])
    if "templates" in config:
        config["templates"] = [str(source.parent / pattern) for pattern in config["templates"]]
    return config


def write_config(document: dict, folder: Path) -> Path:
    """`document` as folder/alertmanager.yml, for servers.Alertmanager."""
    copy = folder / "alertmanager.yml"
    copy.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return copy


class Sink:
    """A webhook receiver on a free loopback port keeping every notification it gets."""

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.receivers: set[str] = set()  # those rewritten to post here
        self.lock = lock = threading.Lock()
        notifications = self.notifications

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    notifications.append(
                        Notification(self.path.strip("/"), time.time(), tuple(body["alerts"]), body["groupKey"])
                    )
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:  # Alertmanager's posts are kept, not logged
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self) -> list[Notification]:
        with self.lock:
            return list(self.notifications)

    def snapshot(self) -> Counter[tuple[str, str]]:
        """Firing alerts notified so far, by (receiver, alertname)."""
        return Counter(
            (n.receiver, a["labels"]["alertname"]) for n in self.received() for a in n.alerts if a["status"] == "firing"
        )

    def __enter__(self) -> Sink:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()
