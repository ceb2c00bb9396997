"""The worker's database effects in-process against a real database: reordering, races between chunks, backfill
with the floor, the cap, the once-only push/pull decision."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from services.consumer import outbox
from services.core import events as ev
from services.core.db import make_pool
from services.core.feed import BACKFILL_LIMIT
from services.worker import fanout, policy
from services.worker.fanout import Effects
from testkit.waiting import eventually
from tests.integration.worker import world

pytestmark = pytest.mark.integration

Conn = psycopg.Connection[Any]


@pytest.fixture
def pool(database_url: str) -> Iterator[ConnectionPool]:
    p = make_pool(database_url, min_size=1, max_size=3, name="test-worker")
    p.open()
    yield p
    p.close()


def effects(pool: ConnectionPool, between_chunks: Callable[[], None] = lambda: None, **kw: Any) -> Effects:
    def hook() -> bool:
        between_chunks()
        return False
    return Effects(pool, kw.pop("threshold", 10_000), should_stop=hook, **kw)


def test_post_deleted_between_chunks_of_its_fanout_leaves_no_rows(db: Conn, pool: ConnectionPool) -> None:
    author, *fans = world.add_users(db, 7)
    world.followers_in_bulk(db, author, fans)
    created = world.post(db, author)
    calls: list[int] = []

    def delete_once() -> None:
        if not calls:
            calls.append(1)
            effects(pool).handle(world.delete_post(db, created.payload["post_id"], author))

    assert effects(pool, delete_once, chunk_size=2).handle(created) == "deleted"
    assert world.problems(db) == []
    assert db.execute("SELECT count(*) FROM timelines").fetchone() == (0,)


def test_unfollow_processed_during_a_fanout_converges(db: Conn, pool: ConnectionPool) -> None:
    author, *fans = world.add_users(db, 7)
    world.followers_in_bulk(db, author, fans)
    created = world.post(db, author)
    done: list[int] = []

    def unfollow_two() -> None:  # one follower already covered by a chunk, one not yet
        if not done:
            done.append(1)
            for fan in (fans[0], fans[-1]):
                effects(pool).handle(world.unfollow(db, fan, author))

    assert effects(pool, unfollow_two, chunk_size=2).handle(created) == "pushed"
    assert world.problems(db) == []


def test_fanout_chunk_holding_the_author_lock_makes_follow_deleted_wait(db: Conn, pool: ConnectionPool,
                                                                         database_url: str) -> None:
    author, fan = world.add_users(db, 2)
    world.follow(db, fan, author)
    created = world.post(db, author)
    db.execute("UPDATE posts SET fanned_out = true WHERE id = %s", (created.payload["post_id"],))
    db.commit()
    with psycopg.connect(database_url) as chunk:  # a chunk whose snapshot still saw the follow
        chunk.execute("SELECT pg_advisory_xact_lock_shared(%s)", (author,))
        for user in (author, fan):
            chunk.execute("INSERT INTO timelines VALUES (%s, %s, %s)", (user, created.payload["post_id"], author))
        unfollowed = world.unfollow(db, fan, author)
        worker = threading.Thread(target=effects(pool).handle, args=(unfollowed,))
        worker.start()
        eventually(lambda: db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                   .fetchone() == (1,), what="follow.deleted waiting for the chunk")
        db.rollback()
        chunk.commit()
    worker.join(10)
    assert world.problems(db) == []


def test_follow_deleted_before_follow_created_leaves_nothing(db: Conn, pool: ConnectionPool) -> None:
    author, fan = world.add_users(db, 2)
    created = world.follow(db, fan, author)
    posted = world.post(db, author)
    effects(pool).handle(posted)
    deleted = world.unfollow(db, fan, author)
    assert effects(pool).handle(deleted) == "removed"
    assert effects(pool).handle(created) == "gone"
    assert world.problems(db) == []


def test_backfill_copies_the_newest_pushed_posts_and_raises_the_floor(db: Conn, pool: ConnectionPool) -> None:
    author, fan = world.add_users(db, 2)
    db.execute("INSERT INTO posts (author_id, body, fanned_out) SELECT %s, 'p', g %% 10 <> 0 "
               "FROM generate_series(1, %s) g", (author, BACKFILL_LIMIT * 2))
    db.commit()
    follow = world.follow(db, fan, author)
    assert effects(pool).handle(follow) == "backfilled"
    assert effects(pool).handle(follow) == "duplicate"
    rows = [r[0] for r in db.execute("SELECT post_id FROM timelines WHERE user_id = %s ORDER BY post_id", (fan,))]
    pushed = [r[0] for r in db.execute("SELECT id FROM posts WHERE fanned_out ORDER BY id DESC LIMIT %s",
                                       (BACKFILL_LIMIT,))]
    assert rows == sorted(pushed)
    assert db.execute("SELECT timeline_floor FROM users WHERE id = %s", (fan,)).fetchone() == (min(pushed),)
    assert world.merged(db, fan) == world.definition(db, fan)


def test_trim_keeps_the_newest_rows_and_raises_the_floor(db: Conn) -> None:
    author, fan, other = world.add_users(db, 3)
    db.execute("INSERT INTO timelines SELECT %s, g, %s FROM generate_series(1, 30) g", (fan, author))
    db.execute("INSERT INTO timelines SELECT %s, g, %s FROM generate_series(1, 5) g", (other, author))
    assert fanout.trim(db, [fan, other], cap=10) == 1
    assert db.execute("SELECT min(post_id), count(*) FROM timelines WHERE user_id = %s", (fan,)).fetchone() == (21, 10)
    floors = db.execute("SELECT timeline_floor FROM users WHERE id IN (%s, %s) ORDER BY id", (fan, other)).fetchall()
    assert floors == [(21,), (0,)]


@pytest.mark.parametrize("followers", [0, 3])  # pulled (3 followers over a threshold of 2), or pushed to no one
def test_an_authors_own_rows_are_written_and_trimmed_whatever_the_decision(db: Conn, pool: ConnectionPool,
                                                                           followers: int) -> None:
    """The worker writes the own row of every post it decides, pulled ones too (docs/adr/0157), and trims the author's
    timeline when his post is due a trim: a celebrity, or an author who follows no one, would otherwise keep every
    own row (nobody else's post is written into his timeline)."""
    author, *fans = world.add_users(db, 1 + followers)
    world.followers_in_bulk(db, author, fans)
    db.execute("WITH p AS (INSERT INTO posts (author_id, body, fanned_out) SELECT %s, 'old', %s"
               " FROM generate_series(1, 30) RETURNING id, author_id)"
               " INSERT INTO timelines SELECT author_id, id, author_id FROM p", (author, not followers))
    db.execute("SELECT setval(pg_get_serial_sequence('posts', 'id'), %s)", (10 * policy.TRIM_EVERY - 1,))
    posted = world.post(db, author)  # its id is due a trim
    assert policy.should_trim(posted.payload["post_id"])
    assert effects(pool, threshold=2, cap=10).handle(posted) == ("pulled" if followers else "pushed")
    rows = [r[0] for r in db.execute("SELECT post_id FROM timelines WHERE user_id = %s ORDER BY post_id DESC",
                                     (author,))]
    assert rows[0] == posted.payload["post_id"] and len(rows) == 10, rows
    assert db.execute("SELECT timeline_floor FROM users WHERE id = %s", (author,)).fetchone() == (rows[-1],)
    assert world.problems(db) == []  # every timeline, the author's included, equals the definition


def test_push_or_pull_is_decided_once_per_post(db: Conn, pool: ConnectionPool) -> None:
    author, fan = world.add_users(db, 2)
    world.follow(db, fan, author)
    posted = world.post(db, author)
    assert effects(pool, threshold=2).handle(posted) == "pushed"
    db.execute("UPDATE users SET follower_count = 5 WHERE id = %s", (author,))
    db.commit()
    # a second event for the same post (its own outbox row): the recorded decision wins over the new count
    again = world.commit_with_outbox(db, ev.Event.new(ev.POST_CREATED, posted.aggregate_id, posted.payload))
    assert effects(pool, threshold=2).handle(again) == "pushed"
    assert effects(pool, threshold=2).handle(world.post(db, author)) == "pulled"
    assert world.problems(db) == []


def test_a_follow_event_ahead_of_its_transaction_is_retried_not_dropped(
        db: Conn, pool: ConnectionPool, database_url: str) -> None:
    """Logical decoding may deliver an event a moment before its transaction is visible to other sessions. A
    follow.created handled in that moment must not conclude "already unfollowed" and skip the backfill for good:
    found by the chaos suite (seed 202), where such follows left posts missing from timelines."""
    author, fan = world.add_users(db, 2)
    posted = world.post(db, author)
    assert effects(pool).handle(posted) == "pushed"
    event = ev.Event.new(ev.FOLLOW_CREATED, f"{fan}:{author}", {"follower_id": fan, "followee_id": author})
    with psycopg.connect(database_url) as writer:  # the api's transaction, written but not yet visible
        writer.execute("INSERT INTO follows (follower_id, followee_id) VALUES (%s, %s)", (fan, author))
        world.insert_outbox(writer, event)
        with pytest.raises(outbox.NotVisibleYet):
            effects(pool).handle(event)
        writer.commit()
    assert effects(pool).handle(event) == "backfilled"  # the retry, once visible
    assert world.merged(db, fan) == [posted.payload["post_id"]]


def test_a_follow_event_after_a_real_unfollow_is_done_at_once(db: Conn, pool: ConnectionPool) -> None:
    author, fan = world.add_users(db, 2)
    followed = world.follow(db, fan, author)
    world.unfollow(db, fan, author)
    assert effects(pool).handle(followed) == "gone"
    assert effects(pool).handle(followed) == "duplicate"


def test_probing_by_key_turns_hash_and_merge_joins_off_for_its_statement_only(pool: ConnectionPool) -> None:
    seen = "SELECT current_setting('enable_hashjoin') AS hash, current_setting('enable_mergejoin') AS merge"
    with pool.connection() as conn, conn.transaction():
        inside = fanout.probing_by_key(conn, psycopg.sql.SQL(seen), {})
        after = conn.execute(seen).fetchall()
    assert inside == [{"hash": "off", "merge": "off"}]
    assert after == [{"hash": "on", "merge": "on"}]  # type: ignore[comparison-overlap]  # the pool's rows are dicts


def test_probing_by_key_fails_the_transaction_and_its_settings_with_it(pool: ConnectionPool) -> None:
    with pool.connection() as conn:
        with pytest.raises(psycopg.errors.DivisionByZero), conn.transaction():
            fanout.probing_by_key(conn, psycopg.sql.SQL("SELECT 1 / 0"), {})
        assert conn.execute("SELECT current_setting('enable_hashjoin')").fetchall() == [{"current_setting": "on"}]  # type: ignore[comparison-overlap]


def _pending(db: Conn, follower: int) -> list[tuple[int, int]]:
    """The follower's (followee, version) pairs in timeline_unfollows."""
    pairs = db.execute("SELECT followee_id, version FROM timeline_unfollows WHERE follower_id = %s ORDER BY 1",
                       (follower,)).fetchall()
    db.commit()
    return [(p[0], p[1]) for p in pairs]


def test_an_unfollow_is_pending_from_its_commit_until_its_batch_removes_the_rows(
        db: Conn, pool: ConnectionPool) -> None:
    """The follows delete records the pair in the same transaction (the read probes the follower's rows while it
    is there); the follow.deleted batch removes the rows and the pair in one statement (docs/adr/0150)."""
    fan, author, other = world.add_users(db, 3)
    world.follow(db, fan, author)
    world.follow(db, fan, other)
    for event in (world.post(db, author), world.post(db, other)):
        assert effects(pool).handle(event) == "pushed"
    assert _pending(db, fan) == []
    unfollowed = world.unfollow(db, fan, author)
    assert [p for p, _ in _pending(db, fan)] == [author]
    assert db.execute("SELECT count(*) FROM timelines WHERE user_id = %s AND author_id = %s",
                      (fan, author)).fetchone() == (1,)  # stale until the batch: the read skips it (api tests)
    db.commit()
    assert effects(pool).handle(unfollowed) == "removed"
    assert _pending(db, fan) == []
    assert effects(pool).handle(unfollowed) == "kept"  # again: nothing left to remove
    assert _pending(db, fan) == []
    assert world.problems(db) == []


def test_a_pair_renewed_while_its_first_batch_runs_stays_pending_for_the_second(
        db: Conn, pool: ConnectionPool, database_url: str) -> None:
    """Unfollow, follow again, and a second unfollow that commits while the first unfollow's batch is deleting
    the pair: that batch saw the follow (kept the rows, now stale again) and the pair at its first version; it
    must not clear the renewed pair, or the rows would show until the second batch."""
    fan, author = world.add_users(db, 2)
    world.follow(db, fan, author)
    assert effects(pool).handle(world.post(db, author)) == "pushed"
    first = world.unfollow(db, fan, author)
    world.follow(db, fan, author)
    [(_, version)] = _pending(db, fan)
    second_event = ev.Event.new(ev.FOLLOW_DELETED, f"{fan}:{author}", {"follower_id": fan, "followee_id": author})
    with psycopg.connect(database_url) as second:  # the second unfollow, not committed yet
        second.execute("DELETE FROM follows WHERE follower_id = %s AND followee_id = %s", (fan, author))
        world.insert_outbox(second, second_event)
        batch = threading.Thread(target=effects(pool).handle, args=(first,))
        batch.start()
        eventually(lambda: db.execute(  # on the second unfollow's transaction (its lock of the renewed pair)
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND wait_event = 'transactionid'").fetchone() == (1,), what="the first batch waiting on the renewed pair")
        db.rollback()
        second.commit()
    batch.join(10)
    assert not batch.is_alive()
    [(followee, renewed)] = _pending(db, fan)
    assert followee == author and renewed > version  # renewed, still pending
    assert db.execute("SELECT count(*) FROM timelines WHERE user_id = %s AND author_id = %s",
                      (fan, author)).fetchone() == (1,)  # kept by the first batch, which saw the follow
    db.commit()
    assert effects(pool).handle(second_event) == "removed"
    assert _pending(db, fan) == []
    assert world.problems(db) == []
