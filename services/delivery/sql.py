"""Every statement the delivery worker issues, named. Bound parameters only."""

from typing import Final

# A batch of deliveries and everything their messages are built from: the target (webhook, or the recipient's
# address), the notification, its actor and post. Secrets are read here and go nowhere but the signature. In the
# same statement, for each delivery to be tried now, one try is taken from its target's rate limit: a GCRA (generic
# cell rate algorithm) per target, allowed while the target's theoretical arrival time is at most `tolerance` ahead
# of now, which then moves `interval` further (no limit: `interval` NULL). `taken` is false when over the limit.
# ON CONFLICT cannot update one row twice in a statement, so one delivery per target takes its try here; the
# others to the same target come back `deferred`, for the next statement (store.py).
LOAD: Final = """
WITH d AS (
    SELECT d.id, d.channel, d.status, d.attempts, d.notification_id, d.recipient_id, d.created_at,
           w.id AS webhook_id, w.url, w.secret, w.previous_secret, w.previous_secret_until, w.disabled_at,
           w.disabled_reason, w.failing_since,
           n.kind, n.actor_id, n.post_id, n.created_at AS notified_at, n.withdrawn_at,
           a.handle AS actor_handle, p.body AS post_body,
           u.handle AS recipient_handle, u.email, u.email_kinds, u.email_verified_at,
           CASE WHEN d.channel = 'email' THEN (SELECT s.value FROM server_secrets s WHERE s.name = 'email_tokens') END
               AS token_key,  -- signs the verification code and the unsubscribe token (services/core/mailtokens.py)
           CASE WHEN d.channel = 'webhook' THEN 'webhook:' || d.webhook_id ELSE 'email:' || d.recipient_id END
               AS target,
           %(interval)s::float8 IS NOT NULL AND d.status IN ('PENDING', 'RETRYING') AND n.withdrawn_at IS NULL
               AND w.disabled_at IS NULL AS limited
    FROM deliveries d
    JOIN users u ON u.id = d.recipient_id
    LEFT JOIN webhooks w ON w.id = d.webhook_id
    LEFT JOIN notifications n ON n.id = d.notification_id
    LEFT JOIN users a ON a.id = n.actor_id
    LEFT JOIN posts p ON p.id = n.post_id AND p.deleted_at IS NULL
    WHERE d.id = ANY(%(ids)s::bigint[])
), first AS (
    SELECT DISTINCT ON (target) id, target FROM d WHERE limited ORDER BY target, id
), taken AS (
    INSERT INTO delivery_rate_limits AS r (target, tat)
    SELECT target, clock_timestamp() + make_interval(secs => %(interval)s) FROM first
    ON CONFLICT (target) DO UPDATE SET tat = greatest(r.tat, clock_timestamp()) + make_interval(secs => %(interval)s)
    WHERE r.tat - clock_timestamp() <= make_interval(secs => %(tolerance)s)
    RETURNING target
)
SELECT d.*,
       %(interval)s::float8 IS NULL OR d.id IN (SELECT f.id FROM first f JOIN taken t USING (target)) AS taken,
       d.limited AND d.id NOT IN (SELECT id FROM first) AS deferred
FROM d
"""

# The outcomes of a batch of tries (or of decisions not to try), one array element each. Only a delivery still to
# be sent changes: one withdrawn or settled meanwhile keeps its status. Its webhook's run of failures starts at the
# first failure and ends at a success (several deliveries of the batch to one webhook: a success among them ends
# it); `disable` (a reason) disables the webhook, keeping the first reason if it already is. The webhook row is
# written only when one of these changes (not at every success: concurrent deliveries to one webhook would queue on
# its row lock).
RECORD: Final = """
WITH r AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::int[], %(codes)s::int[],
                         %(errors)s::text[], %(excerpts)s::text[], %(delays)s::float8[], %(failed)s::bool[],
                         %(disable)s::text[])
        AS r(id, status, attempts, code, error, excerpt, delay, failed, disable)
), d AS (
    UPDATE deliveries x
    SET status = r.status, attempts = greatest(x.attempts, r.attempts), last_status_code = r.code,
        last_error = r.error, response_excerpt = r.excerpt,
        next_attempt_at = clock_timestamp() + make_interval(secs => r.delay), updated_at = clock_timestamp()
    FROM r
    WHERE x.id = r.id AND x.status IN ('PENDING', 'RETRYING')
    RETURNING x.webhook_id, r.failed, r.disable
), h AS (
    SELECT webhook_id, bool_and(failed) AS failed, min(disable) AS disable
    FROM d WHERE webhook_id IS NOT NULL GROUP BY webhook_id
)
UPDATE webhooks w
SET failing_since = CASE WHEN h.failed THEN coalesce(w.failing_since, clock_timestamp()) END,
    disabled_at = CASE WHEN h.disable IS NULL THEN w.disabled_at ELSE coalesce(w.disabled_at, clock_timestamp()) END,
    disabled_reason = CASE WHEN h.disable IS NULL OR w.disabled_at IS NOT NULL THEN w.disabled_reason
                           ELSE h.disable END
FROM h
WHERE w.id = h.webhook_id
  AND (h.disable IS NOT NULL OR (w.failing_since IS NULL) = h.failed)  -- else nothing changes: no write
"""

WITHDRAW: Final = """
UPDATE deliveries SET status = 'WITHDRAWN', next_attempt_at = NULL, updated_at = clock_timestamp()
WHERE id = %(id)s AND status IN ('PENDING', 'RETRYING')
"""

# Over the limit: seconds until a try is allowed.
WAIT: Final = """
SELECT greatest(0, extract(epoch FROM tat - clock_timestamp()) - %(tolerance)s)::float8 AS wait
FROM delivery_rate_limits WHERE target = %(target)s
"""

# A batch's tries per destination host (budget.py), counted in fixed windows of the database clock shared by every
# delivery process, as the api's rate limits (services/api/sql.py RATE_LIMIT_HIT): one row per host, `hits` the
# tries asked for in its window (over the budget too; capped so it cannot overflow). Hosts in one order, so two
# workers' batches cannot deadlock on their rows. `left`: seconds until the window ends.
HOST_BUDGET: Final = """
WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),
asked AS (SELECT * FROM unnest(%(hosts)s::text[], %(counts)s::int[]) AS a(host, n))
INSERT INTO delivery_host_budgets AS b (host, window_start, hits)
SELECT a.host, (floor(c.now / %(window)s) * %(window)s)::bigint, a.n FROM asked a, clock c
ORDER BY a.host
ON CONFLICT (host) DO UPDATE SET
    hits = CASE WHEN b.window_start = excluded.window_start THEN least(b.hits + excluded.hits, 1000000000)
                ELSE excluded.hits END,
    window_start = excluded.window_start
RETURNING b.host, b.hits, greatest(0, b.window_start + %(window)s - (SELECT now FROM clock))::float8 AS left
"""
