"""Every statement `walfeed rebuild timelines` issues, named. Bound parameters only. Why the repair is safe while
workers run: docs/adr/0073."""

from typing import Final

from psycopg import sql

# Users in id order after a key (--all, resumable), or the given ones; with their floors.
USERS_AFTER: Final = sql.SQL(
    "SELECT id, timeline_floor FROM users WHERE id > %(after)s ORDER BY id LIMIT %(limit)s")
USERS_BY_ID: Final = sql.SQL(
    "SELECT id, timeline_floor FROM users WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id")

# What each user's timeline must hold at or above its floor, newest first, at most %(limit)s per user: the user's
# alive posts and the alive, pushed posts of every account the user follows (one probe of posts_author_idx per
# author). The own rows are written with the post, whatever its decision (docs/adr/0157).
EXPECTED: Final = sql.SQL("""
SELECT u.id AS user_id, e.post_id, e.author_id
FROM unnest(%(user_ids)s::bigint[], %(floors)s::bigint[]) AS u(id, floor)
CROSS JOIN LATERAL (
    SELECT p.id AS post_id, p.author_id
    FROM (SELECT f.followee_id AS author_id FROM follows f WHERE f.follower_id = u.id
          UNION ALL SELECT u.id) a
    CROSS JOIN LATERAL (SELECT id, author_id FROM posts
                        WHERE author_id = a.author_id AND deleted_at IS NULL
                          AND (fanned_out IS TRUE OR author_id = u.id) AND id >= u.floor
                        ORDER BY id DESC LIMIT %(limit)s) p
    ORDER BY p.id DESC LIMIT %(limit)s
) e
""")

# Why a materialized row must not be there, NULL if it may. The same predicate decides what ACTUAL reports and
# what REPAIR_DELETE deletes (re-checked under the locks).
_STRAY_REASON: Final = """
CASE WHEN p.id IS NULL THEN 'no such post'
     WHEN p.author_id <> t.author_id THEN 'wrong author'
     WHEN p.deleted_at IS NOT NULL THEN 'deleted'
     WHEN p.fanned_out IS NOT TRUE AND t.author_id <> t.user_id THEN 'not pushed'
     WHEN t.author_id <> t.user_id AND NOT EXISTS (
         SELECT 1 FROM follows f WHERE f.follower_id = t.user_id AND f.followee_id = t.author_id)
         THEN 'not followed'
END"""

# Every materialized row of the users, with the reason it is stray (NULL: valid).
ACTUAL: Final = sql.SQL("""
SELECT t.user_id, t.post_id, t.author_id, p.author_id AS post_author, """ + _STRAY_REASON + """ AS stray
FROM timelines t LEFT JOIN posts p ON p.id = t.post_id
WHERE t.user_id = ANY(%(user_ids)s::bigint[])
""")

# The repair's advisory locks in one statement, keys ascending: the worker's protocol (services/worker/sql.py
# LOCK_AUTHORS, docs/adr/0022 and 0024), so a repair and a batch cannot deadlock on them.
LOCK_AUTHORS: Final = sql.SQL("""
SELECT count(CASE WHEN l.exclusive THEN pg_advisory_xact_lock(l.key) ELSE pg_advisory_xact_lock_shared(l.key) END)
FROM unnest(%(keys)s::bigint[], %(exclusive)s::bool[]) AS l(key, exclusive)
""")

# Rows found stray, deleted only if they still are (this statement's snapshot follows the locks).
REPAIR_DELETE: Final = sql.SQL("""
DELETE FROM timelines d
USING unnest(%(user_ids)s::bigint[], %(post_ids)s::bigint[]) AS c(user_id, post_id)
JOIN timelines t ON t.user_id = c.user_id AND t.post_id = c.post_id
LEFT JOIN posts p ON p.id = t.post_id
WHERE d.user_id = t.user_id AND d.post_id = t.post_id AND (""" + _STRAY_REASON + """) IS NOT NULL
""")

# Rows found missing, inserted only if they are still due: the post alive, and the user's own or pushed and its
# author followed by the user now. (user, post) order, as the worker inserts, so two inserts of one row wait, not
# deadlock.
REPAIR_INSERT: Final = sql.SQL("""
INSERT INTO timelines (user_id, post_id, author_id)
SELECT c.user_id, p.id, p.author_id
FROM unnest(%(user_ids)s::bigint[], %(post_ids)s::bigint[]) AS c(user_id, post_id)
JOIN posts p ON p.id = c.post_id
WHERE p.deleted_at IS NULL
  AND (p.author_id = c.user_id OR p.fanned_out IS TRUE AND EXISTS (
       SELECT 1 FROM follows f WHERE f.follower_id = c.user_id AND f.followee_id = p.author_id))
ORDER BY c.user_id, p.id
ON CONFLICT DO NOTHING
""")

# A floor too low for what the user receives: raise it (never lower it), and drop the rows below it. Both are safe
# whatever runs meanwhile: reads below the floor come from posts + follows (ADR 0023, 0031).
RAISE_FLOORS: Final = sql.SQL("""
UPDATE users u SET timeline_floor = GREATEST(u.timeline_floor, f.floor)
FROM unnest(%(user_ids)s::bigint[], %(floors)s::bigint[]) AS f(id, floor)
WHERE u.id = f.id
""")
BELOW_FLOORS: Final = sql.SQL("""
DELETE FROM timelines t USING users u
WHERE u.id = ANY(%(user_ids)s::bigint[]) AND t.user_id = u.id AND t.post_id < u.timeline_floor
""")

# follows.pulled says whether the followee's posts are merged in at read time (db/init/015): kept by triggers, so a
# wrong flag is a corruption (or a flag set by hand); a read would miss that followee's pulled posts, or probe for
# none. FLAGS_WRONG reports them, REPAIR_FLAGS sets them from pulled_authors.
FLAGS_WRONG: Final = sql.SQL("""
SELECT f.follower_id, f.followee_id, f.pulled FROM follows f
WHERE f.follower_id = ANY(%(user_ids)s::bigint[])
  AND f.pulled <> EXISTS (SELECT 1 FROM pulled_authors a WHERE a.author_id = f.followee_id)
ORDER BY f.follower_id, f.followee_id
""")
REPAIR_FLAGS: Final = sql.SQL("""
UPDATE follows f SET pulled = NOT f.pulled
WHERE f.follower_id = ANY(%(user_ids)s::bigint[])
  AND f.pulled <> EXISTS (SELECT 1 FROM pulled_authors a WHERE a.author_id = f.followee_id)
""")
