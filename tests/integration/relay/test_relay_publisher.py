"""The publisher against the real broker: asynchronous confirms on pika's SelectConnection (docs/adr/0014), here
on a thread of its own (PublisherThread, as the polling source runs it), deliver every token once, and a message
nobody takes is never reported confirmed. A small window is refilled by the acks themselves, and never exceeded."""

from __future__ import annotations

import threading
from collections.abc import Hashable

import pika
import pytest
from pika.adapters.select_connection import IOLoop

from services.cdc_relay.publisher import Outgoing, Publisher, PublisherThread
from services.core.topology import Topology
from tests.harness.infra import Infra
from tests.harness.waiting import eventually

pytestmark = pytest.mark.integration


def test_async_confirms_come_back_once_per_token_and_returns_are_not_confirms(infra: Infra,
                                                                               topology: Topology) -> None:
    confirmed: list[Hashable] = []
    lock = threading.Lock()

    def on_confirmed(tokens: list[Hashable]) -> None:
        with lock:
            confirmed.extend(tokens)

    window = 16
    publisher = PublisherThread(infra.amqp_url, topology, on_confirmed, window=window)
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
    queue = f"{topology.prefix}.test.publisher"
    try:
        channel = conn.channel()
        channel.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
        channel.queue_declare(queue, auto_delete=False)
        channel.queue_bind(queue, topology.events_exchange, "routed")
        routed = [Outgoing(i, "routed", b"{}", f"m{i}", "routed", 0) for i in range(500)]
        lost = [Outgoing("nobody", "nobody.listens", b"{}", "lost", "nobody.listens", 0)]
        publisher.submit(routed[:250] + lost)
        publisher.submit(routed[250:])
        eventually(lambda: len(confirmed) >= 500, timeout=30, what="500 confirms")
        eventually(lambda: channel.queue_declare(queue, passive=True).method.message_count == 500, timeout=10,
                   what="500 messages in the queue")
        with lock:
            assert sorted(confirmed, key=str) == sorted(range(500), key=str)  # each once, the unroutable never
        watching.set()
        watcher.join(5)
        assert 0 < most_unconfirmed[0] <= window
    finally:
        publisher.stop()
        publisher.join(10)
        conn.channel().queue_delete(queue)
        conn.close()
    assert not publisher.is_alive()


def test_stop_during_the_broker_handshake_ends_cleanly(infra: Infra, topology: Topology) -> None:
    """Stopped once the TCP connection is up and the AMQP handshake under way: closing the connection there trips
    an assertion inside pika (docs/adr/0014). The stop must wait for the open (or its failure) instead; an
    exception on the publisher's thread fails this test (pytest turns unhandled thread exceptions into errors)."""
    for _ in range(20):
        publisher = PublisherThread(infra.amqp_url, topology, lambda _tokens: None, window=10)
        publisher.start()
        # A peek at pika's private state, to aim at the race: the socket is connected, the handshake not over.
        eventually(lambda p=publisher: (c := p._publisher._conn) is not None and c._transport is not None,  # type: ignore[misc]
                   timeout=10, interval=0.0005, what="TCP connection up")
        publisher.stop()
        publisher.join(10)
        assert not publisher.is_alive()


def test_stale_messages_are_dropped_waiting_or_failing(infra: Infra, topology: Topology) -> None:
    """Messages whose tokens went stale (the relay's, when a replication session ends) are never published again:
    `drop_stale` drops those waiting, and one failing afterwards (returned: nobody takes it) is not retried. Shown
    by the publisher holding nothing of them any more, so nothing can publish them; then a fresh message with the
    same routing key, now routed, is the only one to arrive."""
    ioloop = IOLoop()
    current: set[Hashable] = {f"u{i}" for i in range(20)} | set(range(50)) | {"fresh"}
    confirmed: list[Hashable] = []
    publisher = Publisher(ioloop, infra.amqp_url, topology, confirmed.extend, window=8,
                          is_current=lambda token: token in current)

    def loop() -> None:
        publisher.start()
        ioloop.start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    routed, late = f"{topology.prefix}.test.routed", f"{topology.prefix}.test.late"
    channel = conn.channel()
    try:
        channel.exchange_declare(topology.events_exchange, exchange_type="topic", durable=True)
        channel.queue_declare(routed)
        channel.queue_bind(routed, topology.events_exchange, "routed")
        unroutable = [Outgoing(f"u{i}", "nobody.yet", b"{}", f"u{i}", "nobody.yet", 0) for i in range(20)]
        messages = [Outgoing(i, "routed", b"{}", f"m{i}", "routed", 0) for i in range(50)]
        ioloop.add_callback_threadsafe(lambda: publisher.submit(unroutable + messages))
        eventually(lambda: len(confirmed) == 50, timeout=30, what="the routed messages confirmed")
        assert publisher.waiting + publisher.unconfirmed > 0  # the unroutable ones: retried, with backoff

        def session_ended() -> None:
            current.difference_update(m.token for m in unroutable)
            publisher.drop_stale()

        ioloop.add_callback_threadsafe(session_ended)
        eventually(lambda: publisher.waiting == 0 and publisher.unconfirmed == 0, timeout=30,
                   what="nothing of the stale messages held")
        channel.queue_declare(late)
        channel.queue_bind(late, topology.events_exchange, "nobody.yet")
        fresh = Outgoing("fresh", "nobody.yet", b"{}", "fresh", "nobody.yet", 0)
        ioloop.add_callback_threadsafe(lambda: publisher.submit([fresh]))
        eventually(lambda: "fresh" in confirmed, timeout=30, what="the fresh message confirmed")
        got = [channel.basic_get(late, auto_ack=True) for _ in range(2)]
        assert got[0][2] is not None and got[0][1].message_id == "fresh" and got[1][0] is None
        assert sorted(confirmed, key=str) == sorted([*range(50), "fresh"], key=str)
    finally:
        ioloop.add_callback_threadsafe(lambda: publisher.stop(ioloop.stop))
        thread.join(10)
        ioloop.close()
        for queue in (routed, late):
            channel.queue_delete(queue)
        conn.close()
    assert not thread.is_alive()
