"""The embedder's backfill while its queue is quiet (docs/adr/0123): after WALFEED_EMBED_IDLE_SECONDS without a
message, one backfill batch at a time (so a message arriving waits one batch at most), until the pass reaches the
horizon; then a new look every idle period. On its own thread; the model is shared with the handler (Model)."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from services.core.embedding.protocol import EmbedderUnavailable
from services.embedder import backfill, metrics
from services.embedder.config import EmbedSettings
from services.embedder.handler import DATABASE, Embedding, Model

log = logging.getLogger(__name__)


def run(stopping: threading.Event, pool: ConnectionPool[psycopg.Connection[object]], model: Model,
        handler: Embedding, settings: EmbedSettings) -> None:
    tick = max(0.05, min(1.0, settings.idle_seconds))
    rest_until = 0.0  # after a pass reached its horizon, or a failure: no batch before this
    while not stopping.wait(tick):
        now = time.monotonic()
        if now < rest_until or now - handler.last_message < settings.idle_seconds:
            continue
        try:
            with pool.connection() as conn:
                done = backfill.run_pass(conn, model, settle=settings.settle_seconds, batch=settings.batch_size,
                                         max_batches=1)
        except EmbedderUnavailable as exc:
            handler.failed(exc.kind, exc.reason, settings.batch_size)
            rest_until = time.monotonic() + settings.idle_seconds
            continue
        except psycopg.Error as exc:
            handler.failed(DATABASE, str(exc).strip()[:300], settings.batch_size)
            rest_until = time.monotonic() + settings.idle_seconds
            continue
        if done.embedded:
            handler.succeeded()
            metrics.EMBEDDED.labels("backfill").inc(done.embedded)
            metrics.LAST_EMBEDDED.set_to_current_time()
            log.info("backfill batch", extra={"model": done.model, "position": done.position,
                                              "horizon": done.horizon, "embedded": done.embedded})
        metrics.BACKFILL_POSITION.set(done.position)
        metrics.MODEL_COMPLETE.set(1 if done.complete else 0)
        if done.position >= done.horizon:
            rest_until = time.monotonic() + settings.idle_seconds
