"""Every statement the worker issues, named. Bound parameters only. The locking protocol is in docs/adr/0022."""

from typing import Final

from psycopg import sql

# Per-author advisory transaction locks (key = the author's user id). Fan-out chunks share the lock; events that
# remove or add an author's rows in someone's timeline take it exclusively, so they serialize with chunks.
# A large post's chunks take it one at a time, in their own transactions.
LOCK_AUTHOR_SHARED: Final = sql.SQL("SELECT pg_advisory_xact_lock_shared(%(author_id)s)")

# A batch's advisory locks in one statement, keys ascending (decide.locks): one global order, so no deadlock.
LOCK_AUTHORS: Final = sql.SQL("""
SELECT count(CASE WHEN l.exclusive THEN pg_advisory_xact_lock(l.key) ELSE pg_advisory_xact_lock_shared(l.key) END)
FROM unnest(%(keys)s::bigint[], %(exclusive)s::bool[]) AS l(key, exclusive)
""")

# Batch statements look rows up by primary key from an unnest of ids through a LATERAL subquery with OFFSET 0 (the
# planner cannot flatten it): one index probe per id whatever the statistics say. Without it, on tables that were
# never analyzed, the planner scanned every undeleted post through posts_author_idx, or hashed the whole outbox,
# for a batch of 30 ids (tests/integration/worker/test_plans.py asserts these plans). The outbox lookup and the
# processed records, shared with every consumer of the events exchange, are in services/consumer/outbox_db.py.

POSTS_FOR_FANOUT: Final = sql.SQL("""
SELECT p.id, p.author_id, p.deleted_at IS NOT NULL AS deleted, p.fanned_out, u.follower_count
FROM unnest(%(post_ids)s::bigint[]) AS i(id)
CROSS JOIN LATERAL (SELECT * FROM posts WHERE id = i.id OFFSET 0) p
JOIN users u ON u.id = p.author_id
""")

# The decision is taken once per post: a retry or duplicate finds it recorded and reuses it. Returns the posts
# this statement decided; the others were decided meanwhile by another transaction (READ_DECISIONS). Rows are
# found by key and updated by ctid: joined with the unnest, a 200-id batch got a sequential scan of posts. A row
# updated meanwhile has another ctid when re-checked, so it is skipped and read again: the same as decided.
RECORD_DECISIONS: Final = sql.SQL("""
UPDATE posts p SET fanned_out = d.push
FROM (SELECT x.ctid, i.push FROM unnest(%(post_ids)s::bigint[], %(push)s::bool[]) AS i(id, push)
      CROSS JOIN LATERAL (SELECT ctid FROM posts WHERE id = i.id AND fanned_out IS NULL OFFSET 0) x) d
WHERE p.ctid = d.ctid AND p.fanned_out IS NULL
RETURNING p.id
""")
READ_DECISIONS: Final = sql.SQL("""
SELECT p.id, p.fanned_out FROM unnest(%(post_ids)s::bigint[]) AS i(id)
CROSS JOIN LATERAL (SELECT id, fanned_out FROM posts WHERE id = i.id OFFSET 0) p
""")

# The own rows of every post decided (%(own)s) and the whole audience of the small pushed ones (%(fan_out)s true), in
# one insert. The api wrote the own row with the post (docs/adr/0157); writing it again costs an index probe and puts
# it there for a post an older api wrote without it. Rows go in (user, post) order, so two transactions inserting the
# same rows (a duplicate event in two batches) wait for each other in one order instead of deadlocking. Re-checks that
# each post is alive.
FANOUT_BATCH: Final = sql.SQL("""
WITH alive AS (
    SELECT p.id, p.author_id, i.fan_out FROM unnest(%(own)s::bigint[], %(fan_out)s::bool[]) AS i(id, fan_out)
    CROSS JOIN LATERAL (SELECT id, author_id FROM posts WHERE id = i.id AND deleted_at IS NULL OFFSET 0) p
)
INSERT INTO timelines (user_id, post_id, author_id)
SELECT r.user_id, r.post_id, r.author_id FROM (
    SELECT f.follower_id AS user_id, a.id AS post_id, a.author_id
    FROM alive a JOIN follows f ON f.followee_id = a.author_id
    WHERE a.fan_out
    UNION ALL
    SELECT a.author_id, a.id, a.author_id FROM alive a
) r
ORDER BY r.user_id, r.post_id
ON CONFLICT DO NOTHING
""")

