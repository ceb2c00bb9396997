"""A real HTTP webhook receiver for tests: answers from a script, verifies every signature with the Standard
Webhooks reference library (`standardwebhooks`, by the specification's authors) and records every request."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: float = 0.0  # seconds to wait (interruptible by `release`) before answering


@dataclass(frozen=True)
class Request:
    path: str
    at: float  # time.monotonic() when it arrived
    headers: dict[str, str]
    body: bytes
    verified_by: tuple[int, ...]  # indexes of the secrets whose reference verification accepted it

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def json(self) -> dict[str, object]:
        return json.loads(self.body)  # type: ignore[no-any-return]


class Receiver:
    def __init__(self, secrets: list[str]) -> None:
        self.secrets = secrets
        self.requests: list[Request] = []
        self.release = threading.Event()  # ends every hang at once
        self._script: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self.port = 0

    def script(self, path: str, *replies: Reply) -> str:
        """Answers for `path`, in order; the last repeats. Returns the URL."""
        self._script[path] = list(replies)
        return f"http://127.0.0.1:{self.port}{path}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _next(self, path: str) -> Reply:
        with self._lock:
            replies = self._script.get(path) or [Reply()]
            return replies.pop(0) if len(replies) > 1 else replies[0]

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> None:
        verified = []
        for i, secret in enumerate(self.secrets):
            try:
                Webhook(secret).verify(body, headers)
                verified.append(i)
            except WebhookVerificationError:
                pass
        with self._lock:
            self.requests.append(Request(path, time.monotonic(), headers, body, tuple(verified)))


@contextmanager
def running(secrets: list[str]) -> Iterator[Receiver]:
    receiver = Receiver(secrets)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver._record(self.path, headers, body)
            reply = receiver._next(self.path)
            if reply.hang:
                receiver.release.wait(reply.hang)
            # No body with 204 (RFC 9110 section 15.3.5): the client takes the response as ended after its head,
            # so a body would stay in the kept-alive connection and be read as the start of the next answer on it.
            payload = b'' if reply.status == 204 else b'{"ok": true}'
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.status != 204:  # nor a Content-Length (RFC 9110 section 8.6)
                    self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (a timeout under test)
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.release.set()
        server.shutdown()
        server.server_close()
