-- Budgets against amplification and retention of notifications and deliveries (ADR 0100). New tables, an
-- index and a function only.

-- Tries per destination host (a webhook URL's host, a mail address's domain) per fixed window of the database
-- clock, shared by every delivery worker process (services/delivery/sql.py HOST_BUDGET). UNLOGGED like
-- rate_limits (006): no WAL, and a crash empties it, which only forgives the current windows.
CREATE UNLOGGED TABLE IF NOT EXISTS delivery_host_budgets (
    host         text    PRIMARY KEY,
    window_start bigint  NOT NULL,  -- epoch seconds, a multiple of the window
    hits         integer NOT NULL   -- tries asked for in the window (those over the budget too)
) WITH (fillfactor = 50);

-- Deliveries the events of one actor (the author of a post that mentions, a follower) may cause per fixed window,
-- taken by the notifier in the transaction that writes them (services/notifier/sql.py NOTIFY).
CREATE UNLOGGED TABLE IF NOT EXISTS notifier_actor_budgets (
    actor_id     bigint  PRIMARY KEY,
    window_start bigint  NOT NULL,
    deliveries   integer NOT NULL
) WITH (fillfactor = 50);

-- Settled deliveries by age, for retention.
CREATE INDEX IF NOT EXISTS deliveries_settled_idx ON deliveries (updated_at)
    WHERE status IN ('DELIVERED', 'DEAD', 'WITHDRAWN');

-- One batch of retention (`walfeed prune-notifications`), in the caller's transaction:
-- deliveries: at most `batch` DELIVERED, DEAD or WITHDRAWN deliveries settled more than `older_than` ago, oldest
--   first (a dead letter of one deleted replays as "no delivery").
-- notifications: of the next `batch` notifications by id after `after_id`, those made more than `older_than` ago,
--   read (at or below the recipient's read marker) or withdrawn, and without a delivery left. `next_id`: where the
--   next batch starts; NULL at the end, or once a whole batch is newer than that (ids grow with time).
CREATE OR REPLACE FUNCTION walfeed_prune_notifications_batch(older_than interval, batch integer, after_id bigint,
                                                             OUT deliveries_deleted integer,
                                                             OUT notifications_deleted integer,
                                                             OUT next_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
    oldest timestamptz;
BEGIN
    IF older_than < interval '0' OR batch < 1 THEN
        RAISE EXCEPTION 'walfeed_prune_notifications_batch: older_than must not be negative, batch at least 1';
    END IF;
    WITH doomed AS (
        SELECT d.id FROM deliveries d
        WHERE d.status IN ('DELIVERED', 'DEAD', 'WITHDRAWN') AND d.updated_at < now() - older_than
        ORDER BY d.updated_at
        LIMIT batch
    )
    DELETE FROM deliveries d USING doomed x WHERE d.id = x.id;
    GET DIAGNOSTICS deliveries_deleted = ROW_COUNT;
    WITH scanned AS (
        SELECT n.id, n.recipient_id, n.created_at, n.withdrawn_at FROM notifications n
        WHERE n.id > after_id ORDER BY n.id LIMIT batch
    ), doomed AS (
        SELECT s.id FROM scanned s LEFT JOIN notification_reads r ON r.user_id = s.recipient_id
        WHERE s.created_at < now() - older_than AND (s.id <= r.up_to OR s.withdrawn_at IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = s.id)
    ), gone AS (
        DELETE FROM notifications n USING doomed x WHERE n.id = x.id RETURNING n.id
    )
    SELECT (SELECT count(*) FROM gone)::integer, max(s.id), min(s.created_at) INTO notifications_deleted, next_id,
        oldest
    FROM scanned s;
    IF oldest IS NULL OR oldest >= now() - older_than THEN
        next_id := NULL;
    END IF;
END $$;

REVOKE ALL ON FUNCTION walfeed_prune_notifications_batch(interval, integer, bigint) FROM PUBLIC;
