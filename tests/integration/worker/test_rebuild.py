"""`walfeed rebuild timelines` against a running relay and worker: --check finds exactly the rows a test corrupted,
and the rebuild repairs them while posts, deletions, follows and unfollows keep flowing (docs/adr/0073)."""

from __future__ import annotations

import functools
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from services.cli import rebuild
from services.cli import timeline_diff as td
from services.core.feed import TIMELINE_CAP
from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.worker import world
from tests.integration.worker.conftest import WORKER_ENV
from tests.integration.worker.test_worker_process import _consuming

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

THRESHOLD = 6  # an author with this many followers is a celebrity: its posts are pulled
ENV = {**WORKER_ENV, "WALFEED_CELEBRITY_THRESHOLD": str(THRESHOLD), "WALFEED_RELAY_METRICS_PORT": "0"}


def _walfeed(processes: Processes, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.cli", *args], env={**processes.env, **ENV},
                          capture_output=True, text=True, timeout=300, check=False)


class Writer(threading.Thread):
    """Writes as the api would, with events, until stopped or `limit` writes, `pause` seconds apart: posts only, or
    also deletions, follows and unfollows."""

    def __init__(self, database_url: str, users: list[int], seed: int, churn: bool, limit: int | None = None,
                 pause: float = 0.0) -> None:
        super().__init__(daemon=True)
        self._url, self._users, self._rng, self._churn = database_url, users, random.Random(seed), churn
        self._limit, self._pause = limit, pause
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.writes = 0

    def run(self) -> None:
        try:
            with psycopg.connect(self._url) as conn:
                while not self.stop.is_set() and (self._limit is None or self.writes < self._limit):
                    self._one(conn)
                    self.writes += 1
                    self.stop.wait(self._pause)  # the pace of the load, not a wait for a condition
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _one(self, conn: psycopg.Connection[Any]) -> None:
        author = self._rng.choice(self._users)
        action = self._rng.random() if self._churn else 0.0
        if action < 0.6:
            world.post(conn, author)
            return
        if action < 0.75:
            row = conn.execute("SELECT id FROM posts WHERE author_id = %s AND deleted_at IS NULL ORDER BY random() "
                               "LIMIT 1", (author,)).fetchone()
            conn.rollback()
            if row:
                world.delete_post(conn, row[0], author)
            return
        other = self._rng.choice([u for u in self._users if u != author])
        exists = conn.execute("SELECT 1 FROM follows WHERE follower_id = %s AND followee_id = %s",
                              (author, other)).fetchone()
        conn.rollback()
        (world.unfollow if exists else world.follow)(conn, author, other)


@pytest.fixture
def writers(database_url: str) -> Iterator[list[Writer]]:
    started: list[Writer] = []
    yield started
    for w in started:
        w.stop.set()
        w.join(30)


