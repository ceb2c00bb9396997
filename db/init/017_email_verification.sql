-- Verified email addresses and signed mail tokens (issue 24, docs/notifications.md "Mail settings", docs/adr/0106).
-- Notification mail goes only to an address its user showed to be theirs: setting an address stores it unverified
-- and queues a verification mail (a `delivery.email` delivery without a notification) carrying a signed code;
-- `POST /v1/users/me/email/verify` with it sets email_verified_at. Addresses set before this migration are
-- unverified too: whoever set them may not own them. Their users set them again to get a code.
ALTER TABLE users ADD COLUMN IF NOT EXISTS email_verified_at timestamptz;

-- Keys the processes share, generated here, once, from the server's strong random source (gen_random_uuid):
-- 'email_tokens' signs verification codes and List-Unsubscribe tokens (services/core/mailtokens.py). Replacing a
-- row's value invalidates every token signed with it.
CREATE TABLE IF NOT EXISTS server_secrets (
    name       text        PRIMARY KEY,
    value      bytea       NOT NULL CHECK (octet_length(value) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO server_secrets (name, value)
SELECT 'email_tokens', decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
ON CONFLICT (name) DO NOTHING;
