"""A clock the test moves by hand, for the pure parts that take one (`clock: Callable[[], float]`)."""

from __future__ import annotations


class Clock:
    """Callable like time.monotonic; `now` is what it answers."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
