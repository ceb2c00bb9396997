"""What the relay's publisher (services/cdc_relay/publisher.py, docs/adr/0014) and the ceiling benchmark rely on in
pika: the asynchronous SelectConnection on an IOLoop of ours, the channel's confirm and return callbacks, and
BasicProperties' attributes (EventProperties). All public API; these checks name what moved if a pika upgrade
changes it."""

from __future__ import annotations

import inspect

import pika
import pika.channel
import pika.exceptions
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pika.adapters.select_connection import IOLoop

from services.cdc_relay.messages import EventProperties
from services.core.events import CONTENT_TYPE


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_pika_major_version_is_the_pinned_one() -> None:
    assert pika.__version__.split(".")[0] == "1", "pyproject pins pika>=1.3,<2: re-check docs/adr/0014"


def test_select_connection_takes_our_ioloop_and_the_three_callbacks() -> None:
    assert _parameters(pika.SelectConnection.__init__)[:6] == [
        "self", "parameters", "on_open_callback", "on_open_error_callback", "on_close_callback", "custom_ioloop"]
    for name in ("add_on_connection_blocked_callback", "add_on_connection_unblocked_callback"):
        assert _parameters(getattr(pika.SelectConnection, name)) == ["self", "callback"], name


def test_the_ioloop_methods_the_relay_runs_on() -> None:
    assert _parameters(IOLoop.add_handler) == ["self", "fd", "handler", "events"]
    assert _parameters(IOLoop.call_later) == ["self", "delay", "callback"]
    for name in ("remove_handler", "remove_timeout", "add_callback_threadsafe"):
        assert len(_parameters(getattr(IOLoop, name))) == 2, name
    for name in ("start", "stop", "close"):
        assert _parameters(getattr(IOLoop, name)) == ["self"], name
    assert IOLoop.READ


def test_the_channel_methods_the_publisher_calls() -> None:
    assert _parameters(pika.channel.Channel.confirm_delivery)[:3] == ["self", "ack_nack_callback", "callback"]
    assert _parameters(pika.channel.Channel.basic_publish) == [
        "self", "exchange", "routing_key", "body", "properties", "mandatory"]
    assert _parameters(pika.channel.Channel.add_on_return_callback) == ["self", "callback"]
    assert _parameters(pika.channel.Channel.add_on_close_callback) == ["self", "callback"]
    assert "callback" in _parameters(pika.channel.Channel.exchange_declare)


@given(message_id=st.text(max_size=64), type=st.text(min_size=1, max_size=64),
       timestamp=st.integers(min_value=0, max_value=2**63 - 1))
def test_event_properties_encode_like_basic_properties_with_the_same_values(message_id: str, type: str,
                                                                            timestamp: int) -> None:
    """EventProperties sets three attributes and inherits the rest from the class; its encode() must give the
    bytes pika's gives for a full BasicProperties (pika joins the pieces into the frame), and decoding them must give
    the values back."""
    ours = EventProperties(message_id, type, timestamp)
    reference = pika.BasicProperties(message_id=message_id, type=type, timestamp=timestamp,
                                     content_type=CONTENT_TYPE, delivery_mode=pika.DeliveryMode.Persistent)
    try:
        expected = b"".join(reference.encode())
    except pika.exceptions.ShortStringTooLong:
        with pytest.raises(pika.exceptions.ShortStringTooLong):
            ours.encode()  # refused alike
        return
    assert b"".join(ours.encode()) == expected
    decoded = pika.BasicProperties()
    decoded.decode(b"".join(ours.encode()))
    assert (decoded.message_id, decoded.type, decoded.timestamp) == (message_id, type, timestamp)
    assert (decoded.content_type, decoded.delivery_mode, decoded.headers) == (CONTENT_TYPE, 2, None)


@given(trace_id=st.text("0123456789abcdef", min_size=32, max_size=32),
       span_id=st.text("0123456789abcdef", min_size=16, max_size=16))
def test_event_properties_with_a_trace_context_carry_it_as_the_traceparent_header(trace_id: str,
                                                                                  span_id: str) -> None:
    traceparent = f"00-{trace_id}-{span_id}-01"
    ours = EventProperties("m1", "post.created", 1764568800, traceparent)
    reference = pika.BasicProperties(message_id="m1", type="post.created", timestamp=1764568800,
                                     content_type=CONTENT_TYPE, delivery_mode=pika.DeliveryMode.Persistent,
                                     headers={"traceparent": traceparent})
    assert b"".join(ours.encode()) == b"".join(reference.encode())
    decoded = pika.BasicProperties()
    decoded.decode(b"".join(ours.encode()))
    assert decoded.headers == {"traceparent": traceparent}
    assert EventProperties("m2", "post.created", 0).headers is None  # the class default is not shared, nor changed


def test_event_properties_changed_after_init_are_encoded_by_pika_itself() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    ours = EventProperties("m1", "post.created", 1764568800, traceparent)
    headers: dict[str, object] = {"traceparent": traceparent, "x-walfeed-attempt": 2}
    setattr(ours, "expiration", "5000")  # noqa: B010 - as a caller changing a built instance would
    setattr(ours, "headers", headers)  # noqa: B010
    reference = pika.BasicProperties(message_id="m1", type="post.created", timestamp=1764568800, expiration="5000",
                                     content_type=CONTENT_TYPE, delivery_mode=pika.DeliveryMode.Persistent,
                                     headers=headers)
    assert b"".join(ours.encode()) == b"".join(reference.encode())


def test_basic_properties_still_has_exactly_the_attributes_event_properties_defaults() -> None:
    fields = set(_parameters(pika.BasicProperties.__init__)) - {"self"}
    defaulted = {name for name, value in vars(EventProperties).items()
                 if not name.startswith("_") and not callable(value)} | {"message_id", "type", "timestamp"}
    assert fields == defaulted, "BasicProperties changed its fields: EventProperties must default every one"
