"""RabbitMQ adapter of `walfeed dead`: holds a dead queue's letters unacked while a command looks at them, acks the
ones it removes, republishes with confirms, and returns the rest to the queue.

A held letter is the broker's until it is acked: if the command stops in any way (a return, an exception, SIGKILL),
the channel closes and the broker puts every held letter back in the queue (docs/adr/0070).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, Final

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from services.cli.dead_letters import Letter
from services.core.amqp import node_parameters
from services.core.topology import DeadLetterQueue

# After this long without a delivery, ask the queue whether it has anything ready left for us.
IDLE: Final = 1.0
ACCESS_REFUSED: Final = 403  # AMQP reply code
_PROPERTIES: Final = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                      "reply_to", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id")


class BrokerError(Exception):
    """The broker cannot be reached or refused what the command asked; the message says which."""


class NotReadable(BrokerError):
    """This broker user may not read the queue (another process's user declared it, docs/adr/0060)."""


class Refused(BrokerError):
    """The broker did not confirm a replayed copy (nacked, or no queue is bound for it): the letter stays dead."""


def _properties(props: pika.BasicProperties) -> dict[str, Any]:
    return {name: getattr(props, name) for name in _PROPERTIES if getattr(props, name) is not None}


class Held:
    """The letters of one dead queue, held unacked on a channel of their own."""

    def __init__(self, channel: BlockingChannel, queue: DeadLetterQueue) -> None:
        self._channel = channel
        self.queue = queue
        self.letters: list[Letter] = []

    def take(self, expected: int, matches: Callable[[Letter], bool], want: int | None,
             ready: Callable[[], int | None]) -> None:
        """Hold what the queue has ready (`expected`, its depth at the start), or until `want` letters `matches`.
        A pause in deliveries ends it only once the queue has nothing ready left (`ready`): a busy broker may
        pause longer than IDLE."""
        found = 0
        if expected == 0 or want == 0:
            return
        for method, props, body in self._channel.consume(self.queue.name, inactivity_timeout=IDLE):
            if method is None:
                if not ready():
                    break
                continue
            letter = Letter(self.queue.name, method.delivery_tag, body, _properties(props), dict(props.headers or {}))
            self.letters.append(letter)
            found += matches(letter)
            if len(self.letters) >= expected or (want is not None and found >= want):
                break
        self._channel.cancel()  # what the broker sent beyond these goes back at once, and no more comes

    def remove(self, letter: Letter) -> None:
        """Ack: the letter leaves the dead queue for good."""
        self._channel.basic_ack(letter.tag)

    def release(self) -> None:
        """Every letter not removed goes back to the queue, in its place."""
        with contextlib.suppress(pika.exceptions.AMQPError):
            self._channel.basic_nack(0, multiple=True, requeue=True)
            self._channel.close()


class DeadBroker:
    def __init__(self, amqp_url: str) -> None:
        try:
            self._conn = pika.BlockingConnection(node_parameters(amqp_url, name="walfeed-dead"))
        except pika.exceptions.AMQPError as exc:
            raise BrokerError(f"broker unreachable at WALFEED_AMQP_URL: {exc!r}") from None
        self._publisher: BlockingChannel | None = None

    def close(self) -> None:
        with contextlib.suppress(pika.exceptions.AMQPError):
            self._conn.close()

    def depth(self, queue: str) -> int | None:
        """Ready messages in `queue`; None if it is not declared (no consumer of it ever started)."""
        channel = self._conn.channel()  # a failed passive declare closes its channel
        try:
            count = int(channel.queue_declare(queue, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return None
        channel.close()
        return count

    def hold(self, queue: DeadLetterQueue, matches: Callable[[Letter], bool] = lambda _: True,
             want: int | None = None) -> Held | None:
        """A Held of the queue's ready letters (or as many as it takes for `want` to match); None if the queue is
        not declared; NotReadable if this broker user may not consume from it."""
        expected = self.depth(queue.name)
        if expected is None:
            return None
        held = Held(self._conn.channel(), queue)
        try:
            held.take(expected, matches, want, lambda: self.depth(queue.name))
        except pika.exceptions.ChannelClosedByBroker as exc:
            if exc.reply_code != ACCESS_REFUSED:
                raise
            raise NotReadable(f"{queue.name}: this broker user may not read it ({exc.reply_text})") from None
        return held

    def republish(self, queue: DeadLetterQueue, letter: Letter, headers: dict[str, Any]) -> None:
        """Publish a copy to where the letter came from and wait for the broker's confirm; Refused if it did not
        take it. The copy keeps the body and properties (no expiration), with `headers`."""
        if self._publisher is None:
            self._publisher = self._conn.channel()
            self._publisher.confirm_delivery()
        props = pika.BasicProperties(**{**letter.properties, "headers": headers})
        try:
            self._publisher.basic_publish(queue.exchange, queue.routing_key, letter.body, props, mandatory=True)
        except pika.exceptions.UnroutableError:
            raise Refused(f"no queue took the copy from {queue.exchange} with routing key {queue.routing_key} "
                          f"(is {queue.origin} declared? start its consumer once)") from None
        except pika.exceptions.NackError:
            raise Refused(f"the broker refused the copy for {queue.origin} (nack)") from None
        except pika.exceptions.ChannelClosedByBroker as exc:  # e.g. the exchange does not exist
            self._publisher = None
            raise Refused(f"the broker closed the channel publishing to {queue.exchange}: {exc.reply_text} "
                          f"(start {queue.origin}'s consumer once: it declares its exchange)") from None

    def sleep(self, seconds: float) -> None:
        """Wait without starving the connection's heartbeats."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._conn.process_data_events(time_limit=min(left, 1.0))
