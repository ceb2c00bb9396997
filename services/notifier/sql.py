"""Every statement the notifier issues, named. Bound parameters only. The outbox check and the processed-event
records are the fan-out worker's statements (services/worker/sql.py) under the consumer name 'notifier'."""

from typing import Final

from psycopg import sql

# One post's post.created and post.deleted serialize on a transaction lock keyed by the post: a deletion that
# committed before a creation's transaction read the post is seen by it (it notifies no one), and one that comes
# after finds the creation's notifications committed (it withdraws them). Keys are -post_id: the fan-out worker's
# keys are user ids (positive), so the two never share a lock. Keys ascending (effects.post_lock_keys): one global
# order, so two batches cannot deadlock.
LOCK_POSTS: Final = sql.SQL("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%(keys)s::bigint[]) AS k")

POSTS: Final = sql.SQL("""
SELECT p.id, p.author_id, p.body, p.deleted_at IS NOT NULL AS deleted
FROM unnest(%(post_ids)s::bigint[]) AS i(id)
CROSS JOIN LATERAL (SELECT id, author_id, body, deleted_at FROM posts WHERE id = i.id OFFSET 0) p
""")

USERS_BY_HANDLE: Final = sql.SQL("SELECT id, handle FROM users WHERE handle = ANY(%(handles)s::text[])")

# New notifications, and in the same statement their deliveries and the deliveries' outbox events. A notification
# exists once per (event, recipient): a duplicate inserts none, so it creates no delivery either. Targets: each
# enabled webhook of the recipient subscribed to the kind, and the recipient's email address if set, verified and
# the kind is one they chose (docs/notifications.md). Each author (the actor: a post's author, a follower) has a
# budget of deliveries per fixed window of the database clock (ADR 0100; `limit` NULL: none), counted in
# notifier_actor_budgets in this transaction (a batch that fails takes nothing): the targets past what is left of
# it get no delivery, their notification is in-app only. Authors in one order, so two batches cannot deadlock on
# their budget rows. Returns the notifications created with their delivery and target counts.
NOTIFY: Final = sql.SQL("""
WITH n AS (
    INSERT INTO notifications (recipient_id, kind, actor_id, post_id, event_id)
    SELECT * FROM unnest(%(recipients)s::bigint[], %(kinds)s::text[], %(actors)s::bigint[], %(posts)s::bigint[],
                         %(events)s::uuid[])
    ORDER BY 5, 1
    ON CONFLICT (event_id, recipient_id) DO NOTHING
    RETURNING id, event_id, recipient_id, kind, actor_id
), targets AS (
    SELECT n.id AS notification_id, n.actor_id, 'webhook' AS channel, w.id AS webhook_id, n.recipient_id
    FROM n JOIN webhooks w ON w.owner_id = n.recipient_id AND w.disabled_at IS NULL AND n.kind = ANY (w.events)
    UNION ALL
    SELECT n.id, n.actor_id, 'email', NULL, n.recipient_id
    FROM n JOIN users u ON u.id = n.recipient_id AND u.email IS NOT NULL AND u.email_verified_at IS NOT NULL
                       AND n.kind = ANY (u.email_kinds)
), ranked AS (
    SELECT t.*, row_number() OVER (PARTITION BY t.actor_id ORDER BY t.notification_id, t.channel, t.webhook_id) AS rank
    FROM targets t
), asked AS (
    SELECT actor_id, count(*)::int AS n FROM ranked WHERE %(limit)s::int IS NOT NULL GROUP BY actor_id
), budget AS (
    INSERT INTO notifier_actor_budgets AS b (actor_id, window_start, deliveries)
    SELECT a.actor_id, (floor(extract(epoch FROM clock_timestamp()) / %(window)s) * %(window)s)::bigint, a.n
    FROM asked a ORDER BY a.actor_id
    ON CONFLICT (actor_id) DO UPDATE SET
        deliveries = CASE WHEN b.window_start = excluded.window_start
                          THEN least(b.deliveries + excluded.deliveries, 1000000000) ELSE excluded.deliveries END,
        window_start = excluded.window_start
    RETURNING b.actor_id, b.deliveries
), kept AS (
    SELECT r.* FROM ranked r
    LEFT JOIN (SELECT a.actor_id, %(limit)s::int - (b.deliveries - a.n) AS room
               FROM asked a JOIN budget b USING (actor_id)) m USING (actor_id)
    WHERE %(limit)s::int IS NULL OR r.rank <= m.room
), d AS (
    INSERT INTO deliveries (notification_id, channel, webhook_id, recipient_id)
    SELECT notification_id, channel, webhook_id, recipient_id FROM kept
    ORDER BY notification_id, channel, webhook_id
    ON CONFLICT DO NOTHING
    RETURNING id, notification_id, channel
), o AS (
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'delivery', d.id::text, 'delivery.' || d.channel, jsonb_build_object('delivery_id', d.id)
    FROM d
)
SELECT n.id, n.event_id, n.recipient_id, n.kind, n.actor_id,
       (SELECT count(*) FROM d WHERE d.notification_id = n.id) AS deliveries,
       (SELECT count(*) FROM targets t WHERE t.notification_id = n.id) AS targets
FROM n
""")

# A deleted post's mentions leave the in-app list, and their deliveries not made yet are not made.
WITHDRAW_MENTIONS: Final = sql.SQL("""
UPDATE notifications SET withdrawn_at = now()
WHERE post_id = ANY(%(post_ids)s::bigint[]) AND kind = 'mention' AND withdrawn_at IS NULL
""")
WITHDRAW_DELIVERIES: Final = sql.SQL("""
UPDATE deliveries d SET status = 'WITHDRAWN', updated_at = now()
FROM notifications n
WHERE n.post_id = ANY(%(post_ids)s::bigint[]) AND n.kind = 'mention' AND d.notification_id = n.id
  AND d.status IN ('PENDING', 'RETRYING')
""")
