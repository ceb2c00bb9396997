-- Outbox and processed-event retention (issue 16, docs/adr/0071). A table, two indexes and two functions; nothing
-- the api, the relay's decoding or the worker reads changes.

-- Watermarks of a slot's confirmed position in transaction terms. When a row is recorded, every transaction with
-- an id below snapshot_xmin had ended and its commit record lay before lsn; once the slot's confirmed_flush_lsn
-- reaches lsn (passed_at), every outbox row those transactions wrote has been published and confirmed.
CREATE TABLE IF NOT EXISTS outbox_watermarks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    slot          text        NOT NULL,
    snapshot_xmin xid8        NOT NULL,
    lsn           pg_lsn      NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    passed_at     timestamptz  -- first seen behind the slot's confirmed_flush_lsn; NULL while waiting
);

-- Published rows of the polling source by age. CDC rows keep published_at NULL: no entry, no cost on their insert.
CREATE INDEX IF NOT EXISTS outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Processed-event records by age. One more index entry per record (follow.created and large posts only, ADR 0024).
CREATE INDEX IF NOT EXISTS processed_events_processed_at_idx ON processed_events (processed_at);

-- Stamps the watermarks the slot has confirmed past, then records a new one unless one is still waiting (a stopped
-- relay must not make them pile up): each run leaves one for the next. Returns how many still wait; NULL if the database has no such slot.
-- The INSERT's snapshot is taken before the insert position is read: every transaction below its xmin has its
-- commit record before `lsn`. SECURITY DEFINER: the relay role runs it without any right on the table.
CREATE OR REPLACE FUNCTION walfeed_outbox_watermark(slot_name text, take_new boolean) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
    confirmed pg_lsn;
    waiting integer;
BEGIN
    SELECT s.confirmed_flush_lsn INTO confirmed FROM pg_replication_slots s
    WHERE s.slot_name = walfeed_outbox_watermark.slot_name AND s.database = current_database();
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE outbox_watermarks w SET passed_at = now()
    WHERE w.slot = walfeed_outbox_watermark.slot_name AND w.passed_at IS NULL AND w.lsn <= confirmed;
    INSERT INTO outbox_watermarks (slot, snapshot_xmin, lsn)
    SELECT walfeed_outbox_watermark.slot_name, pg_snapshot_xmin(pg_current_snapshot()), pg_current_wal_insert_lsn()
    WHERE take_new AND NOT EXISTS (SELECT 1 FROM outbox_watermarks w
                                 WHERE w.slot = walfeed_outbox_watermark.slot_name AND w.passed_at IS NULL);
    SELECT count(*) INTO waiting FROM outbox_watermarks w
    WHERE w.slot = walfeed_outbox_watermark.slot_name AND w.passed_at IS NULL;
    RETURN waiting;
END $$;

-- One batch of each kind of what is due (at most `batch` rows each), in the caller's transaction:
-- confirmed: CDC rows (published_at NULL) whose inserting transaction is below the newest watermark the slot passed
--   at least `older_than` ago, oldest first through outbox_unpublished_idx. A row's xmin has 32 bits: its full id
--   is the one below the statement snapshot's xmax (every committed row it sees is below that) with the same low
--   32 bits, and "below the watermark" is an age larger than the watermark's. A row updated since has a newer
--   xmin (kept longer, never shorter); a frozen row keeps its raw xmin (Postgres 15).
-- published: rows the polling source published (after the broker's confirm) at least `older_than` ago.
-- processed: processed-event records older than `older_than` whose outbox row is gone: the worker reads a record
--   only with its event's outbox row (services/worker/sql.py KNOWN_EVENTS), so nothing reads them again.
-- Watermarks older than the one used are of no more use and go too.
CREATE OR REPLACE FUNCTION walfeed_prune_batch(slot_name text, older_than interval, batch integer,
                                               OUT confirmed integer, OUT published integer, OUT processed integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
    mark record;
BEGIN
    IF older_than < interval '0' OR batch < 1 THEN
        RAISE EXCEPTION 'walfeed_prune_batch: older_than must not be negative, batch at least 1';
    END IF;
    confirmed := 0;
    SELECT w.snapshot_xmin::text::bigint AS xmin, w.recorded_at INTO mark FROM outbox_watermarks w
    WHERE w.slot = walfeed_prune_batch.slot_name AND w.passed_at <= now() - older_than
    ORDER BY w.snapshot_xmin DESC LIMIT 1;
    IF FOUND THEN
        WITH horizon AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next),
        doomed AS (
            SELECT o.ctid FROM outbox o, horizon h
            WHERE o.published_at IS NULL AND o.created_at < mark.recorded_at
              AND ((h.next - o.xmin::text::bigint) % 4294967296 + 4294967296) % 4294967296 > h.next - mark.xmin
            ORDER BY o.created_at
            LIMIT batch
        )
        DELETE FROM outbox o USING doomed d WHERE o.ctid = d.ctid;
        GET DIAGNOSTICS confirmed = ROW_COUNT;
        DELETE FROM outbox_watermarks w
        WHERE w.slot = walfeed_prune_batch.slot_name AND w.snapshot_xmin::text::bigint < mark.xmin;
    END IF;
    WITH doomed AS (
        SELECT o.ctid FROM outbox o
        WHERE o.published_at IS NOT NULL AND o.published_at < now() - older_than
        ORDER BY o.published_at
        LIMIT batch
    )
    DELETE FROM outbox o USING doomed d WHERE o.ctid = d.ctid;
    GET DIAGNOSTICS published = ROW_COUNT;
    WITH doomed AS (
        SELECT p.ctid FROM processed_events p
        WHERE p.processed_at < now() - older_than
          AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.id = p.event_id)
        ORDER BY p.processed_at
        LIMIT batch
    )
    DELETE FROM processed_events p USING doomed d WHERE p.ctid = d.ctid;
    GET DIAGNOSTICS processed = ROW_COUNT;
END $$;

-- Functions are executable by PUBLIC by default: only the roles granted it may prune (db/roles/grants.sql).
REVOKE ALL ON FUNCTION walfeed_outbox_watermark(text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION walfeed_prune_batch(text, interval, integer) FROM PUBLIC;
