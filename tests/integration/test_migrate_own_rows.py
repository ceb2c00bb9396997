"""Migration 025 on a database migrated before it: the own rows the api did not write then (posts not pushed: not
decided yet, or a celebrity's pulled posts) are written once, for alive posts at or above their author's floor
(docs/adr/0157); nothing else changes, and the home read then shows the author's posts."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from services.api import sql as api_sql
from services.core.migrate import apply_schema, migration_files
from testkit.infra import Infra
from tests.integration import migrated

pytestmark = pytest.mark.integration

MIGRATION = "025_own_timeline_rows.sql"
# Author 1 (floor 0): a pushed post with its own row (the worker wrote it), a pulled and an undecided one without,
# a deleted one. Author 2 (floor at his third post): posts below and above it, pulled. User 3 follows 1.
POSTS = """
INSERT INTO users (handle, token_hash) SELECT 'u' || i, sha256(('t' || i)::bytea) FROM generate_series(1, 3) i;
INSERT INTO follows (follower_id, followee_id) VALUES (3, 1);
INSERT INTO posts (author_id, body, fanned_out, deleted_at) VALUES
    (1, 'pushed', true, NULL), (1, 'pulled', false, NULL), (1, 'undecided', NULL, NULL), (1, 'deleted', false, now()),
    (2, 'below', false, NULL), (2, 'below', false, NULL), (2, 'at', false, NULL), (2, 'above', false, NULL);
INSERT INTO timelines (user_id, post_id, author_id) SELECT u, id, 1 FROM posts, (VALUES (1), (3)) v(u)
    WHERE body = 'pushed';
UPDATE users SET timeline_floor = (SELECT id FROM posts WHERE body = 'at') WHERE id = 2;
"""


@pytest.fixture
def url(infra: Infra) -> Iterator[str]:
    with migrated.empty_database(infra) as url:
        yield url


def test_the_missing_own_rows_are_written_once_at_or_above_the_floor(url: str) -> None:
    migrated.before(url, MIGRATION)
    with psycopg.connect(url) as conn:
        conn.execute(POSTS)
    assert apply_schema(url) == [path.name for path in migration_files() if path.name >= MIGRATION]
    rows = """SELECT t.user_id, p.body FROM timelines t JOIN posts p ON p.id = t.post_id
              ORDER BY t.user_id, p.id"""
    with psycopg.connect(url, autocommit=True) as conn:
        after = conn.execute(rows).fetchall()
        assert after == [(1, "pushed"), (1, "pulled"), (1, "undecided"), (2, "at"), (2, "above"), (3, "pushed")]
        assert apply_schema(url) == []
        conn.execute(next(p for p in migration_files() if p.name == MIGRATION).read_text())  # again: nothing more
        assert conn.execute(rows).fetchall() == after
        page = conn.execute(api_sql.HOME_ABOVE_FLOOR["newest"],
                            {"user": 1, "after": 0, "before": 2**63 - 1, "limit": 10}).fetchall()
        assert [r[5] for r in page[1:]] == ["undecided", "pulled", "pushed"]  # the reader's row first, then bodies
