"""The one settler of every consumer: a message's outcome published as its retry copy or dead letter on the settle
channel (confirmed, mandatory; services/consumer/settle_channel.py), a dead letter the full dead queue refuses
parked in a retry queue instead of lost. Runs on the connection thread. The original is acked by the session once
its copy was taken; a copy the broker did not take returns the original to its queue (docs/adr/0020)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import pika
import pika.exceptions

from services.consumer import headers
from services.consumer.broker import Destination, Route, copy_properties
from services.consumer.outcomes import Dead, Hop, Outcome, Retry
from services.consumer.settle_channel import Publishes

log = logging.getLogger(__name__)

_REFUSED = (pika.exceptions.NackError, pika.exceptions.UnroutableError)


def _nothing() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Counters:
    """The consumer's metrics of what the settler does (best effort, services/consumer/metrics.py)."""

    dead: Callable[[], None] = _nothing  # a dead letter about to be published
    dead_queue_full: Callable[[], None] = _nothing  # a dead letter the full dead queue refused


NO_COUNTERS: Final = Counters()


class Settler:
    def __init__(self, publisher: Publishes, route: Route, park_ms: int, counters: Counters = NO_COUNTERS) -> None:
        self._publisher = publisher
        self._route = route
        self._park_ms = park_ms  # a refused dead letter's wait in the retry queue
        self._counters = counters

    def publish(self, outcome: Outcome, body: bytes, props: pika.BasicProperties,
                context: Mapping[str, object]) -> bool:
        """Publish the retry copy or dead letter the outcome asks for (nothing for the others); False if the broker
        refused it (the original is to be requeued). `context`: what the log lines name the message by."""
        if not isinstance(outcome, Retry | Hop | Dead):
            return True
        try:
            if isinstance(outcome, Dead):
                return self._dead(outcome, body, props, context)
            if isinstance(outcome, Retry):
                copy = headers.copy_headers(props.headers, **{headers.ATTEMPT: outcome.attempt,
                                                              headers.REASON: outcome.reason})
            else:
                copy = headers.copy_headers(outcome.headers)
            self._send(self._route.retry(outcome.delay_ms), body, props, copy)
        except _REFUSED as exc:
            log.error("retry publish refused, requeueing", extra={**context, "error": repr(exc)})
            return False
        if isinstance(outcome, Retry):
            log.info("retry scheduled", extra={**context, "attempt": outcome.attempt, "delay_ms": outcome.delay_ms,
                                               "reason": outcome.reason})
        return True

    def publish_alone(self, body: bytes, props: pika.BasicProperties) -> None:
        """One event of a group back into the work queue as a message of its own (without the broker's dead-letter
        history); raises pika's NackError / UnroutableError if the broker did not take it."""
        self._send(self._route.work(), body, props, headers.copy_headers(props.headers))

    def _dead(self, dead: Dead, body: bytes, props: pika.BasicProperties, context: Mapping[str, object]) -> bool:
        self._counters.dead()
        letter = headers.copy_headers(props.headers, **{headers.REASON: dead.reason, headers.ATTEMPTS: dead.attempts,
                                                        headers.DEAD_AT: int(time.time())})
        letter.pop(headers.PARKED, None)
        letter.pop(headers.DUE, None)
        try:
            self._send(self._route.dead(), body, props, letter)
        except pika.exceptions.NackError:  # full (reject-publish): park it, never drop it
            return self._park(dead, body, props, context)
        except pika.exceptions.UnroutableError as exc:
            log.error("dead letter unroutable, requeueing", extra={**context, "error": repr(exc)})
            return False
        log.error("dead-lettered", extra={**context, "reason": dead.reason, "attempts": dead.attempts})
        return True

    def _park(self, dead: Dead, body: bytes, props: pika.BasicProperties, context: Mapping[str, object]) -> bool:
        """The dead queue refused the letter (full, reject-publish): keep the message in a retry queue for a while
        instead of dropping it or spinning on it. It comes back with its reason in headers.PARKED (a consumer that
        reads it dead-letters it again at once) and its attempts."""
        log.error("dead queue full, message parked in the retry queue",
                  extra={**context, "reason": dead.reason, "delay_ms": self._park_ms})
        self._counters.dead_queue_full()
        parked = headers.copy_headers(props.headers, **{headers.ATTEMPT: dead.attempts, headers.PARKED: dead.reason,
                                                        headers.REASON: f"dead queue full: {dead.reason}"})
        try:
            self._send(self._route.retry(self._park_ms), body, props, parked)
        except _REFUSED as exc:
            log.error("parking refused, requeueing", extra={**context, "error": repr(exc)})
            return False
        return True

    def _send(self, to: Destination, body: bytes, props: pika.BasicProperties, copy: dict[str, object]) -> None:
        self._publisher.basic_publish(to.exchange, to.routing_key, body, copy_properties(props, copy, to.expiration),
                                      mandatory=True)
