"""In-memory stand-ins for the consumer runtime's broker, for unit tests: what procrastinate's InMemoryConnector
and dramatiq's StubBroker are to theirs, and testkit/relay.py to the relay.

`StubBroker` keeps exchanges, bindings and queues the way RabbitMQ routes them (topic and direct exchanges,
`x-max-length` with `reject-publish`, dead-lettering of expired messages); `StubConnection` is the part of pika's
BlockingConnection the runtime uses (services/consumer/connection.py Connection, StubChannel its Channel), and its
`process_data_events` does one step at a time: run the callbacks handed back by worker threads, else the timers
(`call_later`, due at once: time passes in steps here), else deliver up to the prefetch, else let a
`ManualExecutor` run one task (as if its thread finished), else call `on_idle`. Hand them to a
services/consumer/session.py Session as main.run hands it the real ones (docs/adr/0025).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import pika
import pika.exceptions
from pika.spec import Basic

P = ParamSpec("P")
R = TypeVar("R")

PRECONDITION_FAILED = 406  # RabbitMQ's reply to a bad ack or redeclaration
NOT_FOUND = 404  # RabbitMQ's reply to a publish to an undeclared exchange
IDLE_LIMIT = 1000  # idle steps before giving up on a session that never stops


class ManualExecutor(Executor):
    """Holds submitted tasks until `run_one` runs the oldest (a cancelled one is skipped, as a pool skips it).
    While `paused`, `run_one` runs nothing: the thread is busy elsewhere. `at_once`: `run_one` runs every task
    pending, as if all the pool's threads finished in the same moment."""

    def __init__(self, *, at_once: bool = False) -> None:
        self._pending: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self.paused = False
        self.at_once = at_once
        self.ran = 0

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        future: Future[R] = Future()
        self._pending.append((future, lambda: fn(*args, **kwargs)))
        return future

    @property
    def pending(self) -> int:
        return sum(1 for future, _ in self._pending if not future.cancelled())

    def run_one(self) -> bool:
        if not self.at_once:
            return self._run_one()
        ran = False
        while self._run_one():
            ran = True
        return ran

    def _run_one(self) -> bool:
        while self._pending and not self.paused:
            future, task = self._pending.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(task())
            except BaseException as exc:  # as a pool does: the future holds it
                future.set_exception(exc)
            self.ran += 1
            return True
        return False


_arrivals = itertools.count()


@dataclass
class Queued:
    body: bytes
    props: pika.BasicProperties
    exchange: str
    routing_key: str
    redelivered: bool = False
    arrival: int = field(default_factory=lambda: next(_arrivals))


