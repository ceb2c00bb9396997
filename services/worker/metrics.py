"""Prometheus metrics of the worker. Best effort: nothing here may fail a message."""

from __future__ import annotations

import logging

from prometheus_client import Counter, Histogram

from services.worker import policy
from services.worker.processing import Result

log = logging.getLogger(__name__)

MESSAGES = Counter("walfeed_worker_messages_total", "Messages settled, by event type and outcome",
                   ["type", "outcome"])
RETRIES = Counter("walfeed_worker_retries_total", "Retry copies published, by event type", ["type"])
DEAD = Counter("walfeed_worker_dead_letters_total", "Messages sent to the dead queue, by event type", ["type"])
LATENCY = Histogram("walfeed_worker_handler_seconds", "Time to process one message, by event type", ["type"],
                    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120))
DEAD_QUEUE_FULL = Counter("walfeed_worker_dead_queue_full_total",
                          "Dead letters the full dead queue refused (parked in the retry queue instead)")
BATCH_SIZE = Histogram("walfeed_worker_batch_messages", "Messages applied together in one batch transaction",
                       buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))


def observe(result: Result) -> None:
    try:
        outcome = result.outcome
        MESSAGES.labels(result.event_type, type(outcome).__name__.lower()).inc()
        LATENCY.labels(result.event_type).observe(result.seconds)
        if isinstance(outcome, policy.Retry):
            RETRIES.labels(result.event_type).inc()
        elif isinstance(outcome, policy.Dead):
            DEAD.labels(result.event_type).inc()
    except Exception:  # metrics are best effort
        log.warning("metrics update failed", exc_info=True)
