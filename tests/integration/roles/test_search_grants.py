"""Search's rights (020_search.sql, db/roles/grants.sql): the embedder writes vectors of live posts, the api reads
them, and the api's soft delete of a post makes its vectors tombstones through the owner's trigger."""

from __future__ import annotations

import numpy as np
import psycopg

from tests.integration.roles.conftest import RoleEnv

VECTOR = np.ones(4, dtype="<f4").tobytes()
UPSERT = """
INSERT INTO post_embeddings (post_id, model, dimension, vector) VALUES (%s, 'm', 4, %s)
ON CONFLICT (post_id, model) DO UPDATE SET vector = excluded.vector, dimension = excluded.dimension,
    changed_xid = pg_current_xact_id(), embedded_at = now()
"""


def test_the_embedder_writes_vectors_the_api_reads_and_the_api_delete_tombstones_them(
        role_env: RoleEnv, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        author = admin.execute("INSERT INTO users (handle, token_hash) VALUES ('s', 'x') RETURNING id").fetchone()
        assert author is not None
        post = admin.execute("INSERT INTO posts (author_id, body) VALUES (%s, 'hello') RETURNING id",
                             (author[0],)).fetchone()
        assert post is not None
    with psycopg.connect(role_env("embedder")["WALFEED_DATABASE_URL"], autocommit=True) as embedder:
        assert embedder.execute("SELECT body FROM posts WHERE id = %s AND deleted_at IS NULL",
                                (post[0],)).fetchone() == ("hello",)
        embedder.execute(UPSERT, (post[0], VECTOR))
        embedder.execute(UPSERT, (post[0], VECTOR))  # again: the upsert's UPDATE is allowed too
    with psycopg.connect(role_env("api")["WALFEED_DATABASE_URL"], autocommit=True) as api:
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s", (post[0],)).fetchone() == (VECTOR,)
        api.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post[0],))
        assert api.execute("SELECT vector FROM post_embeddings WHERE post_id = %s", (post[0],)).fetchone() == (None,)
