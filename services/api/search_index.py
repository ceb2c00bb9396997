"""The api's nearest-neighbour index kept from Postgres (docs/adr/0121, 0122): built from one snapshot at start,
then the window of writing transactions since the last poll is read every WALFEED_SEARCH_POLL_INTERVAL seconds.
Until the first build is done, or while the model's backfill is not complete (docs/adr/0123), `unavailable` says
why and the search answers from text. A failed build or poll is logged and tried again at the next interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg
from prometheus_client import CollectorRegistry, Gauge
from psycopg.rows import dict_row

from services.api import index_files, search_plan, search_sql
from services.api.db import Pool
from services.api.vector_index import VectorIndex
from services.core.embedding.protocol import EmbedderUnavailable
from services.core.embedding.vectors import from_stored

log = logging.getLogger(__name__)

BATCH: Final = 2000  # rows per fetch of the build and of a poll


class SearchIndex:
    def __init__(self, model: str, dimension: Callable[[], int], registry: CollectorRegistry,
                 directory: str | None = None, save_every: float = 300.0) -> None:
        self.model = model
        self._directory = directory  # WALFEED_SEARCH_INDEX_DIR: saved copies, loaded at start (index_files.py)
        self._save_every = save_every
        self._saved_at: float | None = None
        self._no_dimension = False
        self._dimension = dimension  # the embedder's: a remote one asks its server (ADR 0120)
        self.dimension = 0
        self.index: VectorIndex | None = None  # None until the first build is done
        self.complete = False
        self._high = 0  # the poll window's lower end: every writing transaction below it has been read
        self._database: str | None = None  # which database the saved copies are of (index_files.py)
        self._failing = False
        self._vectors = Gauge("walfeed_api_search_index_vectors", "Post vectors in this api process's index",
                              registry=registry, multiprocess_mode="min")
        self._polled = Gauge("walfeed_api_search_index_polled_timestamp_seconds",
                             "When this api process's search index last read the table (Unix time)",
                             registry=registry, multiprocess_mode="min")

    @property
    def unavailable(self) -> str | None:
        """Why the vector half cannot answer now (search_plan's reasons), or None."""
        if self.index is None:
            return search_plan.EMBEDDER_UNAVAILABLE if self._no_dimension else search_plan.INDEX_LOADING
        if not self.complete:
            return search_plan.MODEL_INCOMPLETE
        return None

    async def run(self, url: str, pool: Pool, interval: float) -> None:
        """Build, then poll for ever (until cancelled)."""
        while True:
            try:
                if not self.dimension:
                    self._no_dimension = True  # until the embedder says it (a remote one asks its server)
                    self.dimension = await asyncio.to_thread(self._dimension)
                    self._no_dimension = False
                if self._directory is not None and self._database is None:
                    async with pool.connection() as conn:
                        row = await (await conn.execute(search_sql.DATABASE)).fetchone()
                    assert row is not None
                    self._database = str(row["database"])
                if self.index is None and not await asyncio.to_thread(self._load):
                    await self._build(url)
                await self._poll(pool)
                if self._directory is not None:
                    await asyncio.to_thread(self._save)
                if self._failing:
                    log.info("search index reads the table again", extra={"model": self.model})
                self._failing = False
            except (psycopg.Error, OSError, ValueError, EmbedderUnavailable) as exc:
                if not self._failing:
                    log.warning("search index cannot be built or read the table; trying again",
                                extra={"model": self.model, "error": str(exc)[:300]})
                self._failing = True
            except Exception:  # a bug of ours or the index library's: logged, tried again, never a dead task
                log.exception("search index update failed; trying again", extra={"model": self.model})
                self._failing = True
            await asyncio.sleep(interval)

    def _load(self) -> bool:
        """The newest saved copy of the model's index, if any can be read: its position is where polls resume."""
        if self._directory is None or self._database is None:
            return False
        try:
            found = index_files.saved(self.model, self._database, os.listdir(self._directory))
        except OSError as exc:
            log.warning("search index directory unreadable; building", extra={"error": str(exc)})
            return False
        for entry in found:
            started, index = time.monotonic(), VectorIndex(self.dimension)
            try:
                index.load(os.path.join(self._directory, entry.name))
            except (OSError, RuntimeError, ValueError) as exc:
                log.warning("saved search index unreadable; trying an older one or building",
                            extra={"file": entry.name, "error": str(exc)[:300]})
                continue
            self.index, self._high, self._saved_at = index, entry.xmin, time.monotonic()
            self._vectors.set(len(index))
            log.info("search index loaded", extra={"model": self.model, "file": entry.name, "vectors": len(index),
                                                   "seconds": round(time.monotonic() - started, 3)})
            return True
        return False

    def _save(self) -> None:
        """A copy of the index at the current poll position, every `save_every` seconds (and after a build) unless
        another process of the machine saved one that recently; older copies deleted."""
        assert self._directory is not None and self._database is not None and self.index is not None
        now = time.monotonic()
        if self._saved_at is not None and now - self._saved_at < self._save_every:
            return
        self._saved_at = now
        try:
            names = os.listdir(self._directory)
            newest = index_files.saved(self.model, self._database, names)
            if newest and time.time() - os.path.getmtime(os.path.join(self._directory, newest[0].name)) < \
                    self._save_every and newest[0].xmin >= self._high:
                return
            final = os.path.join(self._directory, index_files.name(self.model, self._database, self._high))
            temporary = f"{final}.{os.getpid()}.tmp"
            self.index.save(temporary)
            os.replace(temporary, final)
            for old in index_files.stale(self.model, self._database, os.listdir(self._directory)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self._directory, old))
        except OSError as exc:
            log.warning("search index not saved", extra={"directory": self._directory, "error": str(exc)})

    async def _build(self, url: str) -> None:
        started = time.monotonic()
        index = VectorIndex(self.dimension)
        async with await psycopg.AsyncConnection.connect(url, row_factory=dict_row) as conn:
            await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await conn.set_read_only(True)
            async with conn.transaction():
                row = await (await conn.execute(search_sql.SNAPSHOT_XMIN)).fetchone()
                assert row is not None
                high = int(row["xmin"])
                async with conn.cursor(name="walfeed_search_build") as cursor:
                    await cursor.execute(search_sql.ALL_VECTORS, {"model": self.model})
                    while rows := await cursor.fetchmany(BATCH):
                        await asyncio.to_thread(self._apply, index, rows)
                complete = await self._complete(conn)
        self.index, self._high, self.complete = index, high, complete
        self._vectors.set(len(index))
        log.info("search index built", extra={"model": self.model, "vectors": len(index),
                                              "seconds": round(time.monotonic() - started, 3),
                                              "memory_bytes": index.memory_bytes(), "complete": complete})

    async def _poll(self, pool: Pool) -> None:
        index = self.index
        assert index is not None
        async with pool.connection() as conn:
            # The model's flag before the window's end: a backfill marks the model complete after its vectors
            # committed, so their transactions are below the xmin read next, and in the index once the flag is.
            complete = await self._complete(conn)
            row = await (await conn.execute(search_sql.SNAPSHOT_XMIN)).fetchone()
            assert row is not None
            high = int(row["xmin"])
            after_xid, after_post = self._high, 0
            while True:
                rows = await (await conn.execute(search_sql.POLL, {
                    "model": self.model, "low": self._high, "high": high, "after_xid": after_xid,
                    "after_post": after_post, "limit": BATCH})).fetchall()
                if rows:
                    await asyncio.to_thread(self._apply, index, rows)
                    after_xid, after_post = int(rows[-1]["xid"]), int(rows[-1]["post_id"])
                if len(rows) < BATCH:
                    break
        self.complete = complete
        self._high = max(self._high, high)
        self._vectors.set(len(index))
        self._polled.set(time.time())

    async def _complete(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> bool:
        row = await (await conn.execute(search_sql.MODEL_COMPLETE, {"model": self.model})).fetchone()
        return bool(row and row["complete"])

    def _apply(self, index: VectorIndex, rows: list[dict[str, Any]]) -> None:
        """Vectors in, tombstones out. A row of another dimension (never written by one model) is skipped."""
        gone = [int(r["post_id"]) for r in rows if r["vector"] is None]
        kept = [r for r in rows if r["vector"] is not None and r["dimension"] == self.dimension]
        if len(kept) + len(gone) < len(rows):
            log.warning("search index skips vectors of another dimension",
                        extra={"model": self.model, "expected": self.dimension, "skipped": len(rows) - len(kept)
                               - len(gone)})
        index.remove(gone)
        index.upsert([int(r["post_id"]) for r in kept], from_stored([bytes(r["vector"]) for r in kept],
                                                                    self.dimension))
