"""Routes (docs/adr/0115): the events exchange carries every event alone, the published contract; the grouped exchange
carries every fan-out event once more, for walfeed's consumers, in groups; a delivery event goes once. Each message
has a token of its own, and an event's position or mark waits for all of its messages."""

from __future__ import annotations

from collections import Counter

import orjson
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_relay import routes
from services.cdc_relay.messages import EVENTS, GROUPED, SINGLE, Outgoing
from services.cdc_relay.poll_policy import Claims
from services.cdc_relay.publisher_state import PublisherState
from services.cdc_relay.sessions import seqs
from services.core.events import DELIVERY_EMAIL, DELIVERY_WEBHOOK, FANOUT_TYPES, POST_CREATED, split_group

types = st.sampled_from([*sorted(FANOUT_TYPES), DELIVERY_WEBHOOK, DELIVERY_EMAIL])


def read(kinds: list[str]) -> tuple[list[Outgoing[int]], int]:
    """A batch as the relay reads it: each event numbered with as many numbers as messages will carry it; and the
    count of numbers given."""
    batch, seq = [], 0
    for i, type in enumerate(kinds):
        batch.append(Outgoing(seq, orjson.dumps({"id": f"e{i}", "type": type}), f"e{i}", type, 0))
        seq += routes.copies(type)
    return batch, seq


def ids(message: Outgoing[object]) -> list[str]:
    bodies = split_group(message.body) if message.traceparents is not None else [message.body]
    return [orjson.loads(body)["id"] for body in bodies]


@given(st.lists(types, max_size=60), st.integers(min_value=1, max_value=12))
def test_every_event_goes_alone_to_the_events_exchange_and_a_fanout_one_also_to_the_grouped_one(
        kinds: list[str], group_max: int) -> None:
    batch, numbers = read(kinds)
    messages = routes.relay(batch, group_max)
    alone = [m for m in messages if m.route in (EVENTS, SINGLE)]
    assert all(m.traceparents is None for m in alone)  # one event a message: the contract
    assert Counter(i for m in alone for i in ids(m)) == Counter(e.message_id for e in batch)
    assert {m.route for m in alone if m.type in FANOUT_TYPES} <= {SINGLE}  # not mandatory: maybe nobody is bound
    assert {m.route for m in alone if m.type not in FANOUT_TYPES} <= {EVENTS}
    grouped = [m for m in messages if m.route == GROUPED]
    assert Counter(i for m in grouped for i in ids(m)) == Counter(e.message_id for e in batch
                                                                  if e.type in FANOUT_TYPES)
    assert all(m.events <= group_max for m in grouped)
    # Every number the relay gave is one message's, once: the position waits for both copies of an event.
    assert sorted(seqs([m.token for m in messages])) == list(range(numbers))


def test_a_fanout_events_grouped_copy_is_numbered_after_its_single_one() -> None:
    batch, _ = read([POST_CREATED, POST_CREATED, DELIVERY_WEBHOOK])
    assert [(m.route, m.token) for m in routes.relay(batch, 10)] == [
        (GROUPED, range(1, 4, 2)), (EVENTS, 4), (SINGLE, 0), (SINGLE, 2)]


def test_the_polling_source_sends_a_fanout_event_twice_with_its_id_and_marks_it_once_both_are_confirmed() -> None:
    batch = [Outgoing("a", b"{}", "a", POST_CREATED, 0), Outgoing("d", b"{}", "d", DELIVERY_WEBHOOK, 0)]
    messages = routes.poll(batch)
    assert [(m.token, m.route) for m in messages] == [("a", GROUPED), ("d", EVENTS), ("a", SINGLE)]
    claims = Claims()
    claims.claimed(m.token for m in messages)
    claims.confirmed(["a", "d"])
    assert claims.take_marks() == ["d"] and claims.in_flight == 1  # "a" alone is not confirmed yet
    claims.confirmed(["a"])
    assert claims.take_marks() == ["a"] and claims.in_flight == 0


def test_a_returned_grouped_copy_fails_alone_when_its_single_copy_is_acked_in_the_same_frame() -> None:
    # Both copies have the event's id; only the grouped one is mandatory, so a return is always its.
    state: PublisherState[int] = PublisherState(window=4)
    state.submit([Outgoing(0, b"{}", "e", POST_CREATED, 0, route=SINGLE),
                  Outgoing(1, b"{}", "e", POST_CREATED, 0, route=GROUPED)])
    state.to_publish(now=0.0)
    state.returned("e")
    settled = state.acked(2, multiple=True)
    assert settled.tokens == [0] and [m.token for m, _ in settled.failed] == [1]
    assert settled.events == 0  # an event is counted published once, with its walfeed copy
