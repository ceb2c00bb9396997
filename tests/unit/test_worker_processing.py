"""The processor without a database (testkit/effects.py FakeEffects): one result per message in order, a
failing message isolated from its batch, attempts counted from the message, a large post handed on and settled by
its continuation, a stop returning the message rather than failing it."""

from __future__ import annotations

import pytest

from services.consumer import headers, outcomes
from services.consumer.messages import Message
from services.consumer.outcomes import Dead, Retry
from services.consumer.processor import Processor
from services.consumer.retry import RetryPolicy
from services.core import events as ev
from testkit.effects import FakeEffects


def post_created(post_id: int = 1, author_id: int = 2) -> ev.Event:
    return ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": author_id})


def message(event: ev.Event, attempt: int | None = None) -> Message:
    return Message(ev.encode(event), None if attempt is None else {headers.ATTEMPT: attempt})


@pytest.fixture
def effects() -> FakeEffects:
    return FakeEffects(large_posts={99})


@pytest.fixture
def processor(effects: FakeEffects) -> Processor:
    return Processor(effects.apply, RetryPolicy(3, 0.1, 1.0), large=effects.fan_out_large)


def test_a_failing_message_is_isolated_and_its_neighbours_are_acked(effects: FakeEffects,
                                                                      processor: Processor) -> None:
    good, bad, other = post_created(1), post_created(2), post_created(3)
    effects.failing[bad.id] = None
    results = processor.batch([message(good), message(bad), message(other), Message(b"{not json", None)])
    assert [type(r.outcome) for r in results] == [outcomes.Ack, Retry, outcomes.Ack, Dead]
    assert effects.calls == [[good.id, bad.id, other.id], [good.id], [bad.id], [other.id]]
    assert effects.commits == [[good.id], [other.id]]
    assert results[1].label == "failed" and results[3].event_type == "malformed"


def test_a_failing_batch_of_one_is_not_applied_a_second_time(effects: FakeEffects, processor: Processor) -> None:
    bad = post_created()
    effects.failing[bad.id] = None
    result, = processor.batch([message(bad)])
    assert isinstance(result.outcome, Retry) and effects.calls == [[bad.id]]


def test_results_keep_the_order_of_the_messages_with_undecodable_ones_dead_in_their_place(
        processor: Processor) -> None:
    events = [post_created(1), post_created(2)]
    unknown = ev.encode(ev.Event.new(ev.POST_CREATED, 3, {"post_id": 3, "author_id": 2})).replace(
        b'"post.created"', b'"post.edited"')
    results = processor.batch([Message(b"", None), message(events[0]), Message(unknown, None), message(events[1])])
    assert [r.event_id for r in results] == [None, str(events[0].id), None, str(events[1].id)]
    assert [type(r.outcome) for r in results] == [Dead, outcomes.Ack, Dead, outcomes.Ack]


def test_a_retry_counts_from_the_messages_attempt_and_the_last_one_is_dead(effects: FakeEffects,
                                                                           processor: Processor) -> None:
    bad = post_created()
    effects.failing[bad.id] = None
    retry = processor.batch([message(bad, attempt=2)])[0].outcome
    assert isinstance(retry, Retry) and retry.attempt == 3
    dead = processor.batch([message(bad, attempt=3)])[0].outcome
    assert isinstance(dead, Dead) and dead.attempts == 3 and dead.reason.startswith("attempts exhausted")


def test_a_large_post_is_handed_on_and_its_continuation_settles_it(effects: FakeEffects,
                                                                   processor: Processor) -> None:
    large = post_created(99)
    result, = processor.batch([message(large)])
    assert result.outcome == outcomes.LARGE and result.event == large and effects.fanned_out == []
    assert processor.large(message(large), large).outcome == outcomes.ACK and effects.fanned_out == [large.id]


def test_a_large_fan_out_interrupted_by_a_stop_returns_its_message_without_spending_an_attempt(
        effects: FakeEffects, processor: Processor) -> None:
    large = post_created(99)
    effects.should_stop = lambda: True
    result = processor.large(message(large, attempt=3), large)
    assert result.outcome == outcomes.REQUEUE and result.label == "interrupted"


def test_a_large_fan_out_that_raises_is_retried_with_the_next_attempt() -> None:
    def broken(event: ev.Event) -> str:
        raise RuntimeError("a bug in the chunk loop")

    large = post_created(99)
    processor = Processor(FakeEffects(large_posts={99}).apply, RetryPolicy(3, 0.1, 1.0), large=broken)
    result = processor.large(message(large, attempt=1), large)
    assert isinstance(result.outcome, Retry) and result.outcome.attempt == 2
    assert result.outcome.reason == "RuntimeError: a bug in the chunk loop"


def test_a_duplicate_message_in_one_batch_gets_the_same_outcome(processor: Processor) -> None:
    event = post_created()
    results = processor.batch([message(event)] * 2)
    assert [r.outcome for r in results] == [outcomes.ACK, outcomes.ACK]


def test_a_database_outage_retries_every_message_without_spending_attempts(effects: FakeEffects) -> None:
    events = [post_created(1), post_created(2)]
    effects.unavailable = True
    processor = Processor(effects.apply, RetryPolicy(2, 0.1, 1.0), large=effects.fan_out_large)
    results = processor.batch([message(e, attempt=2) for e in events])
    assert effects.calls == [[e.id for e in events]]  # not isolated one by one: no message is to blame
    assert all(isinstance(r.outcome, Retry) and r.outcome.attempt == 2 for r in results)  # attempt 2 of 2: not dead
