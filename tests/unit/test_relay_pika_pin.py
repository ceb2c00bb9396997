"""The relay publishes on pika's private `BlockingChannel._impl` (docs/adr/0011): pika's blocking API has no
asynchronous publisher confirms. These checks fail loudly, naming what changed, if a pika upgrade moves the
internals the publisher (services/cdc_relay/publisher.py) and the ceiling benchmark rely on."""

from __future__ import annotations

import inspect

import pika
import pika.channel
from hypothesis import given
from hypothesis import strategies as st
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from services.cdc_relay.publisher import EventProperties
from services.core.events import CONTENT_TYPE


def _parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_pika_major_version_is_the_pinned_one() -> None:
    assert pika.__version__.split(".")[0] == "1", "pyproject pins pika>=1.3,<2: re-check docs/adr/0011"


def test_blocking_channel_keeps_its_async_channel_in_impl() -> None:
    source = inspect.getsource(BlockingChannel.__init__)
    assert "self._impl = channel_impl" in source, "BlockingChannel no longer stores its pika.channel.Channel as _impl"
    assert "channel_impl" in _parameters(BlockingChannel.__init__)


def test_the_async_channel_methods_the_publisher_calls() -> None:
    assert _parameters(pika.channel.Channel.confirm_delivery)[:3] == ["self", "ack_nack_callback", "callback"]
    assert _parameters(pika.channel.Channel.basic_publish) == [
        "self", "exchange", "routing_key", "body", "properties", "mandatory"]
    assert _parameters(pika.channel.Channel.add_on_return_callback) == ["self", "callback"]


def test_the_blocking_connection_methods_the_publisher_calls() -> None:
    assert _parameters(BlockingConnection.process_data_events) == ["self", "time_limit"]
    assert _parameters(BlockingConnection.add_callback_threadsafe) == ["self", "callback"]
    for name in ("add_on_connection_blocked_callback", "add_on_connection_unblocked_callback"):
        assert _parameters(getattr(BlockingConnection, name)) == ["self", "callback"], name


@given(message_id=st.text(max_size=64), type=st.text(min_size=1, max_size=64),
       timestamp=st.integers(min_value=0, max_value=2**63 - 1))
def test_event_properties_encode_like_basic_properties_with_the_same_values(message_id: str, type: str,
                                                                            timestamp: int) -> None:
    """EventProperties sets three attributes and inherits the rest from the class: pika's encode() must give the
    bytes it gives for a full BasicProperties, and decoding them must give the values back."""
    ours = EventProperties(message_id, type, timestamp)
    reference = pika.BasicProperties(message_id=message_id, type=type, timestamp=timestamp,
                                     content_type=CONTENT_TYPE, delivery_mode=pika.DeliveryMode.Persistent)
    assert ours.encode() == reference.encode()
    decoded = pika.BasicProperties()
    decoded.decode(b"".join(ours.encode()))
    assert (decoded.message_id, decoded.type, decoded.timestamp) == (message_id, type, timestamp)
    assert (decoded.content_type, decoded.delivery_mode, decoded.headers) == (CONTENT_TYPE, 2, None)


def test_basic_properties_still_has_exactly_the_attributes_event_properties_defaults() -> None:
    fields = set(_parameters(pika.BasicProperties.__init__)) - {"self"}
    defaulted = {name for name in vars(EventProperties) if not name.startswith("_")} | {"message_id", "type",
                                                                                          "timestamp"}
    assert fields == defaulted, "BasicProperties changed its fields: EventProperties must default every one"
