"""Every statement the API runs, as named constants with bound parameters only."""

from functools import lru_cache
from typing import Final, LiteralString

from psycopg import sql

AUTHENTICATE: Final = "SELECT id, token_hash FROM users WHERE token_hash = %(hash)s"

CREATE_USER: Final = """
INSERT INTO users (handle, token_hash, password_hash) VALUES (%(handle)s, %(hash)s, %(password)s)
ON CONFLICT (handle) DO NOTHING
RETURNING id, handle
"""
# Rotation and revocation: the new hash and, in the same statement (so sent when it commits), the notification
# every api process listens for to drop the old token from its cache (revocations.py, ADR 0035).
SET_TOKEN: Final = """
WITH changed AS (UPDATE users SET token_hash = %(hash)s WHERE id = %(id)s RETURNING id)
SELECT pg_notify('walfeed_token_changed', id::text) FROM changed
"""
# The account's password (argon2id, services/api/passwords.py; db/init/021_mastodon.sql): the OAuth logins of the
# Mastodon layer check it. The bearer token stays as it is.
SET_PASSWORD: Final = "UPDATE users SET password_hash = %(password)s WHERE id = %(id)s"
GET_USER: Final = "SELECT id, handle, follower_count, following_count FROM users WHERE id = %(id)s"
USER_EXISTS: Final = "SELECT 1 FROM users WHERE id = %(id)s"

# Count one request in its partition's current fixed window (services/api/ratelimit.py decides the rest).
# The window comes from the database's clock, the same for every api process. hits stops at limit + 1.
_CLOCK: Final = "clock AS (SELECT extract(epoch FROM statement_timestamp())::float8 AS now)"
_COUNT_HIT: Final = """
INSERT INTO rate_limits AS r (key, window_start, hits)
SELECT %(limit_key)s, (floor(now / %(window)s) * %(window)s)::bigint, 1 FROM clock
ON CONFLICT (key) DO UPDATE SET
    hits = CASE WHEN r.window_start = excluded.window_start THEN LEAST(r.hits + 1, %(cap)s) ELSE 1 END,
    window_start = excluded.window_start
RETURNING hits, window_start, (SELECT now FROM clock) AS now
"""
RATE_LIMIT_HIT: Final = "WITH " + _CLOCK + _COUNT_HIT

# Follow counts change only when a follows row was really inserted or deleted, in the same transaction.
# Both users rows are locked in id order (LOCK_PAIR) before the follows row is touched, so A->B and B->A at once
# cannot deadlock, nor can an unfollow with the first pulled post of its followee (db/init/015's trigger locks the
# author's users row, then the follows rows) or with the worker's batch (users rows, then the pairs of
# timeline_unfollows that the follows DELETE's trigger writes: docs/adr/0152).
FOLLOW: Final = """
INSERT INTO follows (follower_id, followee_id)
SELECT %(follower)s, id FROM users WHERE id = %(followee)s
ON CONFLICT DO NOTHING
RETURNING followee_id
"""
UNFOLLOW: Final = """
DELETE FROM follows WHERE follower_id = %(follower)s AND followee_id = %(followee)s
RETURNING followee_id
"""
LOCK_PAIR: Final = "SELECT id FROM users WHERE id = ANY(%(ids)s) ORDER BY id FOR NO KEY UPDATE"
# With the pair locked: a new follow of a pulled author is marked here, in case that author's first pulled post
# committed while the follow's own insert ran (db/init/015: both sides lock the followee's users row).
ADJUST_COUNTS: Final = """
WITH pulled AS (
    UPDATE follows SET pulled = true
    WHERE %(delta)s > 0 AND follower_id = %(follower)s AND followee_id = %(followee)s AND NOT pulled
      AND EXISTS (SELECT 1 FROM pulled_authors WHERE author_id = %(followee)s)
)
UPDATE users SET
    following_count = following_count + CASE WHEN id = %(follower)s THEN %(delta)s ELSE 0 END,
    follower_count  = follower_count  + CASE WHEN id = %(followee)s THEN %(delta)s ELSE 0 END
WHERE id IN (%(follower)s, %(followee)s)
RETURNING id, following_count
"""

