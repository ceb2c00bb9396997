"""The batch worker's pure parts: which events are real, lock order, what to do with a post, ack frames, failure
budgets, which database failures blame no message (the processor's in test_worker_processing.py)."""

from __future__ import annotations

import psycopg
import psycopg_pool
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.consumer import acks, outbox, outbox_db
from services.consumer.outcomes import Dead, Retry
from services.consumer.retry import RetryPolicy
from services.core import events as ev
from services.worker import decide


def post_created(post_id: int = 1, author_id: int = 2) -> ev.Event:
    return ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": author_id})


def follow(event_type: str, follower: int, followee: int) -> ev.Event:
    return ev.Event.new(event_type, f"{follower}:{followee}", {"follower_id": follower, "followee_id": followee})


def test_an_event_is_real_only_if_its_outbox_row_says_the_same() -> None:
    event = post_created()
    assert outbox.check(event, outbox.Known(event.type, {"post_id": 1, "author_id": 2}, False)) is None
    assert outbox.check(event, outbox.Known(event.type, {"post_id": 1, "author_id": 2, "extra": 9}, True)) is None
    assert isinstance(outbox.check(event, None), outbox.NotVisibleYet)
    assert isinstance(outbox.check(event, outbox.Known(None, None, False)), outbox.NotVisibleYet)
    forged = [outbox.Known(ev.POST_DELETED, {"post_id": 1, "author_id": 2}, False),
              outbox.Known(event.type, {"post_id": 1, "author_id": 3}, False),
              outbox.Known(event.type, {"post_id": 1}, False)]
    for known in forged:
        failure = outbox.check(event, known)
        assert isinstance(failure, outbox.Forged) and str(failure).startswith("not in outbox")


def test_locks_are_sorted_and_exclusive_wins_over_shared() -> None:
    events = [post_created(1, 9), follow(ev.FOLLOW_CREATED, 5, 3), post_created(2, 3), post_created(3, 7),
              ev.Event.new(ev.POST_DELETED, 4, {"post_id": 4, "author_id": 7})]
    assert decide.locks(events) == ([3, 7, 9], [True, True, False])
    assert decide.locks([]) == ([], [])


@given(st.lists(st.tuples(st.sampled_from(sorted(ev.FANOUT_TYPES)), st.integers(1, 20), st.integers(1, 20))))
def test_any_two_batches_take_shared_keys_in_the_same_order(specs: list[tuple[str, int, int]]) -> None:
    events = [ev.Event.new(t, 1, {"post_id": a, "author_id": b, "follower_id": a, "followee_id": b})
              for t, a, b in specs]
    keys, modes = decide.locks(events)
    assert keys == sorted(set(keys)) and len(modes) == len(keys)
    assert set(keys) == {decide.lock_author(e) for e in events}


@pytest.mark.parametrize(("row", "push", "action"), [
    (decide.PostRow(2, True, None, 5), None, decide.DELETED),
    (decide.PostRow(2, False, False, 5), False, decide.PULLED),
    (decide.PostRow(2, False, None, 10), True, decide.PUSHED),
    (decide.PostRow(2, False, True, 11), True, decide.LARGE),
])
def test_post_action(row: decide.PostRow, push: bool | None, action: str) -> None:
    assert decide.post_action(post_created(), row, push, batch_audience=10) == action


def test_a_missing_post_or_another_author_is_inconsistent_data() -> None:
    with pytest.raises(outbox.PostMissing, match="does not exist"):
        decide.post_action(post_created(), None, True, 10)
    with pytest.raises(outbox.PostMissing, match="has author 3"):
        decide.post_action(post_created(), decide.PostRow(3, False, None, 1), True, 10)


@given(st.lists(st.booleans(), max_size=30), st.integers(1, 1000))
def test_ack_frames_settle_exactly_the_done_tags(done_flags: list[bool], first: int) -> None:
    unacked = list(range(first, first + len(done_flags)))
    done = {t for t, flag in zip(unacked, done_flags, strict=True) if flag}
    frames = acks.frames(unacked, done)
    settled: set[int] = set()
    for tag, multiple in frames:
        settled |= {t for t in unacked if t <= tag} if multiple else {tag}
    assert settled == done
    assert sum(1 for _, multiple in frames if multiple) <= 1


def test_ack_frames_use_one_multiple_ack_for_a_done_prefix() -> None:
    assert acks.frames([4, 5, 6, 7], {4, 5, 6, 7}) == [(7, True)]
    assert acks.frames([4, 5, 6, 7], {4, 5, 7}) == [(5, True), (7, False)]
    assert acks.frames([4, 5, 6, 7], {6}) == [(6, False)]


def test_poison_is_dead_at_once_and_an_expected_failure_keeps_to_its_own_budget() -> None:
    retry = RetryPolicy(max_attempts=8, base=0.1, cap=1.0)
    event = post_created()
    assert retry.after_error(1, outbox.Forged(event)) == Dead(str(outbox.Forged(event)), 1)
    assert isinstance(retry.after_error(outbox.NOT_IN_OUTBOX_ATTEMPTS - 1, outbox.NotVisibleYet(event)), Retry)
    outcome = retry.after_error(outbox.NOT_IN_OUTBOX_ATTEMPTS, outbox.NotVisibleYet(event))
    assert isinstance(outcome, Dead) and outcome.reason.startswith("attempts exhausted: NotVisibleYet: not in outbox")
    assert isinstance(retry.after_error(7, RuntimeError("x")), Retry)
    assert isinstance(RetryPolicy(2, 0.1, 1.0).after_error(2, outbox.NotVisibleYet(event)), Dead)


@pytest.mark.parametrize(("error", "unavailable"), [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (psycopg_pool.PoolTimeout("couldn't get a connection after 30.00 sec"), True),
    (psycopg.errors.DeadlockDetected(), True),
    (psycopg.errors.SerializationFailure(), True),
    (psycopg.errors.AdminShutdown(), True),
    (psycopg.errors.QueryCanceled(), False),  # a statement timeout: the batch may hold its cause
])
def test_which_database_failures_blame_no_message(error: psycopg.OperationalError, unavailable: bool) -> None:
    assert outbox_db.unavailable(error) is unavailable


def test_events_are_told_apart_by_what_they_say_not_by_id() -> None:
    real = post_created()
    forged = ev.Event(real.id, ev.POST_DELETED, real.aggregate_type, real.aggregate_id, real.occurred_at,
                      real.payload)
    assert outbox.distinct([real, forged, real]) == [real, forged]
