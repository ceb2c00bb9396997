"""`walfeed api`: serve the app under granian (ADR 0111; WALFEED_API_SERVER=uvicorn: uvicorn with uvloop and
httptools). SIGTERM/SIGINT finish in-flight requests, then exit 0.

Settings: the shared ones (services.core.settings) plus services.api.config (WALFEED_API_*). granian always runs
WALFEED_API_WORKERS worker processes (default: one per CPU this process may use) on one listening socket under a
supervisor (each builds its own app and pool from the environment, `worker_app`), restarts one that dies, and stops
them all on SIGTERM; uvicorn does the same above one worker, and with one serves in this process. The workers'
Prometheus values live in a temporary PROMETHEUS_MULTIPROC_DIR made and removed here, so /metrics on any worker
reports the sum over all of them. With WALFEED_API_METRICS_PORT set, /metrics is not on the public port: this
process serves it on that port (WALFEED_API_METRICS_HOST, 127.0.0.1 by default), the sum of all workers.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Final

import uvicorn
from fastapi import FastAPI
from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from prometheus_client import CollectorRegistry, start_http_server
from starlette.types import ASGIApp
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from services.api.app import create_app, scrape_registry
from services.api.config import FORWARDED_ALLOW_IPS, ApiSettings, listen_address
from services.core import logs, sdnotify
from services.core.settings import Settings

__all__ = ["create_app", "granian_app", "run", "worker_app"]

log = logging.getLogger(__name__)

GRACE_SECONDS = 20  # a stop waits this long for in-flight requests, then ends the workers
_SERVER_OPTIONS = {"log_config": None, "access_log": False, "timeout_graceful_shutdown": GRACE_SECONDS,
                   "server_header": False}
# granian's own loggers go through ours (the root logger's handler, services.core.logs), not to stdout
_GRANIAN_LOGS = {"loggers": {"_granian": {"propagate": True}, "granian.access": {"propagate": True}}}


def run(settings: Settings, host: str | None = None, port: int | None = None) -> int:
    """Serve until SIGTERM/SIGINT on `host`:`port` (the `--host`/`--port` flags), else WALFEED_API_HOST/_PORT."""
    api = ApiSettings.from_env()
    listen_host, listen_port = listen_address()
    host, port = listen_host if host is None else host, listen_port if port is None else port
    log.info("api starting", extra={"host": host, "port": port, "workers": api.workers,
                                    "max_body_bytes": api.max_body_bytes})
    _notify_when_serving(host, port)
    if api.server == "granian" or api.workers > 1:
        _run_workers(host, port, api)
    else:
        app = create_app(settings, api)
        with _metrics_port(api, app.state.scrape_registry):
            _run_single(app, host, port)
    log.info("api stopped")
    return 0


@contextlib.contextmanager
def _metrics_port(api: ApiSettings, registry: CollectorRegistry) -> Iterator[None]:
    """Serve `registry` on the internal metrics port while the api runs (nothing when the port is 0)."""
    if not api.metrics_port:
        yield
        return
    server, thread = start_http_server(api.metrics_port, addr=api.metrics_host, registry=registry)
    log.info("api metrics listening", extra={"host": api.metrics_host, "port": api.metrics_port})
    try:
        yield
    finally:
        server.shutdown()
        thread.join(5)


def _notify_when_serving(host: str, port: int) -> None:
    """Under systemd (Type=notify, deploy/systemd): READY=1 once /healthz answers on our port, with one worker
    process or several (the supervisor does not know when its workers serve). Nothing without $NOTIFY_SOCKET."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    local = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    url = f"http://{f'[{local}]' if ':' in local else local}:{port}/healthz"

    def probe() -> None:
        while True:
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        sdnotify.ready(f"serving on {host}:{port}")
                        return
            except OSError:
                pass
            time.sleep(0.1)  # not serving yet: probe again

    threading.Thread(target=probe, name="sd-notify", daemon=True).start()