# A post, its author's own timeline row and its post.created outbox row in ONE statement (one round trip, atomic on
# its own in autocommit mode): the other two are inserted only when the post was (not on an Idempotency-Key
# conflict). The own row puts the post in its author's materialized timeline at once, whatever the worker decides
# for his followers, so the home read has no branch for the reader's own posts (docs/adr/0157). The payload is built
# here, from the inserted row, with the shape services.core.events defines for post.created. `trace`: the request's
# trace context as the outbox column holds it (services/core/tracecontext.py, docs/adr/0072), or NULL.
# bench/api_latency.py runs this exact text in pgbench as the database ceiling.
_INSERT_POST: Final = """
    INSERT INTO posts (author_id, body, idempotency_key, request_hash)
    {source}
    ON CONFLICT (author_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, author_id, body, created_at
), own AS (
    INSERT INTO timelines (user_id, post_id, author_id) SELECT post.author_id, post.id, post.author_id FROM post
), event AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext)
    SELECT gen_random_uuid(), 'post', post.id::text, 'post.created',
           jsonb_build_object('post_id', post.id, 'author_id', post.author_id), %(trace)s
    FROM post
)
"""
CREATE_POST: Final = "WITH post AS (" + _INSERT_POST.format(
    source="VALUES (%(author)s, %(body)s, %(key)s, %(hash)s)") + "SELECT id, author_id, body, created_at FROM post"
# The same with the writer's rate limit counted first (RATE_LIMIT_HIT), in one statement, so one round trip: the
# post is inserted only when the count is within `limit`; the hit's columns always come back, the post's are NULL
# when it was refused (hits over the limit) or its Idempotency-Key was used already.
CREATE_POST_COUNTED: Final = "WITH " + _CLOCK + ", hit AS (" + _COUNT_HIT + "), post AS (" + _INSERT_POST.format(
    source="SELECT %(author)s, %(body)s, %(key)s, %(hash)s FROM hit WHERE hit.hits <= %(limit)s") + """
SELECT hit.hits, hit.window_start, hit.now, post.id, post.author_id, post.body, post.created_at
FROM hit LEFT JOIN post ON true
"""
POST_BY_KEY: Final = """
SELECT id, author_id, body, created_at, request_hash FROM posts
WHERE author_id = %(author)s AND idempotency_key = %(key)s
"""
GET_POST: Final = "SELECT id, author_id, body, created_at FROM posts WHERE id = %(id)s AND deleted_at IS NULL"
DELETE_POST: Final = """
UPDATE posts SET deleted_at = now()
WHERE id = %(id)s AND author_id = %(author)s AND deleted_at IS NULL
RETURNING id, author_id
"""

INSERT_OUTBOX: Final = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext)
VALUES (%(id)s, %(aggregatetype)s, %(aggregateid)s, %(type)s, %(payload)s, %(trace)s)
"""

# One author's posts, newest first (posts_author_idx).
AUTHOR_POSTS: Final = """
SELECT id, author_id, body, created_at FROM posts
WHERE author_id = %(author)s AND deleted_at IS NULL AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""

# Home timeline (docs/adr/0096). Both statements come in two orders: newest first (a page older than `before`, or the
# newest page above `after`) and oldest first (the page just above `after`, for paging towards newer posts); the
# range is always after < id < before. psycopg.sql composes each order's keywords into the text, never a value:
# `farthest` picks the far end of a set of ids in that order, `nearer` the nearer of two far ends, `within` compares an
# id with one, `everything` is the far end that leaves nothing out.
_ORDERS: Final = {
    "newest": {"order": sql.SQL("DESC"), "farthest": sql.SQL("min"), "nearer": sql.SQL("greatest"),
               "within": sql.SQL(">="), "everything": sql.Literal(0)},
    "oldest": {"order": sql.SQL("ASC"), "farthest": sql.SQL("max"), "nearer": sql.SQL("least"),
               "within": sql.SQL("<="), "everything": sql.Literal(2**63 - 1)},
}


