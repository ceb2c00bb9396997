"""The api's expiring, size-capped map (services/api/ttlmap.py): an entry lives `ttl` seconds on the injected
clock, a ttl of 0 keeps nothing, past the cap the least recently written entry goes (reading does not refresh
it), and entries can be dropped by value or all at once."""

from hypothesis import given
from hypothesis import strategies as st

from services.api.ttlmap import TtlMap
from testkit.clock import Clock


def test_an_entry_lives_ttl_seconds_then_is_dropped() -> None:
    clock = Clock()
    entries: TtlMap[str, int] = TtlMap(10.0, 10, clock)
    entries.put("a", 1)
    clock.now += 9.9
    assert entries.get("a") == 1
    clock.now += 0.1
    assert entries.get("a") is None and len(entries) == 0


def test_writing_again_restarts_the_ttl() -> None:
    clock = Clock()
    entries: TtlMap[str, int] = TtlMap(10.0, 10, clock)
    entries.put("a", 1)
    clock.now += 6.0
    entries.put("a", 2)
    clock.now += 6.0
    assert entries.get("a") == 2


def test_a_ttl_of_zero_keeps_nothing() -> None:
    entries: TtlMap[str, int] = TtlMap(0.0, 10, Clock())
    entries.put("a", 1)
    assert entries.get("a") is None and len(entries) == 0


def test_past_the_cap_the_least_recently_written_goes_first() -> None:
    entries: TtlMap[str, int] = TtlMap(10.0, 2, Clock())
    entries.put("a", 1)
    entries.put("b", 2)
    assert entries.get("a") == 1  # a read does not make "a" newer
    entries.put("c", 3)
    assert (entries.get("a"), entries.get("b"), entries.get("c")) == (None, 2, 3)
    entries.put("b", 4)  # writing again does
    entries.put("d", 5)
    assert (entries.get("b"), entries.get("c"), entries.get("d")) == (4, None, 5)


@given(st.integers(min_value=1, max_value=20), st.lists(st.integers(min_value=0, max_value=30), max_size=100))
def test_the_size_never_exceeds_the_cap_and_the_newest_writes_stay(cap: int, keys: list[int]) -> None:
    entries: TtlMap[int, int] = TtlMap(10.0, cap, Clock())
    latest: dict[int, int] = {}  # the model: each key's latest write, least recently written first
    for i, key in enumerate(keys):
        entries.put(key, i)
        latest.pop(key, None)
        latest[key] = i
        assert len(entries) == min(cap, len(latest))
    kept = dict(list(latest.items())[-cap:])
    assert {key: entries.get(key) for key in latest} == {key: kept.get(key) for key in latest}


def test_entries_are_dropped_by_value_or_all_at_once() -> None:
    entries: TtlMap[str, int] = TtlMap(10.0, 10, Clock())
    for key, value in (("a1", 1), ("a2", 1), ("b", 2)):
        entries.put(key, value)
    entries.discard_values(lambda value: value == 1)
    assert (entries.get("a1"), entries.get("a2"), entries.get("b")) == (None, None, 2)
    entries.clear()
    assert entries.get("b") is None and len(entries) == 0
