"""A channel that only nacks is reopened after a while (services/core/nack_streak.py, docs/adr/0090)."""

from services.core.nack_streak import NackStreak


def test_only_nacks_for_the_whole_period_reopen_the_channel() -> None:
    streak = NackStreak(reopen_after=10.0)
    assert not streak.nacked(100.0)
    assert not streak.nacked(105.0)
    assert streak.nacked(110.0)


def test_an_ack_between_nacks_starts_the_period_again() -> None:
    streak = NackStreak(reopen_after=10.0)
    streak.nacked(100.0)
    streak.acked()
    assert not streak.nacked(109.0)
    assert not streak.nacked(118.0)
    assert streak.nacked(119.0)


def test_a_new_channel_starts_the_period_again() -> None:
    streak = NackStreak(reopen_after=10.0)
    streak.nacked(100.0)
    streak.reset()
    assert not streak.nacked(115.0)
