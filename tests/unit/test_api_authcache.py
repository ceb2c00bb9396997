"""The verified-token cache: entries expire after the TTL, a TTL of 0 keeps nothing, the size is bounded."""

from services.api.authcache import TokenCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = TokenCache(30.0, clock=clock)
    assert cache.get(b"h") is None
    cache.put(b"h", 7)
    clock.now += 29.9
    assert cache.get(b"h") == 7
    clock.now += 0.1
    assert cache.get(b"h") is None and len(cache) == 0  # expired entries are dropped, not kept


def test_zero_ttl_disables_the_cache() -> None:
    cache = TokenCache(0.0)
    cache.put(b"h", 7)
    assert cache.get(b"h") is None and len(cache) == 0


def test_size_is_bounded_oldest_first() -> None:
    cache = TokenCache(60.0, max_entries=3, clock=Clock())
    for i in range(5):
        cache.put(bytes([i]), i)
    assert len(cache) == 3
    assert [cache.get(bytes([i])) for i in range(5)] == [None, None, 2, 3, 4]
