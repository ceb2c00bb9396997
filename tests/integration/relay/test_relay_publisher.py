"""The publisher against the real broker: asynchronous confirms on pika's SelectConnection (docs/adr/0014), here
on a thread of its own (PublisherThread, as the polling source runs it), deliver every token once, and a message
nobody takes is never reported confirmed. A small window is refilled by the acks themselves, and never exceeded."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

import pika
import pytest
from pika.adapters.select_connection import IOLoop

from services.cdc_relay.messages import Outgoing
from services.cdc_relay.publisher import Publisher
from services.cdc_relay.publisher_thread import PublisherThread
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.waiting import eventually

pytestmark = pytest.mark.integration

T = TypeVar("T")


def test_async_confirms_come_back_once_per_token_and_returns_are_not_confirms(
        infra: Infra, topology: Topology, amqp_extra_queues: list[str]) -> None:
    confirmed: list[Hashable] = []
    lock = threading.Lock()

    def on_confirmed(tokens: list[Hashable]) -> None:
        with lock:
            confirmed.extend(tokens)

    window = 16
    publisher: PublisherThread[Hashable] = PublisherThread(infra.amqp_url, topology, on_confirmed, window=window)
    publisher.start()
    most_unconfirmed = [0]
    watching = threading.Event()

    def watch() -> None:  # samples: it can miss a peak, never invent one
        while not watching.is_set():
            most_unconfirmed[0] = max(most_unconfirmed[0], publisher.unconfirmed)
            watching.wait(0.0005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    observed = f"{topology.prefix}.test.publisher"
    amqp_extra_queues.append(observed)
    try:
        channel = conn.channel()
        channel.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
        channel.queue_declare(observed, auto_delete=False)
        channel.queue_bind(observed, topology.events_exchange, "routed")
        routed: list[Outgoing[Hashable]] = [Outgoing(i, b"{}", f"m{i}", "routed", 0) for i in range(500)]
        lost: list[Outgoing[Hashable]] = [Outgoing("nobody", b"{}", "lost", "nobody.listens", 0)]
        publisher.submit(routed[:250] + lost)
        publisher.submit(routed[250:])
        eventually(lambda: len(confirmed) >= 500, timeout=30, what="500 confirms")
        eventually(lambda: channel.queue_declare(observed, passive=True).method.message_count == 500, timeout=10,
                   what="500 messages in the queue")
        with lock:
            assert sorted(confirmed, key=str) == sorted(range(500), key=str)  # each once, the unroutable never
        watching.set()
        watcher.join(5)
        assert 0 < most_unconfirmed[0] <= window
    finally:
        watching.set()
        publisher.stop()
        publisher.join(10)
        conn.close()
    assert not publisher.is_alive()


def test_stop_during_the_broker_handshake_ends_cleanly(infra: Infra, topology: Topology) -> None:
    """Stopped once the TCP connection is up and the AMQP handshake under way: closing the connection there trips
    an assertion inside pika (docs/adr/0014). The stop must wait for the open (or its failure) instead; an
    exception on the publisher's thread fails this test (pytest turns unhandled thread exceptions into errors)."""
    for _ in range(20):
        publisher: PublisherThread[str] = PublisherThread(infra.amqp_url, topology, lambda _tokens: None, window=10)
        publisher.start()
        try:
            # A peek at pika's private state, to aim at the race: the socket is connected, the handshake not over.
            eventually(lambda p=publisher: (c := p._publisher._conn) is not None and c._transport is not None,  # type: ignore[misc]
                       timeout=10, interval=0.0005, what="TCP connection up")
        finally:
            publisher.stop()
            publisher.join(10)
        assert not publisher.is_alive()


def test_stale_messages_are_dropped_waiting_or_failing(infra: Infra, topology: Topology,
                                                       amqp_extra_queues: list[str]) -> None:
    """Messages whose tokens went stale (the relay's, when a replication session ends) are never published again:
    `drop_stale` drops those waiting (ready, or retrying after a return), and those in flight are not published
    again when they fail. Shown by the publisher holding nothing of them any more, so nothing can publish them; then
    a fresh message with the same routing key, now routed, is the only one to arrive."""
    ioloop = IOLoop()
    current: set[Hashable] = set()
    confirmed: list[Hashable] = []
    publisher: Publisher[Hashable] = Publisher(ioloop, infra.amqp_url, topology, confirmed.extend, window=8,
                          is_current=lambda token: token in current)

    def on_loop(call: Callable[[], T]) -> T:
        """`call()` run on the publisher's loop (its state is the loop's), its result handed back."""
        box: queue.Queue[T] = queue.Queue()
        ioloop.add_callback_threadsafe(lambda: box.put(call()))
        return box.get(timeout=10)

    def held() -> int:
        return on_loop(lambda: publisher.waiting + publisher.unconfirmed)

    def unroutable(name: str, count: int) -> list[Outgoing[Hashable]]:
        current.update(f"{name}{i}" for i in range(count))
        return [Outgoing(f"{name}{i}", b"{}", f"{name}{i}", "nobody.yet", 0) for i in range(count)]

    def session_ended(messages: list[Outgoing[Hashable]]) -> None:
        current.difference_update(m.token for m in messages)
        publisher.drop_stale()

    def run() -> None:
        publisher.start()
        ioloop.start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    routed, late = f"{topology.prefix}.test.routed", f"{topology.prefix}.test.late"
    amqp_extra_queues.extend([routed, late])
    try:
        channel = conn.channel()
        channel.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
        channel.queue_declare(routed)
        channel.queue_bind(routed, topology.events_exchange, "routed")
        # 1. Returned, retrying with backoff, then stale: dropped from the retry heap (or on their next failure).
        retrying = unroutable("u", 20)
        current.update(range(50))
        messages: list[Outgoing[Hashable]] = [Outgoing(i, b"{}", f"m{i}", "routed", 0) for i in range(50)]
        on_loop(lambda: publisher.submit(retrying + messages))
        eventually(lambda: len(confirmed) == 50, timeout=30, what="the routed messages confirmed")
        assert held() > 0  # the unroutable ones: retried, with backoff
        on_loop(lambda: session_ended(retrying))
        eventually(lambda: held() == 0, timeout=30, what="nothing of the stale messages held")
        # 2. In flight (a full window) and ready (the rest) when they go stale: the ready ones dropped at once, the
        # in-flight ones when they come back returned.
        batch = unroutable("v", 12)

        def submit_then_end() -> tuple[int, int]:
            publisher.submit(batch)
            at_the_end = publisher.unconfirmed, publisher.waiting
            session_ended(batch)
            return at_the_end

        assert on_loop(submit_then_end) == (8, 4)
        eventually(lambda: held() == 0, timeout=30, what="nothing of the stale in-flight messages held")
        # 3. Routed now: only a fresh message arrives.
        channel.queue_declare(late)
        channel.queue_bind(late, topology.events_exchange, "nobody.yet")
        current.add("fresh")
        on_loop(lambda: publisher.submit([Outgoing("fresh", b"{}", "fresh", "nobody.yet", 0)]))
        eventually(lambda: "fresh" in confirmed, timeout=30, what="the fresh message confirmed")
        got = [channel.basic_get(late, auto_ack=True) for _ in range(2)]
        assert got[0][2] is not None and got[0][1].message_id == "fresh" and got[1][0] is None
        assert sorted(confirmed, key=str) == sorted([*range(50), "fresh"], key=str)
    finally:
        ioloop.add_callback_threadsafe(lambda: publisher.stop(ioloop.stop))
        thread.join(10)
        if not thread.is_alive():
            ioloop.close()
        conn.close()
    assert not thread.is_alive()
