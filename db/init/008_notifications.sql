-- Notifications and their delivery (issue 15, docs/notifications.md). New tables and nullable columns only.

-- A user's email address for notification mail, and the notification kinds they want mailed.
ALTER TABLE users
    ADD COLUMN IF NOT EXISTS email       text CHECK (email IS NULL OR char_length(email) <= 254),
    ADD COLUMN IF NOT EXISTS email_kinds text[] NOT NULL DEFAULT '{}';

-- In-app notifications, derived by the notifier from events. One per (event, recipient): the same event twice
-- gives the same rows.
CREATE TABLE IF NOT EXISTS notifications (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient_id bigint      NOT NULL REFERENCES users (id),
    kind         text        NOT NULL CHECK (kind IN ('follow', 'mention')),
    actor_id     bigint      NOT NULL REFERENCES users (id),
    post_id      bigint,                                -- mention: the post; follow: NULL
    event_id     uuid        NOT NULL,                  -- the event it was derived from
    created_at   timestamptz NOT NULL DEFAULT now(),
    withdrawn_at timestamptz,                           -- set when the mentioning post is deleted
    UNIQUE (event_id, recipient_id)
);
-- GET /v1/notifications: a recipient's notifications, newest first.
CREATE INDEX IF NOT EXISTS notifications_recipient_idx ON notifications (recipient_id, id DESC);
-- post deletion withdraws the post's mentions.
CREATE INDEX IF NOT EXISTS notifications_post_idx ON notifications (post_id) WHERE post_id IS NOT NULL;

-- POST /v1/notifications/read: everything with id <= up_to is read.
CREATE TABLE IF NOT EXISTS notification_reads (
    user_id bigint PRIMARY KEY REFERENCES users (id),
    up_to   bigint NOT NULL
);

-- Webhook endpoints. Secrets are `whsec_` + base64 of random bytes (Standard Webhooks); during a rotation the
-- previous secret signs too, until previous_secret_until.
CREATE TABLE IF NOT EXISTS webhooks (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id              bigint      NOT NULL REFERENCES users (id),
    url                   text        NOT NULL,
    events                text[]      NOT NULL,         -- notification kinds delivered: 'follow', 'mention'
    secret                text        NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    disabled_at           timestamptz,                  -- NULL = enabled
    disabled_reason       text,
    failing_since         timestamptz,                  -- first failure of the current run of failures
    created_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhooks_owner_idx ON webhooks (owner_id);

-- One row per (notification, target), written with the notification and a `delivery.<channel>` outbox event in
-- one transaction. A ping is a webhook delivery without a notification.
CREATE TABLE IF NOT EXISTS deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    notification_id  bigint      REFERENCES notifications (id),
    channel          text        NOT NULL CHECK (channel IN ('webhook', 'email')),
    webhook_id       bigint      REFERENCES webhooks (id) ON DELETE CASCADE, -- channel 'webhook'; gone with it
    recipient_id     bigint      NOT NULL REFERENCES users (id), -- the notification's recipient (webhook: its owner)
    status           text        NOT NULL DEFAULT 'PENDING'
                     CHECK (status IN ('PENDING', 'RETRYING', 'DELIVERED', 'DEAD', 'WITHDRAWN')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,                                   -- HTTP status or SMTP reply code
    last_error       text,
    response_excerpt text CHECK (octet_length(response_excerpt) <= 4096),
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((channel = 'webhook') = (webhook_id IS NOT NULL))
);
-- The notifier writes a notification's deliveries once, whatever duplicates it sees.
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_once_idx ON deliveries (notification_id, channel, coalesce(webhook_id, 0))
    WHERE notification_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS deliveries_webhook_idx ON deliveries (webhook_id, id DESC) WHERE webhook_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS deliveries_notification_idx ON deliveries (notification_id);
