"""Rate-limit policy (pure): decisions from the window's count, reset times, client partitions, header fields."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api import ratelimit
from services.api.ratelimit import Quota

QUOTA = Quota("write", 3, 60)


def test_the_limit_th_request_is_allowed_and_the_next_refused() -> None:
    decisions = [ratelimit.decide(QUOTA, hits, 1200, 1210.5) for hits in (1, 2, 3, 4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert [d.remaining for d in decisions] == [2, 1, 0, 0]
    assert {d.reset for d in decisions} == {50}  # 1200 + 60 - 1210.5, rounded up


def test_header_fields_follow_the_draft_syntax() -> None:
    decision = ratelimit.decide(QUOTA, 2, 1200, 1259.2)
    assert decision.headers == {"RateLimit-Policy": '"write";q=3;w=60', "RateLimit": '"write";r=1;t=1'}


@given(hits=st.integers(1, 10**6), limit=st.integers(1, 10**6), window=st.integers(1, 86_400),
       offset=st.floats(0, 1, exclude_max=True))
def test_reset_is_within_the_window_and_remaining_never_negative(hits: int, limit: int, window: int,
                                                                  offset: float) -> None:
    start = 1_700_000_000 // window * window
    decision = ratelimit.decide(Quota("p", limit, window), hits, start, start + offset * window)
    assert 1 <= decision.reset <= window
    assert decision.remaining >= 0 and decision.allowed == (hits <= limit)


def test_zero_limit_is_off() -> None:
    assert not Quota("signup", 0, 3600).enabled and QUOTA.enabled


@pytest.mark.parametrize(("host", "subject"), [
    ("203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
    ("::ffff:203.0.113.7", "203.0.113.7"),
    ("not-an-address", "unknown"),
    (None, "unknown"),
])
def test_client_partitions(host: str | None, subject: str) -> None:
    assert ratelimit.client_subject(host) == subject


def test_keys_are_per_policy() -> None:
    assert Quota("signup", 1, 1).key("1.2.3.4") != Quota("write", 1, 1).key("1.2.3.4")
