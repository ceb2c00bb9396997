"""Groups of events in one message (docs/events.md "Groups", docs/adr/0095): the codec, and how a consumer splits
a group into the messages its events would be on their own."""

from __future__ import annotations

import pika
import pytest

from services.consumer import messages
from services.core import events as ev


def post(post_id: int) -> ev.Event:
    return ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": 1})


def test_a_group_splits_into_its_events_bodies_byte_for_byte() -> None:
    events = [post(1), post(2), post(3)]
    bodies = [ev.encode(e) for e in events]
    assert ev.split_group(ev.encode_group(bodies)) == bodies
    assert [ev.decode(b) for b in ev.split_group(ev.encode_group(bodies))] == events


@pytest.mark.parametrize("body", [b"", b"{not json", b'{"id": 1}', b"[]", b'"x"'])
def test_a_group_body_that_is_not_a_non_empty_array_is_malformed(body: bytes) -> None:
    with pytest.raises(ev.MalformedEvent):
        ev.split_group(body)


def test_an_element_that_is_no_event_is_split_out_to_be_judged_alone() -> None:
    assert ev.split_group(b'[1, {"a": 2}]') == [b"1", b'{"a":2}']


def test_each_event_gets_its_own_trace_context_and_the_groups_other_headers() -> None:
    events = [post(1), post(2), post(3)]
    headers = {ev.TRACEPARENTS_HEADER: ["00-" + "a" * 32 + "-" + "b" * 16 + "-01", "", "00-" + "c" * 32 + "-"
                                        + "d" * 16 + "-01"], "x-walfeed-attempt": 2}
    split = messages.split(ev.encode_group([ev.encode(e) for e in events]), headers)
    assert [m.headers for m in split] == [
        {"x-walfeed-attempt": 2, "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        {"x-walfeed-attempt": 2},
        {"x-walfeed-attempt": 2, "traceparent": "00-" + "c" * 32 + "-" + "d" * 16 + "-01"}]


@pytest.mark.parametrize("contexts", [None, ["only one"], "not a list"])
def test_trace_contexts_that_are_not_one_per_event_are_left_out(contexts: object) -> None:
    body = ev.encode_group([ev.encode(post(1)), ev.encode(post(2))])
    headers = None if contexts is None else {ev.TRACEPARENTS_HEADER: contexts}
    assert [m.headers for m in messages.split(body, headers)] == [None, None]


def test_an_events_own_properties_carry_its_id_and_time_and_the_groups_type() -> None:
    event = post(1)
    group = pika.BasicProperties(message_id="first", type=ev.POST_CREATED, timestamp=1_700_000_000,
                                 content_type=ev.GROUP_CONTENT_TYPE, delivery_mode=2)
    [message] = messages.split(ev.encode_group([ev.encode(event)]), {ev.TRACEPARENTS_HEADER: ["tp"]})
    props = messages.part_properties(group, message)
    assert (props.message_id, props.type, props.timestamp, props.content_type, props.delivery_mode) == (
        str(event.id), ev.POST_CREATED, ev.epoch_seconds(event.occurred_at), ev.CONTENT_TYPE, 2)
    assert props.headers == {"traceparent": "tp"}
    [odd] = messages.split(b"[42]", None)
    assert (messages.part_properties(group, odd).message_id, messages.part_properties(group, odd).timestamp) == (
        "first", 1_700_000_000)  # no id or time of its own: the group's


@pytest.mark.parametrize(("element", "message_id", "timestamp"), [
    (b'{"id": "' + b"x" * 300 + b'", "occurred_at": "2026-01-01T00:00:00Z"}', "first", 1_767_225_600),
    (b'{"id": "e", "occurred_at": "1969-12-31T23:59:59Z"}', "e", 1_700_000_000),
    (b'{"id": "' + "\u00e9".encode() * 128 + b'", "occurred_at": "x"}', "first", 1_700_000_000)])
def test_a_foreign_events_properties_can_always_be_published_again(element: bytes, message_id: str,
                                                                   timestamp: int) -> None:
    """A group from a publisher that is not walfeed's: an id longer than an AMQP short string (255 bytes), or a time
    before 1970, would make its retry copy or dead letter unpublishable (and the delivery come back for ever): the
    group's values stand in."""
    group = pika.BasicProperties(message_id="first", type=ev.POST_CREATED, timestamp=1_700_000_000,
                                 content_type=ev.GROUP_CONTENT_TYPE, delivery_mode=2)
    [message] = messages.split(b"[" + element + b"]", None)
    props = messages.part_properties(group, message)
    assert (props.message_id, props.timestamp) == (message_id, timestamp)
    props.encode()  # what publishing it does: no ShortStringTooLong, no struct.error
