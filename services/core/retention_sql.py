"""Statements of outbox and processed-event retention (docs/adr/0071). The deletions themselves are the functions
of db/init/009_retention.sql, so a role may prune with EXECUTE on them and no right to delete a row."""

from typing import Final

from psycopg import sql

# Stamps the watermarks the slot passed, records one if none waits (`record`); how many wait (NULL: no slot).
WATERMARK: Final = sql.SQL("SELECT walfeed_outbox_watermark(%(slot)s, %(record)s) AS waiting")

# One batch of each kind: CDC rows behind a watermark the slot passed `older_than` ago, rows the poller published
# `older_than` ago, processed records of events whose outbox row is gone.
PRUNE_BATCH: Final = sql.SQL(
    "SELECT confirmed, published, processed FROM walfeed_prune_batch(%(slot)s, %(older_than)s, %(batch)s)")

# One batch of notification and delivery retention (db/init/015_delivery_budgets.sql, ADR 0100): settled
# deliveries, then read or withdrawn notifications without deliveries among the next `batch` after `after`.
PRUNE_NOTIFICATIONS_BATCH: Final = sql.SQL(
    "SELECT deliveries_deleted, notifications_deleted, next_id "
    "FROM walfeed_prune_notifications_batch(%(older_than)s, %(batch)s, %(after)s)")

# Sizes for `walfeed status` and the relay's metrics: the statistics' live row estimate (no count(*) over a large
# table), the bytes on disk with indexes, and the oldest row not yet published by the poller (under CDC: the
# oldest row), through outbox_unpublished_idx.
SIZES: Final = sql.SQL("""
SELECT c.relname AS name, coalesce(s.n_live_tup, 0)::bigint AS rows, pg_total_relation_size(c.oid) AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = 'public' AND c.relname IN ('outbox', 'processed_events')
""")
OLDEST_UNPUBLISHED: Final = sql.SQL("SELECT min(created_at) AS oldest FROM outbox WHERE published_at IS NULL")
