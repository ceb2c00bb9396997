"""The verified-token cache: entries expire after the TTL, a TTL of 0 keeps nothing, the size is bounded; a token
change forgets the user, a fill that raced with a change is dropped, and nothing is served without the listener."""

from services.api.authcache import TokenCache
from testkit.clock import Clock


def live(ttl: float, **kwargs: object) -> TokenCache:
    cache = TokenCache(ttl, **kwargs)  # type: ignore[arg-type]
    cache.listening(True)
    return cache


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache = live(30.0, clock=clock)
    assert cache.get(b"h") is None
    cache.put(b"h", 7, cache.generation)
    clock.now += 29.9
    assert cache.get(b"h") == 7
    clock.now += 0.1
    assert cache.get(b"h") is None and len(cache) == 0  # expired entries are dropped, not kept


def test_zero_ttl_disables_the_cache() -> None:
    cache = live(0.0)
    cache.put(b"h", 7, cache.generation)
    assert cache.get(b"h") is None and len(cache) == 0


def test_size_is_bounded_oldest_first() -> None:
    cache = live(60.0, max_entries=3, clock=Clock())
    for i in range(5):
        cache.put(bytes([i]), i, cache.generation)
    assert len(cache) == 3
    assert [cache.get(bytes([i])) for i in range(5)] == [None, None, 2, 3, 4]


def test_a_token_change_forgets_every_entry_of_that_user_only() -> None:
    cache = live(60.0)
    for token_hash, user in ((b"a1", 1), (b"a2", 1), (b"b", 2)):
        cache.put(token_hash, user, cache.generation)
    cache.forget_user(1)
    assert (cache.get(b"a1"), cache.get(b"a2"), cache.get(b"b")) == (None, None, 2)


def test_a_fill_that_raced_with_a_token_change_is_dropped() -> None:
    cache = live(60.0)
    before_lookup = cache.generation
    cache.forget_user(1)  # the notification arrives while the request reads the (old) token from the database
    cache.put(b"old", 1, before_lookup)
    assert cache.get(b"old") is None


def test_nothing_is_cached_while_the_listener_is_down() -> None:
    cache = TokenCache(60.0)  # not connected yet
    cache.put(b"h", 7, cache.generation)
    assert cache.get(b"h") is None
    cache.listening(True)
    cache.put(b"h", 7, cache.generation)
    assert cache.get(b"h") == 7
    cache.listening(False)  # lost: it may have missed a change
    assert cache.get(b"h") is None and len(cache) == 0
    cache.put(b"h", 7, cache.generation)
    assert cache.get(b"h") is None
