"""Grouping (docs/adr/0095): consecutive events of one fan-out type read together become one message of at most
WALFEED_RELAY_GROUP_MAX events, in order, their trace contexts aligned with them; every other event, and a run of one,
is published exactly as it would be alone. A group's token names each of its events' sequence numbers."""

from __future__ import annotations

import itertools

import orjson
import pika
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cdc_relay.config import RelaySettings
from services.cdc_relay.grouping import group
from services.cdc_relay.messages import EventProperties, Outgoing, group_properties
from services.cdc_relay.sessions import Sessions, seqs
from services.core.events import (
    DELIVERY_EMAIL,
    DELIVERY_WEBHOOK,
    FANOUT_TYPES,
    FOLLOW_CREATED,
    GROUP_CONTENT_TYPE,
    POST_CREATED,
    POST_DELETED,
    TRACEPARENTS_HEADER,
    split_group,
)
from services.core.settings import SettingsError

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def event(seq: int, type: str = POST_CREATED, traceparent: str | None = None) -> Outgoing[int]:
    body = orjson.dumps({"id": f"e{seq}", "type": type})
    return Outgoing(seq, body, f"e{seq}", type, 1_700_000_000 + seq, traceparent)


def events(*types: str) -> list[Outgoing[int]]:
    return [event(seq, type) for seq, type in enumerate(types)]


def shape(messages: list[Outgoing[int | range]]) -> list[tuple[str, int | range]]:
    return [(m.type, m.token) for m in messages]


def test_consecutive_events_of_one_fanout_type_become_one_message() -> None:
    batch = events(POST_CREATED, POST_CREATED, POST_CREATED, FOLLOW_CREATED, FOLLOW_CREATED, POST_CREATED)
    assert shape(group(batch, 10)) == [(POST_CREATED, range(0, 3)), (FOLLOW_CREATED, range(3, 5)), (POST_CREATED, 5)]


def test_a_group_holds_at_most_group_max_events() -> None:
    assert shape(group(events(*[POST_DELETED] * 7), 3)) == [
        (POST_DELETED, range(0, 3)), (POST_DELETED, range(3, 6)), (POST_DELETED, 6)]


def test_a_delivery_event_goes_alone_and_breaks_the_run_around_it() -> None:
    batch = events(POST_CREATED, POST_CREATED, DELIVERY_WEBHOOK, DELIVERY_WEBHOOK, POST_CREATED, DELIVERY_EMAIL)
    messages = group(batch, 10)
    assert shape(messages) == [(POST_CREATED, range(0, 2)), (DELIVERY_WEBHOOK, 2), (DELIVERY_WEBHOOK, 3),
                               (POST_CREATED, 4), (DELIVERY_EMAIL, 5)]
    assert messages[1:] == batch[2:]  # the very messages read: published as without grouping


def test_a_groups_message_carries_the_bodies_in_order_with_the_first_events_id_and_time() -> None:
    batch = events(*[POST_CREATED] * 4)
    [message] = group(batch, 10)
    assert split_group(message.body) == [e.body for e in batch]
    assert (message.message_id, message.type, message.timestamp) == ("e0", POST_CREATED, batch[0].timestamp)
    assert message.events == 4


def test_a_groups_trace_contexts_are_aligned_with_its_events() -> None:
    batch = [event(0), event(1, traceparent=TRACE), event(2)]
    [message] = group(batch, 10)
    assert message.traceparents == ("", TRACE, "")
    props = group_properties(message)
    assert props.headers == {TRACEPARENTS_HEADER: ["", TRACE, ""]}
    assert (props.content_type, props.delivery_mode) == (GROUP_CONTENT_TYPE, pika.DeliveryMode.Persistent.value)
    assert (props.message_id, props.type, props.timestamp) == ("e0", POST_CREATED, batch[0].timestamp)


def test_a_group_without_any_trace_context_has_no_headers() -> None:
    [message] = group([event(0), event(1)], 10)
    assert group_properties(message).headers is None
    assert b"x-walfeed" not in b"".join(group_properties(message).encode())


def test_a_single_events_message_is_the_one_read_and_its_properties_unchanged() -> None:
    single = event(0, traceparent=TRACE)
    [message] = group([single], 10)
    assert message is single and message.traceparents is None and message.events == 1
    assert b"".join(EventProperties(message.message_id, message.type, message.timestamp, TRACE).encode()) == b"".join(
        pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id="e0", type=POST_CREATED,
                             timestamp=message.timestamp, headers={"traceparent": TRACE}).encode())


def test_events_numbered_at_a_step_of_two_are_grouped_with_that_step() -> None:
    # The relay numbers a fan-out event's two copies s and s + 1: its grouped copies are every other number.
    assert shape(group([event(1), event(3), event(5)], 10)) == [(POST_CREATED, range(1, 7, 2))]


def test_events_not_numbered_at_a_constant_step_cannot_be_grouped() -> None:
    with pytest.raises(ValueError, match="constant step"):
        group([event(0), event(2), event(3)], 10)


types = st.sampled_from([*sorted(FANOUT_TYPES), DELIVERY_WEBHOOK, DELIVERY_EMAIL])


@given(st.lists(types, max_size=60), st.integers(1, 8))
def test_every_event_is_in_exactly_one_message_in_order_and_each_message_obeys_the_rules(
        batch_types: list[str], group_max: int) -> None:
    batch = events(*batch_types)
    messages = group(batch, group_max)
    assert seqs([m.token for m in messages]) == list(range(len(batch)))
    bodies = [b for m in messages for b in (split_group(m.body) if m.traceparents is not None else [m.body])]
    assert bodies == [e.body for e in batch]
    for m in messages:
        assert 1 <= m.events <= group_max
        assert m.events == 1 or m.type in FANOUT_TYPES
    for before, after in itertools.pairwise(messages):  # a run is cut only by a type or a full group
        assert before.type != after.type or before.events == group_max or before.type not in FANOUT_TYPES


def test_a_groups_token_is_current_while_its_session_is() -> None:
    sessions = Sessions()
    token = range(sessions.first_seq, sessions.first_seq + 3)
    assert sessions.is_current(token)
    assert seqs([token, 3]) == [0, 1, 2, 3]
    sessions.end()
    assert not sessions.is_current(token)


def test_group_max_is_ten_unless_set_and_bounded() -> None:
    assert RelaySettings.from_env({}).group_max == 10  # the fast configuration by default (docs/adr/0115)
    assert RelaySettings.from_env({"WALFEED_RELAY_GROUP_MAX": "1"}).group_max == 1
    assert RelaySettings.from_env({"WALFEED_RELAY_GROUP_MAX": "50"}).group_max == 50


@pytest.mark.parametrize("value", ["0", "1001", "ten", "2.5"])
def test_a_bad_group_max_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError, match="WALFEED_RELAY_GROUP_MAX"):
        RelaySettings.from_env({"WALFEED_RELAY_GROUP_MAX": value})
