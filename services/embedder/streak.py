"""When the embedder says that the model (or the database) fails: once when a streak of failures starts, once when
it ends, never per message. Pure: fed with the time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Ended:
    failures: int
    seconds: float


class FailureStreak:
    def __init__(self) -> None:
        self._since: float | None = None
        self._failures = 0

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, now: float) -> bool:
        """A failure at `now`; True when it starts a streak (the one to log)."""
        self._failures += 1
        if self._since is None:
            self._since = now
            return True
        return False

    def succeeded(self, now: float) -> Ended | None:
        """A success at `now`; the streak it ends, if any (to log once)."""
        if self._since is None:
            return None
        ended = Ended(self._failures, now - self._since)
        self._since, self._failures = None, 0
        return ended
