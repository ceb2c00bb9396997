"""The worker's pure decisions: what to do with a message, when to retry, push or pull, when to trim. No I/O."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from services.core import backoff
from services.core.events import FANOUT_TYPES, Event, MalformedEvent, decode

ATTEMPT_HEADER: Final = "x-walfeed-attempt"  # 1-based number of the delivery attempt this copy is
REASON_HEADER: Final = "x-walfeed-reason"  # why the message is in the dead queue (or why it was last retried)
ATTEMPTS_HEADER: Final = "x-walfeed-attempts"  # attempts made before dead-lettering
DEAD_AT_HEADER: Final = "x-walfeed-dead-at"  # when it was dead-lettered, whole seconds since the epoch

# Headers the broker adds when dead-lettering; a republished copy starts without them (see docs/adr/0020).
_BROKER_HEADERS: Final = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
                          "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")

# A fan-out checks the recipients of a post for trimming when post_id % TRIM_EVERY == 0: a timeline then holds
# about TIMELINE_CAP + TRIM_EVERY rows at most between trims (a quarter over the cap), and the check (an index scan
# of about TIMELINE_CAP entries per recipient) costs about TIMELINE_CAP / TRIM_EVERY index reads per inserted row.
TRIM_EVERY: Final = 200


@dataclass(frozen=True, slots=True)
class Ack:
    """Done (effects committed, or nothing to do)."""


@dataclass(frozen=True, slots=True)
class Retry:
    attempt: int  # the attempt number of the copy to publish
    delay_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Dead:
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Requeue:
    """Not done, not failed: the process is stopping. Return the message to the queue as it was."""


@dataclass(frozen=True, slots=True)
class Large:
    """Not settled yet: the post's audience is fanned out in chunks on the large fan-out threads, which settle it."""


class Interrupted(Exception):  # a signal, not an error
    """Raised by a long handler between chunks when the process is stopping."""


class Expected(Exception):
    """A failure the handler foresaw (a state it cannot act on yet): retried like any other, logged in one line
    without a traceback, which is kept for the failures nobody foresaw. `attempts`, where a subclass sets it, is
    the most tries this kind of failure gets (fewer than the policy's when waiting longer cannot help)."""

    attempts: int | None = None


class Unavailable(Expected):
    """The database failed the whole batch for reasons of its own (connection lost, no connection to be had, a
    deadlock or serialization failure): no message is to blame. Every message retries, and the try does not count
    against its attempts, so an outage longer than the retry budget dead-letters nothing."""


class Poison(Exception):
    """A message that can never succeed however often it is tried: dead-lettered at once, with the reason."""


Outcome = Ack | Retry | Dead | Requeue | Large
ACK: Final = Ack()
REQUEUE: Final = Requeue()
LARGE: Final = Large()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    base: float
    cap: float

    def after_error(self, attempt: int, exc: BaseException, rand: random.Random | None = None) -> Retry | Dead:
        """The message failed on try `attempt` (1-based): retry later, or give up into the dead queue. By the
        failure's kind: Poison is dead at once, an Expected failure with a budget of its own gets at most that many
        tries, anything else the policy's."""
        if isinstance(exc, Poison):  # its message is the reason, as a malformed message's is
            return Dead(reason_text(exc, with_type=False), attempt)
        reason = reason_text(exc)
        if isinstance(exc, Unavailable):
            return Retry(attempt, self._delay_ms(attempt + 1, rand), reason)
        budget = exc.attempts if isinstance(exc, Expected) and exc.attempts is not None else self.max_attempts
        return self._after(attempt, reason, min(budget, self.max_attempts), rand)

    def _after(self, attempt: int, reason: str, max_attempts: int, rand: random.Random | None) -> Retry | Dead:
        if attempt >= max_attempts:
            return Dead(f"attempts exhausted: {reason}", attempt)
        return Retry(attempt + 1, self._delay_ms(attempt, rand), reason)

    def _delay_ms(self, attempt: int, rand: random.Random | None) -> int:
        return max(1, round(backoff.delay(attempt, self.base, self.cap, rand) * 1000))


def attempt_of(headers: Mapping[str, object] | None) -> int:
    value = (headers or {}).get(ATTEMPT_HEADER, 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def classify(body: bytes, attempt: int) -> Event | Dead:
    """A decodable event to handle, or a message that can never succeed (dead at once, with the reason)."""
    try:
        event = decode(body)
    except MalformedEvent as exc:
        return Dead(f"malformed: {exc}", attempt)
    if event.type not in FANOUT_TYPES:
        return Dead(f"malformed: {event.type} is not a fan-out event", attempt)
    return event


def copy_headers(headers: Mapping[str, object] | None, **extra: object) -> dict[str, object]:
    """Headers of a republished copy: the original's minus the broker's dead-letter history, plus `extra`."""
    kept = {k: v for k, v in (headers or {}).items() if k not in _BROKER_HEADERS}
    kept.update(extra)
    return kept


def push(follower_count: int, threshold: int) -> bool:
    """Fan out on write (True) or merge at read time (False): authors at or above the threshold are pulled."""
    return follower_count < threshold


def should_trim(post_id: int) -> bool:
    return post_id % TRIM_EVERY == 0


def backfill_floor(found: int, smallest: int | None, limit: int) -> int | None:
    """After backfilling `limit` of `found` (asked for limit + 1) posts: the floor to raise to, if older ones exist."""
    return smallest if found > limit and smallest is not None else None


def reason_text(exc: BaseException, limit: int = 500, *, with_type: bool = True) -> str:
    text = (f"{type(exc).__name__}: {exc}" if with_type else str(exc)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
