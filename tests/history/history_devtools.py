"""Just enough of the Chrome DevTools protocol (over a stdlib WebSocket) to read a live page.

TensorBoard draws its dashboards inside shadow DOM, which ``chromium --dump-dom`` does not
serialise; evaluating a script in the page can walk the shadow roots. This avoids a Selenium
dependency for the browser test.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any


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
