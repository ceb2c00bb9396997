"""From a broker message to its settlement: the steps of one delivery, in order (docs/notifications.md).

Rate limit first (over the limit: wait in the retry queues, no attempt spent), then the try, then its outcome
recorded on the delivery row before the message is settled. The adapters (store, sender) are handed in; nothing
here opens a socket.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Protocol

import psycopg
import psycopg_pool

from services.core.events import MalformedEvent, decode
from services.delivery import metrics, policy, route
from services.delivery.payload import Delivery

log = logging.getLogger(__name__)

_UNAVAILABLE_WAIT_MS: Final = 2048  # the database failed us: the message comes back after about this long
# Logical decoding publishes the notifier's commit a moment before other sessions see it (docs/adr/0024): a
# delivery not found is looked for again after the shortest hop (128 ms), this many times, before it is a dead
# letter. At 100 posts/s on a busy 2-core machine about 4% of deliveries were read before they were visible.
UNSEEN_TRIES: Final = 5


@dataclass(frozen=True, slots=True)
class Ack:
    """Done: delivered, or nothing to send."""


@dataclass(frozen=True, slots=True)
class Hop:
    """Publish a copy to the retry queue of `delay_ms` with `headers`, then ack."""

    delay_ms: int
    headers: dict[str, object] = field(hash=False)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Requeue:
    """Return the message as it was (the process is stopping)."""


Outcome = Ack | Hop | DeadLetter | Requeue
ACK: Final = Ack()
REQUEUE: Final = Requeue()


class Store(Protocol):
    def load(self, delivery_id: int, rate: float, burst: int) -> tuple[Delivery, bool] | None: ...

    def record(self, delivery_id: int, status: str, *, attempts: int, failed: bool, code: int | None = None,
               error: str | None = None, excerpt: str | None = None, delay: float | None = None,
               disable: str | None = None) -> None: ...

    def withdraw(self, delivery_id: int) -> None: ...

    def wait(self, target: str, rate: float, burst: int) -> float: ...


class Sender(Protocol):
    def send(self, delivery: Delivery, now: datetime) -> policy.Result: ...


@dataclass(frozen=True, slots=True)
class Limits:
    channel: str
    retry: policy.Settings
    rate: float
    burst: int


def _now() -> datetime:
    return datetime.now(UTC)


class Processor:
    def __init__(self, store: Store, sender: Sender, limits: Limits, clock: Callable[[], datetime] = _now,
                 rand: random.Random | None = None) -> None:
        self._store = store
        self._sender = sender
        self._limits = limits
        self._clock = clock
        self._rand = rand

    def handle(self, body: bytes, headers: Mapping[str, object] | None) -> Outcome:
        attempt = route.attempt_of(headers)
        parked = route.parked_reason(headers)
        if parked is not None:  # a dead letter that waited for room in the dead queue
            return DeadLetter(parked, attempt)
        try:
            event = decode(body)
        except MalformedEvent as exc:
            return DeadLetter(f"malformed: {exc}", attempt)
        if event.type != f"delivery.{self._limits.channel}":
            return DeadLetter(f"malformed: {event.type} is not a {self._limits.channel} delivery", attempt)
        delivery_id = event.payload["delivery_id"]
        now = self._clock()
        wait = route.hop(route.due_of(headers) - _ms(now))
        if wait is not None:
            return Hop(wait, dict(headers or {}))
        try:
            return self._deliver(delivery_id, attempt, headers, now)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:  # not this message's fault: later
            log.warning("database unavailable, delivery postponed", extra={"delivery_id": delivery_id,
                                                                          "error": repr(exc)})
            return Hop(_UNAVAILABLE_WAIT_MS, route.copy_headers(headers, **{
                route.DUE_HEADER: _ms(now) + _UNAVAILABLE_WAIT_MS, route.REASON_HEADER: "database unavailable"}))
        except Exception as exc:  # a bug in an adapter: this delivery is dead, the consumer goes on
            log.exception("delivery failed unexpectedly, marking it DEAD", extra={"delivery_id": delivery_id})
            reason = f"internal error: {type(exc).__name__}"
            try:
                self._store.record(delivery_id, policy.DEAD, attempts=attempt, failed=False, error=reason)
            except Exception:
                log.exception("could not mark the delivery DEAD", extra={"delivery_id": delivery_id})
            return DeadLetter(reason, attempt)

    def _deliver(self, delivery_id: int, attempt: int, headers: Mapping[str, object] | None,
                 now: datetime) -> Outcome:
        loaded = self._store.load(delivery_id, self._limits.rate, self._limits.burst)
        if loaded is None:
            unseen = route.unseen_of(headers)
            if unseen >= UNSEEN_TRIES:
                return DeadLetter(f"no delivery {delivery_id}", attempt)
            wait = route.first_hop(0)
            return Hop(wait, route.copy_headers(headers, **{
                route.UNSEEN_HEADER: unseen + 1, route.DUE_HEADER: _ms(now) + wait,
                route.REASON_HEADER: "delivery not visible yet"}))
        delivery, taken = loaded
        context = {"delivery_id": delivery_id, "attempt": attempt, "channel": delivery.channel}
        if delivery.status not in policy.SENDABLE:
            log.info("delivery already settled, not sent", extra={**context, "status": delivery.status})
            return ACK
        if delivery.withdrawn_at is not None:
            self._store.withdraw(delivery_id)
            log.info("notification withdrawn, not sent", extra=context)
            return ACK
        if delivery.channel != self._limits.channel:
            return DeadLetter(f"delivery {delivery_id} is for channel {delivery.channel}", attempt)
        if delivery.disabled_at is not None:
            reason = f"webhook disabled: {delivery.disabled_reason}"
            self._store.record(delivery_id, policy.DEAD, attempts=attempt - 1, failed=False, error=reason)
            return DeadLetter(reason, attempt - 1)
        if not taken:
            wait_ms = max(1, round(self._store.wait(delivery.target, self._limits.rate, self._limits.burst) * 1000))
            log.info("rate limited", extra={**context, "wait_ms": wait_ms})
            metrics.THROTTLED.labels(delivery.channel).inc()
            return Hop(route.first_hop(wait_ms), route.copy_headers(headers, **{
                route.DUE_HEADER: _ms(now) + wait_ms, route.REASON_HEADER: "rate limited"}))
        started = time.monotonic()
        result = self._sender.send(delivery, now)
        after = self._clock()  # the backoff counts from the try's end (a timeout may have taken a while)
        decision = policy.decide(result, attempt, self._limits.retry, after, delivery.failing_since, self._rand)
        code = result.code if isinstance(result, policy.Answer) else None
        self._store.record(delivery_id, decision.status, attempts=attempt, failed=decision.status != policy.DELIVERED,
                           code=code, error=decision.reason,
                           excerpt=result.excerpt if isinstance(result, policy.Answer) else None,
                           delay=decision.delay, disable=decision.disable)
        seconds = time.monotonic() - started
        log.info("delivery attempted", extra={**context, "status": decision.status, "code": code,
                                              "reason": decision.reason, "disable": decision.disable,
                                              "ms": round(seconds * 1000, 1)})
        metrics.attempted(delivery.channel, decision.status, seconds, decision.disable is not None)
        if decision.status == policy.DELIVERED:
            return ACK
        if decision.status == policy.DEAD:
            return DeadLetter(decision.reason or "dead", attempt)
        delay_ms = max(1, round((decision.delay or 0) * 1000))
        return Hop(route.first_hop(delay_ms), route.copy_headers(headers, **{
            route.ATTEMPT_HEADER: attempt + 1, route.DUE_HEADER: _ms(after) + delay_ms,
            route.REASON_HEADER: decision.reason or ""}))


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