def test_check_finds_exactly_the_corrupted_rows_and_rebuild_repairs_them_while_writes_flow(
        db: psycopg.Connection[Any], database_url: str, processes: Processes, writers: list[Writer]) -> None:
    # The worker's queue exists before the relay publishes: an event returned unroutable waits out a backoff of up
    # to 5 s, and a follow.created retried after the corruption below would backfill a removed row.
    worker = processes.start("worker", "worker", env=ENV)
    eventually(functools.partial(_consuming, worker), timeout=30, what="the worker consuming")
    processes.start("relay", "relay", env=ENV)
    users = world.add_users(db, 24)
    rng = random.Random(73)
    celebrity = users[0]
    for user in users[1:THRESHOLD + 2]:
        world.follow(db, user, celebrity)
    for user in users[1:]:
        for followee in rng.sample([u for u in users[1:] if u != user], 4):
            world.follow(db, user, followee)
    posts = [world.post(db, rng.choice(users)).payload for _ in range(150)]
    doomed = next(p for p in posts if p["author_id"] != celebrity)
    world.delete_post(db, doomed["post_id"], doomed["author_id"])
    eventually(lambda: not world.problems(db), timeout=60, what="timelines converged before the corruption")

    # The corruption: rows removed from three timelines, and stray rows of every kind in four others.
    removed: dict[int, list[td.Row]] = {}
    for user in users[2:5]:
        rows = db.execute("SELECT post_id, author_id FROM timelines WHERE user_id = %s ORDER BY random() LIMIT 2",
                          (user,)).fetchall()
        removed[user] = sorted(td.Row(p, a) for p, a in rows)
        db.execute("DELETE FROM timelines WHERE user_id = %s AND post_id = ANY(%s)", (user, [p for p, _ in rows]))
    follower_of_doomed = db.execute("SELECT follower_id FROM follows WHERE followee_id = %s LIMIT 1",
                                    (doomed["author_id"],)).fetchone()[0]  # type: ignore[index]
    celebrity_fan = users[1]
    pulled = db.execute("SELECT id FROM posts WHERE author_id = %s AND fanned_out = false AND deleted_at IS NULL "
                        "LIMIT 1", (celebrity,)).fetchone()[0]  # type: ignore[index]
    stranger, stranger_post, stranger_author = db.execute(
        "SELECT u.id, p.id, p.author_id FROM users u JOIN posts p ON p.author_id <> u.id "
        "WHERE u.id = ANY(%s) AND p.fanned_out AND p.deleted_at IS NULL AND NOT EXISTS "
        "(SELECT 1 FROM follows f WHERE f.follower_id = u.id AND f.followee_id = p.author_id) LIMIT 1",
        ([u for u in users[5:] if u not in (follower_of_doomed, celebrity_fan)],)).fetchone()  # type: ignore[misc]
    ghost_owner = next(u for u in users[5:] if u not in (follower_of_doomed, stranger, celebrity_fan))
    strays = {
        follower_of_doomed: td.Stray(td.Row(doomed["post_id"], doomed["author_id"]), "deleted"),
        celebrity_fan: td.Stray(td.Row(pulled, celebrity), "not pushed"),
        stranger: td.Stray(td.Row(stranger_post, stranger_author), "not followed"),
        ghost_owner: td.Stray(td.Row(10_000_000, ghost_owner), "no such post"),
    }
    for user, s in strays.items():
        db.execute("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, %s, %s)",
                   (user, s.row.post_id, s.row.author_id))
    db.commit()
    expected = {u: td.Diff(u, missing=tuple(rows)) for u, rows in removed.items()}
    for user, s in strays.items():
        expected[user] = td.Diff(user, expected.get(user, td.Diff(user)).missing, (s,))

    # --check while posts flow: exactly the corrupted users, each with exactly its rows; nothing written. Fewer posts
    # in all than a timeline keeps: a trim would raise a floor over a removed row, or drop a stray one, meanwhile.
    posting = Writer(database_url, users[1:], seed=1, churn=False, limit=TIMELINE_CAP - len(posts) - 1, pause=0.005)
    writers.append(posting)
    posting.start()
    eventually(lambda: posting.writes >= 20, timeout=30, what="posts flowing")
    check = _walfeed(processes, "rebuild", "timelines", "--all", "--check", "--batch-size", "7", "--settle", "1")
    assert check.returncode == 1, check.stderr
    reported = [line for line in check.stdout.splitlines() if line.startswith("user ")]
    floors = dict(db.execute("SELECT id, timeline_floor FROM users").fetchall())
    db.rollback()
    want = [td.describe(td.Diff(u, d.missing, d.stray, floors[u])) for u, d in sorted(expected.items())]
    assert reported == want, check.stdout + check.stderr
    assert f"{len(users)} users checked, {len(expected)} differ" in check.stdout
    assert "resume with --all --after" in check.stderr
    assert not _repaired(db, removed, strays), "--check wrote"

    # The rebuild while posts, deletions, follows and unfollows flow; then everything converges to the definition.
    churn = Writer(database_url, users[1:], seed=2, churn=True)
    writers.append(churn)
    churn.start()
    eventually(lambda: churn.writes >= 20, timeout=30, what="churn flowing")
    rebuilt = _walfeed(processes, "rebuild", "timelines", "--all", "--batch-size", "5")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert f"{len(users)} users checked" in rebuilt.stdout
    eventually(lambda: churn.writes >= 200, timeout=60, what="more writes after the rebuild")
    for w in writers:
        w.stop.set()
        w.join(30)
        assert w.error is None, repr(w.error)
    eventually(lambda: not world.problems(db), timeout=90, what="timelines equal the definition after the rebuild")
    for user, rows in removed.items():
        present = {r[0] for r in db.execute("SELECT post_id FROM timelines WHERE user_id = %s", (user,))}
        # A removed row comes back unless the churn deleted its post, or made the user unfollow its author, meanwhile.
        owed = {r[0] for r in db.execute(
            "SELECT p.id FROM posts p JOIN users u ON u.id = %s WHERE p.id = ANY(%s) AND p.deleted_at IS NULL "
            "AND p.id >= u.timeline_floor AND (p.author_id = u.id OR EXISTS (SELECT 1 FROM follows f "
            "WHERE f.follower_id = u.id AND f.followee_id = p.author_id))",
            (user, [r.post_id for r in rows]))}
        assert owed <= present, (user, rows)
    assert not any(_present(db, user, s.row.post_id) for user, s in strays.items())
    again = _walfeed(processes, "rebuild", "timelines", "--all", "--check", "--settle", "0")
    assert again.returncode == 0, again.stdout
    assert f"{len(users)} users checked, 0 differ" in again.stdout