@dataclass
class Queue:
    name: str
    arguments: dict[str, object]
    messages: deque[Queued] = field(default_factory=deque)

    def requeue(self, message: Queued) -> None:
        """Back where it was among the messages still queued (RabbitMQ keeps a requeued message's position)."""
        message.redelivered = True
        later = next((i for i, m in enumerate(self.messages) if m.arrival > message.arrival), len(self.messages))
        self.messages.insert(later, message)

    def full(self) -> bool:
        limit = self.arguments.get("x-max-length")
        return (isinstance(limit, int) and len(self.messages) >= limit
                and self.arguments.get("x-overflow") == "reject-publish")


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: `*` is one word, `#` zero or more."""
    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        return bool(k) and p[0] in ("*", k[0]) and match(p[1:], k[1:])
    return match(pattern.split("."), key.split("."))


class StubBroker:
    """Exchanges, bindings and queues in memory. Tests `publish` to an exchange, read `queues[name].messages`, and
    `expire` a queue as if every message's TTL had passed."""

    def __init__(self) -> None:
        self.exchanges: dict[str, str] = {"": "direct"}
        self.bindings: list[tuple[str, str, str]] = []  # (exchange, routing key, queue)
        self.queues: dict[str, Queue] = {}

    def declare_queue(self, name: str, arguments: dict[str, object] | None) -> None:
        queue = self.queues.setdefault(name, Queue(name, dict(arguments or {})))
        if queue.arguments != dict(arguments or {}):
            raise pika.exceptions.ChannelClosedByBroker(
                PRECONDITION_FAILED, f"PRECONDITION_FAILED - inequivalent arg for queue '{name}'")

    def route(self, exchange: str, routing_key: str) -> list[Queue]:
        if exchange not in self.exchanges:
            raise pika.exceptions.ChannelClosedByBroker(NOT_FOUND, f"NOT_FOUND - no exchange '{exchange}'")
        if exchange == "":
            return [self.queues[routing_key]] if routing_key in self.queues else []
        topic = self.exchanges[exchange] == "topic"
        names = {queue for ex, key, queue in self.bindings if ex == exchange
                 and (topic_matches(key, routing_key) if topic else key == routing_key)}
        return [self.queues[name] for name in sorted(names)]

    def publish(self, exchange: str, routing_key: str, body: bytes, props: pika.BasicProperties) -> bool:
        """Route one message; False if a queue it routes to is full and refuses it (a publisher's nack)."""
        queues = self.route(exchange, routing_key)
        if any(q.full() for q in queues):
            return False
        for queue in queues:
            queue.messages.append(Queued(body, props, exchange, routing_key))
        return True

    def expire(self, name: str) -> int:
        """Every message in queue `name` reaches its TTL: dead-lettered as its queue's arguments say, with the
        `x-death` header RabbitMQ adds. Returns how many moved."""
        queue = self.queues[name]
        exchange = str(queue.arguments["x-dead-letter-exchange"])
        moved = 0
        while queue.messages:
            m = queue.messages.popleft()
            key = str(queue.arguments.get("x-dead-letter-routing-key", m.routing_key))
            death = {"queue": name, "reason": "expired", "count": 1, "exchange": m.exchange}
            headers = {**(m.props.headers or {}), "x-death": [death]}
            props = pika.BasicProperties(message_id=m.props.message_id, type=m.props.type, headers=headers,
                                         content_type=m.props.content_type, timestamp=m.props.timestamp,
                                         delivery_mode=m.props.delivery_mode)
            moved += self.publish(exchange, key, m.body, props)
        return moved

    def bodies(self, name: str) -> list[bytes]:
        return [m.body for m in self.queues[name].messages]


class StubChannel:
    """A channel of StubConnection: declarations, qos, consume, ack/nack, and publishing with confirms (raising
    pika's NackError and UnroutableError as BlockingChannel does)."""

    def __init__(self, broker: StubBroker) -> None:
        self._broker = broker
        self._tags = itertools.count(1)
        self._confirming = False
        self.closed = False
        self.prefetch = 0
        self.consumers: dict[str, tuple[str, Callable[..., None]]] = {}  # consumer tag -> (queue, callback)
        self.unacked: dict[int, tuple[str, Queued]] = {}  # delivery tag -> (queue, message), in delivery order
        self.acks: list[tuple[int, bool]] = []  # every basic.ack frame: (delivery tag, multiple)
        self.nacks: list[tuple[int, bool]] = []  # every basic.nack frame: (delivery tag, requeue)

    def exchange_declare(self, exchange: str, exchange_type: str = "direct", durable: bool = False) -> None:
        self._broker.exchanges.setdefault(exchange, exchange_type)

    def queue_declare(self, queue: str, durable: bool = False, arguments: dict[str, object] | None = None) -> None:
        self._broker.declare_queue(queue, arguments)

    def queue_bind(self, queue: str, exchange: str, routing_key: str) -> None:
        if (exchange, routing_key, queue) not in self._broker.bindings:
            self._broker.bindings.append((exchange, routing_key, queue))

    def queue_unbind(self, queue: str, exchange: str, routing_key: str) -> None:
        if (exchange, routing_key, queue) in self._broker.bindings:  # RabbitMQ: unbinding what is not bound is fine
            self._broker.bindings.remove((exchange, routing_key, queue))

    def basic_qos(self, prefetch_count: int = 0) -> None:
        self.prefetch = prefetch_count

    def confirm_delivery(self) -> None:
        self._confirming = True

    def close(self) -> None:
        self.closed = True

    def basic_publish(self, exchange: str, routing_key: str, body: bytes,
                      properties: pika.BasicProperties | None = None, mandatory: bool = False) -> None:
        if not self._broker.route(exchange, routing_key):
            if mandatory and self._confirming:
                raise pika.exceptions.UnroutableError([])
            return
        props = properties or pika.BasicProperties()
        if not self._broker.publish(exchange, routing_key, body, props) and self._confirming:
            raise pika.exceptions.NackError([])

    def basic_consume(self, queue: str, on_message_callback: Callable[..., None], auto_ack: bool = False) -> str:
        assert not auto_ack, "a consumer acks after its effects commit"
        tag = f"ctag{len(self.consumers) + 1}"
        self.consumers[tag] = (queue, on_message_callback)
        return tag

    def basic_cancel(self, consumer_tag: str) -> None:
        del self.consumers[consumer_tag]

    def basic_ack(self, delivery_tag: int, multiple: bool = False) -> None:
        self.acks.append((delivery_tag, multiple))
        for tag in self._settled(delivery_tag, multiple):
            del self.unacked[tag]

    def basic_nack(self, delivery_tag: int, multiple: bool = False, requeue: bool = True) -> None:
        assert requeue, "a consumer dead-letters by publishing, never by nack(requeue=False)"
        self.nacks.append((delivery_tag, requeue))
        for tag in self._settled(delivery_tag, multiple):
            name, message = self.unacked.pop(tag)
            self._broker.queues[name].requeue(message)

    def _settled(self, delivery_tag: int, multiple: bool) -> list[int]:
        if delivery_tag not in self.unacked:  # RabbitMQ closes the channel on a double or foreign ack
            raise pika.exceptions.ChannelClosedByBroker(
                PRECONDITION_FAILED, f"PRECONDITION_FAILED - unknown delivery tag {delivery_tag}")
        return [t for t in self.unacked if t <= delivery_tag] if multiple else [delivery_tag]

    def deliver(self) -> int:
        """Push queued messages to the consumers, while fewer than `prefetch` are unacked. Returns how many."""
        delivered = 0
        for consumer_tag, (name, callback) in list(self.consumers.items()):
            queue = self._broker.queues[name]
            while queue.messages and (not self.prefetch or len(self.unacked) < self.prefetch) \
                    and consumer_tag in self.consumers:
                message = queue.messages.popleft()
                tag = next(self._tags)
                self.unacked[tag] = (name, message)
                method = Basic.Deliver(consumer_tag, tag, message.redelivered, message.exchange, message.routing_key)
                callback(self, method, message.props, message.body)
                delivered += 1
        return delivered


