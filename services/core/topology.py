"""AMQP names (docs/amqp.md), derived from one prefix. Pure: declarations live in each service's adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class DeadLetterQueue:
    """A dead queue and how its letters go back where they came from: published to `exchange` with `routing_key`
    (the origin queue's binding there), as the consumer that dead-lettered them publishes its own copies."""

    name: str
    origin: str  # the queue the letters were consumed from
    exchange: str
    routing_key: str


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

    def dead_letter_queues(self) -> tuple[DeadLetterQueue, ...]:
        """Every dead queue walfeed declares, for `walfeed dead` (docs/operations.md). A consumer with a dead queue
        adds its line here."""
        return (
            DeadLetterQueue(self.dead_queue, self.fanout_queue, self.settle_exchange, self.fanout_queue),
        )

    def queues(self) -> tuple[str, ...]:
        return (self.fanout_queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        return (self.events_exchange, self.settle_exchange)
