"""A stand-in embedding server on 127.0.0.1 speaking Ollama's `POST /api/embed` and the OpenAI-compatible
`POST /v1/embeddings`, for the tests of services/core/embedding/remote.py. What it answers is set by the test:
`mode` good, slow (holds the request until the server stops), error (HTTP 500), garbage (not JSON), or good with a
`dimension` the test changes between calls."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def vector(text: str, dimension: int) -> list[float]:
    """A fixed vector per text (not of unit length: the adapter normalises)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(digest[i % len(digest)]) - 100.0 for i in range(dimension)]


class EmbeddingServer:
    def __init__(self) -> None:
        self.mode = "good"
        self.dimension = 8
        self.requests: list[tuple[str, Any]] = []
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                server.requests.append((self.path, body))
                if server.mode == "slow":
                    server._release.wait(30)
                    return
                if server.mode == "error":
                    return self._send(500, b'{"error": "model not loaded"}')
                if server.mode == "garbage":
                    return self._send(200, b"<html>not json")
                rows = [vector(text, server.dimension) for text in body["input"]]
                if self.path == "/api/embed":
                    answer: Any = {"model": body["model"], "embeddings": rows}
                elif self.path == "/v1/embeddings":
                    answer = {"object": "list", "model": body["model"],
                              "data": [{"object": "embedding", "index": i, "embedding": row}
                                       for i, row in reversed(list(enumerate(rows)))]}
                else:
                    return self._send(404, b"{}")
                self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

    @contextlib.contextmanager
    def running(self) -> Iterator[EmbeddingServer]:
        thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._release.set()
            self._http.shutdown()
            self._http.server_close()
            thread.join()