def _ordered(template: LiteralString, **more: sql.Composable) -> dict[str, bytes]:
    """The statement in each order, composed once, here, as the bytes psycopg sends: a Composed would be composed
    again at every execution (13 us of a 0.4 ms read)."""
    return {name: sql.SQL(template).format(**tokens, **more).as_bytes(None) for name, tokens in _ORDERS.items()}


# Several authors' posts in a range, bounded by the page and not by the number of authors (each author's posts are
# one index range): first each author's nearest post in the range (its head: one index descent each); when there
# are at least `limit` heads, the page's far end cannot lie beyond the `limit`-th nearest of them (that many distinct
# posts are nearer), so only the authors whose head is within that edge (at most `limit`) are read further, up to
# `limit` posts each. Cost: one descent per author, then at most limit x limit index entries.
# The far end of a page from `limit` ids nearest in the page's order: the farthest of them when there are that many,
# else nothing is excluded.
_FAR_END: Final = "CASE WHEN count(*) < %(limit)s THEN {everything} ELSE {farthest}(id) END"
# The far end of such a page, from the `heads` CTE before it:
_EDGE: Final = """), bound AS (
    SELECT """ + _FAR_END + """ AS edge
    FROM (SELECT id FROM heads ORDER BY id {order} LIMIT %(limit)s) nearest
"""