def _run_single(app: FastAPI, host: str, port: int) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **_SERVER_OPTIONS))  # type: ignore[arg-type]
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler: make that one a
    # no-op, so a requested stop exits 0 instead of dying by the signal.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_workers(host: str, port: int, api: ApiSettings) -> None:
    metrics_dir = tempfile.mkdtemp(prefix="walfeed-api-metrics-")
    # Read by the workers (spawned: they inherit the environment; settings flags were written into it by the CLI).
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    os.environ["WALFEED_LOG_LEVEL"] = logging.getLevelName(logging.getLogger().level)
    try:
        with _metrics_port(api, scrape_registry(CollectorRegistry())):  # the sum of the workers' files
            if api.server == "granian":
                _serve_granian(host, port, api.workers, websockets=api.mastodon_api,
                               streams=api.streams_max if api.mastodon_api else 0)
            else:
                uvicorn.run(WORKER_APP, factory=True, host=host, port=port, workers=api.workers,
                            **_SERVER_OPTIONS)  # type: ignore[arg-type]
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(metrics_dir, ignore_errors=True)


WORKER_APP = "services.api.main:worker_app"
_GRANIAN_BACKLOG: Final = 1024  # granian's default
GRANIAN_APP = "services.api.main:granian_app"
_PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h


def _end_with_supervisor() -> None:
    """On Linux, this worker is killed when its supervisor dies, however it died: a SIGKILLed api leaves no orphan
    serving on its port. SIGKILL, not a graceful SIGTERM: the supervisor's death is abrupt already (a normal stop
    is the supervisor's own, graceful, before it exits), and granian's worker, with the embedding model's native
    threads loaded, could hang for good in its SIGTERM handler, the port held (1 run in 6 under load,
    tests/integration/api/test_process.py)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # it died before the call above
        os.kill(os.getpid(), signal.SIGKILL)


def _serve_granian(host: str, port: int, workers: int, *, websockets: bool, streams: int) -> None:
    """granian's supervisor of `workers` processes serving worker_app over HTTP/1.1 (what the api speaks behind a
    proxy); a worker that dies is started again, and a stop gives in-flight requests GRACE_SECONDS. WebSockets only
    for the Mastodon layer's live stream (WALFEED_MASTODON_API, docs/mastodon.md), whose `streams` open
    connections each worker admits on top of granian's own concurrency (its backpressure, backlog / workers): a
    held stream is a request in progress to granian (docs/adr/0140)."""
    # Fresh worker processes, as uvicorn's: forked ones would inherit this process's threads and prometheus_client
    # imported before PROMETHEUS_MULTIPROC_DIR was set (their values in memory, not in the directory's files).
    multiprocessing.set_start_method("spawn", force=True)
    level = logging.getLogger().level
    handlers = logging.getLogger().handlers[:]
    server = Granian(GRANIAN_APP, factory=True, address=host, port=port, interface=Interfaces.ASGI, workers=workers,
                     loop=Loops.auto, http=HTTPModes.http1, websockets=websockets, log_access=False,
                     backpressure=_GRANIAN_BACKLOG // workers + streams, backlog=_GRANIAN_BACKLOG,
                     log_dictconfig=_GRANIAN_LOGS, respawn_failed_workers=True, workers_kill_timeout=GRACE_SECONDS)
    logging.getLogger().handlers[:] = handlers  # granian configured logging: ours again
    logging.getLogger().setLevel(level)
    server.serve()


def granian_app() -> ASGIApp:
    """worker_app behind the X-Forwarded-For handling uvicorn applies itself: the client address (the rate limits'
    partition) is the forwarded one when the peer is trusted, by the same FORWARDED_ALLOW_IPS and default."""
    trusted = os.environ.get(FORWARDED_ALLOW_IPS.name, FORWARDED_ALLOW_IPS.default)
    return ProxyHeadersMiddleware(worker_app(), trusted_hosts=trusted)  # type: ignore[arg-type,return-value]


def worker_app() -> FastAPI:
    """The app of one worker process (the servers' factory): settings from the environment the supervisor passed."""
    logs.configure("api", logs.log_level(), logs.log_format())
    _end_with_supervisor()
    return create_app(Settings.from_env(), ApiSettings.from_env())
