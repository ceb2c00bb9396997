-- walfeed schema. Applied once per database by `walfeed migrate` (tracked in schema_migrations).

CREATE TABLE users (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    handle          text        NOT NULL UNIQUE CHECK (handle ~ '^[a-z0-9_]{1,30}$'),
    token_hash      bytea       NOT NULL UNIQUE,          -- sha256 of the bearer token; the token is never stored
    follower_count  bigint      NOT NULL DEFAULT 0 CHECK (follower_count >= 0),
    following_count bigint      NOT NULL DEFAULT 0 CHECK (following_count >= 0),
    -- Timelines are capped (services/core/feed.py TIMELINE_CAP). Rows of posts with id < timeline_floor may have
    -- been trimmed from this user's materialized timeline: reads below the floor come from posts + follows.
    timeline_floor  bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE follows (
    follower_id bigint      NOT NULL REFERENCES users (id),
    followee_id bigint      NOT NULL REFERENCES users (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (follower_id, followee_id),
    CHECK (follower_id <> followee_id)
);
-- fan-out reads "who follows X": the primary key serves "whom does X follow".
CREATE INDEX follows_followee_idx ON follows (followee_id, follower_id);

CREATE TABLE posts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    author_id       bigint      NOT NULL REFERENCES users (id),
    body            text        NOT NULL CHECK (char_length(body) BETWEEN 1 AND 500),
    created_at      timestamptz NOT NULL DEFAULT now(),
    deleted_at      timestamptz,
    -- The fan-out decision, recorded once per post by the worker:
    --   NULL  = not decided yet (post.created not processed),
    --   true  = pushed into followers' timelines,
    --   false = pulled: the author was a celebrity, reads merge the post in.
    fanned_out      boolean,
    idempotency_key text,
    request_hash    bytea,
    UNIQUE (author_id, idempotency_key)
);
CREATE INDEX posts_author_idx ON posts (author_id, id DESC) WHERE deleted_at IS NULL;
-- read-time merge: the posts that were not fanned out, per author, newest first.
CREATE INDEX posts_pulled_idx ON posts (author_id, id DESC) WHERE fanned_out = false AND deleted_at IS NULL;

-- Materialized home timelines (fan-out on write). The sort key is the post id, so inserting twice changes nothing.
-- 012_timelines_partitioned.sql replaces this table by one hash-partitioned by user_id (docs/adr/0093).
CREATE TABLE timelines (
    user_id   bigint NOT NULL,
    post_id   bigint NOT NULL,
    author_id bigint NOT NULL,
    PRIMARY KEY (user_id, post_id)
);
-- unfollow removes one author's posts from one user's timeline.
CREATE INDEX timelines_user_author_idx ON timelines (user_id, author_id);
-- post deletion removes one post from every timeline.
CREATE INDEX timelines_post_idx ON timelines (post_id);

-- Transactional outbox, column names of Debezium's outbox event router.
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY,
    aggregatetype text        NOT NULL,
    aggregateid   text        NOT NULL,
    type          text        NOT NULL,
    payload       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Consumer-side idempotency for effects that are not naturally idempotent, written in the same transaction.
CREATE TABLE processed_events (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
