"""`walfeed api`: serve the app under uvicorn (uvloop and httptools when installed). SIGTERM/SIGINT finish
in-flight requests, then exit 0.

Settings: the shared ones (services.core.settings) plus services.api.config (WALFEED_API_*). With
WALFEED_API_WORKERS=N > 1, uvicorn's supervisor runs N worker processes on one listening socket (each builds its
own app and pool from the environment, `worker_app`), restarts one that dies, and stops them all on SIGTERM.
Their Prometheus values live in a temporary PROMETHEUS_MULTIPROC_DIR made and removed here, so /metrics on any
worker reports the sum over all of them.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile

import uvicorn
from fastapi import FastAPI

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core import logs
from services.core.settings import Settings

__all__ = ["create_app", "run", "worker_app"]

log = logging.getLogger(__name__)

_SERVER_OPTIONS = {"log_config": None, "access_log": False, "timeout_graceful_shutdown": 20, "server_header": False}


def run(settings: Settings, host: str, port: int) -> int:
    api = ApiSettings.from_env()
    log.info("api starting", extra={"host": host, "port": port, "workers": api.workers,
                                    "max_body_bytes": api.max_body_bytes})
    if api.workers > 1:
        _run_workers(host, port, api.workers)
    else:
        _run_single(create_app(settings, api), host, port)
    log.info("api stopped")
    return 0


def _run_single(app: FastAPI, host: str, port: int) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **_SERVER_OPTIONS))  # type: ignore[arg-type]
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler: make that one a
    # no-op, so a requested stop exits 0 instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_workers(host: str, port: int, workers: int) -> None:
    metrics_dir = tempfile.mkdtemp(prefix="walfeed-api-metrics-")
    # Read by the workers (spawned: they inherit the environment; settings flags were written into it by the CLI).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    os.environ["WALFEED_LOG_LEVEL"] = logging.getLevelName(logging.getLogger().level)
    try:
        uvicorn.run("services.api.main:worker_app", factory=True, host=host, port=port, workers=workers,
                    **_SERVER_OPTIONS)  # type: ignore[arg-type]
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn factory): settings from the environment the supervisor passed."""
    logs.configure("api", os.environ.get("WALFEED_LOG_LEVEL", "INFO"))
    return create_app(Settings.from_env(), ApiSettings.from_env())
