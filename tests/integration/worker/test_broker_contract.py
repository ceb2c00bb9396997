"""What the worker's session relies on from RabbitMQ, checked against both: a real broker through pika's
BlockingConnection, and the unit tests' stand-in (testkit/broker.py's StubConnection on a StubBroker), so
the stand-in cannot drift from the real thing.

Topic routing and mandatory returns, prefetch, a requeued message back in its place and marked redelivered, a
multiple ack, an expired retry copy dead-lettered back to the fan-out queue with `x-death`, the bounded dead queue
refusing a publish, a redeclaration with other arguments closing the channel with 406, and a publish to no
exchange with 404."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pika
import pika.exceptions
import pytest

from services.consumer import broker
from services.core import queues
from services.core.topology import Topology
from testkit.broker import StubBroker, StubConnection
from testkit.infra import Infra

pytestmark = pytest.mark.integration


class Driver(Protocol):
    conn: Any  # pika.BlockingConnection or StubConnection

    def pump(self, until: Callable[[], bool]) -> None: ...  # process events until `until()`, or fail

    def expire(self, queue: str) -> None: ...  # the TTL of every message in `queue` has passed


class StubDriver:
    def __init__(self) -> None:
        self.broker = StubBroker()
        self.conn = StubConnection(self.broker)

    def pump(self, until: Callable[[], bool]) -> None:
        for _ in range(100):
            if until():
                return
            self.conn.process_data_events()
        raise AssertionError("the stub did not get there")

    def expire(self, queue: str) -> None:
        self.broker.expire(queue)


class PikaDriver:
    def __init__(self, amqp_url: str) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(amqp_url))

    def pump(self, until: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while not until():
            assert time.monotonic() < deadline, "the broker did not get there in 10 s"
            self.conn.process_data_events(time_limit=0.05)

    def expire(self, queue: str) -> None:
        pass  # the copies carry a 1 ms TTL


@pytest.fixture(params=["stub", "rabbitmq"])
def driver(request: pytest.FixtureRequest, infra: Infra) -> Iterator[Driver]:
    if request.param == "stub":
        yield StubDriver()
        return
    real = PikaDriver(infra.amqp_url)
    yield real
    if real.conn.is_open:
        real.conn.close()


def props(**kw: Any) -> pika.BasicProperties:
    return pika.BasicProperties(content_type="application/json", delivery_mode=2, **kw)


def test_the_broker_the_session_relies_on(driver: Driver, topology: Topology) -> None:
    conn = driver.conn
    consumer = conn.channel()
    broker.declare(consumer, topology.fanout, dead_max_length=1)
    publisher = conn.channel()
    publisher.confirm_delivery()
    for body in (b"m1", b"m2", b"m3"):
        publisher.basic_publish(topology.grouped_exchange, "post.created", body, props(), mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        publisher.basic_publish(topology.grouped_exchange, "comment.created", b"x", props(), mandatory=True)

    got: list[tuple[int, bool, bytes, dict[str, Any]]] = []
    consumer.basic_qos(prefetch_count=2)
    consumer.basic_consume(topology.fanout_queue, lambda _ch, method, p, body: got.append(
        (method.delivery_tag, method.redelivered, body, p.headers or {})), auto_ack=False)
    driver.pump(lambda: len(got) >= 2)
    assert [g[:3] for g in got] == [(1, False, b"m1"), (2, False, b"m2")]  # m3 waits: two unacked at most
    consumer.basic_nack(1, requeue=True)
    driver.pump(lambda: len(got) >= 3)
    assert got[2][:3] == (3, True, b"m1")  # back in its place, ahead of m3
    consumer.basic_ack(3, multiple=True)  # settles 2 and 3
    driver.pump(lambda: len(got) >= 4)
    assert got[3][:3] == (4, False, b"m3")
    consumer.basic_ack(4)

    publisher.basic_publish(topology.settle_exchange, topology.retry_queue, b"r",
                            props(expiration="1", headers={"x-walfeed-attempt": 2}), mandatory=True)
    driver.expire(topology.retry_queue)
    driver.pump(lambda: len(got) >= 5)
    tag, _, body, headers = got[4]
    assert body == b"r" and headers["x-walfeed-attempt"] == 2
    death = headers["x-death"][0]
    assert (death["queue"], death["reason"]) == (topology.retry_queue, "expired")
    consumer.basic_ack(tag)

    publisher.basic_publish(topology.settle_exchange, topology.dead_queue, b"d1", props(), mandatory=True)
    with pytest.raises(pika.exceptions.NackError):  # x-max-length 1, reject-publish
        publisher.basic_publish(topology.settle_exchange, topology.dead_queue, b"d2", props(), mandatory=True)

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        broker.declare(conn.channel(), topology.fanout, dead_max_length=2)
    assert refused.value.reply_code == 406
    confirming = conn.channel()
    confirming.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        confirming.basic_publish(f"{topology.events_exchange}.none", "post.created", b"x", props(), mandatory=True)
    assert missing.value.reply_code == 404


def test_declaring_moves_a_queue_bound_on_the_events_exchange_to_the_grouped_exchange(
        driver: Driver, topology: Topology) -> None:
    # Before ADR 0115 walfeed's queues were bound on the events exchange; bound on both they would get every event
    # twice, so declaring binds the queue on the grouped exchange and unbinds it from the events exchange.
    conn = driver.conn
    before = conn.channel()
    before.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
    before.queue_declare(topology.fanout_queue, durable=True, arguments=queues.work_queue(
        queues.CLASSIC, topology.settle_exchange, topology.dead_queue))
    for key in topology.fanout_bindings:
        before.queue_bind(topology.fanout_queue, topology.events_exchange, routing_key=key)
    broker.declare(conn.channel(), topology.fanout)
    broker.declare(conn.channel(), topology.fanout)  # again: unbinding what is not bound is no error
    publisher = conn.channel()
    publisher.confirm_delivery()
    publisher.basic_publish(topology.grouped_exchange, "follow.created", b"g", props(), mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        publisher.basic_publish(topology.events_exchange, "post.created", b"e", props(), mandatory=True)
