"""The embedder's statements (db/init/020_search.sql; grants in db/roles/grants.sql)."""

from __future__ import annotations

from typing import Final

# The live posts of these ids with their bodies (events carry ids only).
BODIES: Final = "SELECT id, body FROM posts WHERE id = ANY(%(ids)s::bigint[]) AND deleted_at IS NULL ORDER BY id"

# Vectors of posts still live. A post's body never changes, so an existing row (a vector, or a tombstone: the post
# was deleted meanwhile) is kept: a redelivery rewrites nothing, and a late vector never revives a deleted post.
INSERT_VECTORS: Final = """
INSERT INTO post_embeddings (post_id, model, dimension, vector)
SELECT v.post_id, %(model)s, %(dimension)s, v.vector
FROM unnest(%(ids)s::bigint[], %(vectors)s::bytea[]) AS v(post_id, vector)
JOIN posts p ON p.id = v.post_id AND p.deleted_at IS NULL
ON CONFLICT (post_id, model) DO NOTHING
"""

# post.deleted: the trigger tombstoned the rows in the deleting transaction; this catches a vector inserted by a
# transaction that read the post live just before the delete committed (every model's rows: deleted is deleted).
TOMBSTONE: Final = """
UPDATE post_embeddings e SET vector = NULL, changed_xid = pg_current_xact_id(), embedded_at = now()
FROM posts p
WHERE e.post_id = ANY(%(ids)s::bigint[]) AND e.vector IS NOT NULL AND p.id = e.post_id AND p.deleted_at IS NOT NULL
"""

# Backfill (docs/adr/0123).
ENSURE_MODEL: Final = "INSERT INTO embedding_models (model) VALUES (%(model)s) ON CONFLICT (model) DO NOTHING"
MODEL_STATE: Final = "SELECT position, complete_at FROM embedding_models WHERE model = %(model)s"
# The pass's end: the newest post old enough that its transaction has ended (the api's writes last seconds).
HORIZON: Final = """
SELECT coalesce(max(id), 0) AS horizon FROM posts WHERE created_at < now() - make_interval(secs => %(settle)s)
"""
# The next live posts without a vector of the model, above `after`, up to the horizon.
MISSING: Final = """
SELECT p.id, p.body FROM posts p
WHERE p.id > %(after)s AND p.id <= %(horizon)s AND p.deleted_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM post_embeddings e WHERE e.post_id = p.id AND e.model = %(model)s)
ORDER BY p.id
LIMIT %(batch)s
"""
# A pass from the start (`--from-start`): the position goes back to 0 first, so that a pass that stops resumes
# from where it got to, not from where the previous pass had got (ADVANCE only moves it forward).
RESTART: Final = "UPDATE embedding_models SET position = 0, updated_at = now() WHERE model = %(model)s"
ADVANCE: Final = """
UPDATE embedding_models SET position = greatest(position, %(position)s), updated_at = now(),
    complete_at = CASE WHEN %(complete)s THEN coalesce(complete_at, now()) ELSE complete_at END
WHERE model = %(model)s
"""
# Coverage of a model (walfeed status): live posts, those with a vector, the oldest one without (the lag), and the
# model's backfill row. A scan of every live post: an operator's command, not a process's.
COVERAGE: Final = """
SELECT count(*) AS live, count(e.post_id) AS embedded,
       min(p.created_at) FILTER (WHERE e.post_id IS NULL) AS oldest_missing,
       (SELECT position FROM embedding_models WHERE model = %(model)s) AS position,
       (SELECT complete_at FROM embedding_models WHERE model = %(model)s) AS complete_at
FROM posts p LEFT JOIN post_embeddings e ON e.post_id = p.id AND e.model = %(model)s AND e.vector IS NOT NULL
WHERE p.deleted_at IS NULL
"""
MODELS: Final = "SELECT model FROM embedding_models ORDER BY model"
DIMENSION: Final = """
SELECT dimension FROM post_embeddings WHERE model = %(model)s AND vector IS NOT NULL LIMIT 1
"""
