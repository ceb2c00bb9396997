"""Broker connection helpers shared by the relay (asynchronous adapter) and the worker (blocking adapter), pika."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

import pika
import pika.exceptions

from services.core import backoff, nodes, queues
from services.core.topology import DELIVERY_CHANNELS, Topology

log = logging.getLogger(__name__)


def parameters(url: str, *, heartbeat: int = 30, name: str = "walfeed",
               blocked_connection_timeout: float | None = None) -> pika.URLParameters:
    """`blocked_connection_timeout`: close the connection when the broker has blocked it (resource alarm) for that
    long, instead of waiting forever; None: never closed for being blocked."""
    params = pika.URLParameters(url)
    params.heartbeat = heartbeat
    params.blocked_connection_timeout = blocked_connection_timeout
    params.client_properties = {"connection_name": name}
    params.connection_attempts = 1
    params.socket_timeout = 10
    return params


def node_parameters(url: str, *, heartbeat: int = 30, name: str = "walfeed",
                    blocked_connection_timeout: float | None = None) -> list[pika.URLParameters]:
    """One `parameters` per broker node of a `WALFEED_AMQP_URL` (services/core/nodes.py), in its order: pika's
    BlockingConnection takes the list and connects to the first node that answers."""
    return [parameters(node, heartbeat=heartbeat, name=name, blocked_connection_timeout=blocked_connection_timeout)
            for node in nodes.split(url)]


def connect_with_retry(
    url: str,
    *,
    name: str,
    heartbeat: int = 30,
    base: float = 0.5,
    cap: float = 15.0,
    should_stop: Callable[[], bool] = lambda: False,
) -> pika.BlockingConnection | None:
    """Connect to the first node of `url` that answers, retrying with capped backoff while none does (a booting
    broker is normal).

    Returns None only when `should_stop()` becomes true while waiting.
    """
    attempt = 0
    while not should_stop():
        attempt += 1
        try:
            return pika.BlockingConnection(node_parameters(url, heartbeat=heartbeat, name=name))
        except pika.exceptions.AMQPError as exc:
            wait = backoff.delay(attempt, base, cap)
            log.warning("broker unreachable, retrying", extra={"attempt": attempt, "error": repr(exc),
                                                                "retry_in": round(wait, 2)})
            _sleep_unless(wait, should_stop)
    return None


def _sleep_unless(seconds: float, should_stop: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while not should_stop() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


# How the events exchange is declared (docs/amqp.md), by the worker's blocking channel and the relay's
# asynchronous one alike: a declaration that differs from the existing exchange is refused by the broker.
EVENTS_EXCHANGE: Final[dict[str, Any]] = {"exchange_type": "topic", "durable": True}


def declare_events_exchange(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology) -> None:
    channel.exchange_declare(topology.events_exchange, **EVENTS_EXCHANGE)


PRECONDITION_FAILED: Final = 406  # AMQP reply code of a redeclaration with other arguments
_RECONNECT_PAUSE: Final = 1.0  # seconds after a lost connection before connecting again (connect itself backs off)


class ConsumerSession(Protocol):
    def run(self) -> None: ...

    def abandon(self) -> None: ...


# Appended to every "a queue exists with other arguments" error: quorum and classic queues differ in more arguments
# than x-queue-type, and the broker names only the first that differs.
TYPE_MISMATCH: Final = (
    "; or the queues were declared with another WALFEED_AMQP_QUEUE_TYPE (classic or quorum) than this process has, "
    "and a queue's type never changes: give every walfeed process the type the queues have, or move to the other "
    "type as docs/amqp.md 'Queue types' says")


def consume(url: str, name: str, stopping: threading.Event,
            session: Callable[[pika.BlockingConnection], ConsumerSession], mismatch: str) -> int:
    """Run consumer sessions, connecting again after each lost connection, until `stopping` is set: 0. A queue
    that exists with other arguments than the session declares is logged with `mismatch` (what to do) and
    TYPE_MISMATCH: 2."""
    while not stopping.is_set():
        conn = connect_with_retry(url, name=name, should_stop=stopping.is_set)
        if conn is None:
            break
        current = session(conn)
        try:
            current.run()
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != PRECONDITION_FAILED:
                raise
            log.error(mismatch + TYPE_MISMATCH, extra={"error": exc.reply_text})
            return 2
        except pika.exceptions.AMQPError as exc:
            log.warning("broker connection lost, reconnecting", extra={"error": repr(exc)})
            current.abandon()
            stopping.wait(_RECONNECT_PAUSE)
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError):
                if conn.is_open:
                    conn.close()
    return 0


def declare_delivery_queue(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology,
                           name: str, queue_type: str) -> str:
    """One delivery channel's work queue, bound to its event type; returns its name."""
    queue = topology.delivery_queue(name)
    channel.queue_declare(queue, durable=True, arguments=queues.work_queue(
        queue_type, topology.delivery_settle_exchange, topology.delivery_dead_queue(name)))
    channel.queue_bind(queue, topology.events_exchange, routing_key=topology.delivery_binding(name))
    return queue


def declare_delivery_queues(channel: pika.adapters.blocking_connection.BlockingChannel, topology: Topology,
                            queue_type: str = queues.CLASSIC) -> None:
    """The work queue of each delivery channel, bound to its event type (docs/amqp.md). Declared by the notifier,
    which writes the delivery events, as well as by the delivery worker, which consumes them: the relay publishes
    `mandatory` and holds its WAL position while an event is unroutable (ADR 0012), so these queues must exist
    before the first delivery event, whichever process starts first. Both declare them the same way, here."""
    declare_events_exchange(channel, topology)
    for name in DELIVERY_CHANNELS:
        declare_delivery_queue(channel, topology, name, queue_type)
