"""The api's index kept from post_embeddings by xid windows (services/api/search_index.py, docs/adr/0122): the
build's snapshot, new vectors and tombstones read by the polls, and a row whose transaction commits after a later
one's is not skipped."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from services.api import db as api_db
from services.api.search_index import SearchIndex
from services.core.embedding.vectors import to_stored

pytestmark = pytest.mark.integration

MODEL = "poll-test"


def _vector(seed: int) -> bytes:
    rows = np.random.default_rng(seed).standard_normal((1, 4)).astype(np.float32)
    return to_stored(rows / np.linalg.norm(rows))[0]


def _post(conn: psycopg.Connection[object], body: str) -> int:
    row = conn.execute("INSERT INTO posts (author_id, body) SELECT id, %s FROM users LIMIT 1 RETURNING id",
                       (body,)).fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[index]


async def _opened(database_url: str) -> api_db.Pool:
    pool = api_db.make_pool(database_url, min_size=1, max_size=2, timeout=5)
    await pool.open()
    return pool


def _seed(database_url: str) -> int:
    """A user, the model complete, and one post with its vector: the post's id."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO users (handle, token_hash) VALUES ('poller', 'x')")
        conn.execute("INSERT INTO embedding_models (model, complete_at) VALUES (%s, now())", (MODEL,))
        first = _post(conn, "first")
        conn.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 4, %s)",
                     (first, MODEL, _vector(1)))
    return first


def test_polls_add_vectors_drop_tombstones_and_miss_no_late_commit(database_url: str) -> None:
    asyncio.run(_polls(database_url))


async def _polls(database_url: str) -> None:
    pool = await _opened(database_url)
    first = _seed(database_url)
    index = SearchIndex(MODEL, lambda: 4, CollectorRegistry())
    task = asyncio.create_task(index.run(database_url, pool, 0.05))
    try:
        async def holds(expected: set[int]) -> None:
            for _ in range(200):
                if index.index is not None and {p for p, _ in index.index.search(
                        np.full(4, 0.5, dtype=np.float32), 10)} == expected:
                    return
                await asyncio.sleep(0.05)  # the poll's interval, not a wait for a state: polled until it holds
            raise AssertionError(f"the index never held {expected}")

        await holds({first})
        assert index.unavailable is None
        with psycopg.connect(database_url) as late, psycopg.connect(database_url, autocommit=True) as conn:
            slow, quick = _post(conn, "slow"), _post(conn, "quick")
            late.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 4, %s)",
                         (slow, MODEL, _vector(2)))  # its transaction has an id now, and stays open
            conn.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 4, %s)",
                         (quick, MODEL, _vector(3)))  # a later id, committed first
            await asyncio.sleep(0.3)  # several polls while the early transaction is open
            late.commit()
        await holds({first, slow, quick})
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (quick,))
        await holds({first, slow})
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await pool.close()


def test_a_saved_index_is_loaded_at_start_and_polled_from_its_position(database_url: str, tmp_path: Path) -> None:
    asyncio.run(_saved(database_url, str(tmp_path)))


async def _save_once(database_url: str, pool: api_db.Pool, directory: str) -> None:
    """An index built and saved into `directory`, its process stopped."""
    builder = SearchIndex(MODEL, lambda: 4, CollectorRegistry(), directory, save_every=3600)
    task = asyncio.create_task(builder.run(database_url, pool, 0.05))
    for _ in range(200):
        if os.listdir(directory):
            break
        await asyncio.sleep(0.05)  # polled until the file is there
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _saved(database_url: str, directory: str) -> None:
    pool = await _opened(database_url)
    first = _seed(database_url)
    try:
        await _save_once(database_url, pool, directory)
        saved = os.listdir(directory)
        assert len(saved) == 1 and saved[0].startswith(f"{MODEL}-") and saved[0].endswith(".usearch")
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DELETE FROM post_embeddings")  # a load must not read the table: it is empty now...
            later = _post(conn, "later")
            conn.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 4, %s)",
                         (later, MODEL, _vector(2)))  # ...but for a row written after the save, read by a poll
        loaded = SearchIndex(MODEL, lambda: 4, CollectorRegistry(), directory, save_every=3600)
        task = asyncio.create_task(loaded.run(database_url, pool, 0.05))
        for _ in range(200):
            if loaded.index is not None and len(loaded.index) == 2:
                break
            await asyncio.sleep(0.05)  # polled until the poll has run
        assert loaded.index is not None and {p for p, _ in loaded.index.search(
            np.full(4, 0.5, dtype=np.float32), 10)} == {first, later}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await pool.close()


def test_a_saved_index_of_another_database_is_not_loaded(database_url: str, tmp_path: Path) -> None:
    asyncio.run(_of_another_database(database_url, str(tmp_path)))


async def _of_another_database(database_url: str, directory: str) -> None:
    """The file of a database made again or restored elsewhere (here: the same file under another database's name)
    holds that database's vectors and a position of its transaction counter: the index is built instead."""
    pool = await _opened(database_url)
    _seed(database_url)
    try:
        await _save_once(database_url, pool, directory)
        (saved,) = os.listdir(directory)
        model, _database, xmin, suffix = saved.split(".")
        os.rename(os.path.join(directory, saved), os.path.join(directory, f"{model}.1-1.{xmin}.{suffix}"))
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DELETE FROM post_embeddings")  # this database's vectors now: none but `only`
            only = _post(conn, "only")
            conn.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 4, %s)",
                         (only, MODEL, _vector(2)))
        fresh = SearchIndex(MODEL, lambda: 4, CollectorRegistry(), directory, save_every=3600)
        task = asyncio.create_task(fresh.run(database_url, pool, 0.05))
        for _ in range(200):
            if fresh.index is not None:
                break
            await asyncio.sleep(0.05)  # polled until built
        assert fresh.index is not None and [p for p, _ in fresh.index.search(
            np.full(4, 0.5, dtype=np.float32), 10)] == [only]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await pool.close()
