"""Every statement the worker issues, named. Bound parameters only. The locking protocol is in docs/adr/0022."""

from typing import Final

from psycopg import sql

# Per-author advisory transaction locks (key = the author's user id). Fan-out chunks share the lock; events that
# remove or add an author's rows in someone's timeline take it exclusively, so they serialize with chunks.
LOCK_AUTHOR_SHARED: Final = sql.SQL("SELECT pg_advisory_xact_lock_shared(%(author_id)s)")
LOCK_AUTHOR: Final = sql.SQL("SELECT pg_advisory_xact_lock(%(author_id)s)")

ALREADY_PROCESSED: Final = sql.SQL(
    "SELECT 1 FROM processed_events WHERE consumer = %(consumer)s AND event_id = %(event_id)s")
MARK_PROCESSED: Final = sql.SQL(
    "INSERT INTO processed_events (consumer, event_id) VALUES (%(consumer)s, %(event_id)s) ON CONFLICT DO NOTHING")

POST_FOR_FANOUT: Final = sql.SQL("""
SELECT p.author_id, p.deleted_at IS NOT NULL AS deleted, p.fanned_out, u.follower_count
FROM posts p JOIN users u ON u.id = p.author_id
WHERE p.id = %(post_id)s
""")

# The decision is taken once per post: a retry or duplicate finds it recorded and reuses it.
RECORD_DECISION: Final = sql.SQL(
    "UPDATE posts SET fanned_out = %(push)s WHERE id = %(post_id)s AND fanned_out IS NULL RETURNING fanned_out")
READ_DECISION: Final = sql.SQL("SELECT fanned_out FROM posts WHERE id = %(post_id)s")

INSERT_OWN: Final = sql.SQL("""
INSERT INTO timelines (user_id, post_id, author_id)
SELECT p.author_id, p.id, p.author_id FROM posts p WHERE p.id = %(post_id)s AND p.deleted_at IS NULL
ON CONFLICT DO NOTHING
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

DELETE_POST: Final = sql.SQL("DELETE FROM timelines WHERE post_id = %(post_id)s")

# The outbox row of an event is written in the same transaction as its change: while it is not visible, neither
# is the change. Logical decoding can hand an event to the broker a moment before its transaction becomes visible
# to other sessions (the WAL is flushed before the commit is published in the proc array), so a handler that
# concludes from the ABSENCE of state must first see the event's own row.
EVENT_VISIBLE: Final = sql.SQL("SELECT 1 FROM outbox WHERE id = %(event_id)s")

FOLLOW_EXISTS: Final = sql.SQL(
    "SELECT 1 FROM follows WHERE follower_id = %(follower_id)s AND followee_id = %(followee_id)s")

# The followee's newest pushed posts (pulled ones are merged at read time; undecided ones will be fanned out to
# the follow, which exists by now). Asks for limit + 1 to learn whether older ones exist.
BACKFILL: Final = sql.SQL("""
WITH recent AS (
    SELECT p.id, row_number() OVER (ORDER BY p.id DESC) AS rn
    FROM (SELECT id FROM posts
          WHERE author_id = %(followee_id)s AND deleted_at IS NULL AND fanned_out IS TRUE
          ORDER BY id DESC LIMIT %(limit)s + 1) p
), ins AS (
    INSERT INTO timelines (user_id, post_id, author_id)
    SELECT %(follower_id)s, r.id, %(followee_id)s FROM recent r WHERE r.rn <= %(limit)s
    ON CONFLICT DO NOTHING
)
SELECT count(*) AS found, min(id) FILTER (WHERE rn <= %(limit)s) AS smallest FROM recent
""")

RAISE_FLOOR: Final = sql.SQL(
    "UPDATE users SET timeline_floor = GREATEST(timeline_floor, %(floor)s) WHERE id = %(user_id)s")

UNFOLLOW: Final = sql.SQL("""
DELETE FROM timelines
WHERE user_id = %(follower_id)s AND author_id = %(followee_id)s
  AND NOT EXISTS (SELECT 1 FROM follows WHERE follower_id = %(follower_id)s AND followee_id = %(followee_id)s)
""")

# Keep the newest %(keep)s rows of each given user; where rows were removed, raise the floor to the smallest kept.
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
)
UPDATE users u SET timeline_floor = GREATEST(u.timeline_floor, c.smallest_kept)
FROM cut c
WHERE u.id = c.user_id AND c.user_id IN (SELECT user_id FROM del)
RETURNING u.id
""")

CHUNK_FOLLOWERS: Final = sql.SQL("""
SELECT f.follower_id FROM follows f
WHERE f.followee_id = %(author_id)s AND f.follower_id > %(after)s AND f.follower_id <= %(last)s
ORDER BY f.follower_id
""")
