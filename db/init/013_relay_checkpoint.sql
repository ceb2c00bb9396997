-- The relay's failover checkpoint (issue 17, docs/adr/0091): a row per slot, replicated with the rest of the
-- database, saying which outbox rows the broker has confirmed. A logical slot does not survive the promotion of a
-- standby on Postgres 15; on the new primary the relay creates the slot again and republishes every outbox row
-- the checkpoint does not cover before it streams.
--
-- snapshot_xmin: every transaction with an id below it had ended when the checkpoint's watermark was recorded, and
-- its commit record lay before lsn; the slot's confirmed_flush_lsn then passed lsn, so every outbox row those
-- transactions wrote was published and confirmed (the watermark of docs/adr/0071). A row of a transaction at or
-- above it may not have been. system_identifier and timeline: the server it was recorded on; a promoted standby
-- keeps the system identifier and starts a new timeline. next_*: the watermark waiting for the slot to pass it.
-- recovering: a recovery is under way (docs/adr/0091, "A relay killed while it recovers"). The relay creates the slot
-- again before it republishes the rows the checkpoint does not cover; killed in between, it leaves a slot that has
-- not seen those rows, and on the same server (a dropped slot) or with no checkpoint yet, slot and checkpoint would
-- look in order. Set, with the waiting watermark forgotten, before the slot is created, cleared by the reset that
-- ends the recovery: a relay that finds a slot and `recovering` set republishes from the checkpoint before it streams
-- (services/cdc_relay/failover_policy.py), and the checkpoint timer leaves the checkpoint alone meanwhile (it runs
-- from the relay's start on its own thread; on an idle server a watermark recorded just after the new slot's start
-- would be passed at once and cover the rows still to republish).
CREATE TABLE IF NOT EXISTS relay_checkpoints (
    slot              text        PRIMARY KEY,
    system_identifier bigint,
    timeline          integer,
    snapshot_xmin     xid8,
    lsn               pg_lsn,
    checkpointed_at   timestamptz,
    next_timeline     integer,
    next_xmin         xid8,
    next_lsn          pg_lsn,
    next_recorded_at  timestamptz,
    recovering        boolean     NOT NULL DEFAULT false
);

-- The server's current timeline: the first 8 hex digits of the current WAL segment's name (a primary only).
CREATE OR REPLACE FUNCTION walfeed_timeline() RETURNS integer
LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
$$;

-- The relay's checkpoint timer, once per WALFEED_RELAY_CHECKPOINT_INTERVAL: when the slot's confirmed position has
-- passed the waiting watermark, it becomes the checkpoint; then a new watermark waits. Returns what happened:
-- 'no slot' (nothing done: this database has no such slot), 'recovering' (nothing done: a recovery is under way),
-- 'other server' (nothing done: the checkpoint was
-- recorded on another server or timeline, a failover the relay has not handled yet; the relay resets it when it
-- has republished), 'advanced' or 'waiting'. The watermark's snapshot is taken before the insert position is read
-- (one statement), so every transaction below its xmin has its commit record before its lsn.
CREATE OR REPLACE FUNCTION walfeed_relay_checkpoint(slot_name text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
DECLARE
    confirmed pg_lsn;
    sysid bigint := (pg_control_system()).system_identifier;
    tl integer := walfeed_timeline();
    cp relay_checkpoints%ROWTYPE;
    have boolean;
    mark record;
    result text := 'waiting';
BEGIN
    SELECT s.confirmed_flush_lsn INTO confirmed FROM pg_replication_slots s
    WHERE s.slot_name = walfeed_relay_checkpoint.slot_name AND s.database = current_database();
    IF confirmed IS NULL THEN
        RETURN 'no slot';
    END IF;
    SELECT * INTO cp FROM relay_checkpoints c WHERE c.slot = walfeed_relay_checkpoint.slot_name FOR UPDATE;
    have := FOUND;
    IF have AND cp.recovering THEN
        RETURN 'recovering';
    END IF;
    IF have AND cp.snapshot_xmin IS NOT NULL
       AND (cp.system_identifier, cp.timeline) IS DISTINCT FROM (sysid, tl) THEN
        RETURN 'other server';
    END IF;
    IF have AND cp.next_lsn IS NOT NULL AND cp.next_timeline = tl AND cp.next_lsn <= confirmed THEN
        UPDATE relay_checkpoints c
        SET system_identifier = sysid, timeline = tl, snapshot_xmin = c.next_xmin, lsn = c.next_lsn,
            checkpointed_at = now(), next_timeline = NULL, next_xmin = NULL, next_lsn = NULL, next_recorded_at = NULL
        WHERE c.slot = walfeed_relay_checkpoint.slot_name;
        cp.next_lsn := NULL;
        result := 'advanced';
    END IF;
    IF have AND cp.next_lsn IS NOT NULL AND cp.next_timeline = tl THEN
        RETURN result;  -- still waiting for the slot to pass it
    END IF;
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin, pg_current_wal_insert_lsn() AS lsn INTO mark;
    INSERT INTO relay_checkpoints AS c (slot, next_timeline, next_xmin, next_lsn, next_recorded_at)
    VALUES (walfeed_relay_checkpoint.slot_name, tl, mark.xmin, mark.lsn, now())
    ON CONFLICT (slot) DO UPDATE
    SET next_timeline = excluded.next_timeline, next_xmin = excluded.next_xmin, next_lsn = excluded.next_lsn,
        next_recorded_at = excluded.next_recorded_at;
    RETURN result;
END $$;

-- After a failover, once the relay has republished every row its REPEATABLE READ snapshot saw and the old
-- checkpoint did not cover (each confirmed by the broker): `snapshot_xmin`, that snapshot's xmin, becomes the
-- checkpoint, on this server and timeline. `start_lsn`: the slot's start (rows committed after it are the slot's).
-- Called in a transaction of its own (the republishing one would fail to serialize with the checkpoint timer).
CREATE OR REPLACE FUNCTION walfeed_relay_checkpoint_reset(slot_name text, snapshot_xmin xid8, start_lsn pg_lsn)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO relay_checkpoints AS c (slot, system_identifier, timeline, snapshot_xmin, lsn, checkpointed_at)
    VALUES (walfeed_relay_checkpoint_reset.slot_name, (pg_control_system()).system_identifier, walfeed_timeline(),
            walfeed_relay_checkpoint_reset.snapshot_xmin, start_lsn, now())
    ON CONFLICT (slot) DO UPDATE
    SET system_identifier = excluded.system_identifier, timeline = excluded.timeline,
        snapshot_xmin = excluded.snapshot_xmin, lsn = excluded.lsn, checkpointed_at = excluded.checkpointed_at,
        next_timeline = NULL, next_xmin = NULL, next_lsn = NULL, next_recorded_at = NULL, recovering = false;
