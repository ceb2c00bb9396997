"""020_search.sql on a real server: a deleted post's vectors become tombstones in the deleting transaction, a hard
delete takes them with it, and the full-text query uses the expression index."""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg
import pytest

pytestmark = pytest.mark.integration


def _post(db: psycopg.Connection[Any], body: str) -> int:
    author = db.execute("INSERT INTO users (handle, token_hash) VALUES (%s, %s) RETURNING id",
                        (f"u{abs(hash(body)) % 10**8}", body.encode())).fetchone()
    assert author is not None
    row = db.execute("INSERT INTO posts (author_id, body) VALUES (%s, %s) RETURNING id", (author[0], body)).fetchone()
    assert row is not None
    return int(row[0])


def _embed(db: psycopg.Connection[Any], post: int, model: str) -> None:
    db.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, %s, 2, %s)",
               (post, model, np.array([0.6, 0.8], dtype="<f4").tobytes()))


def test_deleting_a_post_tombstones_every_model_row_and_moves_its_changed_xid(db: psycopg.Connection[Any]) -> None:
    post, other = _post(db, "gone soon"), _post(db, "stays")
    for model in ("a", "b"):
        _embed(db, post, model)
    _embed(db, other, "a")
    db.commit()
    before = db.execute("SELECT max(changed_xid::text::bigint) FROM post_embeddings").fetchone()
    db.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post,))
    db.commit()
    rows = db.execute("SELECT post_id, model, vector IS NULL, changed_xid::text::bigint > %s FROM post_embeddings "
                      "ORDER BY post_id, model", (before[0] if before else 0,)).fetchall()
    assert rows == [(post, "a", True, True), (post, "b", True, True), (other, "a", False, False)]


def test_a_vector_of_the_wrong_length_is_refused(db: psycopg.Connection[Any]) -> None:
    post = _post(db, "short")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, 'a', 3, %s)",
                   (post, b"\0" * 8))


def test_a_hard_deleted_post_takes_its_vectors(db: psycopg.Connection[Any]) -> None:
    post = _post(db, "hard")
    _embed(db, post, "a")
    db.execute("DELETE FROM posts WHERE id = %s", (post,))
    assert db.execute("SELECT count(*) FROM post_embeddings").fetchone() == (0,)


def test_the_full_text_predicate_uses_the_expression_index(db: psycopg.Connection[Any]) -> None:
    author = _post(db, "#rust release notes")
    db.execute("INSERT INTO posts (author_id, body) SELECT author_id, 'filler ' || i FROM posts, "
               "generate_series(1, 3000) i WHERE id = %s", (author,))
    db.execute("ANALYZE posts")
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT id FROM posts WHERE to_tsvector('simple'::regconfig, body) @@ "
        "websearch_to_tsquery('simple'::regconfig, %s) AND deleted_at IS NULL", ("rust",)).fetchall())
    assert "posts_body_fts_idx" in plan
