"""The slowest legal read stays within WALFEED_API_STATEMENT_TIMEOUT (the default: a statement over it would be a
503, these are 200s), a read over it is a 503 problem, and following is capped at MAX_FOLLOWING.

The worst legal pages (docs/adr/0096): the reader follows the cap, every followed account has more posts than the
largest page, and either every one of them is a celebrity (their posts pulled at read time, above the floor) or all
their posts are below the reader's floor (a trimmed or never backfilled timeline: from posts + follows); each
reached by the first page, a forged cursor, and paging towards newer posts from the very first post. Each descends
an index once per followed account, then reads a bounded page: tens of milliseconds, not seconds.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from services.api.app import create_app
from services.api.config import ApiSettings
from services.core.feed import MAX_FOLLOWING
from services.core.settings import Settings
from tests.integration.api.conftest import TEST_API, SignUp, serve

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Db = psycopg.Connection[dict[str, Any]]
PAGE = 100  # the largest page (routes.Limit)

SCENARIO = """
INSERT INTO users (handle, token_hash, follower_count)
    SELECT 'f' || i, sha256(('f' || i)::bytea), 1 FROM generate_series(1, %(cap)s) i;
INSERT INTO follows (follower_id, followee_id) SELECT %(reader)s, id FROM users WHERE handle LIKE 'f%%';
UPDATE users SET following_count = %(cap)s WHERE id = %(reader)s;
INSERT INTO posts (author_id, body) SELECT u.id, 'post ' || g FROM users u, generate_series(1, %(per)s) g
    WHERE u.handle LIKE 'f%%';
"""


def forged_cursor(last_id: int, direction: str = "") -> str:
    raw = f'{{"v":1,"k":"home","id":{last_id}{direction}}}'.encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


NEWER = ',"d":"newer"'  # from the first post on, towards newer ones


@pytest.fixture
def at_the_cap(client: httpx.Client, signup: SignUp, db: Db) -> dict[str, str]:
    reader = signup("reader")
    psycopg.ClientCursor(db).execute(SCENARIO, {"cap": MAX_FOLLOWING, "reader": reader.id,
                                                "per": PAGE + 1})
    db.execute("ANALYZE")  # no VACUUM: index-only scans still visit the heap (fresh rows, before autovacuum)
    return reader.auth


def timed_read(client: httpx.Client, auth: dict[str, str], params: dict[str, Any]) -> float:
    started = time.perf_counter()
    reply = client.get("/v1/timeline", params={"limit": PAGE, **params}, headers=auth)
    elapsed = time.perf_counter() - started
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["items"]) == PAGE
    return elapsed


def test_following_more_than_the_cap_is_409_and_writes_nothing(client: httpx.Client, signup: SignUp,
                                                                at_the_cap: dict[str, str], db: Db) -> None:
    one_more = signup("one_more")
    reply = client.put(f"/v1/following/{one_more.id}", headers=at_the_cap)
    assert reply.status_code == 409 and reply.json()["type"].endswith("/following-limit"), reply.text
    assert db.execute("SELECT count(*) AS n FROM follows WHERE followee_id = %s", (one_more.id,)).fetchone() == {"n": 0}
    assert db.execute("SELECT count(*) AS n FROM outbox").fetchone() == {"n": 0}
    first = db.execute("SELECT id FROM users WHERE handle = 'f1'").fetchone()
    assert first is not None
    assert client.delete(f"/v1/following/{first['id']}", headers=at_the_cap).status_code == 204
    assert client.put(f"/v1/following/{one_more.id}", headers=at_the_cap).status_code == 204  # room again
    assert client.put(f"/v1/following/{one_more.id}", headers=at_the_cap).status_code == 204  # idempotent at the cap


def test_the_slowest_legal_reads_stay_within_the_statement_timeout(client: httpx.Client, db: Db,
                                                                   at_the_cap: dict[str, str]) -> None:
    bound = ApiSettings().statement_timeout  # the default, which the api fixture runs with (each statement)
    top = db.execute("SELECT max(id) AS id FROM posts").fetchone()
    assert top is not None
    db.execute("UPDATE posts SET fanned_out = false")  # 5,000 celebrities followed: every post pulled at read time
    db.execute("VACUUM ANALYZE posts, follows")
    assert db.execute("SELECT count(*) AS n FROM follows WHERE pulled").fetchone() == {"n": MAX_FOLLOWING}
    times = {"pulled, first page": timed_read(client, at_the_cap, {}),
             "pulled, forged cursor": timed_read(client, at_the_cap, {"cursor": forged_cursor(top["id"] // 2)})}
    db.execute("UPDATE users SET timeline_floor = %s WHERE handle = 'reader'", (top["id"] + 1,))
    times |= {"below the floor, first page": timed_read(client, at_the_cap, {}),
              "below the floor, forged cursor": timed_read(client, at_the_cap,
                                                           {"cursor": forged_cursor(top["id"] // 2)}),
              "below the floor, newer from the start": timed_read(client, at_the_cap,
                                                                  {"cursor": forged_cursor(0, NEWER)})}
    # Each statement ran under the timeout (else a 503, not the 200 timed_read asserts); the whole pages too:
    print("slowest reads (ms): " + ", ".join(f"{k} {v * 1000:.1f}" for k, v in times.items())
          + f"; statement timeout {bound} s")


@pytest.fixture
def impatient(settings: Settings) -> Iterator[httpx.Client]:
    api = dataclasses.replace(TEST_API, pool_max=2, statement_timeout=0.001)
    with serve(create_app(settings, api)) as url, httpx.Client(base_url=url, timeout=30) as c:
        yield c


def test_a_read_over_the_statement_timeout_is_a_503_problem(impatient: httpx.Client, at_the_cap: dict[str, str],
                                                            db: Db) -> None:
    db.execute("UPDATE users SET timeline_floor = 2147483647 WHERE handle = 'reader'")  # a 5,000-author read
    reply = impatient.get("/v1/timeline", params={"limit": PAGE}, headers=at_the_cap)
    assert reply.status_code == 503 and reply.headers["retry-after"] == "1", reply.text
    assert reply.json()["type"].endswith("/database-timeout")
