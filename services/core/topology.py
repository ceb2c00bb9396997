"""AMQP names (docs/amqp.md), derived from one prefix. Pure: declarations live in each service's adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

# Notification delivery channels: one work queue each, `{prefix}.deliveries.{channel}`, bound to `delivery.{channel}`.
DELIVERY_CHANNELS: Final = ("webhook", "email")


@dataclass(frozen=True, slots=True)
class ConsumerQueues:
    """One consumer of the events exchange (docs/adr/0020): its work queue and bindings, its retry and dead
    queues, and the direct exchange it republishes through (retry copies, dead letters, expired retries back)."""

    events_exchange: str
    queue: str
    bindings: tuple[str, ...]
    retry_queue: str
    dead_queue: str
    settle_exchange: str

    def queues(self) -> tuple[str, ...]:
        return (self.queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        return (self.events_exchange, self.settle_exchange)


@dataclass(frozen=True, slots=True)
class Topology:
    prefix: str

    @property
    def events_exchange(self) -> str:
        return f"{self.prefix}.events"

    @property
    def fanout_queue(self) -> str:
        return f"{self.prefix}.fanout"

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

    # The fan-out queue's bindings on the events exchange.
    fanout_bindings: ClassVar[tuple[str, ...]] = ("post.*", "follow.*")

    def queues(self) -> tuple[str, ...]:
        """The fan-out worker's queues."""
        return (self.fanout_queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        """The exchanges the fan-out worker declares."""
        return (self.events_exchange, self.settle_exchange)

    @property
    def fanout(self) -> ConsumerQueues:
        return ConsumerQueues(self.events_exchange, self.fanout_queue, self.fanout_bindings, self.retry_queue,
                              self.dead_queue, self.settle_exchange)

    @property
    def notifier(self) -> ConsumerQueues:
        """The notifier's queues (docs/notifications.md): the same events as the fan-out, on a queue of its own so
        that it never slows the fan-out down."""
        base = f"{self.prefix}.notifier"
        return ConsumerQueues(self.events_exchange, base, ("post.*", "follow.*"), f"{base}.retry", f"{base}.dead",
                              f"{base}.settle")

    # Notification delivery (docs/amqp.md).

    @staticmethod
    def delivery_binding(channel: str) -> str:
        """The routing key (event type) of a channel's deliveries on the events exchange."""
        return f"delivery.{channel}"

    def delivery_queue(self, channel: str) -> str:
        return f"{self.prefix}.deliveries.{channel}"
