"""Durations as operators write them."""

from datetime import timedelta

import pytest

from services.core import backoff, durations


@pytest.mark.parametrize(("text", "expected"), [
    ("0", timedelta(0)), ("90s", timedelta(seconds=90)), ("15m", timedelta(minutes=15)), ("6h", timedelta(hours=6)),
    ("7d", timedelta(days=7)), ("2w", timedelta(weeks=2)), ("1d12h", timedelta(hours=36)),
    (" 1.5H ", timedelta(hours=1.5)),
])
def test_durations_parse(text: str, expected: timedelta) -> None:
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["", "7", "7 days", "-1h", "1h-", "d", "1y", "1h 30m"])
def test_anything_else_is_refused_with_the_form(text: str) -> None:
    with pytest.raises(durations.DurationError, match=r"e\.g\. 90s, 15m"):
        durations.parse(text)


def test_ages_render_in_their_two_largest_units() -> None:
    assert [durations.render(timedelta(seconds=s)) for s in (0, 59, 3700, 90_061, -5)] == [
        "0s", "59s", "1h1m", "1d1h", "0s"]


@pytest.mark.parametrize("text", ["99999999999999d", "\u0663s"])
def test_a_duration_past_any_wait_or_in_other_digits_is_refused_not_an_overflow(text: str) -> None:
    with pytest.raises(durations.DurationError):
        durations.parse(text)


def test_a_hostile_attempt_number_backs_off_at_most_the_cap() -> None:
    assert 0 <= backoff.delay(10**6, 1.0, 30.0) <= 30.0