def _present(db: psycopg.Connection[Any], user: int, post: int) -> bool:
    found = db.execute("SELECT 1 FROM timelines WHERE user_id = %s AND post_id = %s", (user, post)).fetchone()
    db.rollback()
    return found is not None


def _repaired(db: psycopg.Connection[Any], removed: dict[int, list[td.Row]],
              strays: dict[int, td.Stray]) -> list[tuple[int, td.Row]]:
    """The corrupted rows that are not as the corruption left them: a removed row back, a stray row gone."""
    return ([(u, r) for u, rows in removed.items() for r in rows if _present(db, u, r.post_id)]
            + [(u, s.row) for u, s in strays.items() if not _present(db, u, s.row.post_id)])


def test_rebuild_refuses_unknown_users_and_bad_arguments_and_writes_nothing(
        db: psycopg.Connection[Any], processes: Processes) -> None:
    users = world.add_users(db, 2)
    unknown = _walfeed(processes, "rebuild", "timelines", "--user", str(users[0]), "999999", "--check")
    assert unknown.returncode == 2
    assert "no such user: 999999" in unknown.stderr
    neither = _walfeed(processes, "rebuild", "timelines")
    assert neither.returncode == 2 and "--user" in neither.stderr
    batch = _walfeed(processes, "rebuild", "timelines", "--all", "--batch-size", "0")
    assert batch.returncode == 2 and "--batch-size must be at least 1" in batch.stderr
    mixed = _walfeed(processes, "rebuild", "timelines", "--user", str(users[0]), "--after", "3")
    assert mixed.returncode == 2 and "not both" in mixed.stderr
    fine = _walfeed(processes, "rebuild", "timelines", "--user", *map(str, users), "--check")
    assert fine.returncode == 0 and "2 users checked, 0 differ" in fine.stdout