# At or above the reader's floor, ONE statement in the common case: the reader's materialized rows (one range scan of
# the reader's partition of timelines, each row checked against posts: deleted posts the worker has not removed yet are
# skipped), merged with the posts of the reader's pulled followees (follows_pulled_idx). The reader's own posts are
# among his materialized rows from the moment they are written (CREATE_POST writes the own row: docs/adr/0157), so
# there is no branch for them. The materialized rows come first: when they fill a page, the page cannot reach beyond
# their far end (`reach`), so the pulled branch reads only the posts within it, not `limit` posts of each celebrity,
# whose bodies would be fetched to be thrown away (docs/adr/0154). Each branch carries the columns of the page, so the
# page needs no second lookup of its posts. The branches are disjoint, so the page merges them without looking for
# duplicates (docs/adr/0155): a follower's row is written only for a pushed post, the pulled branch reads only posts
# decided pulled, and the reader never follows himself. The first row is the reader's (its post columns NULL, first in
# either order): the floor (the caller decides from it whether the page continues below the floor, paging.py),
# `placed` and `again`; then the page. Each branch reads `low` (and the pulled one its edge) as a scalar subquery, so
# that it bounds the index range itself (a join with `me` would only filter the rows read).
# The statement comes in two forms (docs/adr/0155, 0156). `common`, the one the api runs first, is for the reader
# most readers are: a handful of celebrities (at most `limit`), so each one's posts within reach are read in one step,
# and no unfollow the worker has not processed yet, so the materialized rows are taken as they are. When the reader
# has more pulled followees than `limit`, or a pending unfollow (a pair in timeline_unfollows, whose stale rows must be
# skipped: db/init/022, docs/adr/0150 and 0152), its `again` is true, it reads no celebrity's posts, and the caller
# reads the page again with `careful`: each materialized row checked against follows while the reader has such a
# pair, and each pulled followee's head first (its nearest post in the range, one index descent); when there are at
# least `limit` heads the page's far end cannot lie beyond the `limit`-th nearest of them (that many distinct posts
# are nearer), so only the followees whose head is within that edge and reach are read further, up to `limit` posts
# each: a reader who follows thousands of them reads a bounded page (docs/adr/0096).
# `{timelines}` is the parent, or the reader's own partition (home_above_floor), `{placed}` that partition's check.
_HOME_ABOVE_FLOOR: Final = """
WITH {stars}me AS MATERIALIZED (
    SELECT timeline_floor AS floor, greatest(timeline_floor, least(%(after)s, 9223372036854775806) + 1) AS low,
           {placed} AS placed, {checks}
    FROM users WHERE id = %(user)s
), pushed AS MATERIALIZED (
    SELECT p.id, p.author_id, p.body, p.created_at FROM {timelines} t
    JOIN posts p ON p.id = t.post_id AND p.deleted_at IS NULL
    WHERE t.user_id = %(user)s AND t.post_id < %(before)s AND t.post_id >= (SELECT low FROM me){unfollowed}
    ORDER BY t.post_id {order} LIMIT %(limit)s
), reach AS MATERIALIZED (
    SELECT """ + _FAR_END + """ AS edge FROM pushed
{pulled})
SELECT * FROM (
    SELECT floor, placed, again, NULL::bigint AS id, NULL::bigint AS author_id, NULL::text AS body,
           NULL::timestamptz AS created_at FROM me
    UNION ALL SELECT NULL, NULL, NULL, * FROM pushed
    UNION ALL SELECT NULL, NULL, NULL, * FROM pulled OFFSET 0) page  -- OFFSET 0: one sort, not a merge of sorts
ORDER BY id {order} NULLS FIRST LIMIT %(limit)s + 1
"""
# The two forms: the CTE before `me` (or nothing), `me`'s checks (a pending unfollow: timeline_unfollows' primary key),
# the check of the materialized rows against follows, the CTEs that end with `pulled`.
_UNSURE: Final = "EXISTS (SELECT 1 FROM timeline_unfollows u WHERE u.follower_id = %(user)s)"
_FORMS: Final[dict[str, tuple[LiteralString, LiteralString, LiteralString, LiteralString]]] = {
    "common": ("""stars AS MATERIALIZED (
    SELECT followee_id FROM follows WHERE follower_id = %(user)s AND pulled LIMIT %(limit)s + 1
), """, _UNSURE + " OR (SELECT count(*) > %(limit)s FROM stars) AS again", "", """
), pulled AS (  -- nothing read when the page will be read again
    SELECT x.* FROM (SELECT followee_id FROM stars WHERE NOT (SELECT again FROM me)) s CROSS JOIN LATERAL (
        SELECT p.id, p.author_id, p.body, p.created_at FROM posts p
        WHERE p.author_id = s.followee_id AND p.fanned_out = false AND p.deleted_at IS NULL
          AND p.id < %(before)s AND p.id >= (SELECT low FROM me) AND p.id {within} (SELECT edge FROM reach)
        ORDER BY p.id {order} LIMIT %(limit)s) x
"""),
    "careful": ("", _UNSURE + " AS unsure, false AS again", """
      AND (NOT (SELECT unsure FROM me) OR p.author_id = %(user)s OR EXISTS (  -- OFFSET 0: one probe a row
            SELECT 1 FROM follows f WHERE f.follower_id = %(user)s AND f.followee_id = p.author_id OFFSET 0))""", """
), heads AS (
    SELECT f.followee_id AS author_id, h.id FROM follows f CROSS JOIN LATERAL (
        SELECT p.id FROM posts p
        WHERE p.author_id = f.followee_id AND p.fanned_out = false AND p.deleted_at IS NULL
          AND p.id < %(before)s AND p.id >= (SELECT low FROM me) AND p.id {within} (SELECT edge FROM reach)
        ORDER BY p.id {order} LIMIT 1) h
    WHERE f.follower_id = %(user)s AND f.pulled
), bound AS (
    SELECT {nearer}((SELECT edge FROM reach), """ + _FAR_END + """) AS edge
    FROM (SELECT id FROM heads ORDER BY id {order} LIMIT %(limit)s) nearest
), pulled AS (
    SELECT x.* FROM bound b, heads h CROSS JOIN LATERAL (
        SELECT p.id, p.author_id, p.body, p.created_at FROM posts p
        WHERE p.author_id = h.author_id AND p.fanned_out = false AND p.deleted_at IS NULL
          AND p.id < %(before)s AND p.id >= (SELECT low FROM me) AND p.id {within} b.edge
        ORDER BY p.id {order} LIMIT %(limit)s) x
    WHERE h.id {within} b.edge
"""),
}


