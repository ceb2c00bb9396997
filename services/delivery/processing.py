"""From a broker message to its settlement: the steps of one delivery, in order (docs/notifications.md).

Rate limit first (over the limit: wait in the retry queues, no attempt spent), then the try, then its outcome
recorded on the delivery row before the message is settled. The adapters (store, sender) are handed in; nothing
here opens a socket.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Protocol

import psycopg
import psycopg_pool

from services.consumer.headers import ATTEMPT, DUE, REASON, UNSEEN, attempt_of, copy_headers, parked_reason
from services.consumer.outcomes import ACK, REQUEUE, Ack, Dead, Hop, Requeue
from services.core.events import MalformedEvent, decode
from services.delivery import budget, metrics, policy, route
from services.delivery.payload import Delivery

log = logging.getLogger(__name__)

_UNAVAILABLE_WAIT_MS: Final = 2048  # the database failed us: the message comes back after about this long
# Logical decoding publishes the notifier's commit a moment before other sessions see it (docs/adr/0024): a
# delivery not found is looked for again after the shortest hop (128 ms), this many times, before it is a dead
# letter. At 100 posts/s on a busy 2-core machine about 4% of deliveries were read before they were visible.
UNSEEN_TRIES: Final = 5
_RANDOM: Final = random.Random()


# What becomes of a delivery message: the runtime's outcomes (services/consumer/outcomes.py). A Hop waits in the
# retry queue of its delay with the headers written here (route.py); a Dead is a dead letter.
Outcome = Ack | Hop | Dead | Requeue


@dataclass(frozen=True, slots=True)
class Attempt:
    """A delivery to try now: it has taken a try from its target's rate. `now` is when its message was taken."""

    delivery: Delivery
    attempt: int
    headers: Mapping[str, object] | None = field(hash=False)
    now: datetime


@dataclass(frozen=True, slots=True)
class Tried:
    """An attempt and what came of it: the sender's result, or None and the exception's type when the sender
    raised (a bug)."""

    attempt: Attempt
    result: policy.Result | policy.Postponed | None
    after: datetime  # the try's end: the backoff counts from there (a timeout may have taken a while)
    seconds: float
    raised: str | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """The outcome of a try (or of a decision not to try) to write on a delivery row (sql.RECORD)."""

    delivery_id: int
    status: str
    attempts: int
    failed: bool
    code: int | None = None
    error: str | None = None
    excerpt: str | None = None
    delay: float | None = None
    disable: str | None = None


class Store(Protocol):
    def load_many(self, delivery_ids: Sequence[int], rate: float,
                  burst: int) -> dict[int, tuple[Delivery, bool]]: ...

    def record_many(self, records: Sequence[Record]) -> None: ...

    def withdraw(self, delivery_id: int) -> None: ...

    def wait(self, target: str, rate: float, burst: int) -> float: ...

    def take_hosts(self, asked: Mapping[str, int], window: float) -> dict[str, budget.Taken]: ...


class Sender(Protocol):
    def send(self, delivery: Delivery, now: datetime) -> policy.Result | policy.Postponed: ...


@dataclass(frozen=True, slots=True)
class Limits:
    channel: str
    retry: policy.Settings
    rate: float
    burst: int
    hosts: budget.HostBudget = budget.NO_BUDGET  # tries per destination host per window


def _now() -> datetime:
    return datetime.now(UTC)


