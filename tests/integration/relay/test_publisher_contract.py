"""What the relay relies on from its publisher, checked against both: the real one (publisher.Publisher on a real
broker) and the unit tests' stand-in (testing.StubPublisher), so the stand-in cannot drift from the real thing.

Each current message submitted comes back through `on_confirmed` once, with its token; stale messages still
waiting when `drop_stale` is called never do; `stop` ends with `on_stopped`."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import pika
import pytest
from pika.adapters.select_connection import IOLoop

from services.cdc_relay.messages import Outgoing
from services.cdc_relay.publisher import Publisher
from services.cdc_relay.relay import EventPublisher
from services.cdc_relay.sessions import Token, seqs
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.relay import StubPublisher
from testkit.waiting import eventually

pytestmark = pytest.mark.integration


class Driver(Protocol):
    """A publisher under test; `call` runs on its thread, `settle` lets the broker (or the test) confirm."""

    confirmed: list[Token]

    @property
    def publisher(self) -> EventPublisher: ...

    def call(self, action: Callable[[], None]) -> None: ...

    def settle(self) -> None: ...

    def stop(self) -> bool: ...  # True once on_stopped was called


def message(token: int) -> Outgoing[int]:
    return Outgoing(token, b"{}", f"m{token}", "routed", 0)


class StubDriver:
    def __init__(self, is_current: Callable[[Token], bool]) -> None:
        self.confirmed: list[Token] = []
        self.publisher = StubPublisher(self.confirmed.extend, is_current)

    def call(self, action: Callable[[], None]) -> None:
        action()

    def settle(self) -> None:
        self.publisher.confirm()

    def stop(self) -> bool:
        stopped = threading.Event()
        self.publisher.stop(stopped.set)
        return stopped.is_set()


class PikaDriver:
    def __init__(self, is_current: Callable[[Token], bool], infra: Infra, topology: Topology) -> None:
        self.confirmed: list[Token] = []
        self._loop = IOLoop()
        self.publisher: Publisher[Token] = Publisher(self._loop, infra.amqp_url, topology, self.confirmed.extend,
                                                     window=4, is_current=is_current)
        self._thread = threading.Thread(target=self._loop.start, daemon=True)
        self._thread.start()

    def call(self, action: Callable[[], None]) -> None:
        done = threading.Event()

        def on_loop() -> None:
            action()
            done.set()

        self._loop.add_callback_threadsafe(on_loop)
        assert done.wait(10)

    def settle(self) -> None:
        pass  # the broker confirms by itself

    def stop(self) -> bool:
        stopped = threading.Event()
        self.call(lambda: self.publisher.stop(stopped.set))
        stopped.wait(10)
        self._loop.add_callback_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        return stopped.is_set()


def _is_current(current: set[int], token: int | range) -> bool:
    """A token is current when its (first) event's number is: a group's numbers come from one session."""
    return (token.start if isinstance(token, range) else token) in current


@pytest.fixture(params=["stub", "pika"])
def driver(request: pytest.FixtureRequest, infra: Infra, topology: Topology,
           amqp_extra_queues: list[str]) -> Iterator[tuple[Driver, set[int]]]:
    current: set[int] = set()
    if request.param == "stub":
        yield StubDriver(functools.partial(_is_current, current)), current
        return
    observed = f"{topology.prefix}.test.contract"
    amqp_extra_queues.append(observed)
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        channel.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
        channel.queue_declare(observed)
        channel.queue_bind(observed, topology.events_exchange, "routed")
        yield PikaDriver(functools.partial(_is_current, current), infra, topology), current
    finally:
        conn.close()


def test_current_messages_are_confirmed_once_and_stale_waiting_ones_never(driver: tuple[Driver, set[int]]) -> None:
    d, current = driver
    publisher = d.publisher
    current.update(range(10))
    d.call(lambda: publisher.submit([message(t) for t in range(10)]))  # not started: they wait
    current.difference_update(range(5))
    d.call(publisher.drop_stale)
    d.call(publisher.start)
    current.update(range(10, 20))
    d.call(lambda: publisher.submit([message(t) for t in range(10, 20)]))

    def all_confirmed() -> bool:
        d.call(d.settle)
        return len(d.confirmed) >= 15

    eventually(all_confirmed, timeout=30, what="15 confirmations")
    assert sorted(seqs(d.confirmed)) == list(range(5, 20))
    assert d.stop()


def test_a_groups_message_comes_back_once_with_its_range_token(driver: tuple[Driver, set[int]]) -> None:
    d, current = driver
    publisher = d.publisher
    current.update(range(4))
    group = Outgoing(range(0, 3), b"[{},{},{}]", "m0", "routed", 0, None, ("", "", ""))
    d.call(publisher.start)
    d.call(lambda: publisher.submit([group, message(3)]))

    def confirmed() -> bool:
        d.call(d.settle)
        return len(d.confirmed) >= 2

    eventually(confirmed, timeout=30, what="the group's and the single message's confirmations")
    assert d.confirmed == [range(0, 3), 3]
    assert d.stop()
