"""AMQP names (SPEC.md section 5), derived from one prefix. Pure: declarations live in each service's adapter."""

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

    # The fan-out queue's bindings on the events exchange.
    fanout_bindings: ClassVar[tuple[str, ...]] = ("post.*", "follow.*")

    def queues(self) -> tuple[str, ...]:
        return (self.fanout_queue, self.retry_queue, self.dead_queue)
