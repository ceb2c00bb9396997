-- Webhook signing secrets out of the api's reach (issue 24, docs/adr/0105): the internet-facing api role may
-- write a secret but never read one (db/roles/grants.sql grants it every column of webhooks but the two secrets).
-- A rotation moves the current secret into previous_secret, which reads it: it runs here, as the owner, and
-- returns only what the api shows (the webhook's id and when the previous secret stops signing).
CREATE OR REPLACE FUNCTION walfeed_rotate_webhook_secret(owner bigint, webhook bigint, new_secret text,
                                                         overlap_seconds integer)
RETURNS TABLE (id bigint, previous_secret_until timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = public, pg_catalog, pg_temp AS $$
    UPDATE webhooks w SET previous_secret = w.secret, secret = new_secret,
                          previous_secret_until = now() + make_interval(secs => overlap_seconds)
    WHERE w.id = webhook AND w.owner_id = owner
    RETURNING w.id, w.previous_secret_until
$$;
REVOKE ALL ON FUNCTION walfeed_rotate_webhook_secret(bigint, bigint, text, integer) FROM PUBLIC;
