"""Every statement the delivery worker issues, named. Bound parameters only."""

from typing import Final

# A delivery and everything its message is built from: the target (webhook, or the recipient's address), the
# notification, its actor and post. Secrets are read here and go nowhere but the signature. In the same statement,
# when the delivery is to be tried now, one try is taken from its target's rate limit: a GCRA (generic cell rate
# algorithm) per target, allowed while the target's theoretical arrival time is at most `tolerance` ahead of now,
# which then moves `interval` further (no limit: `interval` NULL). `taken` is false when over the limit.
LOAD: Final = """
WITH d AS (
    SELECT d.id, d.channel, d.status, d.attempts, d.notification_id, d.recipient_id, d.created_at,
           w.id AS webhook_id, w.url, w.secret, w.previous_secret, w.previous_secret_until, w.disabled_at,
           w.disabled_reason, w.failing_since,
           n.kind, n.actor_id, n.post_id, n.created_at AS notified_at, n.withdrawn_at,
           a.handle AS actor_handle, p.body AS post_body,
           u.handle AS recipient_handle, u.email, u.email_kinds,
           CASE WHEN d.channel = 'webhook' THEN 'webhook:' || d.webhook_id ELSE 'email:' || d.recipient_id END
               AS target
    FROM deliveries d
    JOIN users u ON u.id = d.recipient_id
    LEFT JOIN webhooks w ON w.id = d.webhook_id
    LEFT JOIN notifications n ON n.id = d.notification_id
    LEFT JOIN users a ON a.id = n.actor_id
    LEFT JOIN posts p ON p.id = n.post_id AND p.deleted_at IS NULL
    WHERE d.id = %(id)s
), taken AS (
    INSERT INTO delivery_rate_limits AS r (target, tat)
    SELECT d.target, clock_timestamp() + make_interval(secs => %(interval)s) FROM d
    WHERE %(interval)s::float8 IS NOT NULL AND d.status IN ('PENDING', 'RETRYING') AND d.withdrawn_at IS NULL
      AND d.disabled_at IS NULL
    ON CONFLICT (target) DO UPDATE SET tat = greatest(r.tat, clock_timestamp()) + make_interval(secs => %(interval)s)
    WHERE r.tat - clock_timestamp() <= make_interval(secs => %(tolerance)s)
    RETURNING true
)
SELECT d.*, %(interval)s::float8 IS NULL OR EXISTS (SELECT FROM taken) AS taken FROM d
"""

# The outcome of a try (or of a decision not to try). Only a delivery still to be sent changes: one withdrawn or
# settled meanwhile keeps its status. Its webhook's run of failures starts at the first failure and ends at a
# success; `disable` (a reason) disables the webhook, keeping the first reason if it already is. The webhook row is
# written only when one of these changes (not at every success: concurrent deliveries to one webhook would queue on
# its row lock).
RECORD: Final = """
WITH d AS (
    UPDATE deliveries
    SET status = %(status)s, attempts = greatest(attempts, %(attempts)s), last_status_code = %(code)s,
        last_error = %(error)s, response_excerpt = %(excerpt)s,
        next_attempt_at = clock_timestamp() + make_interval(secs => %(delay)s), updated_at = clock_timestamp()
    WHERE id = %(id)s AND status IN ('PENDING', 'RETRYING')
    RETURNING webhook_id
)
UPDATE webhooks w
SET failing_since = CASE WHEN %(failed)s THEN coalesce(w.failing_since, clock_timestamp()) END,
    disabled_at = CASE WHEN %(disable)s::text IS NULL THEN w.disabled_at
                       ELSE coalesce(w.disabled_at, clock_timestamp()) END,
    disabled_reason = CASE WHEN %(disable)s::text IS NULL OR w.disabled_at IS NOT NULL THEN w.disabled_reason
                           ELSE %(disable)s END
FROM d
WHERE w.id = d.webhook_id
  AND (%(disable)s::text IS NOT NULL OR (w.failing_since IS NULL) = %(failed)s)  -- else nothing changes: no write
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
