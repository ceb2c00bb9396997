"""`walfeed api`: serve the app under uvicorn. SIGTERM/SIGINT finish in-flight requests, then exit 0.

Settings: the shared ones (services.core.settings) plus services.api.config (WALFEED_API_*).
"""

from __future__ import annotations

import logging
import signal

import uvicorn

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core.settings import Settings

__all__ = ["create_app", "run"]

log = logging.getLogger(__name__)


def run(settings: Settings, host: str, port: int) -> int:
    api = ApiSettings.from_env()
    app = create_app(settings, api)
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=20, server_header=False)
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler: make that one a
    # no-op, so a requested stop exits 0 instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    log.info("api starting", extra={"host": host, "port": port, "max_body_bytes": api.max_body_bytes})
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    log.info("api stopped")
    return 0
