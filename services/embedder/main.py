"""`walfeed embedder` and `walfeed embed backfill`: wiring of the embedding consumer and of the backfill command
(docs/search.md; settings in services/embedder/config.py and services/core/embedding/config.py).

Consumes `{prefix}.embedder` (post.created and post.deleted on the grouped exchange, bounded, drop-head) on the
consumer runtime (services/consumer: one Session, the batches strategy on one thread: the model uses one core),
with services/embedder/handler.py as its Work and services/embedder/route.py as its Route; every message is acked.
A second thread runs the backfill while the queue is quiet (services/embedder/idle.py). SIGTERM/SIGINT: stop
consuming, return what is not started, let the running batch finish, exit 0."""

from __future__ import annotations

import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from services.consumer.batched import Batches, Limits
from services.consumer.session import Session
from services.core.amqp import consume
from services.core.embedding import config as embedder_config
from services.core.embedding.protocol import EmbedderUnavailable
from services.core.metrics import serve as serve_metrics
from services.core.settings import Settings
from services.core.stopping import on_signals
from services.core.topology import Topology
from services.embedder import backfill as backfills
from services.embedder import idle, store
from services.embedder.config import EmbedSettings
from services.embedder.handler import Embedding, Model
from services.embedder.route import EmbedderQueue

log = logging.getLogger(__name__)


def run(settings: Settings) -> int:
    embed = EmbedSettings.from_env()
    chosen = embedder_config.EmbedderSettings.from_env()
    if chosen.kind == "off":
        log.error("WALFEED_EMBEDDER=off: there is no model to embed with; do not run the embedder, or choose one")
        return 2
    try:
        embedder = embedder_config.build(chosen, embed.threads)
    except EmbedderUnavailable as exc:
        log.error("the embedder cannot start", extra={"embedder": chosen.kind, "error": exc.reason})
        return 1
    assert embedder is not None
    stopping = on_signals()
    serve_metrics(embed.metrics_port, embed.metrics_host)
    pool: ConnectionPool[Any] = ConnectionPool(
        settings.database_url, min_size=1, max_size=2, name="walfeed-embedder", open=False,
        kwargs={"autocommit": True, "application_name": "walfeed-embedder"}, check=ConnectionPool.check_connection)
    pool.open()
    model = Model(embedder, _dimension(pool, embedder.model_id))
    handler = Embedding(pool, model)
    backfill = threading.Thread(target=idle.run, args=(stopping, pool, model, handler, embed), name="backfill",
                                daemon=True)
    limits = Limits(batch_size=embed.batch_size, batches=1, prefetch=embed.batch_size * 2,
                    queue_type=settings.amqp_queue_type)
    route = EmbedderQueue(Topology(settings.amqp_prefix), embed.queue_max_length, settings.amqp_queue_type)
    log.info("embedder starting", extra={"model": embedder.model_id, "batch_size": embed.batch_size,
                                         "queue_max_length": embed.queue_max_length,
                                         "prefix": settings.amqp_prefix})
    backfill.start()
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="embed") as batches:
            code = consume(settings.amqp_url, "walfeed-embedder", stopping,
                           lambda conn: Session(conn, route, Batches(handler, batches, None, limits), stopping,
                                                prefetch=limits.prefetch, park_ms=limits.park_ms),
                           "the embedder's queue exists with other arguments (another WALFEED_EMBED_QUEUE_MAX_LENGTH "
                           "or queue type): delete it (it only holds work the backfill redoes) or set the setting "
                           "to match")
    finally:
        stopping.set()
        backfill.join(30)
        pool.close()
    log.info("embedder stopped")
    return code


def run_backfill(settings: Settings, *, from_start: bool, batch_size: int | None) -> int:
    """`walfeed embed backfill`: one pass (services/embedder/backfill.py, docs/adr/0123), its progress printed."""
    if batch_size is not None and not 1 <= batch_size <= 1024:
        print(f"walfeed embed backfill: --batch-size {batch_size} is invalid: expected 1..1024", file=sys.stderr)
        return 2
    embed = EmbedSettings.from_env()
    chosen = embedder_config.EmbedderSettings.from_env()
    try:
        embedder = embedder_config.build(chosen, embed.threads)
    except EmbedderUnavailable as exc:
        print(f"walfeed embed backfill: the embedder cannot start: {exc.reason}", file=sys.stderr)
        return 1
    if embedder is None:
        print("walfeed embed backfill: WALFEED_EMBEDDER=off: there is no model to embed with", file=sys.stderr)
        return 2

    def show(p: backfills.Progress) -> None:
        print(f"embed backfill: {p.model}: post {p.position} of {p.horizon}, {p.embedded} embedded"
              + (", complete" if p.complete else ""), flush=True)

    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        # the embedder process's check (handler.Model): vectors of another length than the model's rows are refused
        model = Model(embedder, store.known_dimension(conn, embedder.model_id))
        try:
            done = backfills.run_pass(conn, model, settle=embed.settle_seconds,
                                      batch=batch_size or embed.batch_size, from_start=from_start, progress=show)
        except EmbedderUnavailable as exc:
            print(f"walfeed embed backfill: the model failed ({exc.reason}); run it again to resume",
                  file=sys.stderr)
            return 1
    print(f"embed backfill: {done.model}: {done.embedded} embedded, every live post up to {done.horizon} has a "
          "vector; search uses this model" + ("" if done.complete else " once complete"), flush=True)
    return 0


def coverage(database_url: str) -> tuple[str | None, list[store.Coverage]]:
    """`walfeed status`'s view: the configured model (None: off) and the coverage of it and of every model a
    backfill ran for. Raises psycopg.Error, SettingsError."""
    configured = embedder_config.model_id(embedder_config.EmbedderSettings.from_env())
    with psycopg.connect(database_url, connect_timeout=5, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('post_embeddings')").fetchone() == (None,):
            raise psycopg.errors.UndefinedTable("post_embeddings does not exist: run `walfeed migrate`")
        names = sorted({*store.models(conn), *([configured] if configured else [])})
        return configured, [store.coverage(conn, name) for name in names]


def _dimension(pool: ConnectionPool[Any], model: str) -> int | None:
    """The model's vectors' length so far, so that a server answering another is refused from the first batch."""
    try:
        with pool.connection() as conn:
            return store.known_dimension(conn, model)
    except psycopg.Error:
        return None  # the database is down: the first answer's length, checked against the rows by the api too
