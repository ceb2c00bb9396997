"""Read-your-writes tokens and memory (services/api/readafter.py): a token is a WAL position both ways, anything
else is refused; the bounded wait never sleeps past its bound; a user's remembered write expires and only moves
forward; the memory is bounded."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import readafter
from services.api.readafter import WriteMemory
from testkit.clock import Clock


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_a_token_is_the_position_it_prints(lsn: int) -> None:
    assert readafter.parse(readafter.format_lsn(lsn)) == lsn


def test_tokens_read_as_postgres_prints_lsns() -> None:
    assert readafter.format_lsn(0x16_B374D848) == "16/B374D848"
    assert readafter.parse("0/16b3748") == 0x16B3748
    assert readafter.parse(" 1/0 ") == 1 << 32


@pytest.mark.parametrize("text", ["", "0", "0/", "/1", "1/2/3", "G/1", "123456789/0", "0/-1", "tomorrow"])
def test_anything_else_is_refused_naming_the_header(text: str) -> None:
    with pytest.raises(readafter.InvalidToken, match=readafter.HEADER):
        readafter.parse(text)


@given(st.floats(min_value=0.0, max_value=10.0))
def test_the_wait_never_sleeps_past_its_bound(bound: float) -> None:
    delays = list(readafter.poll_delays(bound))
    assert sum(delays) <= bound + 1e-9
    assert all(readafter.FIRST_POLL <= d <= readafter.MAX_POLL for d in delays)
    assert bound < readafter.FIRST_POLL or delays  # a bound of a millisecond or more polls at least once


def test_a_bound_of_zero_checks_once_and_does_not_wait() -> None:
    assert list(readafter.poll_delays(0.0)) == []


def test_a_remembered_write_expires_and_only_moves_forward() -> None:
    clock = Clock()
    memory = WriteMemory(10.0, clock=clock)
    assert memory.get(7) is None
    memory.remember(7, 500)
    memory.remember(7, 300)  # an earlier position reported late does not move it back
    clock.now += 9.9
    assert memory.get(7) == 500
    clock.now += 0.1
    assert memory.get(7) is None and len(memory) == 0


def test_a_memory_of_zero_seconds_keeps_nothing() -> None:
    memory = WriteMemory(0.0)
    memory.remember(7, 500)
    assert memory.get(7) is None and len(memory) == 0


def test_the_memory_is_bounded_the_oldest_writer_goes_first() -> None:
    memory = WriteMemory(10.0, max_entries=2)
    memory.remember(1, 10)
    memory.remember(2, 20)
    memory.remember(1, 30)  # writing again makes 1 the newest
    memory.remember(3, 40)
    assert (memory.get(1), memory.get(2), memory.get(3)) == (30, None, 40)


@pytest.mark.parametrize(("token", "remembered", "wanted"), [
    (None, None, None), (5, None, 5), (None, 7, 7), (5, 7, 7), (9, 7, 9)])
def test_a_read_waits_for_the_later_of_token_and_memory(token: int | None, remembered: int | None,
                                                         wanted: int | None) -> None:
    assert readafter.wanted(token, remembered) == wanted
