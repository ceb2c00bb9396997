"""The arguments each kind of walfeed queue is declared with, by queue type (docs/amqp.md, docs/adr/0090). Pure.

Every process that declares a queue takes its arguments from here, so that two processes declaring the same queue
(the notifier and the delivery worker both declare the delivery work queues) always agree: the broker refuses a
declaration that differs from the existing queue (PRECONDITION_FAILED), and a queue's type can never change.

- `classic`: exactly the arguments walfeed always declared (no `x-queue-type`), so an upgrade never trips.
- `quorum`: `x-queue-type: quorum` on every queue; a work queue gets `x-delivery-limit` as a backstop against a
  message that kills its consumer again and again, with dead-lettering into its dead queue so that a message over
  the limit is kept, not dropped; every queue that dead-letters (a work queue into its dead queue, a retry queue
  back into its work queue) does it at-least-once (`x-dead-letter-strategy`), which needs `x-overflow:
  reject-publish` on the source queue. Quorum queues take message TTL from RabbitMQ 3.10, both per message (the
  fan-out retry queue) and per queue (the delivery retry queues).
"""

from __future__ import annotations

from typing import Final

CLASSIC: Final = "classic"
QUORUM: Final = "quorum"
QUEUE_TYPES: Final = (CLASSIC, QUORUM)

# Redeliveries of one message by the broker before a quorum work queue dead-letters it (reason `delivery_limit`).
# walfeed counts its own attempts in a header and retries through a fresh copy, so the broker's count grows only when
# a message goes back to the queue unsettled: a consumer's connection lost (a node stopped, a crash, a kill), a
# worker stopping with messages prefetched, a settle publish refused. 20 such returns of one message means a message
# that takes its consumer down with it, not bad luck (RabbitMQ 4.0 chose the same default).
DELIVERY_LIMIT: Final = 20

Arguments = dict[str, object]


def _dead_lettering(exchange: str, routing_key: str) -> Arguments:
    return {"x-dead-letter-exchange": exchange, "x-dead-letter-routing-key": routing_key}


def _at_least_once(queue_type: str) -> Arguments:
    if queue_type != QUORUM:
        return {}
    return {"x-queue-type": QUORUM, "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def work_queue(queue_type: str, settle_exchange: str, dead_queue: str) -> Arguments:
    """A consumer's work queue. Classic: none (it never dead-letters, docs/adr/0020). Quorum: the delivery limit,
    with letters over it dead-lettered through the settle exchange into the dead queue."""
    if queue_type != QUORUM:
        return {}
    return {**_at_least_once(queue_type), **_dead_lettering(settle_exchange, dead_queue),
            "x-delivery-limit": DELIVERY_LIMIT}


def retry_queue(queue_type: str, settle_exchange: str, work_queue: str, ttl_ms: int | None = None) -> Arguments:
    """A retry queue: dead-letters expired copies back to the work queue through the settle exchange; `ttl_ms`: a
    queue-level TTL (the delivery retry queues), else each copy carries its own expiration."""
    ttl: Arguments = {} if ttl_ms is None else {"x-message-ttl": ttl_ms}
    return {**ttl, **_dead_lettering(settle_exchange, work_queue), **_at_least_once(queue_type)}


def dead_queue(queue_type: str, max_length: int) -> Arguments:
    """A dead queue: bounded, refusing publishes when full (never dropping what it holds)."""
    kind: Arguments = {"x-queue-type": QUORUM} if queue_type == QUORUM else {}
    return {"x-max-length": max_length, "x-overflow": "reject-publish", **kind}


def best_effort_queue(queue_type: str, max_length: int) -> Arguments:
    """A work queue whose consumer may fall behind for good without harm (the embedder's: what it misses, its
    backfill does): bounded, the oldest message dropped when full (`drop-head`, not `reject-publish`: a refused
    publish would make the relay retry and hold the fan-out's events back). No dead-lettering."""
    kind: Arguments = {"x-queue-type": QUORUM} if queue_type == QUORUM else {}
    return {"x-max-length": max_length, "x-overflow": "drop-head", **kind}
