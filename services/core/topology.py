"""AMQP names (docs/amqp.md), derived from one prefix. Pure: declarations live in each service's adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

# Notification delivery channels: one work queue each, `{prefix}.deliveries.{channel}`, bound to `delivery.{channel}`.
DELIVERY_CHANNELS: Final = ("webhook", "email")

# The delivery retry queues' delays, one queue per delay with that queue-level TTL, so a queue's head always expires
# first (no head-of-line blocking). A wait of any length is a chain of hops, the longest delay that fits first:
# 128 ms to 2**27 ms (37 h), at most 21 hops (docs/adr/0081).
DELIVERY_RETRY_DELAYS_MS: Final = tuple(1 << k for k in range(7, 28))

@dataclass(frozen=True, slots=True)
class ConsumerQueues:
    """One walfeed consumer of the events (docs/adr/0020): its work queue and its bindings on `source` (the
    grouped exchange, docs/adr/0115), its retry and dead queues, and the direct exchange it republishes through
    (retry copies, dead letters, expired retries back). `events_exchange`, the published single-event exchange,
    is the one its queue was bound to before ADR 0115: it unbinds the queue there at start."""

    events_exchange: str
    queue: str
    bindings: tuple[str, ...]
    retry_queue: str
    dead_queue: str
    settle_exchange: str
    source: str

    def queues(self) -> tuple[str, ...]:
        return (self.queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        return (self.events_exchange, self.source, self.settle_exchange)


@dataclass(frozen=True, slots=True)
class DeadLetterQueue:
    """A dead queue and how its letters go back where they came from: published to `exchange` with `routing_key`
    (the origin queue's binding there), as the consumer that dead-lettered them publishes its own copies."""

    name: str
    origin: str  # the queue the letters were consumed from
    exchange: str
    routing_key: str
    # A delivery channel's dead queue: each letter names a row of `deliveries`, which a replay makes PENDING again
    # (docs/adr/0070); None for consumers whose letters are replayed by republishing alone.
    delivery_channel: str | None = None


@dataclass(frozen=True, slots=True)
class Topology:
    prefix: str

    @property
    def events_exchange(self) -> str:
        return f"{self.prefix}.events"

    @property
    def grouped_exchange(self) -> str:
        """Topic exchange of walfeed's own consumers (docs/adr/0115): every fan-out event (`post.*`, `follow.*`)
        again, routing key = its type, in groups of up to WALFEED_RELAY_GROUP_MAX events a message (docs/events.md
        "Groups"). `events_exchange` carries each of them alone, the published contract."""
        return f"{self.prefix}.events.grouped"

    @property
    def fanout_queue(self) -> str:
        return f"{self.prefix}.fanout"

    @property
    def stream_queue_prefix(self) -> str:
        """Each api process's live-stream queue is this and random hex (services/api/mastodon/stream_queue.py,
        ADR 0140): exclusive, auto-delete, bound to post and follow events on the events exchange."""
        return f"{self.prefix}.stream."

    @property
    def retry_queue(self) -> str:
        return f"{self.prefix}.fanout.retry"

    @property
    def dead_queue(self) -> str:
        return f"{self.prefix}.fanout.dead"

    @property
    def settle_exchange(self) -> str:
        """Direct exchange of the worker's own republishing: retry copies, dead letters, and expired retries back
        to the fan-out queue, each routed by its queue's name. The worker needs no right on the default exchange,
        through which it could publish into any queue of the vhost (docs/adr/0060)."""
        return f"{self.prefix}.fanout.settle"

    # The fan-out queue's bindings on the grouped exchange.
    fanout_bindings: ClassVar[tuple[str, ...]] = ("post.*", "follow.*")

    def dead_letter_queues(self) -> tuple[DeadLetterQueue, ...]:
        """Every dead queue walfeed declares, for `walfeed dead` (docs/operations.md). A consumer with a dead queue
        adds its line here."""
        notifier = self.notifier
        return (
            DeadLetterQueue(self.dead_queue, self.fanout_queue, self.settle_exchange, self.fanout_queue),
            DeadLetterQueue(notifier.dead_queue, notifier.queue, notifier.settle_exchange, notifier.queue),
            *(DeadLetterQueue(self.delivery_dead_queue(channel), self.delivery_queue(channel),
                              self.delivery_settle_exchange, self.delivery_queue(channel), channel)
              for channel in DELIVERY_CHANNELS),
        )

    def queues(self) -> tuple[str, ...]:
        """The fan-out worker's queues."""
        return (self.fanout_queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        """The exchanges the fan-out worker declares."""
        return self.fanout.exchanges()

    @property
    def fanout(self) -> ConsumerQueues:
        return ConsumerQueues(self.events_exchange, self.fanout_queue, self.fanout_bindings, self.retry_queue,
                              self.dead_queue, self.settle_exchange, self.grouped_exchange)

    @property
    def notifier(self) -> ConsumerQueues:
        """The notifier's queues (docs/notifications.md): the same events as the fan-out, on a queue of its own so
        that it never slows the fan-out down."""
        return self.consumer("notifier", ("post.*", "follow.*"))

    def consumer(self, name: str, bindings: tuple[str, ...]) -> ConsumerQueues:
        """The queues of a consumer of the events exchange named `name` (docs/consumers.md): `{prefix}.{name}` bound
        to `bindings` on the grouped exchange, its `.retry` and `.dead` queues and its `.settle` exchange."""
        base = f"{self.prefix}.{name}"
        return ConsumerQueues(self.events_exchange, base, bindings, f"{base}.retry", f"{base}.dead",
                              f"{base}.settle", self.grouped_exchange)

    # The embedder (docs/amqp.md, docs/search.md): one queue, no retry or dead queue.

    @property
    def embedder_queue(self) -> str:
        """The embedder's queue on the grouped exchange: bounded, its oldest messages dropped when full, never
        dead-lettering (a post it misses is the backfill's)."""
        return f"{self.prefix}.embedder"

    embedder_bindings: ClassVar[tuple[str, ...]] = ("post.created", "post.deleted")

    # Notification delivery (docs/amqp.md, docs/adr/0081).

    @staticmethod
    def delivery_binding(channel: str) -> str:
        """The routing key (event type) of a channel's deliveries on the events exchange."""
        return f"delivery.{channel}"

    def delivery_queue(self, channel: str) -> str:
        return f"{self.prefix}.deliveries.{channel}"

    def delivery_retry_queue(self, channel: str, delay_ms: int) -> str:
        """The retry queue holding each message `delay_ms` (one of DELIVERY_RETRY_DELAYS_MS), then back to the
        channel's queue."""
        return f"{self.prefix}.deliveries.{channel}.retry.{delay_ms}ms"

    def delivery_dead_queue(self, channel: str) -> str:
        return f"{self.prefix}.deliveries.{channel}.dead"

    @property
    def delivery_settle_exchange(self) -> str:
        """Direct exchange of the delivery workers' own republishing (retry hops, dead letters, expired retries back
        to the work queue), routed by queue name, as the fan-out worker's settle exchange (docs/adr/0060)."""
        return f"{self.prefix}.deliveries.settle"

    def delivery_queues(self, channel: str) -> tuple[str, ...]:
        """A channel's queues: work, retries (shortest first), dead."""
        retries = tuple(self.delivery_retry_queue(channel, d) for d in DELIVERY_RETRY_DELAYS_MS)
        return (self.delivery_queue(channel), *retries, self.delivery_dead_queue(channel))

    def all_delivery_queues(self) -> tuple[str, ...]:
        return tuple(q for channel in DELIVERY_CHANNELS for q in self.delivery_queues(channel))