def _above_floor(order: str, form: str, timelines: sql.Composable, placed: sql.Composable) -> bytes:
    tokens = _ORDERS[order]
    stars, checks, unfollowed, ctes = _FORMS[form]
    return sql.SQL(_HOME_ABOVE_FLOOR).format(
        **tokens, stars=sql.SQL(stars), checks=sql.SQL(checks), unfollowed=sql.SQL(unfollowed),
        pulled=sql.SQL(ctes).format(**tokens), timelines=timelines,
        placed=placed).as_bytes(None)


# Through the parent, by order: the form the api runs first, and the one it runs when that one says `again`.
HOME_ABOVE_FLOOR: Final = {order: _above_floor(order, "common", sql.Identifier("timelines"), sql.SQL("true"))
                           for order in _ORDERS}
HOME_ABOVE_FLOOR_CAREFUL: Final = {order: _above_floor(order, "careful", sql.Identifier("timelines"),
                                                       sql.SQL("true")) for order in _ORDERS}


@lru_cache(maxsize=512)  # two orders and two forms for each partition of timelines (32: db/init/012)
def home_above_floor(order: str, schema: str, partition: str, constraint: str, careful: bool = False) -> bytes:
    """HOME_ABOVE_FLOOR (HOME_ABOVE_FLOOR_CAREFUL with `careful`) reading the reader's own partition of timelines, named
    (docs/adr/0153): a generic plan over the parent locks every partition before it prunes to one. Its `placed`
    column says whether that table is the partition with `constraint` (partitions.Layout: the reader's by Postgres's
    hash; a split of ADR 0093 changes it), checked when the statement is planned (db/init/024); when it is not, the
    caller throws the page away and reads through the parent."""
    table = sql.Identifier(schema, partition)
    check = sql.SQL("walfeed_timeline_partition_is({}::regclass, {})").format(
        sql.Literal(table.as_string(None)), sql.Literal(constraint))
    return _above_floor(order, "careful" if careful else "common", table, check)


# Below the floor (rows trimmed, or never backfilled), from the source of truth: the posts of every followed account
# and the reader's, bounded as above (posts_author_idx).
HOME_BELOW_FLOOR: Final = _ordered("""
WITH authors AS (
    SELECT followee_id AS author_id FROM follows WHERE follower_id = %(user)s UNION ALL SELECT %(user)s
), heads AS (
    SELECT a.author_id, h.id FROM authors a CROSS JOIN LATERAL (
        SELECT p.id FROM posts p
        WHERE p.author_id = a.author_id AND p.deleted_at IS NULL AND p.id < %(before)s AND p.id > %(after)s
        ORDER BY p.id {order} LIMIT 1) h
""" + _EDGE + """), page AS (
    SELECT x.id FROM bound b, heads h CROSS JOIN LATERAL (
        SELECT p.id FROM posts p
        WHERE p.author_id = h.author_id AND p.deleted_at IS NULL AND p.id < %(before)s AND p.id > %(after)s
          AND p.id {within} b.edge
        ORDER BY p.id {order} LIMIT %(limit)s) x
    WHERE h.id {within} b.edge
    ORDER BY x.id {order} LIMIT %(limit)s
)
SELECT p.id, p.author_id, p.body, p.created_at FROM page JOIN posts p ON p.id = page.id ORDER BY p.id {order}
""")


