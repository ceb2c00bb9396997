-- The pending unfollows are looked up in timeline_unfollows by the read, no longer counted in users (docs/adr/0152).
-- 022's trigger updated the follower's users row inside the follows DELETE, before the api locked the pair of users
-- rows in id order for the follow counts: an unfollow A->B (A > B) held A and waited for B while a follow B->A held
-- B and waited for A, a deadlock; the worker's batch, which locks users rows (floors, the posts trigger's share lock
-- on an author) and then decremented the count, made a second cycle. The trigger now writes only the pair's own
-- row, and the worker deletes only pairs' rows: neither waits on users on that account.
CREATE OR REPLACE FUNCTION walfeed_follows_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
    INSERT INTO timeline_unfollows (follower_id, followee_id)
    SELECT follower_id, followee_id FROM deleted ORDER BY follower_id, followee_id
    ON CONFLICT (follower_id, followee_id) DO UPDATE SET version = excluded.version, since = excluded.since;
    RETURN NULL;
END $$;

ALTER TABLE users DROP COLUMN IF EXISTS unfollows_pending;

-- The read's generic plan scans the table whole while its statistics say it is empty or a page, and by its primary
-- key once they say more; a new ANALYZE re-plans prepared statements. Analyzed (and vacuumed: rows last seconds)
-- after a fixed number of changes rather than a fraction of its size, so that the statistics of a table that is
-- usually empty follow an outage's pairs within autovacuum's naptime (tests/integration/api/test_plans.py).
ALTER TABLE timeline_unfollows SET (autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 50,
                                    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);