END $$;

-- Before the relay creates the slot again: mark the recovery under way, and forget the waiting watermark. It was
-- recorded for the slot that is gone; on the same timeline (a dropped slot) the new slot's start would pass it at
-- once, though the rows below it may never have been confirmed. A watermark recorded from now on lies after the new
-- slot's start.
CREATE OR REPLACE FUNCTION walfeed_relay_checkpoint_forget(slot_name text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
    UPDATE relay_checkpoints c
    SET next_timeline = NULL, next_xmin = NULL, next_lsn = NULL, next_recorded_at = NULL, recovering = true
    WHERE c.slot = walfeed_relay_checkpoint_forget.slot_name
$$;

-- The outbox rows the checkpoint does not cover, in the caller's snapshot: CDC rows (published_at NULL; the
-- polling source's rows were confirmed when it marked them) whose inserting transaction is at or above the
-- checkpoint's snapshot_xmin, or every CDC row when there is no checkpoint. A row's 32-bit xmin is widened against
-- the statement snapshot's xmax as in walfeed_prune_batch (009_retention.sql). Only the xmin is compared, never
-- the snapshot's list of running transactions: a row written in a subtransaction carries the subtransaction's id,
-- which that list does not hold. One pass over the CDC rows (outbox_unpublished_idx), at a failover only.
CREATE OR REPLACE FUNCTION walfeed_relay_unconfirmed(slot_name text)
RETURNS TABLE (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb, created_at timestamptz,
               tracingspancontext text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
    WITH horizon AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next),
    mark AS (SELECT (SELECT c.snapshot_xmin::text::bigint FROM relay_checkpoints c
                     WHERE c.slot = walfeed_relay_unconfirmed.slot_name) AS xmin)
    SELECT o.id, o.aggregatetype, o.aggregateid, o.type, o.payload, o.created_at, o.tracingspancontext
    FROM outbox o, horizon h, mark m
    WHERE o.published_at IS NULL
      AND (m.xmin IS NULL
           OR ((h.next - o.xmin::text::bigint) % 4294967296 + 4294967296) % 4294967296 <= h.next - m.xmin)
    ORDER BY o.created_at, o.id
$$;

REVOKE ALL ON FUNCTION walfeed_relay_checkpoint(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION walfeed_relay_checkpoint_reset(text, xid8, pg_lsn) FROM PUBLIC;
REVOKE ALL ON FUNCTION walfeed_relay_checkpoint_forget(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION walfeed_relay_unconfirmed(text) FROM PUBLIC;
