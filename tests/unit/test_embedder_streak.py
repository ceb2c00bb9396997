"""The embedder logs a failing model once per streak (services/embedder/streak.py)."""

from services.embedder.streak import Ended, FailureStreak


def test_only_the_first_failure_of_a_streak_is_logged_and_the_end_reports_it() -> None:
    streak = FailureStreak()
    assert streak.succeeded(0.0) is None
    assert [streak.failed(t) for t in (1.0, 2.0, 3.0)] == [True, False, False]
    assert streak.failing
    assert streak.succeeded(5.0) == Ended(3, 4.0)
    assert not streak.failing and streak.succeeded(6.0) is None
    assert streak.failed(7.0)  # a new streak
