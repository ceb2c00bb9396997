"""The confirmable position: only commit positions, only behind broker confirms, never backwards."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_relay.positions import PositionError, PositionTracker


def test_a_transaction_is_confirmable_only_when_all_its_events_are_confirmed() -> None:
    t = PositionTracker(100)
    t.begin()
    a, b = t.published_many(1), t.published_many(1)
    t.commit(200)
    assert t.confirmable == 100
    t.confirmed_many([b])
    assert t.confirmable == 100
    t.confirmed_many([a])
    assert t.confirmable == 200
    assert t.in_flight == 0 and t.idle


def test_events_confirmed_before_the_commit_arrives_wait_for_the_commit() -> None:
    t = PositionTracker(0)
    t.begin()
    t.confirmed_many([t.published_many(1)])
    assert t.confirmable == 0
    t.commit(50)
    assert t.confirmable == 50


def test_a_later_transaction_confirmed_first_does_not_move_the_position_past_an_earlier_one() -> None:
    t = PositionTracker(0)
    t.begin()
    first = t.published_many(1)
    t.commit(10)
    t.begin()
    second = t.published_many(1)
    t.commit(20)
    t.confirmed_many([second])
    assert t.confirmable == 0
    t.confirmed_many([first])
    assert t.confirmable == 20


def test_transactions_without_events_advance_the_position_when_nothing_waits() -> None:
    t = PositionTracker(5)
    for lsn in (10, 20, 30):
        t.begin()
        t.commit(lsn)
    assert t.confirmable == 30


def test_empty_transactions_behind_a_pending_one_wait_then_merge() -> None:
    t = PositionTracker(0)
    t.begin()
    seq = t.published_many(1)
    t.commit(10)
    for lsn in range(11, 1000):
        t.begin()
        t.commit(lsn)
    assert t.confirmable == 0
    assert len(t._waiting) == 1  # bounded: empty transactions merged into the pending one
    t.confirmed_many([seq])
    assert t.confirmable == 999


def test_server_idle_position_only_when_nothing_is_open_or_in_flight() -> None:
    t = PositionTracker(0)
    t.server_idle_at(100)
    assert t.confirmable == 100
    t.begin()
    t.server_idle_at(200)
    assert t.confirmable == 100
    seq = t.published_many(1)
    t.commit(150)
    t.server_idle_at(300)
    assert t.confirmable == 100
    t.confirmed_many([seq])
    t.server_idle_at(300)
    assert t.confirmable == 300


def test_never_backwards() -> None:
    t = PositionTracker(500)
    t.begin()
    t.commit(400)  # a resent transaction from before the start position
    t.server_idle_at(100)
    assert t.confirmable == 500


def test_protocol_errors_are_loud() -> None:
    t = PositionTracker(0)
    with pytest.raises(PositionError):
        t.commit(1)
    with pytest.raises(PositionError):
        t.published_many(1)
    with pytest.raises(PositionError):
        t.confirmed_many([42])
    t.begin()
    with pytest.raises(PositionError):
        t.begin()


@given(st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=30), st.randoms())
def test_confirmable_is_always_a_fully_confirmed_commit(sizes: list[int], rnd: random.Random) -> None:
    """Random transactions, confirmations in random order: the answer is always the highest commit position
    whose transaction and every earlier one are fully confirmed, and it never decreases."""
    t = PositionTracker(0)
    txn_of: dict[int, int] = {}
    commits: list[int] = []
    for i, size in enumerate(sizes):
        t.begin()
        for _ in range(size):
            txn_of[t.published_many(1)] = i
        commits.append((i + 1) * 10)
        t.commit(commits[-1])
    pending = list(txn_of)
    rnd.shuffle(pending)
    unconfirmed = {i: sum(1 for s in txn_of if txn_of[s] == i) for i in range(len(sizes))}
    previous = t.confirmable
    for seq in pending:
        t.confirmed_many([seq])
        unconfirmed[txn_of[seq]] -= 1
        done = 0
        for i in range(len(sizes)):
            if unconfirmed[i]:
                break
            done = commits[i]
        assert t.confirmable == done
        assert t.confirmable >= previous
        previous = t.confirmable
    assert t.confirmable == commits[-1]


def test_events_and_confirmations_in_batches() -> None:
    t = PositionTracker(0, first_seq=1 << 40)
    t.begin()
    first = t.published_many(3)
    assert first == 1 << 40 and t.next_seq == first + 3 and t.in_flight == 3
    t.commit(100)
    t.begin()
    second = t.published_many(2)
    t.commit(200)
    t.confirmed_many([second, second + 1])
    assert t.confirmable == 0  # the first transaction is still unconfirmed: never ahead of it
    t.confirmed_many([first + 2, first])
    assert t.confirmable == 0
    t.confirmed_many([first + 1])
    assert t.confirmable == 200 and t.in_flight == 0
    with pytest.raises(PositionError):
        t.confirmed_many([first])