# Only deleted posts: the event is checked against the outbox, and the state confirms it. Timelines are partitioned
# by user: a post's rows are in any partition, one index probe in each (docs/adr/0093). Run with PROBE_BY_KEY.
DELETE_POSTS: Final = sql.SQL("""
DELETE FROM timelines t
USING unnest(%(post_ids)s::bigint[]) AS i(id)
CROSS JOIN LATERAL (SELECT id FROM posts WHERE id = i.id AND deleted_at IS NOT NULL OFFSET 0) p
WHERE t.post_id = p.id
""")

# For each (follower, followee) pair whose follow exists now: the followee's newest pushed posts (pulled ones are
# merged at read time; undecided ones will be fanned out to the follow, which exists by now), limit + 1 asked to
# learn whether older ones exist. One row per existing pair: the others were unfollowed since.
BACKFILL: Final = sql.SQL("""
WITH pairs AS (
    SELECT pr.follower_id, pr.followee_id
    FROM unnest(%(followers)s::bigint[], %(followees)s::bigint[]) AS pr(follower_id, followee_id)
    WHERE EXISTS (SELECT 1 FROM follows f
                  WHERE f.follower_id = pr.follower_id AND f.followee_id = pr.followee_id)
), recent AS (
    SELECT pr.follower_id, pr.followee_id, r.id, r.rn
    FROM pairs pr CROSS JOIN LATERAL (
        SELECT p.id, row_number() OVER (ORDER BY p.id DESC) AS rn
        FROM (SELECT id FROM posts
              WHERE author_id = pr.followee_id AND deleted_at IS NULL AND fanned_out IS TRUE
              ORDER BY id DESC LIMIT %(limit)s + 1) p
    ) r
), ins AS (
    INSERT INTO timelines (user_id, post_id, author_id)
    SELECT follower_id, id, followee_id FROM recent WHERE rn <= %(limit)s
    ORDER BY follower_id, id
    ON CONFLICT DO NOTHING
)
SELECT pr.follower_id, pr.followee_id, count(r.id) AS found, min(r.id) FILTER (WHERE r.rn <= %(limit)s) AS smallest
FROM pairs pr LEFT JOIN recent r ON r.follower_id = pr.follower_id AND r.followee_id = pr.followee_id
GROUP BY pr.follower_id, pr.followee_id
""")

RAISE_FLOORS: Final = sql.SQL("""
UPDATE users u SET timeline_floor = GREATEST(u.timeline_floor, f.floor)
FROM unnest(%(user_ids)s::bigint[], %(floors)s::bigint[]) AS f(id, floor)
WHERE u.id = f.id
""")

# A followee's rows leave a follower's timeline only if the follow is gone now; in the same statement (one
# snapshot) the pairs' entries in timeline_unfollows go, each only at the version this statement read: an unfollow
# that renewed the entry after this snapshot (a follow and unfollow again) keeps it for its own batch, which removes
# the rows this one kept (db/init/022, docs/adr/0150 and 0152). Run with PROBE_BY_KEY, under the followees'
# exclusive locks.
UNFOLLOW: Final = sql.SQL("""
WITH pairs AS (
    SELECT * FROM unnest(%(followers)s::bigint[], %(followees)s::bigint[]) AS pr(follower_id, followee_id)
), removed AS (
    DELETE FROM timelines t USING pairs pr
    WHERE t.user_id = pr.follower_id AND t.author_id = pr.followee_id
      AND NOT EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = pr.follower_id AND f.followee_id = pr.followee_id)
    RETURNING t.user_id, t.author_id
), seen AS (
    SELECT u.follower_id, u.followee_id, u.version FROM pairs pr
    CROSS JOIN LATERAL (SELECT * FROM timeline_unfollows u
                        WHERE u.follower_id = pr.follower_id AND u.followee_id = pr.followee_id OFFSET 0) u
), cleared AS (
    DELETE FROM timeline_unfollows u USING seen s
    WHERE u.follower_id = s.follower_id AND u.followee_id = s.followee_id AND u.version = s.version
)
SELECT user_id, author_id FROM removed
""")

