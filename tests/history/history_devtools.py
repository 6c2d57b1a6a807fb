"""TensorBoard in headless Chromium: start both, read the live page, take screenshots.

Just enough of the Chrome DevTools protocol (over a stdlib WebSocket): TensorBoard draws its
dashboards inside shadow DOM, which ``chromium --dump-dom`` does not serialise; evaluating a
script in the page can walk the shadow roots. This avoids a Selenium dependency. Used by the
browser test and by ``scripts/screenshot_history.py``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
STARTUP_SECONDS = 40

# Text of every element, shadow roots included, and every image with its decoded size.
COLLECT_PAGE = """(() => {
  const texts = [], images = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) { walk(el.shadowRoot); texts.push(el.shadowRoot.textContent); }
      if (el.tagName === 'IMG' && el.naturalWidth)
        images.push([el.naturalWidth, el.naturalHeight]);
    }
  };
  walk(document);
  const body = document.body ? document.body.innerText : '';
  return {text: texts.join(' ') + ' ' + body, images: images};
})()"""

# A function, callable in the page, that finds elements by tag name through shadow roots
# (under ``start``, the whole document by default).
FIND_ALL = """globalThis.findAll = (tag, start = document) => {
  const found = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.tagName.toUpperCase() === tag.toUpperCase()) found.push(el);
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(start.shadowRoot || start);
  return found;
};"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(process: subprocess.Popen) -> None:
    """Stop a process started in its own session, with all its children."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def get_bytes(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


@contextmanager
def tensorboard_server(logdir: Path, samples_per_plugin: str = "images=1000") -> Iterator[str]:
    """Serve ``logdir`` with this Python's TensorBoard on a free port; yield its URL once the
    text plugin answers."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
         "--port", str(port), "--load_fast=false", f"--samples_per_plugin={samples_per_plugin}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                if get_json(f"{url}/data/plugin/text/tags"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise TimeoutError(f"TensorBoard did not serve {url} within {STARTUP_SECONDS} s")
            time.sleep(0.3)
        yield url
    finally:
        stop(process)


@contextmanager
def chromium_page(profile: Path) -> Iterator[DevToolsPage]:
    """Headless Chromium with a fresh profile in ``profile``; yield a DevTools session on its page."""
    process = subprocess.Popen(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}",
         "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    page = None
    try:
        port = wait_for_devtools_port(profile, time.monotonic() + STARTUP_SECONDS)
        page = DevToolsPage(page_websocket_url(port))
        yield page
    finally:
        if page is not None:
            page.close()
        stop(process)
        shutil.rmtree(profile, ignore_errors=True)


def wait_for_devtools_port(user_data_dir: Path, deadline: float) -> int:
    """The port Chromium picked for ``--remote-debugging-port=0`` (it writes it to a file)."""
    port_file = user_data_dir / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError("Chromium did not open its DevTools port in time")


def page_websocket_url(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
        targets = json.load(response)
    pages = [t for t in targets if t.get("type") == "page"]
    if not pages:
        raise RuntimeError(f"no page target among {targets}")
    return pages[0]["webSocketDebuggerUrl"]


class DevToolsPage:
    """A DevTools session on one page target; ``evaluate`` returns a script's JSON value."""

    def __init__(self, websocket_url: str, timeout: float = 10.0) -> None:
        host_port, path = websocket_url.removeprefix("ws://").split("/", 1)
        host, port = host_port.split(":")
        self._socket = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self._socket.sendall(
            f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            response += self._socket.recv(4096)
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"WebSocket handshake refused: {response[:200]!r}")
        self._next_id = 0

    def call(self, method: str, **params: Any) -> dict:
        self._next_id += 1
        self._send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._receive())
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def navigate(self, url: str, width: int = 1400, height: int = 1000) -> None:
        """Load ``url`` in a ``width`` x ``height`` viewport."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)

    def wait_for(self, done: Callable[[Any], bool], script: str = COLLECT_PAGE,
                 seconds: float = 30.0) -> Any:
        """Evaluate ``script`` until ``done(value)``; the last value when time runs out."""
        deadline = time.monotonic() + seconds
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(script)
            except RuntimeError:  # the page is between documents while navigating
                value = None
            if value is not None and done(value):
                break
            time.sleep(0.3)
        return value

    def screenshot(self, path: Path) -> None:
        """Save the viewport as a PNG."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self._socket.close()

    def _send(self, text: str) -> None:
        payload = text.encode()
        header = bytes([0x81])
        if len(payload) < 126:
            header += bytes([0x80 | len(payload)])
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self._socket.sendall(header + mask + masked)

    def _receive(self) -> str:
        parts = []
        while True:
            first, second = self._exact(2)
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", self._exact(2))
            elif length == 127:
                (length,) = struct.unpack(">Q", self._exact(8))
            mask = self._exact(4) if second & 0x80 else None
            data = self._exact(length)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if first & 0x0F == 0x8:
                raise RuntimeError("DevTools closed the connection")
            parts.append(data)
            if first & 0x80:
                return b"".join(parts).decode()

    def _exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._socket.recv(size - len(data))
            if not chunk:
                raise RuntimeError("DevTools connection closed mid-frame")
            data += chunk
        return data
