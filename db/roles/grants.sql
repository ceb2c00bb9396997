-- What each walfeed process may do in its database (docs/adr/0060). Applied by `walfeed bootstrap-roles` after
-- the migrations, every run: everything is revoked first, so the result is exactly this file.
-- {database}, {owner}, {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder} are identifiers filled in with
-- psycopg.sql.Identifier.
-- A migration that adds a table or a statement that reads a new column adds its grant here.

REVOKE ALL ON DATABASE {database} FROM PUBLIC;
REVOKE ALL ON DATABASE {database} FROM {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};
GRANT CONNECT ON DATABASE {database} TO {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};

REVOKE ALL ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};
GRANT USAGE ON SCHEMA public TO {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};
-- REVOKE ... ON TABLE also revokes the column privileges.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC, {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM PUBLIC, {api}, {relay}, {worker}, {notifier}, {delivery}, {embedder};

-- api (services/api/sql.py): sign-up, follow counts, posts and their soft delete, outbox inserts, timeline reads.
-- Identity columns draw from their sequence without a sequence privilege.
GRANT SELECT ON users, follows, posts, timelines TO {api};
GRANT INSERT (handle, token_hash, password_hash) ON users TO {api};
GRANT UPDATE (follower_count, following_count) ON users TO {api};  -- also what LOCK_PAIR's FOR NO KEY UPDATE needs
GRANT INSERT (follower_id, followee_id), DELETE ON follows TO {api};
GRANT UPDATE (pulled) ON follows TO {api};  -- ADJUST_COUNTS marks a new follow of a pulled author (db/init/015)
GRANT SELECT ON pulled_authors TO {api};
GRANT SELECT ON timeline_unfollows TO {api};  -- the home read's pending check (db/init/023, docs/adr/0152)
-- the home read's check of the partition it names (db/init/024, docs/adr/0153); SELECT on each partition of
-- timelines is granted by bootstrap-roles itself (services/cli/pg_roles.py), one statement a partition
REVOKE ALL ON FUNCTION walfeed_timeline_partition_is(regclass, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION walfeed_timeline_partition_is(regclass, text) TO {api};
GRANT INSERT (author_id, body, idempotency_key, request_hash) ON posts TO {api};
GRANT INSERT ON timelines TO {api};  -- the author's own row, written with the post (docs/adr/0157)
GRANT UPDATE (deleted_at) ON posts TO {api};
GRANT INSERT (id, aggregatetype, aggregateid, type, payload, tracingspancontext) ON outbox TO {api};
GRANT UPDATE (token_hash) ON users TO {api};  -- token rotation and revocation (SET_TOKEN)
GRANT SELECT, INSERT, UPDATE ON rate_limits TO {api};  -- RATE_LIMIT_HIT's upsert (006_rate_limits.sql)
-- notifications (008_notifications.sql): the in-app list and its read marker, mail settings, webhooks, their
-- deliveries (ping, retry); a webhook's deliveries go with it by ON DELETE CASCADE, run as the table owner.
GRANT SELECT ON notifications TO {api};
GRANT SELECT, INSERT, UPDATE ON notification_reads TO {api};
GRANT UPDATE (email, email_kinds, email_verified_at) ON users TO {api};
-- the key of verification codes and unsubscribe tokens (017_email_verification.sql), checked by the api
GRANT SELECT ON server_secrets TO {api};
-- Webhook secrets (docs/adr/0105): the api writes a new one (it generates it and shows it once, never reading it
-- back) and rotates through the owner's function; it reads every column but secret and previous_secret.
GRANT SELECT (id, owner_id, url, events, previous_secret_until, disabled_at, disabled_reason, failing_since,
              created_at) ON webhooks TO {api};
GRANT DELETE ON webhooks TO {api};
GRANT INSERT (owner_id, url, events, secret) ON webhooks TO {api};
GRANT UPDATE (disabled_at, disabled_reason, failing_since) ON webhooks TO {api};
-- search (services/api/search_sql.py, 020_search.sql): the vectors of its nearest-neighbour index, read only; the
-- full-text half reads posts, granted above.
GRANT SELECT ON post_embeddings, embedding_models TO {api};
REVOKE ALL ON FUNCTION walfeed_rotate_webhook_secret(bigint, bigint, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION walfeed_rotate_webhook_secret(bigint, bigint, text, integer) TO {api};
GRANT SELECT ON deliveries TO {api};
GRANT INSERT (channel, webhook_id, recipient_id) ON deliveries TO {api};
GRANT UPDATE (status, attempts, next_attempt_at, updated_at) ON deliveries TO {api};
-- the Mastodon layer (021_mastodon.sql, services/api/mastodon/sql.py): passwords, OAuth apps, codes (used once:
-- deleted by their exchange) and access tokens (revoked, never deleted)
GRANT UPDATE (password_hash) ON users TO {api};
GRANT SELECT, INSERT ON oauth_apps TO {api};
GRANT SELECT, INSERT, DELETE ON oauth_codes TO {api};
GRANT SELECT, INSERT ON oauth_tokens TO {api};
GRANT UPDATE (revoked_at) ON oauth_tokens TO {api};

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
-- relay's failover checkpoint (docs/adr/0091): read at start to recognise a new primary, written only through the
-- functions of 013_relay_checkpoint.sql; the republish reads the outbox rows the checkpoint does not cover.
GRANT SELECT ON relay_checkpoints TO {relay};
REVOKE ALL ON FUNCTION walfeed_relay_checkpoint(text), walfeed_relay_checkpoint_reset(text, xid8, pg_lsn),
    walfeed_relay_checkpoint_forget(text), walfeed_relay_unconfirmed(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION walfeed_relay_checkpoint(text), walfeed_relay_checkpoint_reset(text, xid8, pg_lsn),
    walfeed_relay_checkpoint_forget(text), walfeed_relay_unconfirmed(text) TO {relay};

-- worker (services/worker/sql.py): fan-out into timelines, the post's decision, the timeline floor, the outbox
-- row of an event (visibility and authenticity checks), its idempotency records.
GRANT SELECT, INSERT, DELETE ON timelines TO {worker};
GRANT SELECT ON posts, users, follows, outbox TO {worker};
-- walfeed rebuild timelines (run as the worker's role) repairs follows.pulled (db/init/015); the flags are
-- otherwise kept by 015's triggers, which run as their owner.
GRANT SELECT ON pulled_authors TO {worker};
GRANT UPDATE (pulled) ON follows TO {worker};
-- the follow.deleted batch removes the pairs whose rows it removed (db/init/022, 023; the trigger adds them as owner)
GRANT SELECT, DELETE ON timeline_unfollows TO {worker};
GRANT UPDATE (fanned_out) ON posts TO {worker};
GRANT UPDATE (timeline_floor) ON users TO {worker};
GRANT SELECT, INSERT (consumer, event_id) ON processed_events TO {worker};

-- notifier (services/notifier/sql.py, and the worker's KNOWN_EVENTS and MARK_PROCESSED_MANY): the outbox row of an
-- event, posts' bodies and users' handles and mail settings, the webhooks' subscriptions (never their secrets),
-- notifications and deliveries with their delivery.* outbox events, its idempotency records.
GRANT SELECT (id, type, payload) ON outbox TO {notifier};
GRANT INSERT (id, aggregatetype, aggregateid, type, payload) ON outbox TO {notifier};
GRANT SELECT (id, author_id, body, deleted_at) ON posts TO {notifier};
GRANT SELECT (id, handle, email, email_kinds, email_verified_at) ON users TO {notifier};
GRANT SELECT (id, owner_id, events, disabled_at) ON webhooks TO {notifier};
GRANT SELECT, INSERT (recipient_id, kind, actor_id, post_id, event_id) ON notifications TO {notifier};
GRANT UPDATE (withdrawn_at) ON notifications TO {notifier};
GRANT SELECT, INSERT (notification_id, channel, webhook_id, recipient_id) ON deliveries TO {notifier};
GRANT UPDATE (status, updated_at) ON deliveries TO {notifier};
GRANT SELECT, INSERT (consumer, event_id) ON processed_events TO {notifier};
GRANT SELECT, INSERT, UPDATE ON notifier_actor_budgets TO {notifier};  -- NOTIFY's budget (015_delivery_budgets.sql)

-- delivery (services/delivery/sql.py): a delivery with its target, notification, actor and post; its outcome; the
-- webhook's run of failures and disabling; the per-target rate limits (011_delivery.sql). Webhook secrets are read
-- to sign, never written.
GRANT SELECT ON deliveries, webhooks, notifications TO {delivery};
GRANT SELECT (id, handle, email, email_kinds, email_verified_at) ON users TO {delivery};  -- never token_hash
GRANT SELECT ON server_secrets TO {delivery};  -- signs verification codes and unsubscribe tokens
GRANT SELECT (id, body, deleted_at) ON posts TO {delivery};
GRANT UPDATE (status, attempts, last_status_code, last_error, response_excerpt, next_attempt_at, updated_at)
    ON deliveries TO {delivery};
GRANT UPDATE (failing_since, disabled_at, disabled_reason) ON webhooks TO {delivery};
GRANT SELECT, INSERT, UPDATE ON delivery_rate_limits TO {delivery};
GRANT SELECT, INSERT, UPDATE ON delivery_host_budgets TO {delivery};  -- HOST_BUDGET (015_delivery_budgets.sql)
-- `walfeed prune-notifications` runs as the delivery role, through its function only (015_delivery_budgets.sql).
REVOKE ALL ON FUNCTION walfeed_prune_notifications_batch(interval, integer, bigint) FROM PUBLIC, {delivery};
GRANT EXECUTE ON FUNCTION walfeed_prune_notifications_batch(interval, integer, bigint) TO {delivery};

-- embedder (services/embedder/sql.py, `walfeed embed backfill`): live posts' bodies by id, and the vectors it writes
-- (inserts; updates only to tombstone). It deletes nothing: a deleted
-- post's vectors become tombstones (020_search.sql's trigger, as the owner; the embedder's post.deleted also).
GRANT SELECT (id, body, created_at, deleted_at) ON posts TO {embedder};
GRANT SELECT ON post_embeddings TO {embedder};
GRANT INSERT (post_id, model, dimension, vector), UPDATE (vector, changed_xid, embedded_at) ON post_embeddings
    TO {embedder};
GRANT SELECT, INSERT (model), UPDATE (position, complete_at, updated_at) ON embedding_models TO {embedder};
