"""The delivery worker's decisions: what an attempt's result means, when to try again, what becomes of the delivery
and its webhook. Pure: no I/O, the clock and the random source are arguments."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Final

# Delivery statuses (db/init/008_notifications.sql).
PENDING: Final = "PENDING"
RETRYING: Final = "RETRYING"
DELIVERED: Final = "DELIVERED"
DEAD: Final = "DEAD"
WITHDRAWN: Final = "WITHDRAWN"
SENDABLE: Final = frozenset({PENDING, RETRYING})  # anything else is settled: a message for it is acked unsent

# HTTP answers worth another try (RFC 9110): the request may succeed later. 501 Not Implemented never will.
RETRIABLE_HTTP: Final = frozenset({408, 425, 429})
_RANDOM: Final = random.Random()

# Retry-After as a receiver sends it: RFC 9110's delay-seconds are ASCII digits only (str.isdigit also accepts "²",
# which int() then refuses); more than this many digits is past any ceiling (10^15 s); an HTTP-date is 29
# characters, so a longer value that is not digits is no date; a longer wait than a day is never honoured.
_ASCII_DIGITS: Final = frozenset("0123456789")
_DIGITS_MAX: Final = 15
_DATE_MAX: Final = 64
# RFC 9110's third HTTP-date form, ANSI C's asctime(): `Sun Nov  6 08:50:37 1994`, the one without a zone
_ASCTIME: Final = re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}")
RETRY_AFTER_CEILING: Final = 86_400.0


@dataclass(frozen=True, slots=True)
class Answer:
    """The receiver answered: an HTTP status, or an SMTP reply code (`smtp` True)."""

    code: int
    retry_after: str | None = None  # the Retry-After header, as sent
    excerpt: str | None = None  # the start of the response body, at most 4 KB
    smtp: bool = False


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """No answer: connection refused or reset, DNS failure, timeout. Always worth another try. `error` is stored
    (the webhook's owner reads it); `detail`, which may tell a closed port from a silent one, is only logged."""

    error: str
    detail: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Refused:
    """walfeed refused to send (an address not allowed, an invalid URL or secret): trying again cannot help.
    `reason` is stored; `detail` (the address refused) is only logged."""

    reason: str
    detail: str | None = field(default=None, compare=False)


Result = Answer | NoAnswer | Refused


@dataclass(frozen=True, slots=True)
class Postponed:
    """Not tried after all: walfeed's own means were busy (the try's name lookup waited its whole deadline behind
    other receivers' lookups, never started). Not the receiver's doing: tried again shortly, no attempt spent, nothing
    recorded on the delivery or its webhook."""

    reason: str


POSTPONE_SECONDS: Final = 1.0  # how soon a postponed try comes back (through the retry queues' first hop)


@dataclass(frozen=True, slots=True)
class Settings:
    max_attempts: int
    base: float  # seconds: the first retry's delay (30 s); each next doubles
    cap: float  # seconds: the largest backoff delay (30 min)
    retry_after_max: float  # seconds: the longest Retry-After honoured (24 h)
    disable_after: float  # seconds: a webhook failing this long without a success is disabled


@dataclass(frozen=True, slots=True)
class Decision:
    status: str  # DELIVERED, RETRYING or DEAD
    reason: str | None = None  # why it failed (DEAD: the dead letter's reason)
    delay: float | None = None  # RETRYING: seconds until the next attempt
    disable: str | None = None  # the webhook is disabled, with this reason


def backoff(attempt: int, base: float, cap: float, rand: random.Random | None = None) -> float:
    """Seconds before the try after failed try `attempt` (1-based): base, 2 base, 4 base ... up to cap, less up to
    a fifth at random so the retries of many deliveries failed together do not arrive together."""
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 64))
    return ceiling * (1 - 0.2 * (rand if rand is not None else _RANDOM).random())


