"""A map whose entries live `ttl` seconds, bounded in size: past `max_entries` the least recently written entry
goes first (a read does not refresh an entry). Pure (the clock is injected). The api's per-process memories are
built on it: verified tokens (authcache.py) and each user's latest write (readafter.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlMap(Generic[K, V]):
    def __init__(self, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic):
        self._ttl = ttl
        self._max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()  # oldest write first

    def get(self, key: K) -> V | None:
        """The value written for `key` less than `ttl` seconds ago, else None (an expired entry is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V) -> None:
        """Remember `value` for `ttl` seconds as the newest entry (a ttl of 0 or less keeps nothing); past
        `max_entries`, the least recently written entries go."""
        if self._ttl <= 0:
            return
        self._entries[key] = (value, self._clock() + self._ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def discard_values(self, matches: Callable[[V], bool]) -> None:
        """Drop every entry whose value `matches` (a scan of at most max_entries)."""
        for key in [k for k, (value, _) in self._entries.items() if matches(value)]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
