"""The steps of one delivery (services/delivery/processing.py) with in-memory adapters."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from services.consumer import headers, outcomes
from services.core import events as ev
from services.core.topology import DELIVERY_RETRY_DELAYS_MS
from services.delivery import budget, policy, processing, route
from services.delivery.payload import Delivery

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
RETRY = policy.Settings(max_attempts=3, base=30.0, cap=1800.0, retry_after_max=86_400.0, disable_after=1e9)


@dataclass
class FakeStore:
    rows: dict[int, Delivery] = field(default_factory=dict)
    records: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    over_limit_for: float = 0.0  # seconds the target's rate limit holds tries back
    limited: set[int] | None = None  # with over_limit_for: only these deliveries are over the limit (None: all)
    fail_load: Exception | None = None
    fail_load_of: int | None = None  # fail_load only when this delivery is among those loaded
    fail_record: Exception | None = None
    loads: list[list[int]] = field(default_factory=list)  # the ids of each load_many call
    record_calls: int = 0
    host_hits: dict[str, int] = field(default_factory=dict)  # tries asked per host in the (one) window

    def load_many(self, delivery_ids: Sequence[int], rate: float, burst: int) -> dict[int, tuple[Delivery, bool]]:
        self.loads.append(list(delivery_ids))
        if self.fail_load is not None and (self.fail_load_of is None or self.fail_load_of in delivery_ids):
            raise self.fail_load
        return {i: (self.rows[i], self.over_limit_for == 0 or (self.limited is not None and i not in self.limited))
                for i in delivery_ids if i in self.rows}

    def record_many(self, records: Sequence[processing.Record]) -> None:
        self.record_calls += 1
        if self.fail_record is not None:
            raise self.fail_record
        for record in records:
            fields = dataclasses.asdict(record)
            self.records.append((fields.pop("delivery_id"), fields.pop("status"), fields))

    def withdraw(self, delivery_id: int) -> None:
        self.withdrawn.append(delivery_id)

    def wait(self, target: str, rate: float, burst: int) -> float:
        return self.over_limit_for

    def take_hosts(self, asked: Mapping[str, int], window: float) -> dict[str, budget.Taken]:
        for host, n in asked.items():
            self.host_hits[host] = self.host_hits.get(host, 0) + n
        return {host: budget.Taken(self.host_hits[host], window / 2) for host in asked}


@dataclass
class FakeSender:
    results: list[policy.Result | policy.Postponed | Exception] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)

    def send(self, delivery: Delivery, now: datetime) -> policy.Result | policy.Postponed:
        self.sent.append(delivery.id)
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def _delivery(delivery_id: int = 1, **kwargs: Any) -> Delivery:
    base: dict[str, Any] = {"id": delivery_id, "channel": "webhook", "status": "PENDING", "recipient_id": 5,
                            "created_at": NOW, "notification_id": 9, "kind": "follow", "webhook_id": 3,
                            "url": "https://example.com/hook", "secret": "whsec_AAAA"}
    return Delivery(**{**base, **kwargs})


def _body(delivery_id: int = 1, type: str = ev.DELIVERY_WEBHOOK) -> bytes:
    return ev.encode(ev.Event.new(type, delivery_id, {"delivery_id": delivery_id}))


def _processor(store: FakeStore, sender: FakeSender) -> processing.Processor:
    limits = processing.Limits("webhook", RETRY, rate=10.0, burst=1)
    return processing.Processor(store, sender, limits, clock=lambda: NOW, rand=random.Random(1))


def test_a_success_is_recorded_delivered_and_acked() -> None:
    store, sender = FakeStore({1: _delivery()}), FakeSender([policy.Answer(204)])
    assert _processor(store, sender).handle(_body(), None) == outcomes.ACK
    assert store.records == [(1, policy.DELIVERED, {"attempts": 1, "failed": False, "code": 204, "error": None,
                                                    "excerpt": None, "delay": None, "disable": None})]


def test_a_retriable_failure_hops_with_the_next_attempt_and_its_due_time() -> None:
    store, sender = FakeStore({1: _delivery()}), FakeSender([policy.Answer(503)])
    outcome = _processor(store, sender).handle(_body(), {headers.ATTEMPT: 2})
    assert isinstance(outcome, outcomes.Hop)
    due = outcome.headers[headers.DUE]
    assert isinstance(due, int) and 0.8 * 60_000 <= due - NOW_MS <= 60_000
    assert outcome.headers[headers.ATTEMPT] == 3 and outcome.delay_ms == route.first_hop(due - NOW_MS)
    assert store.records[0][1] == policy.RETRYING and store.records[0][2]["attempts"] == 2


def test_a_postponed_try_comes_back_soon_without_spending_an_attempt_or_touching_the_row() -> None:
    store = FakeStore({1: _delivery(), 2: _delivery(2)})
    sender = FakeSender([policy.Postponed("the sender's name lookups were busy"), policy.Answer(204)])
    processor = _processor(store, sender)
    attempts = [a for a in processor.admit([(_body(1), {headers.ATTEMPT: 2}), (_body(2), None)])
                if isinstance(a, processing.Attempt)]
    first, second = processor.conclude([processor.send(a) for a in attempts])
    assert isinstance(first, outcomes.Hop) and second == outcomes.ACK
    assert first.headers[headers.ATTEMPT] == 2 and first.headers[headers.DUE] == NOW_MS + 1000
    assert [(delivery_id, status) for delivery_id, status, _ in store.records] == [(2, policy.DELIVERED)]
    only_postponed = FakeStore({1: _delivery()})
    outcome = _processor(only_postponed, FakeSender([policy.Postponed("busy")])).handle(_body(), None)
    assert isinstance(outcome, outcomes.Hop) and only_postponed.record_calls == 0


def test_two_messages_of_one_delivery_in_a_batch_make_one_try() -> None:
    """An event the relay published again, both copies taken in one batch: one try, the other copy acked unsent."""
    store, sender = FakeStore({1: _delivery()}), FakeSender([policy.Answer(204)])
    processor = _processor(store, sender)
    admitted = processor.admit([(_body(1), None), (_body(1), None)])
    assert isinstance(admitted[0], processing.Attempt) and admitted[1] == outcomes.ACK
    assert processor.conclude([processor.send(admitted[0])]) == [outcomes.ACK]
    assert sender.sent == [1] and len(store.records) == 1


def test_the_last_attempt_is_a_dead_letter() -> None:
    store, sender = FakeStore({1: _delivery()}), FakeSender([policy.NoAnswer("timeout")])
    outcome = _processor(store, sender).handle(_body(), {headers.ATTEMPT: 3})
    assert outcome == outcomes.Dead("attempts exhausted (3): timeout", 3)
    assert store.records[0][1] == policy.DEAD


def test_over_the_rate_limit_it_waits_without_spending_an_attempt_or_sending() -> None:
    store, sender = FakeStore({1: _delivery()}, over_limit_for=1.5), FakeSender()
    outcome = _processor(store, sender).handle(_body(), {headers.ATTEMPT: 2})
    assert isinstance(outcome, outcomes.Hop)
    assert outcome.headers[headers.ATTEMPT] == 2 and outcome.headers[headers.DUE] == NOW_MS + 1500
    assert sender.sent == [] and store.records == []


def test_a_copy_not_due_yet_hops_on_unchanged_and_touches_nothing() -> None:
    store, sender = FakeStore({1: _delivery()}), FakeSender()
    copy: dict[str, object] = {headers.ATTEMPT: 2, headers.DUE: NOW_MS + 10_000}
    outcome = _processor(store, sender).handle(_body(), copy)
    assert outcome == outcomes.Hop(8192, copy)
    assert sender.sent == [] and store.records == []


@pytest.mark.parametrize("status", [policy.DELIVERED, policy.DEAD, policy.WITHDRAWN])
def test_a_settled_delivery_is_acked_unsent(status: str) -> None:
    store, sender = FakeStore({1: _delivery(status=status)}), FakeSender()
    assert _processor(store, sender).handle(_body(), None) == outcomes.ACK
    assert sender.sent == [] and store.records == []


def test_a_withdrawn_notification_withdraws_its_delivery_unsent() -> None:
    store, sender = FakeStore({1: _delivery(withdrawn_at=NOW)}), FakeSender()
    assert _processor(store, sender).handle(_body(), None) == outcomes.ACK
    assert store.withdrawn == [1] and sender.sent == []


def test_a_disabled_webhook_kills_the_delivery_unsent() -> None:
    store, sender = FakeStore({1: _delivery(disabled_at=NOW, disabled_reason="410 Gone")}), FakeSender()
    outcome = _processor(store, sender).handle(_body(), None)
    assert outcome == outcomes.Dead("webhook disabled: 410 Gone", 0)
    assert store.records[0][1] == policy.DEAD and sender.sent == []


def test_an_adapter_that_raises_makes_the_delivery_dead_and_the_next_goes_on() -> None:
    store = FakeStore({1: _delivery(), 2: _delivery(2)})
    sender = FakeSender([KeyError("bug"), policy.Answer(200)])
    processor = _processor(store, sender)
    assert processor.handle(_body(1), None) == outcomes.Dead("internal error: KeyError", 1)
    assert store.records[0][:2] == (1, policy.DEAD)
    assert processor.handle(_body(2), None) == outcomes.ACK


def test_a_database_outage_postpones_without_spending_an_attempt() -> None:
    store = FakeStore({1: _delivery()}, fail_load=psycopg.OperationalError("server closed the connection"))
    outcome = _processor(store, FakeSender()).handle(_body(), {headers.ATTEMPT: 2})
    assert isinstance(outcome, outcomes.Hop) and outcome.headers[headers.ATTEMPT] == 2


@pytest.mark.parametrize(("body", "reason"), [(b"nope", "malformed: body is not JSON"),
                                              (_body(type=ev.DELIVERY_EMAIL), "is not a webhook delivery")])
def test_malformed_messages_are_dead_letters(body: bytes, reason: str) -> None:
    outcome = _processor(FakeStore(), FakeSender()).handle(body, None)
    assert isinstance(outcome, outcomes.Dead) and reason in outcome.reason


def test_an_unknown_delivery_is_looked_for_again_at_the_shortest_hop_then_is_a_dead_letter() -> None:
    processor, copy = _processor(FakeStore(), FakeSender()), None
    for unseen in range(1, processing.UNSEEN_TRIES + 1):
        outcome = processor.handle(_body(7), copy)
        assert isinstance(outcome, outcomes.Hop) and outcome.delay_ms == DELIVERY_RETRY_DELAYS_MS[0]
        assert outcome.headers[headers.UNSEEN] == unseen
        assert outcome.headers[headers.DUE] == NOW_MS + DELIVERY_RETRY_DELAYS_MS[0]
        copy = {**outcome.headers, headers.DUE: NOW_MS}  # back from the retry queue, due
    assert processor.handle(_body(7), copy) == outcomes.Dead("no delivery 7", 1)


def test_a_delivery_visible_at_the_second_look_is_sent_without_spending_an_attempt() -> None:
    store, sender = FakeStore(), FakeSender([policy.Answer(204)])
    processor = _processor(store, sender)
    outcome = processor.handle(_body(1), None)
    assert isinstance(outcome, outcomes.Hop) and not sender.sent and not store.records
    store.rows[1] = _delivery(1)
    assert processor.handle(_body(1), {**outcome.headers, headers.DUE: NOW_MS}) == outcomes.ACK
    assert sender.sent == [1]
    assert [(r[1], r[2]["attempts"]) for r in store.records] == [(policy.DELIVERED, 1)]


def test_a_parked_dead_letter_goes_to_the_dead_queue_again() -> None:
    outcome = _processor(FakeStore(), FakeSender()).handle(b"", {headers.PARKED: b"HTTP 400",
                                                                 headers.ATTEMPT: 1})
    assert outcome == outcomes.Dead("HTTP 400", 1)


def _batch(processor: processing.Processor, *ids: int) -> list[processing.Outcome]:
    """admit, send and conclude, as the consumer does, for one message per delivery id."""
    admitted = processor.admit([(_body(i), None) for i in ids])
    tries = [processor.send(a) for a in admitted if isinstance(a, processing.Attempt)]
    concluded = iter(processor.conclude(tries))
    return [next(concluded) if isinstance(a, processing.Attempt) else a for a in admitted]


def test_a_batch_is_loaded_with_one_statement_and_recorded_with_one() -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2), 3: _delivery(3)})
    sender = FakeSender([policy.Answer(204), policy.Answer(500), policy.Answer(410)])
    settled = _batch(_processor(store, sender), 1, 2, 3)
    assert store.loads == [[1, 2, 3]] and store.record_calls == 1
    assert settled[0] == outcomes.ACK and isinstance(settled[1], outcomes.Hop)
    assert settled[2] == outcomes.Dead("HTTP 410", 1)
    assert [(r[0], r[1]) for r in store.records] == [(1, policy.DELIVERED), (2, policy.RETRYING), (3, policy.DEAD)]
    assert store.records[2][2]["disable"] is not None


def test_in_a_batch_a_sender_that_raises_kills_only_its_own_delivery() -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2)})
    settled = _batch(_processor(store, FakeSender([ZeroDivisionError("bug"), policy.Answer(200)])), 1, 2)
    assert settled == [outcomes.Dead("internal error: ZeroDivisionError", 1), outcomes.ACK]
    assert [(r[0], r[1]) for r in store.records] == [(1, policy.DEAD), (2, policy.DELIVERED)]


def test_a_batch_load_that_raises_is_loaded_again_one_by_one_and_only_the_failing_one_is_dead() -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2)}, fail_load=ValueError("bug"), fail_load_of=1)
    settled = _batch(_processor(store, FakeSender([policy.Answer(204)])), 1, 2)
    assert settled == [outcomes.Dead("internal error: ValueError", 1), outcomes.ACK]
    assert store.loads == [[1, 2], [1], [2]]


def test_in_a_batch_only_the_rate_limited_ones_wait_and_they_spend_no_attempt() -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2)}, over_limit_for=0.5, limited={2})
    outcome_1, outcome_2 = _processor(store, FakeSender()).admit([(_body(1), None),
                                                                  (_body(2), {headers.ATTEMPT: 3})])
    assert isinstance(outcome_1, processing.Attempt) and outcome_1.attempt == 1
    assert isinstance(outcome_2, outcomes.Hop) and outcome_2.headers[headers.ATTEMPT] == 3
    assert outcome_2.headers[headers.REASON] == "rate limited" and store.records == []


def test_a_database_outage_while_recording_postpones_the_batch_without_spending_attempts() -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2)},
                      fail_record=psycopg.OperationalError("server closed the connection"))
    settled = _batch(_processor(store, FakeSender([policy.Answer(204), policy.Answer(500)])), 1, 2)
    assert all(isinstance(o, outcomes.Hop) and o.headers[headers.REASON] == "database unavailable"
               and headers.ATTEMPT not in o.headers for o in settled)


@pytest.mark.parametrize("retry_after", ["\u00b2", "9" * 400, "Mon, 01 Jan 100000000000000000000 00:00:00 GMT"])
def test_a_hostile_retry_after_in_a_batch_loses_no_other_outcome(retry_after: str) -> None:
    store = FakeStore({1: _delivery(1), 2: _delivery(2), 3: _delivery(3)})
    sender = FakeSender([policy.Answer(204), policy.Answer(503, retry_after=retry_after), policy.Answer(200)])
    settled = _batch(_processor(store, sender), 1, 2, 3)
    assert settled[0] == settled[2] == outcomes.ACK and isinstance(settled[1], outcomes.Hop)
    assert [(r[0], r[1]) for r in store.records] == [(1, policy.DELIVERED), (2, policy.RETRYING),
                                                     (3, policy.DELIVERED)]
    delay = store.records[1][2]["delay"]
    assert isinstance(delay, float) and 0 < delay <= RETRY.retry_after_max
    assert settled[1].headers[headers.ATTEMPT] == 2  # an attempt spent: it runs out


def test_a_delivery_whose_outcome_cannot_be_decided_is_dead_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    decide = policy.decide

    def failing(result: policy.Result, *args: Any, **kwargs: Any) -> policy.Decision:
        if isinstance(result, policy.Answer) and result.code == 503:
            raise OverflowError("a bug")
        return decide(result, *args, **kwargs)

    monkeypatch.setattr(policy, "decide", failing)
    store = FakeStore({1: _delivery(1), 2: _delivery(2)})
    settled = _batch(_processor(store, FakeSender([policy.Answer(503), policy.Answer(204)])), 1, 2)
    assert settled == [outcomes.Dead("internal error: OverflowError", 1), outcomes.ACK]
    assert [(r[0], r[1], r[2]["error"]) for r in store.records] == [
        (1, policy.DEAD, "internal error: OverflowError"), (2, policy.DELIVERED, None)]


def test_tries_over_their_hosts_budget_wait_for_its_next_window_without_spending_an_attempt() -> None:
    store = FakeStore({i: _delivery(i, url=f"https://Hooks.example.com/{i}") for i in (1, 2, 3)}
                      | {4: _delivery(4, url="https://other.example.org/")}, host_hits={"hooks.example.com": 1})
    limits = processing.Limits("webhook", RETRY, rate=10.0, burst=1, hosts=budget.HostBudget(2, 60.0))
    processor = processing.Processor(store, FakeSender(), limits, clock=lambda: NOW, rand=random.Random(1))
    admitted = processor.admit([(_body(i), {headers.ATTEMPT: 2}) for i in (1, 2, 3, 4)])
    assert [type(a).__name__ for a in admitted] == ["Attempt", "Hop", "Hop", "Attempt"]
    for hop in admitted[1:3]:
        assert isinstance(hop, outcomes.Hop) and hop.headers[headers.REASON] == "host over its budget"
        assert hop.headers[headers.ATTEMPT] == 2  # no attempt spent
        due = hop.headers[headers.DUE]
        assert isinstance(due, int) and 30_000 <= due - NOW_MS <= 30_000 + budget.SPREAD * 60_000
    assert store.host_hits == {"hooks.example.com": 4, "other.example.org": 1} and store.records == []


def test_stored_errors_and_excerpts_are_bounded_and_without_nul() -> None:
    assert policy.bounded(None) is None
    long = policy.bounded("\x00é" * 5000)
    assert long is not None and len(long.encode()) <= policy.ERROR_BYTES and "\x00" not in long
    assert len((policy.bounded("x" * 9000, policy.EXCERPT_BYTES) or "").encode()) == policy.EXCERPT_BYTES
