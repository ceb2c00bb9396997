"""The statements of search (services/api/routes/search.py, services/api/search_index.py; db/init/020_search.sql).
Full-text queries must keep the index's expression and predicate: `to_tsvector('simple'::regconfig, body)` of
rows `WHERE deleted_at IS NULL`."""

from __future__ import annotations

from typing import Final

_FILTERS: Final = """
  AND (%(author)s::bigint IS NULL OR p.author_id = %(author)s::bigint)
  AND (%(since)s::timestamptz IS NULL OR p.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR p.created_at < %(until)s::timestamptz)"""

# The best `limit` live posts for the words of `q` (websearch syntax: "quoted phrases", -excluded, or), ranked by
# cover density; ties newest first.
TEXT: Final = """
SELECT p.id, p.author_id, p.body, p.created_at,
       ts_rank_cd(to_tsvector('simple'::regconfig, p.body), w.query)::float8 AS score
FROM websearch_to_tsquery('simple'::regconfig, %(q)s) AS w(query)
JOIN posts p ON to_tsvector('simple'::regconfig, p.body) @@ w.query
WHERE p.deleted_at IS NULL""" + _FILTERS + """
ORDER BY score DESC, p.id DESC
LIMIT %(limit)s
"""

# The vector index's hits that are live posts within the filters (the index may lag a deletion: ADR 0122).
RECHECK: Final = """
SELECT p.id, p.author_id, p.body, p.created_at FROM posts p
WHERE p.id = ANY(%(ids)s::bigint[]) AND p.deleted_at IS NULL""" + _FILTERS

# The index's build: in one REPEATABLE READ transaction, its snapshot's xmin (the first poll window's lower end),
# then every vector of the model in that snapshot.
SNAPSHOT_XMIN: Final = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin"
# Which database an index's saved copy belongs to (index_files.py): the cluster and the database within it.
DATABASE: Final = ("SELECT system_identifier::text || '-' || (SELECT oid FROM pg_database "
                   "WHERE datname = current_database())::text AS database FROM pg_control_system()")
ALL_VECTORS: Final = """
SELECT post_id, dimension, vector FROM post_embeddings WHERE model = %(model)s AND vector IS NOT NULL
"""
# What changed in the window [low, high) of writing transactions (every one below high has ended: ADR 0122), in
# batches by (changed_xid, post_id); a NULL vector is a tombstone.
POLL: Final = """
SELECT post_id, dimension, vector, changed_xid::text::bigint AS xid FROM post_embeddings
WHERE model = %(model)s AND changed_xid >= %(low)s::text::xid8 AND changed_xid < %(high)s::text::xid8
  AND (changed_xid, post_id) > (%(after_xid)s::text::xid8, %(after_post)s::bigint)
ORDER BY changed_xid, post_id
LIMIT %(limit)s
"""
# Whether the model's backfill has covered every post (docs/adr/0123): search uses its vectors only then.
MODEL_COMPLETE: Final = "SELECT complete_at IS NOT NULL AS complete FROM embedding_models WHERE model = %(model)s"
