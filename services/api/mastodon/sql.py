"""The statements of the Mastodon layer and its OAuth, as named constants with bound parameters only. The posts,
follows, home timeline and notification writes are the api's own (services/api/sql.py)."""

from typing import Final, LiteralString

from psycopg import sql

# OAuth (db/init/021_mastodon.sql).
CREATE_APP: Final = """
INSERT INTO oauth_apps (client_id, secret_hash, name, website, redirect_uris, scopes)
VALUES (%(client_id)s, %(secret_hash)s, %(name)s, %(website)s, %(redirect_uris)s, %(scopes)s)
RETURNING id, client_id, name, website, redirect_uris, scopes
"""
APP: Final = """
SELECT id, client_id, secret_hash, name, website, redirect_uris, scopes FROM oauth_apps WHERE client_id = %(client_id)s
"""
CREDENTIALS: Final = "SELECT id, password_hash FROM users WHERE handle = %(handle)s"
CREATE_CODE: Final = """
INSERT INTO oauth_codes (code_hash, app_id, user_id, redirect_uri, scopes, challenge, challenge_method, expires_at)
VALUES (%(code_hash)s, %(app)s, %(user)s, %(redirect_uri)s, %(scopes)s, %(challenge)s, %(method)s,
        now() + make_interval(secs => %(seconds)s))
"""
# A code is used once: the exchange deletes it, and only an unexpired one counts.
TAKE_CODE: Final = """
DELETE FROM oauth_codes WHERE code_hash = %(code_hash)s
RETURNING app_id, user_id, redirect_uri, scopes, challenge, challenge_method, expires_at > now() AS fresh
"""
CREATE_TOKEN: Final = """
INSERT INTO oauth_tokens (token_hash, app_id, user_id, scopes) VALUES (%(hash)s, %(app)s, %(user)s, %(scopes)s)
RETURNING created_at
"""
# Revoked, and every api process told to forget the user's cached tokens (revocations.CHANNEL, as SET_TOKEN).
REVOKE_TOKEN: Final = """
WITH revoked AS (
    UPDATE oauth_tokens SET revoked_at = now()
    WHERE token_hash = %(hash)s AND app_id = %(app)s AND revoked_at IS NULL
    RETURNING user_id
)
SELECT user_id, pg_notify('walfeed_token_changed', user_id::text) FROM revoked WHERE user_id IS NOT NULL
"""
# Who a bearer token is and what it may do: an api token (POST /v1/users: every scope) or an OAuth access token.
GRANT: Final = """
SELECT id AS user_id, token_hash, NULL::text[] AS scopes FROM users WHERE token_hash = %(hash)s
UNION ALL
SELECT user_id, token_hash, scopes FROM oauth_tokens WHERE token_hash = %(hash)s AND revoked_at IS NULL
LIMIT 1
"""

# Accounts. statuses_count is counted up to STATUSES_CAP (an index range of bounded length, as UNREAD_COUNT).
_ACCOUNT_COLUMNS: Final = """
u.id, u.handle, u.follower_count, u.following_count, u.created_at,
(SELECT count(*) FROM (SELECT 1 FROM posts p WHERE p.author_id = u.id AND p.deleted_at IS NULL
                       LIMIT %(cap)s) c) AS statuses_count
"""
ACCOUNTS: Final = "SELECT " + _ACCOUNT_COLUMNS + " FROM users u WHERE u.id = ANY(%(ids)s)"
ACCOUNT_BY_HANDLE: Final = "SELECT " + _ACCOUNT_COLUMNS + " FROM users u WHERE u.handle = %(handle)s"
# Search: the exact handle first, then handles starting with the query (users_handle_key serves the range).
SEARCH_ACCOUNTS: Final = "SELECT " + _ACCOUNT_COLUMNS + """ FROM users u
WHERE u.handle >= %(prefix)s AND u.handle < %(prefix)s || '~'
ORDER BY u.handle <> %(prefix)s, u.handle LIMIT %(limit)s
"""
RELATIONSHIPS: Final = """
SELECT t.id,
       EXISTS (SELECT 1 FROM follows WHERE follower_id = %(me)s AND followee_id = t.id) AS following,
       EXISTS (SELECT 1 FROM follows WHERE follower_id = t.id AND followee_id = %(me)s) AS followed_by
FROM unnest(%(ids)s::bigint[]) AS t(id)
"""
POSTS: Final = """
SELECT id, author_id, body, created_at FROM posts WHERE id = ANY(%(ids)s) AND deleted_at IS NULL
"""
# A post as the stream sees it: deleted ones too (a delete event follows), absent ones not yet visible (the relay
# can publish a commit it decoded a moment before the commit is visible to other sessions).
POST_FOR_STREAM: Final = """
SELECT id, author_id, body, created_at, deleted_at IS NOT NULL AS deleted FROM posts WHERE id = %(id)s
"""
COUNTS: Final = """
SELECT (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'users'::regclass) AS users,
       (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'posts'::regclass) AS statuses
"""

# Ranges in either order, after < id < before (as services/api/sql.py's home statements).
_ORDERS: Final = {"newest": sql.SQL("DESC"), "oldest": sql.SQL("ASC")}


def _ordered(template: LiteralString) -> dict[str, sql.Composed]:
    return {name: sql.SQL(template).format(order=order) for name, order in _ORDERS.items()}


AUTHOR_POSTS: Final = _ordered("""
SELECT id, author_id, body, created_at FROM posts
WHERE author_id = %(author)s AND deleted_at IS NULL AND id > %(after)s AND id < %(before)s
ORDER BY id {order} LIMIT %(limit)s
""")
# The caller's notifications of the kinds asked (withdrawn ones left out), notifications_recipient_idx.
NOTIFICATIONS: Final = _ordered("""
SELECT id, kind, actor_id, post_id, created_at FROM notifications
WHERE recipient_id = %(user)s AND withdrawn_at IS NULL AND kind = ANY(%(kinds)s)
  AND id > %(after)s AND id < %(before)s
ORDER BY id {order} LIMIT %(limit)s
""")
NOTIFICATION: Final = """
SELECT id, kind, actor_id, post_id, created_at FROM notifications
WHERE id = %(id)s AND recipient_id = %(user)s AND withdrawn_at IS NULL
"""
FOLLOWEES: Final = "SELECT followee_id FROM follows WHERE follower_id = %(user)s"