class Processor:
    """The steps of a delivery, for a batch of messages at a time: `admit` (one statement loads the batch and takes
    its tries from the targets' rates), `send` (one delivery, on any thread), `conclude` (one statement records the
    outcomes). `handle` runs the three for one message."""

    def __init__(self, store: Store, sender: Sender, limits: Limits, clock: Callable[[], datetime] = _now,
                 rand: random.Random | None = None) -> None:
        self._store = store
        self._sender = sender
        self._limits = limits
        self._clock = clock
        self._rand = rand

    def handle(self, body: bytes, headers: Mapping[str, object] | None) -> Outcome:
        (admitted,) = self.admit([(body, headers)])
        if not isinstance(admitted, Attempt):
            return admitted
        (outcome,) = self.conclude([self.send(admitted)])
        return outcome

    def admit(self, messages: Sequence[tuple[bytes, Mapping[str, object] | None]]) -> list[Outcome | Attempt]:
        """For each message, in order: its outcome without a try (not due, malformed, nothing to send, rate
        limited, ...) or the Attempt to make."""
        now = self._clock()
        admitted: list[Outcome | Attempt | None] = []
        wanted: dict[int, int] = {}  # message index -> delivery id, to load
        for index, (body, headers) in enumerate(messages):
            early = self._early(body, headers, now)
            admitted.append(early if not isinstance(early, int) else None)
            if isinstance(early, int):
                wanted[index] = early
        waits: dict[str, float] = {}  # rate-limited targets of this batch: their wait, asked once each
        if wanted:
            try:
                loaded = self._store.load_many(list(wanted.values()), self._limits.rate,
                                               self._limits.burst)
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                for index, delivery_id in wanted.items():
                    admitted[index] = self._unavailable(delivery_id, messages[index][1], now, exc)
            except Exception:  # a bug in the adapter, maybe for one row: one at a time, so only that one is DEAD
                log.exception("loading a batch failed, loading its deliveries one by one")
                for index, delivery_id in wanted.items():
                    admitted[index] = self._guarded(delivery_id, messages[index][1], now, lambda d, h, t: (
                        self._admit(d, h, t, self._store.load_many([d], self._limits.rate, self._limits.burst),
                                    waits)))
            else:
                for index, delivery_id in wanted.items():
                    admitted[index] = self._guarded(delivery_id, messages[index][1], now, lambda d, h, t: (
                        self._admit(d, h, t, loaded, waits)))
        return self._within_host_budgets(_once([a if a is not None else REQUEUE for a in admitted]), now)

    def _within_host_budgets(self, admitted: list[Outcome | Attempt], now: datetime) -> list[Outcome | Attempt]:
        """The tries over their host's budget (budget.py) wait for its next window, no attempt spent."""
        limit, window = self._limits.hosts.limit, self._limits.hosts.window
        tries = [(i, a) for i, a in enumerate(admitted) if isinstance(a, Attempt)]
        hosts = [budget.host_of(a.delivery) for _, a in tries]
        asked = budget.count(hosts)
        if limit <= 0 or not asked:
            return admitted
        try:
            taken = self._store.take_hosts(asked, window)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            for i, a in tries:
                admitted[i] = self._unavailable(a.delivery.id, a.headers, now, exc)
            return admitted
        except Exception:  # a bug in the adapter: the tries go on unbudgeted rather than not at all
            log.exception("taking the hosts' budgets failed, trying without them")
            return admitted
        for (i, a), host, delay in zip(tries, hosts, budget.delays(hosts, taken, limit, window,
                                                                 self._rand or _RANDOM), strict=True):
            if delay is None:
                continue
            wait_ms = max(1, round(delay * 1000))
            log.info("host over its budget", extra={"delivery_id": a.delivery.id, "host": host, "wait_ms": wait_ms,
                                                    "channel": a.delivery.channel})
            metrics.HOST_DEFERRED.labels(a.delivery.channel).inc()
            admitted[i] = Hop(route.first_hop(wait_ms), copy_headers(a.headers, **{
                DUE: _ms(now) + wait_ms, REASON: "host over its budget"}))
        return admitted

    def send(self, attempt: Attempt) -> Tried:
        """The try itself (HTTP or SMTP), on the calling thread; an exception in the sender is a None result."""
        started = time.monotonic()
        try:
            result = self._sender.send(attempt.delivery, attempt.now)
        except Exception as exc:  # a bug in the adapter: this delivery is DEAD, the others go on
            log.exception("delivery failed unexpectedly, marking it DEAD", extra={"delivery_id": attempt.delivery.id})
            return Tried(attempt, None, self._clock(), time.monotonic() - started, type(exc).__name__)
        return Tried(attempt, result, self._clock(), time.monotonic() - started)

    def conclude(self, tried: Sequence[Tried]) -> list[Outcome]:
        """The outcomes of the tries, recorded on their rows in one statement, in order. Whatever one of them
        raises (deciding or recording), the others' outcomes are recorded: none is sent again for another's fault."""
        decided = [self._decided(t) for t in tried]
        try:
            records = [record for record, _ in decided if record is not None]
            if records:
                self._store.record_many(records)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:  # sent, not recorded: sent again later
            return [self._unavailable(t.attempt.delivery.id, t.attempt.headers, t.after, exc) for t in tried]
        except Exception:  # a bug, maybe for one row: one at a time, so only that one is DEAD
            log.exception("recording a batch failed, recording its deliveries one by one")
            outcomes: list[Outcome] = []
            for t, (record, outcome) in zip(tried, decided, strict=True):
                step = functools.partial(self._record_one, record, outcome)
                guarded = self._guarded(t.attempt.delivery.id, t.attempt.headers, t.after, step)
                assert not isinstance(guarded, Attempt)
                outcomes.append(guarded)
            return outcomes
        for t, (record, _) in zip(tried, decided, strict=True):
            delivery = t.attempt.delivery
            if record is None:
                log.info("delivery postponed", extra={"delivery_id": delivery.id, "attempt": t.attempt.attempt,
                                                      "reason": getattr(t.result, "reason", None)})
                continue
            log.info("delivery attempted", extra={"delivery_id": delivery.id, "attempt": t.attempt.attempt,
                                                  "channel": delivery.channel, "status": record.status,
                                                  "code": record.code, "reason": record.error,
                                                  "detail": getattr(t.result, "detail", None),
                                                  "disable": record.disable, "ms": round(t.seconds * 1000, 1)})
            metrics.attempted(delivery.channel, record.status, t.seconds, record.disable is not None)
        return [outcome for _, outcome in decided]

    def _record_one(self, record: Record | None, outcome: Outcome, *_: object) -> Outcome:
        if record is not None:
            self._store.record_many([record])
        return outcome

    def _early(self, body: bytes, headers: Mapping[str, object] | None, now: datetime) -> Outcome | int:
        """What a message comes to before its delivery is read, or its delivery id."""
        attempt = attempt_of(headers)
        parked = parked_reason(headers)
        if parked is not None:  # a dead letter that waited for room in the dead queue
            return Dead(parked, attempt)
        try:
            event = decode(body)
        except MalformedEvent as exc:
            return Dead(f"malformed: {exc}", attempt)
        if event.type != f"delivery.{self._limits.channel}":
            return Dead(f"malformed: {event.type} is not a {self._limits.channel} delivery", attempt)
        wait = route.hop(route.due_of(headers) - _ms(now))
        if wait is not None:
            return Hop(wait, dict(headers or {}))
        delivery_id: int = event.payload["delivery_id"]
        return delivery_id

    def _guarded(self, delivery_id: int, headers: Mapping[str, object] | None, now: datetime,
                 step: Callable[[int, Mapping[str, object] | None, datetime], Outcome | Attempt]) -> Outcome | Attempt:
        """`step` for one delivery: a database that fails us postpones it; any other exception (a bug in an
        adapter) makes it DEAD, and the others go on."""
        try:
            return step(delivery_id, headers, now)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            return self._unavailable(delivery_id, headers, now, exc)
        except Exception as exc:
            log.exception("delivery failed unexpectedly, marking it DEAD", extra={"delivery_id": delivery_id})
            return self._dead(delivery_id, attempt_of(headers), f"internal error: {type(exc).__name__}")

    def _dead(self, delivery_id: int, attempt: int, reason: str) -> Dead:
        try:
            self._store.record_many([Record(delivery_id, policy.DEAD, attempts=attempt, failed=False, error=reason)])
        except Exception:
            log.exception("could not mark the delivery DEAD", extra={"delivery_id": delivery_id})
        return Dead(reason, attempt)

    @staticmethod
    def _unavailable(delivery_id: int, headers: Mapping[str, object] | None, now: datetime,
                     exc: Exception) -> Hop:
        """The database failed us, not this message: it comes back later."""
        log.warning("database unavailable, delivery postponed", extra={"delivery_id": delivery_id,
                                                                      "error": repr(exc)})
        return Hop(_UNAVAILABLE_WAIT_MS, copy_headers(headers, **{
            DUE: _ms(now) + _UNAVAILABLE_WAIT_MS, REASON: "database unavailable"}))

    def _admit(self, delivery_id: int, headers: Mapping[str, object] | None, now: datetime,
               loaded: Mapping[int, tuple[Delivery, bool]], waits: dict[str, float]) -> Outcome | Attempt:
        attempt = attempt_of(headers)
        found = loaded.get(delivery_id)
        if found is None:
            unseen = route.unseen_of(headers)
            if unseen >= UNSEEN_TRIES:
                return Dead(f"no delivery {delivery_id}", attempt)
            wait = route.first_hop(0)
            return Hop(wait, copy_headers(headers, **{
                UNSEEN: unseen + 1, DUE: _ms(now) + wait,
                REASON: "delivery not visible yet"}))
        delivery, taken = found
        context = {"delivery_id": delivery_id, "attempt": attempt, "channel": delivery.channel}
        if delivery.status not in policy.SENDABLE:
            log.info("delivery already settled, not sent", extra={**context, "status": delivery.status})
            return ACK
        if delivery.withdrawn_at is not None:
            self._store.withdraw(delivery_id)
            log.info("notification withdrawn, not sent", extra=context)
            return ACK
        if delivery.channel != self._limits.channel:
            return Dead(f"delivery {delivery_id} is for channel {delivery.channel}", attempt)
        if delivery.disabled_at is not None:
            reason = f"webhook disabled: {delivery.disabled_reason}"
            self._store.record_many([Record(delivery_id, policy.DEAD, attempts=attempt - 1, failed=False,
                                            error=reason)])
            return Dead(reason, attempt - 1)
        if not taken:
            if delivery.target not in waits:
                waits[delivery.target] = self._store.wait(delivery.target, self._limits.rate, self._limits.burst)
            wait_ms = max(1, round(waits[delivery.target] * 1000))
            log.info("rate limited", extra={**context, "wait_ms": wait_ms})
            metrics.THROTTLED.labels(delivery.channel).inc()
            return Hop(route.first_hop(wait_ms), copy_headers(headers, **{
                DUE: _ms(now) + wait_ms, REASON: "rate limited"}))
        return Attempt(delivery, attempt, headers, now)

    def _decided(self, tried: Tried) -> tuple[Record | None, Outcome]:
        """`_decide`, or DEAD with the exception's type when deciding raised (a bug, or an answer we failed to
        parse): that delivery is a dead letter with its reason, the batch's others are recorded as decided."""
        try:
            return self._decide(tried)
        except Exception as exc:
            log.exception("deciding a delivery's outcome failed, marking it DEAD",
                          extra={"delivery_id": tried.attempt.delivery.id})
            return _internal_error(tried, type(exc).__name__)

    def _decide(self, tried: Tried) -> tuple[Record | None, Outcome]:
        attempt, result, after = tried.attempt.attempt, tried.result, tried.after
        delivery_id = tried.attempt.delivery.id
        if result is None:
            return _internal_error(tried, tried.raised)
        if isinstance(result, policy.Postponed):  # this try again, soon: no record, no attempt spent
            wait_ms = round(policy.POSTPONE_SECONDS * 1000)
            return None, Hop(route.first_hop(wait_ms), copy_headers(tried.attempt.headers, **{
                DUE: _ms(after) + wait_ms, REASON: result.reason}))
        decision = policy.decide(result, attempt, self._limits.retry, after, tried.attempt.delivery.failing_since,
                                 self._rand)
        answer = result if isinstance(result, policy.Answer) else None
        record = Record(delivery_id, decision.status, attempts=attempt, failed=decision.status != policy.DELIVERED,
                        code=answer.code if answer else None, error=decision.reason,
                        excerpt=answer.excerpt if answer else None, delay=decision.delay, disable=decision.disable)
        if decision.status == policy.DELIVERED:
            return record, ACK
        if decision.status == policy.DEAD:
            return record, Dead(decision.reason or "dead", attempt)
        delay_ms = max(1, round((decision.delay or 0) * 1000))
        return record, Hop(route.first_hop(delay_ms), copy_headers(tried.attempt.headers, **{
            ATTEMPT: attempt + 1, DUE: _ms(after) + delay_ms,
            REASON: decision.reason or ""}))


def _once(admitted: list[Outcome | Attempt]) -> list[Outcome | Attempt]:
    """One try per delivery in a batch: a second message for a delivery already tried in it (an event published
    again by the relay, both copies taken together) is acked unsent, its row is the first's to record."""
    seen: set[int] = set()
    for index, item in enumerate(admitted):
        if isinstance(item, Attempt):
            if item.delivery.id in seen:
                log.info("a second message for a delivery in the batch, not sent", extra={
                    "delivery_id": item.delivery.id})
                admitted[index] = ACK
            seen.add(item.delivery.id)
    return admitted


def _internal_error(tried: Tried, raised: str | None) -> tuple[Record, Dead]:
    """A try that ended in a bug of ours (the sender, or deciding its outcome): DEAD, naming the exception's type."""
    reason, attempt = f"internal error: {raised}", tried.attempt.attempt
    return Record(tried.attempt.delivery.id, policy.DEAD, attempts=attempt, failed=False, error=reason), \
        Dead(reason, attempt)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
