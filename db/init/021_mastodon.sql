-- Mastodon's client API (docs/mastodon.md): account passwords, OAuth applications, authorization codes
-- and access tokens, and the signal of a new notification for the live stream (docs/adr/0140). New tables and a
-- nullable column only.

-- argon2id, in the PHC string format argon2-cffi writes ($argon2id$v=19$m=...,t=...,p=...$salt$hash); NULL: the
-- account has no password (it signs in with its bearer token only).
ALTER TABLE users ADD COLUMN IF NOT EXISTS password_hash text CHECK (char_length(password_hash) <= 512);

-- POST /api/v1/apps. The client secret is 256 random bits shown once: only its sha256 is kept (as bearer tokens).
CREATE TABLE IF NOT EXISTS oauth_apps (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    client_id     text        NOT NULL UNIQUE,
    secret_hash   bytea       NOT NULL,
    name          text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    website       text        CHECK (char_length(website) <= 2000),
    redirect_uris text[]      NOT NULL,
    scopes        text[]      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- GET/POST /oauth/authorize: a code is used once (deleted by the exchange that uses it) within 10 minutes.
-- challenge: PKCE (RFC 7636), S256 or plain, when the authorization request had one.
CREATE TABLE IF NOT EXISTS oauth_codes (
    code_hash        bytea       PRIMARY KEY,
    app_id           bigint      NOT NULL REFERENCES oauth_apps (id) ON DELETE CASCADE,
    user_id          bigint      NOT NULL REFERENCES users (id),
    redirect_uri     text        NOT NULL,
    scopes           text[]      NOT NULL,
    challenge        text,
    challenge_method text        CHECK (challenge_method IN ('S256', 'plain')),
    expires_at       timestamptz NOT NULL
);

-- Access tokens of /oauth/token, sha256-hashed as users.token_hash; user_id NULL: a client_credentials token (the
-- app itself, no account). Revoked: revoked_at set, never deleted (what a revoked token was stays known).
CREATE TABLE IF NOT EXISTS oauth_tokens (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_hash bytea       NOT NULL UNIQUE,
    app_id     bigint      NOT NULL REFERENCES oauth_apps (id) ON DELETE CASCADE,
    user_id    bigint      REFERENCES users (id),
    scopes     text[]      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- The live stream (docs/adr/0140): every api process LISTENs on walfeed_notification and sends a new notification
-- to the streams of its recipient that it holds. Sent when the notifier's transaction commits, so a stream never
-- sees a notification the list does not show yet. Payload: "<recipient_id>:<notification_id>".
CREATE OR REPLACE FUNCTION walfeed_notification_signal() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('walfeed_notification', NEW.recipient_id::text || ':' || NEW.id::text);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS notifications_signal ON notifications;
CREATE TRIGGER notifications_signal AFTER INSERT ON notifications
    FOR EACH ROW EXECUTE FUNCTION walfeed_notification_signal();
