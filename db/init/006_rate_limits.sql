-- API rate limits (docs/adr/0033): one row per partition (policy + client address or user), counted in fixed
-- windows by one UPSERT per limited request, so the limits hold across every api process and host.
-- UNLOGGED: no WAL (the relay's decoder never reads it, replicas never get it); a crash empties it, which only
-- forgives the current windows. fillfactor 50: the counter updates stay HOT (no index change) on the same page.
CREATE UNLOGGED TABLE IF NOT EXISTS rate_limits (
    key          text    PRIMARY KEY,
    window_start bigint  NOT NULL,  -- epoch seconds, a multiple of the window
    hits         integer NOT NULL
) WITH (fillfactor = 50);
