"""Headless Chromium, driven over its DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages ended by a
NUL byte, Chromium reading fd 3 and writing fd 4): open a page, wait for a promise the page exposes, take a PNG of
it. A pipe needs no port and no websocket client."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from hpcobs.errors import ToolError

EXECUTABLES = ("chromium", "chromium-browser", "google-chrome")
MISSING = (
    "preview: needs headless Chromium and the Inter font of Grafana's theme: apt-get install -y chromium fonts-inter"
)
TIMEOUT = 60.0
LOG_LINES = 5
FLAGS = (
    "--headless=new",
    "--remote-debugging-pipe",
    "--no-sandbox",  # root in a container has no user namespace to sandbox in
    "--hide-scrollbars",
    "--no-proxy-server",  # the page and its icons are on loopback
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--mute-audio",
)
_FIRST_FREE_FD = 10  # above 3 and 4, so that placing the pipe's ends there cannot overwrite one with the other


def find() -> str:
    for name in EXECUTABLES:
        if path := shutil.which(name):
            return path
    raise ToolError(MISSING)


class Browser:
    """One Chromium for the pages taken in a `with` block; its output goes to `log`."""

    def __init__(self, log: Path):
        self.log, self.next_id, self.buffer = log, 0, b""

    def __enter__(self) -> Browser:
        to_chromium, self.writer = _high(os.pipe())
        self.reader, from_chromium = _high(os.pipe())
        executable = find()
        with open(self.log, "wb") as log:
            self.pid = os.posix_spawn(
                executable,
                [executable, *FLAGS, "about:blank"],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, log.fileno(), 2),
                    (os.POSIX_SPAWN_DUP2, to_chromium, 3),
                    (os.POSIX_SPAWN_DUP2, from_chromium, 4),
                ],
            )
        os.close(to_chromium)
        os.close(from_chromium)
        return self

    def __exit__(self, *exc_info) -> None:
        with contextlib.suppress(ToolError, OSError):  # it may be gone already: then it is killed below
            self.call("Browser.close", {})
        os.close(self.writer)
        os.close(self.reader)
        deadline = time.monotonic() + 5
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return
            time.sleep(0.05)

    def screenshot(self, url: str, width: int, ready: str, png: Path) -> Any:
        """Open `url` in a page `width` CSS pixels wide, wait for the promise `ready` names (it resolves to a
        JSON value with the `height` and `width` the page drew), write a PNG of that much and return the value."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        metrics = {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", metrics, session)
        self.call("Page.navigate", {"url": url}, session)
        # Page.navigate answers once the new document is committed; the page's script may not have run yet.
        waited = f"new Promise(r => {{ const p = () => {ready} ? r({ready}) : setTimeout(p, 20); p(); }})"
        answer = self.call(
            "Runtime.evaluate", {"expression": waited, "awaitPromise": True, "returnByValue": True}, session
        )
        if "exceptionDetails" in answer:
            raise self._failure(f"the page failed: {answer['exceptionDetails'].get('text')}")
        value = answer["result"]["value"]
        # Cropped to what the page drew: a panel drawn alone is a picture of that panel.
        clip = {"x": 0, "y": 0, "width": min(width, value["width"]), "height": value["height"], "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, session
        )
        png.write_bytes(base64.b64decode(shot["data"]))
        self.call("Target.closeTarget", {"targetId": target})
        return value

    def call(self, method: str, params: dict, session: str | None = None) -> dict:
        self.next_id += 1
        message = {
            "id": self.next_id,
            "method": method,
            "params": params,
            **({"sessionId": session} if session else {}),
        }
        os.write(self.writer, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:  # events and other answers arrive in between; only this call's answer is wanted
            answer = self._message(deadline, method)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise ToolError(f"preview: Chromium refused {method}: {answer['error'].get('message')}")
                return answer["result"]

    def _message(self, deadline: float, method: str) -> dict:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reader], [], [], left)[0]:
                raise self._failure(f"Chromium did not answer {method} within {TIMEOUT:.0f} s")
            chunk = os.read(self.reader, 1 << 20)
            if not chunk:
                raise self._failure(f"Chromium exited during {method}")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def _failure(self, what: str) -> ToolError:
        """`what` went wrong, with the last lines Chromium wrote (its log goes with the scratch directory)."""
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_LINES:]
        return ToolError([f"preview: {what}; Chromium's last lines:", *(f"  {line}" for line in lines)])


def _high(pipe: tuple[int, int]) -> tuple[int, int]:
    """The pipe's two ends moved to close-on-exec descriptors >= _FIRST_FREE_FD."""
    read, write = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FIRST_FREE_FD) for fd in pipe)
    for fd in pipe:
        os.close(fd)
    return read, write
