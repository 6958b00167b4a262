"""Open a local HTML file in headless Chromium over the DevTools pipe and report what a reader would see.

No extra packages: Chromium's `--remote-debugging-pipe` speaks CDP as NUL-separated JSON on fds 3/4.
Returns console errors, every image's load state and pixel spread, the network requests made, and a
full-page screenshot (PNG bytes).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.real_binaries import require_binary

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
)
VIEWPORT = {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False}

# For each <img>: loaded?, natural size, and how many distinct grey levels a sparse pixel sample shows
# (a blank figure has one or two). data: images do not taint the canvas.
IMAGES_JS = """
JSON.stringify(Array.from(document.images).map(img => {
  const out = {complete: img.complete, naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight,
               levels: 0, nonWhite: 0};
  if (!img.naturalWidth) return out;
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  const data = context.getImageData(0, 0, canvas.width, canvas.height).data;
  const seen = new Set();
  for (let i = 0; i < data.length; i += 4 * 31) {
    const grey = (data[i] + data[i + 1] + data[i + 2]) / 3 | 0;
    seen.add(grey);
    if (grey < 250) out.nonWhite++;
  }
  out.levels = seen.size;
  return out;
}))
"""


def find_chromium() -> str:
    """Chromium's path; the test skips (fails under GRILL_REQUIRE_REAL=1) where there is none."""
    return require_binary(*CHROMIUM_NAMES, install="Debian package: apt-get install -y chromium")


@dataclass
class PageView:
    console_errors: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    requested_urls: list[str] = field(default_factory=list)
    screenshot_png: bytes = b""
    title: str = ""


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write_fd, self.read_fd, self.deadline = write_fd, read_fd, deadline
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        for index, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(index)
        while True:
            event = self._read()
            if event.get("method") == method:
                return event
            self.events.append(event)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("chromium did not answer in time")
            ready, _, _ = select.select([self.read_fd], [], [], remaining)
            if ready:
                chunk = os.read(self.read_fd, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


def _high_fds(fds: tuple[int, int]) -> tuple[int, int]:
    """Move a pipe above fd 4 so that the child's dup2 onto 3 and 4 cannot clobber it."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return moved[0], moved[1]


def view_page(html_path: Path, timeout_s: float = 60.0) -> PageView:
    """Load html_path in headless Chromium; raise if it does not load within timeout_s."""
    binary = find_chromium()
    to_chrome_read, to_chrome_write = _high_fds(os.pipe())
    from_chrome_read, from_chrome_write = _high_fds(os.pipe())

    def wire_pipes() -> None:  # in the child: Chromium reads CDP on fd 3 and writes on fd 4
        os.dup2(to_chrome_read, 3)
        os.dup2(from_chrome_write, 4)

    with tempfile.TemporaryDirectory(prefix="grill-chromium-") as profile:
        process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_pipes,
            pass_fds=(3, 4),
        )
        os.close(to_chrome_read)
        os.close(from_chrome_write)
        pipe = _Pipe(to_chrome_write, from_chrome_read, time.monotonic() + timeout_s)
        try:
            return _inspect(pipe, html_path)
        finally:
            try:
                pipe.send("Browser.close")
            except (RuntimeError, TimeoutError, OSError):
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            os.close(to_chrome_write)
            os.close(from_chrome_read)


def _inspect(pipe: _Pipe, html_path: Path) -> PageView:
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Log", "Network"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.send("Emulation.setDeviceMetricsOverride", VIEWPORT, session=session)
    pipe.send("Page.navigate", {"url": html_path.resolve().as_uri()}, session=session)
    pipe.wait_event("Page.loadEventFired")

    view = PageView()
    view.title = _evaluate(pipe, session, "document.title")
    view.images = json.loads(_evaluate(pipe, session, IMAGES_JS))
    shot = pipe.send(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False}, session=session
    )
    view.screenshot_png = base64.b64decode(shot["data"])
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            view.console_errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            view.console_errors.append(str(params.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            view.console_errors.append(str(params["entry"].get("text")))
        elif method == "Network.requestWillBeSent":
            view.requested_urls.append(params["request"]["url"])
    return view


def _evaluate(pipe: _Pipe, session: str, expression: str) -> Any:
    result = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    if "exceptionDetails" in result:
        raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
    return result["result"]["value"]
