"""The backfill with the real local model (services/embedder/backfill.py, docs/adr/0123): resumable, leaving
posts younger than the settle time and rows that exist, marking the model complete at the horizon; the api uses a
model only then; `walfeed embed backfill` prints its progress."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from services.cli.status import embedding_status
from services.core.embedding.local import LocalEmbedder
from services.core.embedding.protocol import CONNECTION, EmbedderUnavailable, Vectors
from services.core.settings import Settings
from services.embedder import backfill
from testkit.embedding_server import EmbeddingServer
from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.search.conftest import Search

pytestmark = pytest.mark.integration


def _posts(database_url: str, author: int, bodies: list[str]) -> list[int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return [int(conn.execute("INSERT INTO posts (author_id, body) VALUES (%s, %s) RETURNING id",
                                 (author, body)).fetchone()[0]) for body in bodies]  # type: ignore[index]


def _embedded(database_url: str) -> set[int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT post_id FROM post_embeddings WHERE vector IS NOT NULL")}


def test_a_pass_resumes_where_it_stopped_and_completes_the_model(database_url: str, author: tuple[int, str],
                                                                  embedder: LocalEmbedder) -> None:
    ids = _posts(database_url, author[0], [f"post number {i}" for i in range(7)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (ids[3],))
        first = backfill.run_pass(conn, embedder, settle=0, batch=2, max_batches=1)  # stopped after one batch
        assert (first.position, first.complete, first.embedded) == (ids[1], False, 2)
        assert conn.execute("SELECT position, complete_at IS NULL FROM embedding_models").fetchone() == (ids[1], True)
        seen: list[backfill.Progress] = []
        done = backfill.run_pass(conn, embedder, settle=0, batch=2, progress=seen.append)
    assert done.complete and done.embedded == 4 and done.position == ids[-1]
    assert [p.position for p in seen] == [ids[4], ids[6]]  # ids[3] is deleted: the batch reads past it
    assert _embedded(database_url) == set(ids) - {ids[3]}


def test_posts_younger_than_the_settle_time_wait_for_the_next_pass(database_url: str, author: tuple[int, str],
                                                                   embedder: LocalEmbedder) -> None:
    old = _posts(database_url, author[0], ["an old post"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE posts SET created_at = now() - interval '1 hour' WHERE id = %s", (old[0],))
    young = _posts(database_url, author[0], ["a young post"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        done = backfill.run_pass(conn, embedder, settle=60)
        assert (done.position, done.complete) == (old[0], True)
        assert _embedded(database_url) == set(old)
        backfill.run_pass(conn, embedder, settle=0)
    assert _embedded(database_url) == {*old, *young}


def test_search_uses_a_model_only_once_its_backfill_completed(database_url: str, author: tuple[int, str],
                                                              embedder: LocalEmbedder, search: Search) -> None:
    _posts(database_url, author[0], ["the cat sat on the mat"])
    eventually(lambda: search("feline", mode="semantic")["degraded"] == "model-incomplete", timeout=60,
               what="the index built, its model incomplete")
    with psycopg.connect(database_url, autocommit=True) as conn:
        backfill.run_pass(conn, embedder, settle=0)
    def answered() -> dict[str, Any] | None:
        page = search("kitten on a rug", mode="semantic")
        return page if page["degraded"] is None else None

    page = eventually(answered, timeout=30, what="the model complete in the api")
    assert [item["body"] for item in page["items"]] == ["the cat sat on the mat"]


def test_walfeed_embed_backfill_prints_progress_and_fills_every_post(database_url: str, author: tuple[int, str],
                                                                     processes: Processes) -> None:
    ids = _posts(database_url, author[0], ["one", "two", "three"])
    proc = processes.start("backfill", "embed", "backfill", "--batch-size", "2",
                           env={"WALFEED_EMBED_SETTLE_SECONDS": "0"})
    assert proc.wait(timeout=120) == 0, proc.log()
    assert f"post {ids[1]} of {ids[2]}, 2 embedded" in proc.log()
    assert "3 embedded, every live post up to" in proc.log()
    assert _embedded(database_url) == set(ids)
    bad = processes.start("bad", "embed", "backfill", "--batch-size", "0")
    assert bad.wait(timeout=60) == 2 and "--batch-size 0 is invalid" in bad.log()


def test_status_shows_the_coverage_and_lag_of_the_configured_model(database_url: str, author: tuple[int, str],
                                                                   embedder: LocalEmbedder, settings: Settings) -> None:
    _posts(database_url, author[0], ["first", "second"])
    before = embedding_status(settings)
    assert [(m.model, m.configured, m.live_posts, m.embedded, m.complete) for m in before] == [
        (embedder.model_id, True, 2, 0, False)]
    assert before[0].lag_seconds is not None and before[0].lag_seconds >= 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        backfill.run_pass(conn, embedder, settle=0)
    after = embedding_status(settings)[0]
    assert (after.embedded, after.lag_seconds, after.complete) == (2, 0.0, True)


def test_a_new_model_is_backfilled_under_its_own_name_beside_the_old_one(
        database_url: str, author: tuple[int, str], embedder: LocalEmbedder, processes: Processes) -> None:
    ids = _posts(database_url, author[0], ["one", "two"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        backfill.run_pass(conn, embedder, settle=0)  # the model in use
    with EmbeddingServer().running() as server:
        proc = processes.start("backfill", "embed", "backfill", "--model", "next-model", env={
            "WALFEED_EMBEDDER": "ollama", "WALFEED_EMBEDDER_URL": server.url, "WALFEED_EMBED_SETTLE_SECONDS": "0"})
        assert proc.wait(timeout=120) == 0, proc.log()
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT model, dimension, count(*) FROM post_embeddings GROUP BY 1, 2 "
                            "ORDER BY 1").fetchall()
        models = conn.execute("SELECT model, complete_at IS NOT NULL FROM embedding_models ORDER BY 1").fetchall()
    assert rows == [(embedder.model_id, 384, len(ids)), ("ollama:next-model", 8, len(ids))]
    assert models == [(embedder.model_id, True), ("ollama:next-model", True)]


def test_walfeed_embed_backfill_refuses_vectors_of_another_length_than_the_models_rows(
        database_url: str, author: tuple[int, str], processes: Processes) -> None:
    """As the embedder process does (handler.Model): a server answering another length under the same model name
    is a failure, not rows of two lengths under one model (which the api's index would skip for ever)."""
    ids = _posts(database_url, author[0], ["one", "two", "three"])
    with EmbeddingServer().running() as server:
        env = {"WALFEED_EMBEDDER": "ollama", "WALFEED_EMBEDDER_URL": server.url, "WALFEED_EMBEDDER_MODEL": "m",
               "WALFEED_EMBED_SETTLE_SECONDS": "0"}
        first = processes.start("first", "embed", "backfill", "--batch-size", "1", env=env)
        assert first.wait(timeout=120) == 0, first.log()
        more = _posts(database_url, author[0], ["four"])
        server.dimension = 7
        second = processes.start("second", "embed", "backfill", "--from-start", env=env)
        assert second.wait(timeout=120) == 1 and "dimensions" in second.log(), second.log()
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT dimension, count(*) FROM post_embeddings GROUP BY 1").fetchall()
    assert rows == [(8, len(ids))] and more


class _FailsAfter:
    """The real model for `batches` calls, then a failing one (a server gone in the middle of a pass)."""

    def __init__(self, real: LocalEmbedder, batches: int) -> None:
        self._real, self._left = real, batches
        self.model_id = real.model_id

    def dimension(self) -> int:
        return self._real.dimension()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self._left == 0:
            raise EmbedderUnavailable("connection refused", CONNECTION)
        self._left -= 1
        return self._real.embed(texts)


def test_a_pass_from_the_start_that_stops_is_resumed_where_it_stopped(database_url: str, author: tuple[int, str],
                                                                       embedder: LocalEmbedder) -> None:
    """`--from-start` after the vectors were lost (a restore): stopped half way, the next pass goes on from there,
    not from where the complete pass before it had got (every post after the stop would have stayed without)."""
    ids = _posts(database_url, author[0], [f"post number {i}" for i in range(6)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        backfill.run_pass(conn, embedder, settle=0)
        conn.execute("DELETE FROM post_embeddings")
        with pytest.raises(EmbedderUnavailable):
            backfill.run_pass(conn, _FailsAfter(embedder, 1), settle=0, batch=2, from_start=True)
        backfill.run_pass(conn, embedder, settle=0, batch=2)
    assert _embedded(database_url) == set(ids)
