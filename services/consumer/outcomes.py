"""What becomes of a message: the outcomes a consumer's handler answers, and the failures it raises. One set for
every consumer (the fan-out worker, the notifier, the delivery workers, the next one); the runtime settles each
(services/consumer/settler.py). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True, slots=True)
class Ack:
    """Done (effects committed, delivered, or nothing to do)."""


@dataclass(frozen=True, slots=True)
class Retry:
    """A retry copy into the retry queue, due in `delay_ms`, for try `attempt`: the runtime writes its ATTEMPT and
    REASON headers (services/consumer/headers.py). Then the original is acked."""

    attempt: int  # the attempt number of the copy to publish
    delay_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Hop:
    """A copy into the retry queue of `delay_ms` with exactly `headers` (the handler wrote them: a due time, an
    attempt it did not spend, ...). Then the original is acked. The delivery workers' wait (docs/adr/0081)."""

    delay_ms: int
    headers: dict[str, object] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Dead:
    """A dead letter with its reason (parked in the retry queue while the dead queue is full). Then the ack."""

    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Requeue:
    """Not done, not failed: the process is stopping (or a bug of ours). Return the message to the queue as it was."""


@dataclass(frozen=True, slots=True)
class Large:
    """Not settled yet: the handler goes on with it on the long-work threads (a large fan-out), which settle it."""


# What a consumer's `apply` answers for an event it is not done with: the processor's outcome is Large, and the
# event goes on to the consumer's `fan_out_large` (services/consumer/processor.py).
LARGE_LABEL: Final = "large"

Outcome = Ack | Retry | Hop | Dead | Requeue | Large
ACK: Final = Ack()
REQUEUE: Final = Requeue()
LARGE: Final = Large()


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


def reason_text(exc: BaseException, limit: int = 500, *, with_type: bool = True) -> str:
    text = (f"{type(exc).__name__}: {exc}" if with_type else str(exc)).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
