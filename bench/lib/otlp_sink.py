"""An OTLP/HTTP endpoint that accepts every export and keeps nothing: the benchmarks' `--otlp sink`. What tracing
costs a walfeed process is creating and exporting its spans, not what a collector does with them."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink:
    def __init__(self) -> None:
        class Discard(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Discard)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="otlp-sink", daemon=True).start()


def endpoint(option: str | None) -> dict[str, str]:
    """The environment a process under test gets for `--otlp URL|sink` (nothing without it)."""
    if not option:
        return {}
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": Sink().url if option == "sink" else option}
