"""The embedder's queue as the consumer runtime uses it (services/consumer/session.py Route): one work queue on the
grouped exchange, bound to post.created and post.deleted, bounded (WALFEED_EMBED_QUEUE_MAX_LENGTH) and dropping
its oldest message when full (services/core/queues.py best_effort_queue). No retry or dead queue: the handler acks
every message (services/embedder/handler.py), so the runtime never asks where a copy goes."""

from __future__ import annotations

from dataclasses import dataclass

from services.consumer.broker import Destination
from services.consumer.connection import Channel
from services.core import queues
from services.core.amqp import EVENTS_EXCHANGE
from services.core.topology import Topology


@dataclass(frozen=True, slots=True)
class EmbedderQueue:
    topology: Topology
    max_length: int
    queue_type: str = queues.CLASSIC

    @property
    def queue(self) -> str:
        return self.topology.embedder_queue

    def declare(self, channel: Channel) -> None:
        t = self.topology
        channel.exchange_declare(t.grouped_exchange, **EVENTS_EXCHANGE)
        channel.queue_declare(self.queue, durable=True,
                              arguments=queues.best_effort_queue(self.queue_type, self.max_length))
        for key in t.embedder_bindings:
            channel.queue_bind(self.queue, t.grouped_exchange, routing_key=key)

    def retry(self, delay_ms: int) -> Destination:
        raise AssertionError("the embedder retries nothing: every message is acked")

    def dead(self) -> Destination:
        raise AssertionError("the embedder dead-letters nothing: every message is acked")

    def work(self) -> Destination:
        raise AssertionError("the embedder sends nothing back to its queue")
