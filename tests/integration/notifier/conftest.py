"""Fixtures of the notifier's integration tests: a database connection, a broker channel with the notifier's
queues declared (as the notifier declares them), and the notifier's environment."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.consumer import broker
from services.core.amqp import declare_delivery_queues
from services.core.topology import Topology
from testkit.infra import Infra

pytestmark = pytest.mark.integration

NOTIFIER_ENV = {
    "WALFEED_NOTIFIER_METRICS_PORT": "0",
    "WALFEED_NOTIFIER_RETRY_BASE": "0.05",
    "WALFEED_NOTIFIER_RETRY_CAP": "0.2",
    "WALFEED_NOTIFIER_MAX_ATTEMPTS": "5",
}



@pytest.fixture
def channel(infra: Infra, topology: Topology) -> Iterator[Channel]:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        ch = conn.channel()
        broker.declare(ch, topology.notifier)
        declare_delivery_queues(ch, topology)
        yield ch
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()


def depth(channel: Channel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def drained(channel: Channel, topology: Topology) -> bool:
    queues = topology.notifier
    return depth(channel, queues.queue) == 0 and depth(channel, queues.retry_queue) == 0
