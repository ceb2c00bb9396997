"""AMQP names (docs/amqp.md), derived from one prefix. Pure: declarations live in each service's adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


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
        return (self.fanout_queue, self.retry_queue, self.dead_queue)

    def exchanges(self) -> tuple[str, ...]:
        return (self.events_exchange, self.settle_exchange)
