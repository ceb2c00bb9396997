"""The headers walfeed's consumers write on the copies they publish (retry copies, dead letters, parked letters)
and read back (docs/amqp.md, docs/events.md). One set for every consumer and for `walfeed dead`. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

ATTEMPT: Final = "x-walfeed-attempt"  # 1-based number of the try this copy is for
REASON: Final = "x-walfeed-reason"  # why the message is in the dead queue (or why it was last retried)
ATTEMPTS: Final = "x-walfeed-attempts"  # tries made, on a dead letter
DEAD_AT: Final = "x-walfeed-dead-at"  # when it was dead-lettered, whole seconds since the epoch
DUE: Final = "x-walfeed-due"  # epoch milliseconds before which the copy is not worked on (the delivery workers)
PARKED: Final = "x-walfeed-dead"  # a dead letter waiting because the dead queue was full: its reason
UNSEEN: Final = "x-walfeed-unseen"  # times the delivery's row was looked for and not visible yet
REPLAYS: Final = "x-walfeed-replays"  # how many times `walfeed dead replay` sent this message back

# Headers the broker adds when dead-lettering; a republished copy starts without them (docs/adr/0020; RabbitMQ
# ignores client-set x-death since 3.13, and nothing here reads it).
BROKER: Final = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
                 "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")
# What a dead letter replayed by `walfeed dead replay` starts without: the consumers' history and the broker's.
HISTORY: Final = frozenset({REASON, ATTEMPTS, ATTEMPT, DEAD_AT, DUE, PARKED, *BROKER})


def copy_headers(headers: Mapping[str, object] | None, **extra: object) -> dict[str, object]:
    """Headers of a republished copy: the original's minus the broker's dead-letter history, plus `extra`."""
    kept = {k: v for k, v in (headers or {}).items() if k not in BROKER}
    kept.update(extra)
    return kept


def int_of(headers: Mapping[str, object] | None, name: str) -> int | None:
    """The header `name` if it is an integer (a bool is not), else None."""
    value = (headers or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attempt_of(headers: Mapping[str, object] | None) -> int:
    """The try a message is for: its ATTEMPT header, 1 without one (or with one that is not a positive integer)."""
    value = int_of(headers, ATTEMPT)
    return value if value is not None and value >= 1 else 1


def parked_reason(headers: Mapping[str, object] | None) -> str | None:
    """The reason of a dead letter that waited in a retry queue for room in the dead queue, if it is one."""
    value = (headers or {}).get(PARKED)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else None
