"""Fixtures of the worker's integration tests: a database connection, a broker channel with the topology."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from services.consumer import broker
from services.core.topology import Topology
from testkit.infra import Infra

pytestmark = pytest.mark.integration

WORKER_ENV = {
    "WALFEED_WORKER_METRICS_PORT": "0",
    "WALFEED_WORKER_RETRY_BASE": "0.05",
    "WALFEED_WORKER_RETRY_CAP": "0.2",
    "WALFEED_WORKER_MAX_ATTEMPTS": "3",
}


@pytest.fixture
def channel(infra: Infra, topology: Topology) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    """A channel on which the worker's topology is declared (as the worker declares it), for publishing."""
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        ch = conn.channel()
        broker.declare(ch, topology.fanout)
        yield ch
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()


def depth(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def drained(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology) -> bool:
    return depth(channel, topology.fanout_queue) == 0 and depth(channel, topology.retry_queue) == 0


def dead_letters(channel: pika.adapters.blocking_connection.BlockingChannel,
                 topology: Topology) -> list[tuple[pika.BasicProperties, bytes]]:
    out: list[tuple[pika.BasicProperties, bytes]] = []
    while True:
        method, props, body = channel.basic_get(topology.dead_queue, auto_ack=True)
        if method is None:
            return out
        out.append((props, body))
