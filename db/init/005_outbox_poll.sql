-- Polling outbox relay (`walfeed relay --source poll`, docs/adr/0040). The CDC relay ignores these columns.
-- New nullable columns without a default: a catalog-only change, no table rewrite; the API's inserts leave them
-- NULL. The partial index is the one cost the CDC path pays: one more index entry per outbox insert.
ALTER TABLE outbox
    ADD COLUMN IF NOT EXISTS published_at     timestamptz,  -- set after the broker confirmed the event
    ADD COLUMN IF NOT EXISTS claimed_by       text,         -- the poller holding (or last holding) the row
    ADD COLUMN IF NOT EXISTS claim_expires_at timestamptz;  -- the claim's lease: free to claim again after it

-- The pollers' queue: unpublished rows in claim order. Rows leave it once published.
CREATE INDEX IF NOT EXISTS outbox_unpublished_idx ON outbox (created_at, id) WHERE published_at IS NULL;