def test_an_emptied_timeline_is_refilled_up_to_the_cap_its_floor_raised_and_a_run_resumes_after_a_user(
        db: psycopg.Connection[Any], processes: Processes) -> None:
    reader, author, other = world.add_users(db, 3)
    world.followers_in_bulk(db, author, [reader])
    posts = [r[0] for r in db.execute(
        "INSERT INTO posts (author_id, body, fanned_out) SELECT %s, 'old', true FROM generate_series(1, %s) "
        "RETURNING id", (author, 2 * TIMELINE_CAP + 10))]
    db.commit()  # decided and pushed, but no row anywhere: a timelines table emptied by hand

    check = _walfeed(processes, "rebuild", "timelines", "--user", str(reader), "--check", "--settle", "0")
    assert check.returncode == 1
    newest = sorted(posts)[-TIMELINE_CAP:]
    assert f"user {reader}: {TIMELINE_CAP} missing" in check.stdout
    assert f"floor 0 too low: more than 2 x the cap of posts above it, to raise to {newest[0]}" in check.stdout

    resumed = _walfeed(processes, "rebuild", "timelines", "--all", "--after", str(reader), "--batch-size", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert "2 users checked, 1 repaired" in resumed.stdout  # the author (its own posts); the reader comes before
    assert f"up to user {other} (resume with --all --after {other})" in resumed.stderr
    assert not db.execute("SELECT 1 FROM timelines WHERE user_id = %s", (reader,)).fetchone()
    db.rollback()
    one = _walfeed(processes, "rebuild", "timelines", "--user", str(reader))
    assert one.returncode == 0 and "1 users checked, 1 repaired" in one.stdout, one.stdout + one.stderr
    assert f"{TIMELINE_CAP} rows inserted, 0 deleted, 1 floors raised" in one.stdout
    rows = [r[0] for r in db.execute("SELECT post_id FROM timelines WHERE user_id = %s ORDER BY post_id", (reader,))]
    floor = db.execute("SELECT timeline_floor FROM users WHERE id = %s", (reader,)).fetchone()[0]  # type: ignore[index]
    db.rollback()
    assert rows == newest and floor == newest[0]
    again = _walfeed(processes, "rebuild", "timelines", "--all", "--check", "--settle", "0")
    assert again.returncode == 0 and "0 differ" in again.stdout, again.stdout


def test_an_authors_own_rows_are_expected_whatever_the_decision(db: psycopg.Connection[Any],
                                                                processes: Processes) -> None:
    """Every post has its author's row (docs/adr/0157): the own rows of a pulled and an undecided post are reported
    missing and written, the own row of a pulled post is not stray, and no follower is owed a row of either."""
    author, fan = world.add_users(db, 2)
    world.followers_in_bulk(db, author, [fan])
    pulled, undecided, kept = [r[0] for r in db.execute(
        "INSERT INTO posts (author_id, body, fanned_out) VALUES (%s, 'a', false), (%s, 'b', NULL), (%s, 'c', false) "
        "RETURNING id", (author, author, author))]
    db.execute("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, %s, %s)", (author, kept, author))
    db.commit()

    check = _walfeed(processes, "rebuild", "timelines", "--all", "--check", "--settle", "0")
    assert check.returncode == 1, check.stdout + check.stderr
    missing = td.Diff(author, (td.Row(pulled, author), td.Row(undecided, author)), (), 0)
    assert [line for line in check.stdout.splitlines() if line.startswith("user ")] == [td.describe(missing)]
    rebuilt = _walfeed(processes, "rebuild", "timelines", "--all")
    assert rebuilt.returncode == 0 and "2 rows inserted, 0 deleted" in rebuilt.stdout, rebuilt.stdout
    rows = db.execute("SELECT user_id, post_id FROM timelines ORDER BY 1, 2").fetchall()
    db.rollback()
    assert rows == [(author, pulled), (author, undecided), (author, kept)]
    again = _walfeed(processes, "rebuild", "timelines", "--all", "--check", "--settle", "0")
    assert again.returncode == 0 and "0 differ" in again.stdout, again.stdout


def _rebuild_state(database_url: str, users: list[int]) -> list[td.Diff]:
    with psycopg.connect(database_url, row_factory=dict_row, autocommit=True) as conn:
        return rebuild._diff(conn, users)


def _repair(database_url: str, diffs: list[td.Diff]) -> rebuild.Totals:
    totals = rebuild.Totals()
    with psycopg.connect(database_url, row_factory=dict_row, autocommit=True) as conn:
        rebuild._repair(conn, diffs, totals)
    return totals


def test_a_repair_writes_only_what_is_still_wrong_when_it_writes(
        db: psycopg.Connection[Any], database_url: str) -> None:
    """A diff read before a deletion or a follow is stale by the time it is repaired: the post deleted since is not
    inserted, the row whose author the user follows since is not deleted (each write re-checks under the locks)."""
    reader, author = world.add_users(db, 2)
    post = _pushed(db, author)
    db.execute("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, %s, %s)", (reader, post, author))
    db.commit()  # a row of an author the reader does not follow
    diffs = _rebuild_state(database_url, [reader, author])
    assert [d.stray for d in diffs] == [(td.Stray(td.Row(post, author), "not followed", author),), ()]
    world.follow(db, reader, author)
    assert _repair(database_url, diffs).deleted == 0
    assert _present(db, reader, post)

    gone = _pushed(db, author)
    diffs = _rebuild_state(database_url, [reader])
    assert diffs[0].missing == (td.Row(gone, author),)
    db.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (gone,))
    db.execute("DELETE FROM timelines WHERE post_id = %s", (gone,))
    db.commit()  # deleted, and its rows removed, as the api and a worker would
    assert _repair(database_url, diffs).inserted == 0
    assert not _present(db, reader, gone)


