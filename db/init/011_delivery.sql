-- Delivery rate limits per target (issue 15, docs/notifications.md, docs/adr/0081): one row per webhook or mailbox,
-- the GCRA's theoretical arrival time. Shared by every delivery worker process. UNLOGGED like rate_limits (006):
-- no WAL, and a crash empties it, which only forgives the current bursts.
CREATE UNLOGGED TABLE IF NOT EXISTS delivery_rate_limits (
    target text        PRIMARY KEY,   -- 'webhook:<id>' or 'email:<user id>'
    tat    timestamptz NOT NULL       -- when the target's allowance is spent; a try is allowed while tat - now is
                                      -- at most (burst - 1) / rate
) WITH (fillfactor = 50);
