"""Prometheus metrics of the consumers of the events exchange (the fan-out worker and the notifier, each on its own
port; the names say "worker" as they did before there were several). Best effort: nothing here may fail a message."""

from __future__ import annotations

import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Histogram

from services.consumer import outcomes
from services.consumer.messages import Result

log = logging.getLogger(__name__)

MESSAGES = Counter("walfeed_worker_messages_total", "Messages settled, by event type and outcome",
                   ["type", "outcome"])
RETRIES = Counter("walfeed_worker_retries_total", "Retry copies published, by event type", ["type"])
DEAD = Counter("walfeed_worker_dead_letters_total", "Messages sent to the dead queue, by event type", ["type"])
LATENCY = Histogram("walfeed_worker_handler_seconds", "Time to process one message, by event type", ["type"],
                    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120))
DEAD_QUEUE_FULL = Counter("walfeed_worker_dead_queue_full_total",
                          "Dead letters the full dead queue refused (parked in the retry queue instead)")
# Commit to effect: from the event's occurred_at (its outbox row's transaction) to the worker's commit of its
# effects, for applied events; what a follower waits for a post, end to end, on this worker's side.
DELAY = Histogram("walfeed_worker_event_delay_seconds", "From the event's occurred_at to its effects committed",
                  ["type"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
BATCH_SIZE = Histogram("walfeed_worker_batch_messages",
                       "Events applied together in one batch transaction (a group's events each, docs/adr/0095)",
                       buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))


def observe(results: Iterable[Result]) -> None:
    """The settled messages of one batch. Counters go up once per label set and batch, and each label set is looked
    up once per batch: per message, they cost the worker's connection thread about 20 us a message."""
    try:
        settled: Tally[tuple[str, str]] = Tally()
        latency: dict[str, Any] = {}
        delay: dict[str, Any] = {}
        now = time.time()
        for result in results:
            outcome, kind = result.outcome, result.event_type
            settled[kind, type(outcome).__name__.lower()] += 1
            _child(latency, LATENCY, kind).observe(result.seconds)
            if isinstance(outcome, outcomes.Ack) and result.event is not None:
                _child(delay, DELAY, kind).observe(max(0.0, now - result.event.occurred_at.timestamp()))
        for (kind, outcome_name), n in settled.items():
            MESSAGES.labels(kind, outcome_name).inc(n)
            if outcome_name == "retry":
                RETRIES.labels(kind).inc(n)
            elif outcome_name == "dead":
                DEAD.labels(kind).inc(n)
    except Exception:  # metrics are best effort
        log.warning("metrics update failed", exc_info=True)


def _child(children: dict[str, Any], metric: Histogram, kind: str) -> Any:
    child = children.get(kind)
    if child is None:
        child = children[kind] = metric.labels(kind)
    return child