class StubConnection:
    """pika.BlockingConnection in memory (a services/consumer/connection.py Connection), for a session whose pools
    are ManualExecutors (`workers`).
    `process_data_events` does one step (see the module docstring); after IDLE_LIMIT idle steps in a row without
    `on_idle` stopping the session, it raises instead of spinning."""

    def __init__(self, broker: StubBroker, workers: Iterable[ManualExecutor] = (),
                 on_idle: Callable[[], None] | None = None) -> None:
        self.broker = broker
        self.workers = list(workers)
        self.on_idle = on_idle
        self.channels: list[StubChannel] = []
        self._callbacks: deque[Callable[[], None]] = deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []  # (delay, order, callback)
        self._order = itertools.count()
        self._idle = 0
        self.is_open = True

    def channel(self) -> StubChannel:
        self.channels.append(StubChannel(self.broker))
        return self.channels[-1]

    def add_callback_threadsafe(self, callback: Callable[[], None]) -> None:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("BlockingConnection.add_callback_threadsafe() called "
                                                            "on closed or closing connection.")
        self._callbacks.append(callback)

    def call_later(self, delay: float, callback: Callable[[], None]) -> int:
        """A timer of the connection's thread; fired, in order of delay, on the next step without callbacks."""
        order = next(self._order)
        self._timers.append((delay, order, callback))
        return order

    def process_data_events(self, time_limit: float = 0) -> None:
        if not self.is_open:
            raise pika.exceptions.StreamLostError("Stream connection lost: closed by the test")
        if self._step():
            self._idle = 0
            return
        self._idle += 1
        if self._idle > IDLE_LIMIT:
            raise RuntimeError(f"nothing to do for {IDLE_LIMIT} steps and the session did not stop")
        if self.on_idle is not None:
            self.on_idle()

    def _step(self) -> bool:
        if self._callbacks:
            while self._callbacks:
                self._callbacks.popleft()()
            return True
        if self._timers:
            due, self._timers = sorted(self._timers), []
            for _, _, callback in due:
                callback()
            return True
        if sum(channel.deliver() for channel in self.channels):
            return True
        return any(worker.run_one() for worker in self.workers)

    @property
    def unacked(self) -> int:
        return sum(len(channel.unacked) for channel in self.channels)

    def close(self) -> None:
        """Closed, or lost: the broker puts every unacked message back."""
        for channel in self.channels:
            for name, message in channel.unacked.values():
                self.broker.queues[name].requeue(message)
            channel.unacked.clear()
        self.is_open = False

