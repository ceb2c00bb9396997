"""A consumer's settle channel on the real broker (services/consumer/settle_channel.py, docs/adr/0090): a streak of
nacks replaces the channel, and the next publish goes through the new one.

The nacks come from a full queue that refuses publishes (`x-max-length` 1, `x-overflow: reject-publish`): RabbitMQ's
own nack, through pika's BlockingChannel, as a quorum queue electing its leader gives. The streak is 0.3 s here
instead of nack_streak.REOPEN_AFTER."""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from services.consumer.settle_channel import SettleChannel
from services.core.nack_streak import NackStreak
from testkit.infra import Infra
from testkit.waiting import eventually

pytestmark = pytest.mark.integration


def test_a_channel_answering_only_nacks_is_replaced_and_the_next_publish_is_confirmed(
        infra: Infra, amqp_prefix: str, amqp_extra_queues: list[str]) -> None:
    full, free = f"{amqp_prefix}.full", f"{amqp_prefix}.free"
    amqp_extra_queues.extend([full, free])
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        setup = conn.channel()
        setup.queue_declare(full, durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        setup.queue_declare(free, durable=True)
        settle = SettleChannel(conn, NackStreak(reopen_after=0.3))
        settle.basic_publish("", full, b"first", mandatory=True)  # takes the queue's one place
        first = settle.channel

        def refused() -> bool:
            with pytest.raises(pika.exceptions.NackError):
                settle.basic_publish("", full, b"refused", mandatory=True)
            return settle.reopened == 1

        eventually(refused, timeout=10, interval=0.05, what="the channel replaced after 0.3 s of nacks")
        assert first.is_closed and settle.channel.is_open
        settle.basic_publish("", free, b"through the new channel", mandatory=True)
        assert setup.queue_declare(free, passive=True).method.message_count == 1
        assert setup.queue_declare(full, passive=True).method.message_count == 1  # nothing refused was kept
    finally:
        conn.close()
