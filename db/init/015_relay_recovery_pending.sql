-- A recovery under way is recorded (docs/adr/0091, "A relay killed while it recovers"). The relay creates the slot
-- again before it republishes the rows the checkpoint does not cover; killed in between, it left a slot that had
-- not seen those rows and a checkpoint that still matched the server (a slot dropped on the same server, or no
-- checkpoint yet): the next relay found both in order and streamed, and the rows not yet republished were never
-- published. `recovering` is set, with the waiting watermark forgotten, before the slot is created and cleared by
-- the reset that ends the recovery; a relay that finds a slot and `recovering` set republishes from the checkpoint
-- before it streams (services/cdc_relay/failover_policy.py). Meanwhile the checkpoint timer leaves the checkpoint
-- alone: it runs on its own thread from the relay's start, and on the same server a watermark recorded right after
-- the slot's creation lies at the slot's start when nothing else writes, so the timer would advance the checkpoint
-- over the rows still to republish.
ALTER TABLE relay_checkpoints ADD COLUMN IF NOT EXISTS recovering boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION walfeed_relay_checkpoint_forget(slot_name text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
    UPDATE relay_checkpoints c
    SET next_timeline = NULL, next_xmin = NULL, next_lsn = NULL, next_recorded_at = NULL, recovering = true
    WHERE c.slot = walfeed_relay_checkpoint_forget.slot_name
$$;

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

-- 013's timer, unchanged but for the first test: nothing while a recovery is under way ('recovering').
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
