"""The embedder's handler on the consumer runtime (services/consumer, docs/consumers.md): a batch of post.created
and post.deleted events in, every message acked. Best effort: the model failing (timeout, refused, HTTP
error, wrong dimension) or the database failing is counted, logged once per streak, and the messages are acked
anyway: nothing is retried or dead-lettered, the backfill embeds every live post without a vector later
(docs/adr/0123). Only a stopping process returns its messages (the runtime's Requeue)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

import psycopg
from psycopg_pool import ConnectionPool

from services.consumer import outcomes
from services.consumer.messages import Message, Result
from services.core.embedding.protocol import DIMENSION, Embedder, EmbedderUnavailable, Vectors
from services.core.events import POST_CREATED, POST_DELETED, Event, MalformedEvent, decode
from services.embedder import batch, metrics, store
from services.embedder.streak import FailureStreak

log = logging.getLogger(__name__)

TYPES = frozenset({POST_CREATED, POST_DELETED})
DATABASE = "database"  # the failure kind of a database error (the others: services/core/embedding/protocol.py)


class Model:
    """The embedder as the handler and the idle backfill share it: one call at a time (the model runs on
    WALFEED_EMBED_THREADS threads; two calls at once would only compete), and the same dimension for ever (the
    first vectors' length, or that of the model's rows in Postgres): an answer of another is a failure."""

    def __init__(self, embedder: Embedder, dimension: int | None = None) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()
        self._dimension = dimension

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    def dimension(self) -> int:
        with self._lock:
            if self._dimension is None:
                self._dimension = self._embedder.dimension()
            return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        with self._lock:
            rows = self._embedder.embed(texts)
            if self._dimension is None:
                self._dimension = int(rows.shape[1])
            elif rows.shape[1] != self._dimension:
                raise EmbedderUnavailable(f"the model answered vectors of {rows.shape[1]} dimensions, its vectors "
                                          f"have {self._dimension}: a different model behind the same name? Give "
                                          "it another WALFEED_EMBEDDER_MODEL", DIMENSION)
            return rows


class Embedding:
    """The runtime's Work (services/consumer/batched.py)."""

    def __init__(self, pool: ConnectionPool[psycopg.Connection[object]], model: Model) -> None:
        self._pool = pool
        self._model = model
        self._streak = FailureStreak()
        self._streak_lock = threading.Lock()
        self.last_message = time.monotonic()  # the idle backfill waits for a quiet queue (services/embedder/idle.py)

    def batch(self, messages: Sequence[Message]) -> list[Result]:
        started = self.last_message = time.monotonic()
        events: list[Event | None] = [self._event(m) for m in messages]
        label = self.apply([e for e in events if e is not None])
        seconds = (time.monotonic() - started) / max(1, len(messages))
        return [Result(outcomes.ACK, e.type, str(e.id), label, seconds, e) if e is not None else
                Result(outcomes.ACK, "malformed", None, "ignored", seconds) for e in events]

    def large(self, message: Message, event: Event) -> Result:
        raise AssertionError("the embedder never answers Large")

    def apply(self, events: Sequence[Event]) -> str:
        """Embed the batch's new posts and tombstone its deleted ones; what happened, as the messages' label."""
        work = batch.plan(events)
        if not work.embed and not work.tombstone:
            return "nothing"
        try:
            with self._pool.connection() as conn:
                # first, and whatever the model does: nothing else repairs a deleted post's vector (the backfill
                # only adds missing ones), while a post the model fails on is the backfill's to embed
                metrics.TOMBSTONED.inc(store.tombstone(conn, work.tombstone))
                written = self._embed(conn, work.embed)
        except EmbedderUnavailable as exc:
            self.failed(exc.kind, exc.reason, len(work.embed))
            return "model-failed"
        except psycopg.Error as exc:
            self.failed(DATABASE, str(exc).strip()[:300], len(work.embed))
            return "database-failed"
        self.succeeded()
        return "embedded" if written else "tombstoned" if work.tombstone else "nothing-new"

    def _embed(self, conn: psycopg.Connection[object], ids: list[int]) -> int:
        if not ids:
            return 0
        posts = store.bodies(conn, ids)
        if not posts:
            return 0
        started = time.monotonic()
        vectors = self._model.embed([body for _, body in posts])
        written = store.insert_vectors(conn, self._model.model_id, [post for post, _ in posts], vectors)
        metrics.SECONDS.observe(time.monotonic() - started)
        metrics.EMBEDDED.labels("event").inc(written)
        metrics.LAST_EMBEDDED.set_to_current_time()
        return written

    def failed(self, kind: str, reason: str, posts: int) -> None:
        metrics.FAILURES.labels(kind).inc()
        with self._streak_lock:
            first = self._streak.failed(time.monotonic())
        if first:
            log.warning("embedding failed: the messages are acked, the backfill embeds their posts later; logged "
                        "again when it works", extra={"kind": kind, "reason": reason, "posts": posts,
                                                     "model": self._model.model_id})

    def succeeded(self) -> None:
        with self._streak_lock:
            ended = self._streak.succeeded(time.monotonic())
        if ended is not None:
            log.info("embedding works again", extra={"failed_batches": ended.failures,
                                                     "seconds": round(ended.seconds, 1),
                                                     "model": self._model.model_id})

    @staticmethod
    def _event(message: Message) -> Event | None:
        """The message's event if it is one for the embedder; else None (acked and counted, never dead-lettered:
        the fan-out's queue dead-letters the same malformed message)."""
        try:
            event = decode(message.body) if message.refused is None else None
        except MalformedEvent:
            event = None
        if event is None or event.type not in TYPES:
            metrics.IGNORED.inc()
            return None
        return event
