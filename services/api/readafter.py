"""Read-your-writes over a read replica (docs/adr/0092): the token a write returns, the per-user memory of this
process's writes, and the schedule of a bounded wait for the replica. Pure (the clock is injected).

The token is a WAL position of the primary taken right after the write committed, printed as Postgres prints an
LSN (`16/B374D848`): a read carrying it is served by the replica only once the replica has replayed that far.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Final

from services.api.ttlmap import TtlMap

HEADER: Final = "WalFeed-Read-After"
MAX_ENTRIES: Final = 10_000  # users remembered per process: far above one process's writers per memory window
FIRST_POLL: Final = 0.001  # seconds; a healthy replica replays a commit within a millisecond or two
MAX_POLL: Final = 0.02  # the poll interval grows up to this: at most ~50 replay checks a second per waiting read

_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


class InvalidToken(ValueError):
    pass


def parse(text: str) -> int:
    """The WAL position of a token (`hi/lo`, hexadecimal, as pg_lsn prints), as a number of bytes."""
    match = _LSN.fullmatch(text.strip())
    if match is None:
        raise InvalidToken(f"{HEADER} must be a WAL position like 0/16B3748 (the value a write returned)")
    return int(match[1], 16) << 32 | int(match[2], 16)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def poll_delays(bound: float) -> Iterator[float]:
    """The pauses between replay checks of one read waiting at most `bound` seconds: doubling from FIRST_POLL up
    to MAX_POLL, and none that would end past the bound (the caller checks once more after each)."""
    spent, delay = 0.0, FIRST_POLL
    while spent + delay <= bound:
        yield delay
        spent += delay
        delay = min(delay * 2, MAX_POLL)


class WriteMemory:
    """The WAL position of each user's latest write through this process, for `ttl` seconds: that user's reads
    here wait for it even when the client does not send the token back. Bounded: the oldest writers go first."""

    def __init__(self, ttl: float, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic):
        self._entries: TtlMap[int, int] = TtlMap(ttl, max_entries, clock)  # user id -> WAL position

    def remember(self, user: int, lsn: int) -> None:
        """`user` wrote at `lsn`: remember the later of it and what is remembered, as the newest writer."""
        self._entries.put(user, max(lsn, self._entries.get(user) or 0))

    def get(self, user: int) -> int | None:
        return self._entries.get(user)

    def __len__(self) -> int:
        return len(self._entries)


def wanted(token: int | None, remembered: int | None) -> int | None:
    """The position a read must see: the later of the client's token and this process's memory, if any."""
    known = [lsn for lsn in (token, remembered) if lsn is not None]
    return max(known) if known else None


class NotReplayed(Exception):
    """Raised by a read's work on a replica: a row the read must find (the caller's own account, just
    authenticated on the primary) is not there yet. replica.Replica.run reads it on the primary instead."""
