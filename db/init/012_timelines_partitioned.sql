-- Timelines hash-partitioned by user_id (docs/adr/0093): a statement about one user reads and writes one partition.
-- Fresh databases get the table of 001_schema.sql and convert it here with no rows to move: one schema for all.
-- Idempotent: a no-op when timelines is already partitioned. Otherwise, in this migration's one transaction:
-- create the partitioned table, copy the rows, build its indexes, then drop the old table and give the new one its
-- name, its index names, its owner and its grants.
-- Locks: SHARE on the old table while rows are copied and indexes built (timeline reads go on, fan-out writes
-- wait), then ACCESS EXCLUSIVE from the drop to the commit (catalog changes only: reads wait milliseconds).
-- On a big table the copy takes minutes: docs/database.md says how long, and how to convert it online instead.
DO $$
DECLARE
    partitions CONSTANT integer := 32;  -- a power of two: one partition splits into two later (ADR 0093)
    old_owner name;
    grants text[];
    part text;
    statement text;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'timelines'::regclass) = 'p' THEN
        RETURN;
    END IF;
    LOCK TABLE timelines IN SHARE MODE;
    SELECT pg_get_userbyid(relowner) INTO old_owner FROM pg_class WHERE oid = 'timelines'::regclass;
    -- Every privilege granted on the table and on its columns, except the owner's own, as GRANT statements.
    SELECT coalesce(array_agg(format('GRANT %s%s ON timelines TO %s%s', a.privilege_type,
                                     CASE WHEN g.attname IS NULL THEN '' ELSE format(' (%I)', g.attname) END,
                                     CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                                     CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)), '{}')
    INTO grants
    FROM (SELECT NULL::name AS attname, c.relacl AS acl, c.relowner FROM pg_class c WHERE c.oid = 'timelines'::regclass
          UNION ALL
          SELECT t.attname, t.attacl, c.relowner FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid
          WHERE t.attrelid = 'timelines'::regclass AND t.attnum > 0 AND NOT t.attisdropped AND t.attacl IS NOT NULL) g
    CROSS JOIN LATERAL aclexplode(g.acl) a
    WHERE a.grantee <> g.relowner;

    CREATE TABLE timelines_partitioned (
        user_id   bigint NOT NULL,
        post_id   bigint NOT NULL,
        author_id bigint NOT NULL
    ) PARTITION BY HASH (user_id);
    FOR i IN 0 .. partitions - 1 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF timelines_partitioned '
                       'FOR VALUES WITH (MODULUS %s, REMAINDER %s)', 'timelines_p' || lpad(i::text, 2, '0'),
                       partitions, i);
    END LOOP;
    -- Rows first, indexes after: one sorted build per index and partition instead of row-by-row insertion.
    INSERT INTO timelines_partitioned (user_id, post_id, author_id)
        SELECT user_id, post_id, author_id FROM timelines;
    -- The indexes of 001_schema.sql; each cascades to every partition. Renamed to their old names below.
    ALTER TABLE timelines_partitioned ADD CONSTRAINT timelines_partitioned_pkey PRIMARY KEY (user_id, post_id);
    -- unfollow removes one author's posts from one user's timeline.
    CREATE INDEX timelines_partitioned_user_author_idx ON timelines_partitioned (user_id, author_id);
    -- post deletion removes one post from every timeline: one probe per partition.
    CREATE INDEX timelines_partitioned_post_idx ON timelines_partitioned (post_id);
    ANALYZE timelines_partitioned;  -- autovacuum analyzes the partitions, never the parent

    DROP TABLE timelines;
    ALTER TABLE timelines_partitioned RENAME TO timelines;
    ALTER TABLE timelines RENAME CONSTRAINT timelines_partitioned_pkey TO timelines_pkey;
    ALTER INDEX timelines_partitioned_user_author_idx RENAME TO timelines_user_author_idx;
    ALTER INDEX timelines_partitioned_post_idx RENAME TO timelines_post_idx;

    -- The old table's owner and grants. The partitions get no grant: a statement on timelines checks the
    -- privileges on timelines only, and only the owner may touch a partition directly.
    IF old_owner <> current_user THEN
        EXECUTE format('ALTER TABLE timelines OWNER TO %I', old_owner);
        FOR part IN SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'timelines'::regclass LOOP
            EXECUTE format('ALTER TABLE %s OWNER TO %I', part, old_owner);
        END LOOP;
    END IF;
    FOREACH statement IN ARRAY grants LOOP
        EXECUTE statement;
    END LOOP;
END $$;
