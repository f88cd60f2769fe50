"""A real HTTP server on 127.0.0.1 that serves files the way the Hugging Face
hub does, for `engy pull` tests (HF_ENDPOINT points at it).

    GET /api/models/{owner}/{repo}?blobs=true   {"id", "siblings": [{"rfilename", "size",
                                                 "lfs": {"sha256", "size"}}]}
    GET /{owner}/{repo}/resolve/main/{path}     302 to /cdn/..., with X-Linked-Etag (the
                                                 sha256) and X-Linked-Size, as the hub does
    GET /cdn/{owner}/{repo}/{path}              the bytes, honouring Range
    GET /files/{name}                           a plain file (for URL pulls)

It counts the body bytes it sends per path, records each request's headers,
and can, on demand, drop the connection after N body bytes, send bytes that
differ from the published sha256, or go slowly.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class Hub:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}  # "owner/repo/path" or "files/name" -> content
        self.published: dict[str, str] = {}  # key -> the sha256 the hub announces
        self.sent: Counter[str] = Counter()  # key -> body bytes sent
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.drop_after: dict[str, int] = {}  # key -> drop the connection after N bytes (once)
        self.serve_instead: dict[str, bytes] = {}  # key -> bytes sent in place of the real ones
        self.delay = 0.0  # seconds to sleep per 64 KiB sent
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def add(self, key: str, data: bytes) -> None:
        self.files[key] = data
        self.published[key] = hashlib.sha256(data).hexdigest()

    def start(self) -> Hub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def listing(self, repo: str) -> dict[str, Any]:
        prefix = repo + "/"
        siblings = [
            {
                "rfilename": key[len(prefix) :],
                "size": len(data),
                "lfs": {"sha256": self.published[key], "size": len(data), "pointerSize": 134},
            }
            for key, data in sorted(self.files.items())
            if key.startswith(prefix)
        ]
        return {"id": repo, "modelId": repo, "sha": "0" * 40, "siblings": siblings}


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            hub.requests.append((path, {k.lower(): v for k, v in self.headers.items()}))
            if path.startswith("/api/models/"):
                repo = path[len("/api/models/") :]
                body = hub.listing(repo)
                if not body["siblings"]:
                    return self._status(404, b'{"error":"Repository not found"}')
                return self._status(200, json.dumps(body).encode(), "application/json")
            m = re.match(r"^/([^/]+/[^/]+)/resolve/main/(.+)$", path)
            if m:
                key = f"{m[1]}/{m[2]}"
                if key not in hub.files:
                    return self._status(404, b"Entry not found")
                self.send_response(302)
                self.send_header("Location", f"/cdn/{key}")
                self.send_header("X-Linked-Etag", f'"{hub.published[key]}"')
                self.send_header("X-Linked-Size", str(len(hub.files[key])))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            for prefix in ("/cdn/", "/"):
                key = path[len(prefix) :]
                if path.startswith(prefix) and key in hub.files:
                    return self._send_file(key)
            return self._status(404, b"Not found")

        def _status(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_file(self, key: str) -> None:
            data = hub.serve_instead.get(key, hub.files[key])
            start = 0
            m = _RANGE.match(self.headers.get("Range", ""))
            if m:
                start = int(m[1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data) - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            limit = hub.drop_after.pop(key, None)
            pos = start
            while pos < len(data):
                end = min(pos + 65536, len(data))
                if limit is not None:
                    end = min(end, start + limit)
                    if pos >= end:
                        self.wfile.flush()
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                self.wfile.write(data[pos:end])
                hub.sent[key] += end - pos
                pos = end
                if hub.delay:
                    time.sleep(hub.delay)

    return Handler


@contextmanager
def running_hub() -> Iterator[Hub]:
    hub = Hub().start()
    try:
        yield hub
    finally:
        hub.stop()
