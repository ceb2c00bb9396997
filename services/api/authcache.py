"""A small per-process TTL cache of verified bearer tokens: sha256(token) -> user id. Pure (the clock is injected).

Only tokens the database confirmed are remembered (a forged token always costs a lookup, a new sign-up works at
once). Tokens are immutable and users are never deleted, so an entry can only go stale if that changes: the TTL
bounds how long (ADR 0032). Bounded in size: when full, the oldest entries go first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

MAX_ENTRIES: Final = 10_000  # ~1 MB: far more distinct callers per process and TTL than one process serves


class TokenCache:
    def __init__(self, ttl: float, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[int, float]] = OrderedDict()

    def get(self, token_hash: bytes) -> int | None:
        """The user id of a token verified less than `ttl` seconds ago, else None."""
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        user, expires = entry
        if self._clock() >= expires:
            del self._entries[token_hash]
            return None
        return user

    def put(self, token_hash: bytes, user: int) -> None:
        if self.ttl <= 0:
            return
        self._entries[token_hash] = (user, self._clock() + self.ttl)
        self._entries.move_to_end(token_hash)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
