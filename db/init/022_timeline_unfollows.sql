-- The home read checks its materialized rows against follows only for a reader with an unfollow the worker has
-- not processed yet (docs/adr/0150). A deleted follow leaves its followee's rows in the follower's timeline until
-- the worker's follow.deleted batch removes them (services/worker/sql.py UNFOLLOW); until then the pair is in
-- timeline_unfollows and counted in the follower's users.unfollows_pending, which the read already fetches with the
-- reader's floor: at 0 no row of the page is probed in follows, above 0 each row is, as before this file.
--
-- Kept by the database, whoever deletes follows: the trigger below adds (or renews) the pair in the transaction
-- that deletes the follow, so a read that sees the follow gone sees the count too. The worker removes the pair in
-- the statement that removes its rows, under the followee's exclusive advisory lock (docs/adr/0022: a fan-out in
-- flight holds it shared, so none can insert a row of the pair after that statement), and only at the version it
-- read: a pair renewed meanwhile (followed and unfollowed again) stays for the later unfollow's batch. A pair left
-- behind (its event dead-lettered) costs its follower's reads the probes, nothing else.
--
-- 023 replaced the count in users by a lookup of the pairs (docs/adr/0152): this file stays as it was applied.
ALTER TABLE users ADD COLUMN IF NOT EXISTS unfollows_pending integer NOT NULL DEFAULT 0;

CREATE SEQUENCE IF NOT EXISTS timeline_unfollows_version;

CREATE TABLE IF NOT EXISTS timeline_unfollows (
    follower_id bigint      NOT NULL,
    followee_id bigint      NOT NULL,
    version     bigint      NOT NULL DEFAULT nextval('timeline_unfollows_version'),
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (follower_id, followee_id)
);

CREATE OR REPLACE FUNCTION walfeed_follows_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
    WITH marked AS (
        INSERT INTO timeline_unfollows (follower_id, followee_id)
        SELECT follower_id, followee_id FROM deleted ORDER BY follower_id, followee_id
        ON CONFLICT (follower_id, followee_id) DO UPDATE SET version = excluded.version, since = excluded.since
        RETURNING follower_id, xmax = 0 AS added  -- xmax 0: inserted, not renewed
    )
    UPDATE users u SET unfollows_pending = u.unfollows_pending + m.n
    FROM (SELECT follower_id, count(*) FILTER (WHERE added) AS n FROM marked GROUP BY follower_id) m
    WHERE u.id = m.follower_id AND m.n > 0;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS follows_deleted ON follows;
CREATE TRIGGER follows_deleted AFTER DELETE ON follows REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION walfeed_follows_deleted();

-- Rows of unfollows made before this file whose batches have not run yet: their pairs, found from the rows
-- themselves (after the trigger exists, so a follow deleted while this runs is covered either way), and the
-- counts from the pairs. On a large database this reads every timeline row once.
INSERT INTO timeline_unfollows (follower_id, followee_id)
    SELECT DISTINCT t.user_id, t.author_id FROM timelines t
    WHERE t.author_id <> t.user_id
      AND NOT EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = t.user_id AND f.followee_id = t.author_id)
ON CONFLICT DO NOTHING;
UPDATE users u SET unfollows_pending = c.n
FROM (SELECT follower_id, count(*)::integer AS n FROM timeline_unfollows GROUP BY follower_id) c
WHERE u.id = c.follower_id AND u.unfollows_pending <> c.n;
