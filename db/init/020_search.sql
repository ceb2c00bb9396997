-- Search over posts (issue 26, docs/search.md, docs/adr/0121): the vectors of the embedder and the full-text index.
--
-- post_embeddings: one row per (post, model). Postgres is the source of truth; the api's nearest-neighbour index is
-- rebuilt from it at start and kept current by polling it by `changed_xid` (docs/adr/0122). `vector` is the
-- float32 little-endian bytes of a unit vector (no vector extension is installable here: docs/adr/0121); NULL is a
-- tombstone: the post was deleted, and a tombstone is never overwritten by a vector again. Rows go with their post
-- (ON DELETE CASCADE); posts are soft-deleted, so the trigger below tombstones every model's row of a post in the
-- transaction that deletes it.
CREATE TABLE IF NOT EXISTS post_embeddings (
    post_id     bigint      NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
    model       text        NOT NULL CHECK (char_length(model) BETWEEN 1 AND 200),
    dimension   integer     NOT NULL CHECK (dimension BETWEEN 1 AND 8192),
    vector      bytea       CHECK (vector IS NULL OR octet_length(vector) = 4 * dimension),
    -- The transaction that last wrote the row. Every transaction below pg_snapshot_xmin(pg_current_snapshot()) has
    -- ended, and one still without an id will get a larger one: polling the window [last xmin, this xmin) never
    -- misses a row that commits late (a sequence would: its values are not in commit order).
    changed_xid xid8        NOT NULL DEFAULT pg_current_xact_id(),
    embedded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (post_id, model)
);
-- The api's poll (services/api/search_sql.py POLL) and coverage by model (walfeed status).
CREATE INDEX IF NOT EXISTS post_embeddings_changed_idx ON post_embeddings (model, changed_xid);

-- Each model's backfill (`walfeed embed backfill`, docs/adr/0123): where its pass over the posts stands (resumed
-- from there) and when a pass first covered every post. Search uses a model's vectors only once `complete_at` is
-- set: until then a model being introduced would answer from a fraction of the posts.
CREATE TABLE IF NOT EXISTS embedding_models (
    model       text        PRIMARY KEY CHECK (char_length(model) BETWEEN 1 AND 200),
    position    bigint      NOT NULL DEFAULT 0,  -- every live post with id <= position had its turn
    started_at  timestamptz NOT NULL DEFAULT now(),
    complete_at timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A deleted post's vectors become tombstones in the deleting transaction (the api's soft delete). SECURITY
-- DEFINER: it runs as its owner, the api role needs no privilege on post_embeddings beyond SELECT.
CREATE OR REPLACE FUNCTION walfeed_tombstone_post_embeddings() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE post_embeddings SET vector = NULL, changed_xid = pg_current_xact_id(), embedded_at = now()
    WHERE post_id = NEW.id AND vector IS NOT NULL;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS posts_tombstone_embeddings ON posts;
CREATE TRIGGER posts_tombstone_embeddings AFTER UPDATE OF deleted_at ON posts
    FOR EACH ROW WHEN (OLD.deleted_at IS NULL AND NEW.deleted_at IS NOT NULL)
    EXECUTE FUNCTION walfeed_tombstone_post_embeddings();

-- Full-text search of live posts' bodies (GET /v1/search?mode=text and the lexical half of hybrid), with the
-- 'simple' configuration: lower-cased words, no stemming, no stop words (docs/adr/0121: posts carry no language,
-- and exact tokens are this half's job; meaning is the vectors'). Queries must use the same expression and
-- predicate (services/api/search_sql.py TEXT). On a large existing install, build it first by hand with
-- CREATE INDEX CONCURRENTLY (same name and definition): this statement is then a no-op.
CREATE INDEX IF NOT EXISTS posts_body_fts_idx ON posts USING gin (to_tsvector('simple'::regconfig, body))
    WHERE deleted_at IS NULL;
