-- The Idempotency-Key's uniqueness as a partial index (issue 12, docs/adr/0026). UNIQUE (author_id, idempotency_key)
-- of 001 held an entry for every post, also for the posts without a key (NULLs never conflict), and the fan-out's
-- decision UPDATE (posts.fanned_out, never a HOT update: the column is in posts_pending_idx's and posts_pulled_idx's
-- predicates) wrote a new one for each. Only keyed posts get an entry now; the constraint it replaces enforced
-- nothing more. The api's ON CONFLICT names the predicate, which the full constraint satisfies too, so an api that
-- already runs the new statement works before and after this file; an older api must not run after it (its
-- ON CONFLICT finds no arbiter). Builds the index with a write lock on posts: on a large table, create it
-- CONCURRENTLY by hand first (this file then keeps it).
CREATE UNIQUE INDEX IF NOT EXISTS posts_idempotency_idx ON posts (author_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
ALTER TABLE posts DROP CONSTRAINT IF EXISTS posts_author_id_idempotency_key_key;