def parse_retry_after(value: str | None, now: datetime, ceiling: float = RETRY_AFTER_CEILING) -> float | None:
    """Retry-After (RFC 9110 10.2.3) in seconds from now, at most `ceiling`: delay-seconds or an HTTP-date; None if
    absent or invalid. Total: whatever a receiver sends, this returns and never raises."""
    if value is None:
        return None
    text = value.strip(" \t")
    if text and set(text) <= _ASCII_DIGITS:  # any length: a delay past the ceiling is the ceiling
        digits = text.lstrip("0")
        return ceiling if len(digits) > _DIGITS_MAX else min(float(int(digits or "0")), ceiling)
    if not text or len(text) > _DATE_MAX or not text.isascii():
        return None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # an HTTP-date is always GMT: only asctime's form says so by having no zone
            if not _ASCTIME.fullmatch(text):
                return None
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    except (TypeError, ValueError, IndexError, OverflowError):  # a year 10^20 overflows datetime
        return None
    return min(max(0.0, seconds), ceiling)


def failure_of(result: Result) -> tuple[bool, str] | None:
    """(retriable, reason) of a failed result; None for a success."""
    if isinstance(result, NoAnswer):
        return True, result.error
    if isinstance(result, Refused):
        return False, result.reason
    code = result.code
    if result.smtp:
        if 200 <= code < 400:
            return None
        return 400 <= code < 500, f"SMTP {code}"
    if 200 <= code < 300:
        return None
    if 300 <= code < 400:
        return False, f"HTTP {code}: redirects are not followed"
    return (code in RETRIABLE_HTTP or (500 <= code < 600 and code != 501)), f"HTTP {code}"


def decide(result: Result, attempt: int, settings: Settings, now: datetime,
           failing_since: datetime | None = None, rand: random.Random | None = None) -> Decision:
    """What becomes of a delivery after try `attempt` (1-based) gave `result`."""
    failure = failure_of(result)
    if failure is None:
        return Decision(DELIVERED)
    retriable, reason = failure
    if isinstance(result, Answer) and not result.smtp and result.code == 410:
        return Decision(DEAD, reason, disable="the endpoint answered 410 Gone")
    since = failing_since or now
    if now - since >= timedelta(seconds=settings.disable_after):
        return Decision(DEAD, reason, disable=f"failing since {since.isoformat()}, last: {reason}")
    if not retriable:
        return Decision(DEAD, reason)
    if attempt >= settings.max_attempts:
        return Decision(DEAD, f"attempts exhausted ({attempt}): {reason}")
    delay = backoff(attempt, settings.base, settings.cap, rand)
    asked = parse_retry_after(result.retry_after, now, settings.retry_after_max) \
        if isinstance(result, Answer) else None
    if asked is not None and asked > delay:
        delay = asked
    return Decision(RETRYING, reason, delay=delay)


# What a delivery row keeps of a receiver's words: its last error (and a webhook's disabled reason, which quotes it)
# and the response excerpt, in UTF-8 bytes at most. A receiver chooses them (an exception's text may quote its
# answer): without a bound, each failing try of each delivery could store whatever it sent.
ERROR_BYTES: Final = 1024
EXCERPT_BYTES: Final = 4096  # deliveries.response_excerpt's CHECK (db/init/008_notifications.sql)


def bounded(text: str | None, limit: int = ERROR_BYTES) -> str | None:
    """`text` as stored: at most `limit` bytes of UTF-8, NULs dropped (Postgres text has none)."""
    return None if text is None else excerpt(text.encode("utf-8", errors="replace"), limit)


def excerpt(body: bytes, limit: int = EXCERPT_BYTES) -> str:
    """Text to store of a response body: at most `limit` bytes of UTF-8, NULs dropped (Postgres text has none)."""
    text = body[:limit].decode("utf-8", errors="replace").replace("\x00", "")
    encoded = text.encode("utf-8")
    return text if len(encoded) <= limit else encoded[:limit].decode("utf-8", errors="ignore")
