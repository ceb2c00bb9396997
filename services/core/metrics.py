"""The Prometheus endpoint of a consumer process. Best effort: a port in use is logged, never fatal."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger(__name__)


def serve(port: int, host: str) -> None:
    """Serve /metrics on host:port in a daemon thread; port 0: not at all."""
    if port == 0:
        return
    try:
        start_http_server(port, addr=host)
        log.info("metrics listening", extra={"host": host, "port": port})
    except OSError as exc:
        log.warning("metrics endpoint unavailable", extra={"host": host, "port": port, "error": repr(exc)})