# Notifications (docs/notifications.md). The caller's own, newest first, withdrawn ones left out
# (notifications_recipient_idx); `read` against the caller's marker.
NOTIFICATIONS: Final = """
SELECT n.id, n.kind, n.actor_id, n.post_id, n.created_at,
       n.id <= coalesce((SELECT up_to FROM notification_reads WHERE user_id = %(user)s), 0) AS read
FROM notifications n
WHERE n.recipient_id = %(user)s AND n.withdrawn_at IS NULL AND n.id < %(before)s
ORDER BY n.id DESC LIMIT %(limit)s
"""
# Counted up to %(cap)s: a badge needs no more, and the count stays an index range of bounded length.
UNREAD_COUNT: Final = """
SELECT count(*) AS unread FROM (
    SELECT 1 FROM notifications
    WHERE recipient_id = %(user)s AND withdrawn_at IS NULL
      AND id > coalesce((SELECT up_to FROM notification_reads WHERE user_id = %(user)s), 0)
    LIMIT %(cap)s) n
"""
# The marker only moves up, and never above the caller's newest notification: one that arrives later is unread.
MARK_READ: Final = """
INSERT INTO notification_reads AS r (user_id, up_to)
SELECT %(user)s, least(%(up_to)s, newest.id)
FROM (SELECT id FROM notifications WHERE recipient_id = %(user)s ORDER BY id DESC LIMIT 1) newest
ON CONFLICT (user_id) DO UPDATE SET up_to = greatest(r.up_to, excluded.up_to)
"""

GET_ME: Final = """
SELECT id, handle, email, email_kinds, email_verified_at IS NOT NULL AS email_verified FROM users WHERE id = %(id)s
"""
# A new address is unverified, and its verification mail (an email delivery without a notification, and its
# delivery.email event) is queued in the same statement; the same address again changes nothing, except that an
# address not verified yet whose code is no longer on its way (its mail sent or dead: the code may have expired) is
# mailed a new code (docs/adr/0106; deliveries_verification_idx).
UPDATE_ME: Final = """
WITH old AS (
    SELECT email, email_verified_at IS NULL AND NOT EXISTS (
               SELECT 1 FROM deliveries x WHERE x.recipient_id = %(id)s AND x.notification_id IS NULL
                 AND x.channel = 'email' AND x.status IN ('PENDING', 'RETRYING')) AS recode
    FROM users WHERE id = %(id)s FOR NO KEY UPDATE
), u AS (
    UPDATE users u
    SET email = CASE WHEN %(set_email)s THEN %(email)s ELSE u.email END,
        email_kinds = coalesce(%(kinds)s::text[], u.email_kinds),
        email_verified_at = CASE WHEN %(set_email)s AND %(email)s::text IS DISTINCT FROM old.email THEN NULL
                                 ELSE u.email_verified_at END
    FROM old WHERE u.id = %(id)s
    RETURNING u.id, u.handle, u.email, u.email_kinds, u.email_verified_at IS NOT NULL AS email_verified,
              %(set_email)s AND %(email)s::text IS NOT NULL
                  AND (%(email)s::text IS DISTINCT FROM old.email OR old.recode) AS changed
), d AS (
    INSERT INTO deliveries (channel, recipient_id) SELECT 'email', id FROM u WHERE changed RETURNING id
), o AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'delivery', d.id::text, 'delivery.email', jsonb_build_object('delivery_id', d.id)
    FROM d
)
SELECT id, handle, email, email_kinds, email_verified FROM u
"""
# The caller's address and the key of mail tokens (services/core/mailtokens.py,
# db/init/017_email_verification.sql).
MAIL_TOKEN_KEY: Final = """
SELECT u.email, s.value AS key FROM users u CROSS JOIN server_secrets s WHERE u.id = %(id)s AND s.name = %(name)s
"""
# Only the address the code was mailed to, and only while it is still the user's.
VERIFY_EMAIL: Final = """
UPDATE users SET email_verified_at = coalesce(email_verified_at, now())
WHERE id = %(id)s AND email = %(email)s
RETURNING id, handle, email, email_kinds, true AS email_verified
"""
UNSUBSCRIBE: Final = """
UPDATE users SET email_kinds = array_remove(email_kinds, %(kind)s) WHERE id = %(id)s AND email = %(email)s
RETURNING id
"""

