"""A replication session's sequence numbers go stale when it ends, and never collide with a later session's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.cdc_relay.sessions import Sessions


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6))
def test_each_session_numbers_above_every_earlier_one_and_only_its_own_are_current(events: list[int]) -> None:
    sessions = Sessions()
    earlier: list[int] = []
    for count in events:  # a session reads `count` events, then ends
        seqs = list(range(sessions.first_seq, sessions.first_seq + count))
        assert all(sessions.is_current(seq) for seq in seqs)
        assert not any(sessions.is_current(seq) for seq in earlier)
        assert sessions.current(earlier + seqs) == seqs
        earlier += seqs
        sessions.end()
    assert sessions.current(earlier) == []
