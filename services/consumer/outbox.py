"""Whether an event a consumer of the events exchange got is real and new: its outbox row as the consumer's
transaction sees it, and the consumer's processed record (docs/adr/0022). Pure: outbox_db.py reads the rows.
The fan-out worker, the notifier and the next consumer of the events exchange decide the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from services.consumer.outcomes import Expected, Poison
from services.core import events as ev

# An event whose outbox row a consumer cannot see is either ahead of its transaction's visibility (a moment, see
# docs/adr/0022) or forged. Tries before it is dead-lettered as forged: with the retry delays of retry.RetryPolicy
# (full jitter from 0.5 s up) three retries span about 1.75 s on average, thousands of times the visibility lag.
NOT_IN_OUTBOX_ATTEMPTS: Final = 4


class NotVisibleYet(Expected):
    """The event's outbox row is not visible to this consumer: its transaction is not visible yet, or the event was
    never written by walfeed. Retried a few times, then dead-lettered as forged."""

    attempts = NOT_IN_OUTBOX_ATTEMPTS

    def __init__(self, event: ev.Event) -> None:
        super().__init__(f"not in outbox: {event.type} {event.id} has no visible outbox row")


class Forged(Poison):
    """The event's outbox row exists with another type or payload: the message was not published by the relay."""

    def __init__(self, event: ev.Event) -> None:
        super().__init__(f"not in outbox: {event.type} {event.id} differs from its outbox row")


class PostMissing(Expected):
    """post.created names a post that does not exist, or whose author differs: the data is inconsistent."""


@dataclass(frozen=True, slots=True)
class Known:
    """What the database holds for one event id: its outbox row (None: none visible) and whether it was processed."""

    type: str | None
    payload: Mapping[str, Any] | None
    processed: bool


def check(event: ev.Event, known: Known | None) -> Expected | Poison | None:
    """None if the event is real (its outbox row says the same); else the failure to report for it."""
    if known is None or known.type is None or known.payload is None:
        return NotVisibleYet(event)
    if known.type != event.type or any(known.payload.get(k) != v for k, v in event.payload.items()):
        return Forged(event)
    return None


def distinct(events: Iterable[ev.Event]) -> list[ev.Event]:
    """Each event once: a message delivered twice in one batch is applied once. Events are told apart by all they
    say, not by id: a forgery that reuses a real event's id must not take the real event's outcome."""
    return list(dict.fromkeys(events))