# Webhooks: every statement is scoped to the caller (owner_id), so another user's webhook is not found (404).
# WEBHOOKS: all of the caller's, or the one %(id)s.
COUNT_WEBHOOKS: Final = "SELECT count(*) AS n FROM webhooks WHERE owner_id = %(owner)s"
# The owner's row is locked first, so two registrations at once cannot both pass the per-user limit.
LOCK_USER: Final = "SELECT id FROM users WHERE id = %(id)s FOR NO KEY UPDATE"
CREATE_WEBHOOK: Final = """
INSERT INTO webhooks (owner_id, url, events, secret) VALUES (%(owner)s, %(url)s, %(events)s, %(secret)s)
RETURNING id
"""
WEBHOOKS: Final = """
SELECT id, url, events, disabled_at, disabled_reason, created_at,
       CASE WHEN previous_secret_until > now() THEN previous_secret_until END AS previous_until
FROM webhooks WHERE owner_id = %(owner)s AND (%(id)s::bigint IS NULL OR id = %(id)s)
ORDER BY id
"""
DELETE_WEBHOOK: Final = "DELETE FROM webhooks WHERE id = %(id)s AND owner_id = %(owner)s RETURNING id"
# The previous secret signs too until %(overlap)s seconds from now (Standard Webhooks rotation). Through the owner's
# function (db/init/016_webhook_secrets.sql): moving the secret reads it, and the api role may not (docs/adr/0105).
ROTATE_SECRET: Final = """
SELECT id, previous_secret_until FROM walfeed_rotate_webhook_secret(%(owner)s, %(id)s, %(secret)s, %(overlap)s)
"""
ENABLE_WEBHOOK: Final = """
UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL
WHERE id = %(id)s AND owner_id = %(owner)s
RETURNING id
"""
# The delivery.webhook event (docs/events.md) of the deliveries the `d` query before it returns, in the same statement.
_WITH_DELIVERY_EVENT: Final = """
), o AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'delivery', d.id::text, 'delivery.webhook', jsonb_build_object('delivery_id', d.id)
    FROM d
)
SELECT id FROM d
"""
# A delivery of the webhook without a notification, and its delivery.webhook event, in one statement.
PING: Final = """
WITH d AS (
    INSERT INTO deliveries (channel, webhook_id, recipient_id)
    SELECT 'webhook', id, owner_id FROM webhooks WHERE id = %(id)s AND owner_id = %(owner)s AND disabled_at IS NULL
    RETURNING id""" + _WITH_DELIVERY_EVENT
WEBHOOK_DELIVERIES: Final = """
SELECT id, notification_id, status, attempts, last_status_code, last_error, next_attempt_at, created_at, updated_at
FROM deliveries WHERE webhook_id = %(id)s AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s
"""
# Again PENDING with a new delivery.webhook event, for a delivery that is over (DEAD, or DELIVERED to send again);
# one in flight (PENDING, RETRYING) or WITHDRAWN is left as it is. The webhook must be enabled.
RETRY_DELIVERY: Final = """
WITH d AS (
    UPDATE deliveries d SET status = 'PENDING', attempts = 0, next_attempt_at = NULL, updated_at = now()
    FROM webhooks w
    WHERE d.id = %(delivery)s AND d.webhook_id = %(id)s AND w.id = d.webhook_id AND w.owner_id = %(owner)s
      AND w.disabled_at IS NULL AND d.status IN ('DEAD', 'DELIVERED')
    RETURNING d.id""" + _WITH_DELIVERY_EVENT
DELIVERY_STATUS: Final = """
SELECT d.status FROM deliveries d JOIN webhooks w ON w.id = d.webhook_id AND w.owner_id = %(owner)s
WHERE d.id = %(delivery)s AND d.webhook_id = %(id)s
"""
