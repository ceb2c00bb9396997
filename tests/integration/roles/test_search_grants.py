"""Search's rights (020_search.sql, db/roles/grants.sql): the embedder writes vectors of live posts, the api reads
them, and the api's soft delete of a post makes its vectors tombstones through the owner's trigger."""

from __future__ import annotations

import numpy as np
import psycopg

from services.embedder import store
from tests.integration.roles.conftest import RoleEnv

VECTORS = np.full((1, 4), 0.5, dtype=np.float32)


def test_the_embedder_writes_vectors_the_api_reads_and_the_api_delete_tombstones_them(
        role_env: RoleEnv, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        author = admin.execute("INSERT INTO users (handle, token_hash) VALUES ('s', 'x') RETURNING id").fetchone()
        assert author is not None
        post = admin.execute("INSERT INTO posts (author_id, body) VALUES (%s, 'hello') RETURNING id",
                             (author[0],)).fetchone()
        assert post is not None
    with psycopg.connect(role_env("embedder")["WALFEED_DATABASE_URL"], autocommit=True) as embedder:
        assert store.bodies(embedder, [post[0]]) == [(post[0], "hello")]
        assert store.insert_vectors(embedder, "m", [post[0]], VECTORS) == 1
        assert store.insert_vectors(embedder, "m", [post[0]], VECTORS) == 0  # a redelivery
        assert store.tombstone(embedder, [post[0]]) == 0  # the post is live
        assert store.ensure_model(embedder, "m") == (0, False)
        store.advance(embedder, "m", post[0], True)
        covered = store.coverage(embedder, "m")
        assert (covered.live, covered.embedded, covered.position) == (1, 1, post[0])
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as api:
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s",
                           (post[0],)).fetchone() == (VECTORS[0].astype("<f4").tobytes(),)
        api.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post[0],))
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s", (post[0],)).fetchone() == (None,)