def _pushed(db: psycopg.Connection[Any], author: int) -> int:
    """A post decided pushed, with its author's own row (as a worker leaves it)."""
    post: int = db.execute("INSERT INTO posts (author_id, body, fanned_out) VALUES (%s, 'p', true) RETURNING id",
                           (author,)).fetchone()[0]  # type: ignore[index]
    db.execute("INSERT INTO timelines (user_id, post_id, author_id) VALUES (%s, %s, %s)", (author, post, author))
    db.commit()
    return post


def test_a_repair_waits_for_a_worker_that_holds_the_authors_lock(
        db: psycopg.Connection[Any], database_url: str) -> None:
    """The worker's post.deleted and follow.* hold the author's advisory lock exclusively (ADR 0022): a repair of
    that author's rows waits for their commit and then sees what they committed (docs/adr/0073)."""
    reader, author = world.add_users(db, 2)
    world.followers_in_bulk(db, author, [reader])
    post = _pushed(db, author)
    diffs = _rebuild_state(database_url, [reader])
    assert diffs[0].missing == (td.Row(post, author),)

    done: list[rebuild.Totals] = []
    repairing = threading.Thread(target=lambda: done.append(_repair(database_url, diffs)))
    with psycopg.connect(database_url) as worker:
        worker.execute("SELECT pg_advisory_xact_lock(%s)", (author,))  # as a worker's post.deleted batch
        worker.execute("UPDATE posts SET deleted_at = now() WHERE id = %s", (post,))  # (the api's commit, here)
        repairing.start()
        eventually(lambda: db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s", (author,)
        ).fetchone() == (1,), timeout=30, what="the repair waiting for the author's lock")
        db.rollback()
        assert not done
        worker.commit()
    repairing.join(30)
    assert done and done[0].inserted == 0  # it saw the deletion committed while it waited
    assert db.execute("SELECT count(*) FROM timelines WHERE user_id = %s", (reader,)).fetchone() == (0,)


def test_wrong_pulled_flags_are_reported_and_repaired(db: psycopg.Connection[Any], processes: Processes) -> None:
    """follows.pulled (db/init/015) is kept by triggers; one set by hand either way is a difference --check reports
    and the rebuild sets right, as it does rows."""
    reader, celebrity, other = world.add_users(db, 3)
    world.followers_in_bulk(db, celebrity, [reader])
    world.followers_in_bulk(db, other, [reader])
    db.execute("INSERT INTO posts (author_id, body, fanned_out) VALUES (%s, 'pulled', false)", (celebrity,))
    db.commit()
    flags = "SELECT followee_id, pulled FROM follows WHERE follower_id = %s ORDER BY followee_id"
    assert db.execute(flags, (reader,)).fetchall() == [(celebrity, True), (other, False)]  # the triggers' work
    db.execute("UPDATE follows SET pulled = NOT pulled WHERE follower_id = %s", (reader,))
    db.commit()

    check = _walfeed(processes, "rebuild", "timelines", "--user", str(reader), "--check", "--settle", "0")
    assert check.returncode == 1
    assert f"user {reader}: follows.pulled wrong for followees {celebrity}, {other}" in check.stdout
    fixed = _walfeed(processes, "rebuild", "timelines", "--user", str(reader))
    assert fixed.returncode == 0 and "2 pulled flags set" in fixed.stdout, fixed.stdout + fixed.stderr
    assert db.execute(flags, (reader,)).fetchall() == [(celebrity, True), (other, False)]