# One chunk of followers (keyset on follower_id), one set-based insert; re-checks inside the locked transaction
# that the post is not deleted. Returns the last follower of the chunk, its size, and whether the post is alive.
FANOUT_CHUNK: Final = sql.SQL("""
WITH chunk AS (
    SELECT f.follower_id FROM follows f
    WHERE f.followee_id = %(author_id)s AND f.follower_id > %(after)s
    ORDER BY f.follower_id
    LIMIT %(limit)s
), alive AS (
    SELECT EXISTS (SELECT 1 FROM posts WHERE id = %(post_id)s AND deleted_at IS NULL) AS alive
), ins AS (
    INSERT INTO timelines (user_id, post_id, author_id)
    SELECT c.follower_id, %(post_id)s, %(author_id)s FROM chunk c, alive a WHERE a.alive
    ON CONFLICT DO NOTHING
)
SELECT (SELECT max(follower_id) FROM chunk) AS last,
       (SELECT count(*) FROM chunk) AS n,
       (SELECT alive FROM alive) AS alive
""")

# Keep the newest %(keep)s rows of each given user; where rows were removed, raise the floor to the smallest kept.
# Deletes by key, each user's rows in that user's partition (docs/adr/0093): a ctid names a row only within one
# partition, so the ctid join this used before deleted other users' rows once timelines was partitioned. Run with
# PROBE_BY_KEY: the planner prices a probe of the partitioned table as a probe of every partition (32 x), and
# would otherwise hash the whole table for a large batch.
TRIM: Final = sql.SQL("""
WITH cut AS (
    SELECT u.id AS user_id,
           (SELECT t.post_id FROM timelines t WHERE t.user_id = u.id
            ORDER BY t.post_id DESC OFFSET %(keep)s - 1 LIMIT 1) AS smallest_kept
    FROM unnest(%(user_ids)s::bigint[]) AS u(id)
), del AS (
    DELETE FROM timelines t USING cut c
    WHERE t.user_id = c.user_id AND t.post_id < c.smallest_kept
    RETURNING t.user_id
), trimmed AS (
    SELECT DISTINCT user_id FROM del
)
UPDATE users u SET timeline_floor = GREATEST(u.timeline_floor, c.smallest_kept)
FROM trimmed d JOIN cut c ON c.user_id = d.user_id
WHERE u.id = d.user_id AND u.id = ANY(%(user_ids)s::bigint[])
RETURNING u.id
""")

# Around a batch's delete from timelines (TRIM, UNFOLLOW, DELETE_POSTS), in its transaction: join by nested loops,
# so that each user's rows are probed in that user's partition only (run-time partition pruning, docs/adr/0093)
# and each deleted post's through timelines_post_idx of each partition. Postgres costs a parameterized probe of a
# partitioned table as the sum over all its partitions, not the one it will run, so it would hash or merge the
# whole table for a batch of a few hundred keys; and timeline_unfollows, small or empty when last analyzed, is read
# by key even when an outage has filled it. END_PROBES restores the session's settings.
PROBE_BY_KEY: Final = sql.SQL(
    "SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), "
    "set_config('enable_seqscan', 'off', true)")
END_PROBES: Final = sql.SQL(
    "SELECT set_config(name, reset_val, true) FROM pg_settings "
    "WHERE name IN ('enable_hashjoin', 'enable_mergejoin', 'enable_seqscan')")

CHUNK_FOLLOWERS: Final = sql.SQL("""
SELECT f.follower_id FROM follows f
WHERE f.followee_id = %(author_id)s AND f.follower_id > %(after)s AND f.follower_id <= %(last)s
ORDER BY f.follower_id
""")

# The timelines whose trim is due (policy.should_trim): the followers of the authors of small pushed posts
# (%(audiences)s), and the authors themselves, whose own rows grow with every post they write (docs/adr/0157).
TRIM_DUE: Final = sql.SQL("""
SELECT follower_id FROM follows WHERE followee_id = ANY(%(audiences)s::bigint[])
UNION SELECT unnest(%(authors)s::bigint[])
""")
