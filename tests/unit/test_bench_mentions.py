"""Pure parts of bench/notify_latency.py (bench/lib/mentions.py): whom a post mentions, the receiver's records, and
the matching of received webhooks to posts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.lib import mentions
from bench.lib.mentions import Receipt
from services.notifier import mentions as notifier_mentions


@given(st.integers(0, 10_000), st.integers(1, 1000), st.integers(1, 50))
def test_a_post_names_one_or_two_distinct_recipients_of_the_range(seed: int, first: int, count: int) -> None:
    picked = mentions.targets(random.Random(seed), first, count)
    assert 1 <= len(picked) <= min(2, count)
    assert len(set(picked)) == len(picked)
    assert all(first <= u < first + count for u in picked)


def test_both_one_and_two_mentions_occur() -> None:
    rng = random.Random(1)
    assert {len(mentions.targets(rng, 101, 100)) for _ in range(100)} == {1, 2}
    with pytest.raises(ValueError, match="recipient"):
        mentions.targets(rng, 101, 0)


@given(st.integers(0, 10**6), st.lists(st.integers(1, 10**6), min_size=1, max_size=2, unique=True))
def test_the_notifier_finds_exactly_the_handles_the_body_names(n: int, users: list[int]) -> None:
    handles = [f"bench{u}" for u in users]
    assert notifier_mentions.handles(mentions.body(n, handles)) == handles


@given(st.floats(0, 1e6, allow_nan=False), st.text("0123456789abcdef-", min_size=1, max_size=36),
       st.none() | st.integers(1, 10**9), st.none() | st.integers(1, 10**9), st.booleans())
def test_a_receipt_survives_its_line(at: float, webhook_id: str, post: int | None, user: int | None,
                                     verified: bool) -> None:
    parsed = Receipt.parse(Receipt(at, webhook_id, post, user, verified).line())
    assert parsed == Receipt(round(at, 6), webhook_id, post, user, verified)


def test_latency_is_from_the_commit_to_the_first_verified_receipt_of_each_mention() -> None:
    committed = {10: (1.0, (101, 102)), 11: (2.0, (103,))}
    got = mentions.match(committed, [
        Receipt(1.050, "d1", 10, 101, True),
        Receipt(1.200, "d1", 10, 101, True),  # the same delivery again (at least once)
        Receipt(1.040, "d2", 10, 102, False),  # a bad signature is not a receipt
        Receipt(1.300, "d2", 10, 102, True),
        Receipt(2.500, "d9", 99, 101, True),  # a post nobody wrote
        Receipt(2.600, "d8", 11, 104, True),  # a recipient the post did not name
    ])
    assert sorted(round(v, 3) for v in got.latencies_ms) == [50.0, 300.0]
    assert (got.missing, got.repeats, got.unexpected, got.unverified) == (1, 1, 2, 1)
    assert (got.first_received, got.last_received) == (1.050, 1.300)


def test_a_repeat_arriving_first_in_the_records_counts_from_the_earliest() -> None:
    got = mentions.match({1: (0.0, (5,))}, [Receipt(0.3, "d", 1, 5, True), Receipt(0.1, "d", 1, 5, True)])
    assert [round(v) for v in got.latencies_ms] == [100] and got.repeats == 1


def test_nothing_received_leaves_every_mention_missing() -> None:
    got = mentions.match({1: (0.0, (5, 6)), 2: (0.1, (7,))}, [])
    assert (got.latencies_ms, got.missing, got.first_received) == ([], 3, None)


@given(st.dictionaries(st.integers(1, 50), st.tuples(st.floats(0, 100), st.sets(st.integers(1, 9), min_size=1,
                                                                                   max_size=2).map(tuple)),
                       max_size=20), st.randoms())
def test_every_mention_is_either_received_or_missing_whatever_the_order(
        committed: dict[int, tuple[float, tuple[int, ...]]], rng: random.Random) -> None:
    receipts = [Receipt(t + 0.5, f"{p}-{u}", p, u, True) for p, (t, users) in committed.items() for u in users
                if rng.random() < 0.7]
    receipts += rng.sample(receipts, len(receipts) // 3)  # repeats
    rng.shuffle(receipts)
    got = mentions.match(committed, receipts)
    assert len(got.latencies_ms) + got.missing == sum(len(users) for _, users in committed.values())
    assert all(round(v, 6) == 500.0 for v in got.latencies_ms)
    assert got.unexpected == 0 and got.repeats == len(receipts) - len(got.latencies_ms)
