-- The home read costs the page, not the follow list (docs/adr/0096). A reader's followed accounts whose posts are
-- pulled at read time (celebrities: a handful per reader) are marked on the follow itself and found through a
-- partial index, so the read never walks the whole follow list; posts not decided yet are no longer merged in at
-- read time (the reader's own are: read-your-writes), so posts_pending_idx goes.
--
-- pulled_authors: every author with at least one post pulled at read time (posts.fanned_out = false). An author
-- stays in it once there: their pulled posts stay pulled when their follower count drops again.
-- follows.pulled: the followee is in pulled_authors. Kept by the database, whoever writes posts or follows:
--   * a post becoming pulled (insert or decision) adds its author, and the first time marks the author's follows;
--   * a statement inserting follows marks those of pulled authors (set-based, one statement per statement);
--   * the api's follow statement checks it again after it has locked the followee's users row
--     (services/api/sql.py ADJUST_COUNTS), and the trigger below takes FOR SHARE on the same row before it adds
--     an author: whichever of a new follow and an author's first pulled post commits first, the other sees it.
-- `walfeed rebuild timelines` repairs flags that differ (services/cli/rebuild_sql.py).
-- On a large database the UPDATE below rewrites every follow of every pulled author in one transaction (locks
-- those rows; their follows and unfollows wait): run it by hand in batches of followees first, then this file
-- finds nothing left to mark (docs/database.md).

ALTER TABLE follows ADD COLUMN IF NOT EXISTS pulled boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS pulled_authors (
    author_id bigint      PRIMARY KEY REFERENCES users (id),
    since     timestamptz NOT NULL DEFAULT now()
);

INSERT INTO pulled_authors (author_id)
    SELECT DISTINCT author_id FROM posts WHERE fanned_out = false
    ON CONFLICT DO NOTHING;
UPDATE follows f SET pulled = true FROM pulled_authors a WHERE f.followee_id = a.author_id AND NOT f.pulled;

-- The reader's pulled followees: a handful of entries per reader, whatever the number of accounts followed.
CREATE INDEX IF NOT EXISTS follows_pulled_idx ON follows (follower_id, followee_id) WHERE pulled;

CREATE OR REPLACE FUNCTION walfeed_author_pulled() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pulled_authors WHERE author_id = NEW.author_id) THEN
        RETURN NULL;
    END IF;
    -- Conflicts with the follow path's FOR NO KEY UPDATE of the followee (services/api/sql.py LOCK_PAIR).
    PERFORM 1 FROM users WHERE id = NEW.author_id FOR SHARE;
    INSERT INTO pulled_authors (author_id) VALUES (NEW.author_id) ON CONFLICT DO NOTHING;
    IF FOUND THEN  -- this statement's snapshot is taken after the lock: it sees every follow committed before
        UPDATE follows SET pulled = true WHERE followee_id = NEW.author_id AND NOT pulled;
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS posts_author_pulled ON posts;
CREATE TRIGGER posts_author_pulled AFTER INSERT OR UPDATE OF fanned_out ON posts
    FOR EACH ROW WHEN (NEW.fanned_out = false) EXECUTE FUNCTION walfeed_author_pulled();

CREATE OR REPLACE FUNCTION walfeed_follows_pulled() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
BEGIN
    UPDATE follows f SET pulled = true
    FROM inserted i JOIN pulled_authors a ON a.author_id = i.followee_id
    WHERE f.follower_id = i.follower_id AND f.followee_id = i.followee_id AND NOT f.pulled;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS follows_pulled ON follows;
CREATE TRIGGER follows_pulled AFTER INSERT ON follows REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION walfeed_follows_pulled();

DROP INDEX IF EXISTS posts_pending_idx;
