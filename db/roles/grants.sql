-- What each walfeed process may do in its database (docs/adr/0060). Applied by `walfeed bootstrap-roles` after
-- the migrations, every run: everything is revoked first, so the result is exactly this file.
-- {database}, {owner}, {api}, {relay}, {worker} are identifiers filled in with psycopg.sql.Identifier.
-- A migration that adds a table or a statement that reads a new column adds its grant here.

REVOKE ALL ON DATABASE {database} FROM PUBLIC;
REVOKE ALL ON DATABASE {database} FROM {api}, {relay}, {worker};
GRANT CONNECT ON DATABASE {database} TO {api}, {relay}, {worker};

REVOKE ALL ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM {api}, {relay}, {worker};
GRANT USAGE ON SCHEMA public TO {api}, {relay}, {worker};
-- REVOKE ... ON TABLE also revokes the column privileges.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC, {api}, {relay}, {worker};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM PUBLIC, {api}, {relay}, {worker};

-- api (services/api/sql.py): sign-up, follow counts, posts and their soft delete, outbox inserts, timeline reads.
-- Identity columns draw from their sequence without a sequence privilege.
GRANT SELECT ON users, follows, posts, timelines TO {api};
GRANT INSERT (handle, token_hash) ON users TO {api};
GRANT UPDATE (follower_count, following_count) ON users TO {api};  -- also what LOCK_PAIR's FOR NO KEY UPDATE needs
GRANT INSERT (follower_id, followee_id), DELETE ON follows TO {api};
GRANT INSERT (author_id, body, idempotency_key, request_hash) ON posts TO {api};
GRANT UPDATE (deleted_at) ON posts TO {api};
GRANT INSERT (id, aggregatetype, aggregateid, type, payload, tracingspancontext) ON outbox TO {api};
GRANT UPDATE (token_hash) ON users TO {api};  -- token rotation and revocation (SET_TOKEN)
GRANT SELECT, INSERT, UPDATE ON rate_limits TO {api};  -- RATE_LIMIT_HIT's upsert (006_rate_limits.sql)

-- relay: the cdc source reads the slot through its REPLICATION attribute (no table privilege: logical decoding
-- reads the WAL); the poll source (services/cdc_relay/poll_sql.py) claims and marks outbox rows.
GRANT SELECT (id, aggregatetype, aggregateid, type, payload, created_at, published_at, claimed_by, claim_expires_at,
               tracingspancontext) ON outbox TO {relay};
GRANT UPDATE (claimed_by, claim_expires_at, published_at) ON outbox TO {relay};
-- relay's pruning timer (docs/adr/0071): only through the two functions of 009_retention.sql, which delete what
-- is due and nothing else (SECURITY DEFINER); the relay itself may still delete no row.
REVOKE ALL ON FUNCTION walfeed_outbox_watermark(text, boolean), walfeed_prune_batch(text, interval, integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION walfeed_outbox_watermark(text, boolean), walfeed_prune_batch(text, interval, integer)
    TO {relay};

-- worker (services/worker/sql.py): fan-out into timelines, the post's decision, the timeline floor, the outbox
-- row of an event (visibility and authenticity checks), its idempotency records.
GRANT SELECT, INSERT, DELETE ON timelines TO {worker};
GRANT SELECT ON posts, users, follows, outbox TO {worker};
GRANT UPDATE (fanned_out) ON posts TO {worker};
GRANT UPDATE (timeline_floor) ON users TO {worker};
GRANT SELECT, INSERT (consumer, event_id) ON processed_events TO {worker};
