"""A small per-process TTL cache of verified bearer tokens: sha256(token) -> user id. Pure (the clock is injected).

Only tokens the database confirmed are remembered (a forged token always costs a lookup, a new sign-up works at
once). A token can be rotated or revoked (ADR 0035): the api's listener (revocations.py) tells this cache to
forget the user at once, and while the listener is not connected the cache serves nothing, since it could miss
a change. A fill that raced with a change is dropped: `put` carries the generation read before the database
lookup, and every forget or reset starts a new generation. Bounded in size: when full, the oldest entries go first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol

from services.api.ttlmap import TtlMap

MAX_ENTRIES: Final = 10_000  # about 1 MB, far above one process's callers per TTL


class TokenCache:
    def __init__(self, ttl: float, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic):
        self._entries: TtlMap[bytes, int] = TtlMap(ttl, max_entries, clock)  # sha256(token) -> user id
        self.generation = 0
        self.live = False  # the listener is connected, so token changes reach forget_user

    def get(self, token_hash: bytes) -> int | None:
        """The user id of a token verified less than `ttl` seconds ago, else None."""
        return self._entries.get(token_hash)

    def put(self, token_hash: bytes, user: int, generation: int) -> None:
        """Remember a token the database confirmed after `generation` was read; unless something changed since."""
        if self.live and generation == self.generation:
            self._entries.put(token_hash, user)

    def forget_user(self, user: int) -> None:
        """The user's token changed: drop every entry of theirs (rare; a scan of at most max_entries)."""
        self.generation += 1
        self._entries.discard_values(lambda owner: owner == user)

    def listening(self, live: bool) -> None:
        """The listener (re)connected or lost its connection: either way, forget everything."""
        self.generation += 1
        self.live = live
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class Forgets(Protocol):
    """What the revocation listener drives (revocations.py): TokenCache, and the Mastodon layer's grant cache."""

    def forget_user(self, user: int) -> None: ...

    def listening(self, live: bool) -> None: ...


class Caches:
    """Several caches told of every token change at once."""

    def __init__(self, *caches: Forgets) -> None:
        self._caches = caches

    def forget_user(self, user: int) -> None:
        for cache in self._caches:
            cache.forget_user(user)

    def listening(self, live: bool) -> None:
        for cache in self._caches:
            cache.listening(live)
