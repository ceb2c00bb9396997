"""A one-line-per-phase progress display with elapsed time and an ETA from the planned phase durations."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def clock(seconds: float) -> str:
    """12s, 3m05s, 1h02m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def eta(planned: list[float], done: int, elapsed: float) -> float:
    """Seconds left: the plan of the phases not done yet, scaled by how far reality is from the plan so far."""
    spent_plan = sum(planned[:done])
    left_plan = sum(planned[done:])
    scale = elapsed / spent_plan if spent_plan > 0 and elapsed > 0 else 1.0
    return left_plan * min(max(scale, 0.5), 3.0)


def line(index: int, count: int, name: str, elapsed: float, left: float) -> str:
    return f"[{index:>2}/{count}] {name:<44} elapsed {clock(elapsed):>6}  ETA {clock(left):>6}"


class Progress:
    """Phases are announced with start(name); the plan (name -> estimated seconds) fixes the count and the ETA."""

    def __init__(self, plan: list[tuple[str, float]], out: TextIO = sys.stderr,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._plan = plan
        self._out, self._now = out, now
        self._started = now()
        self._done = 0

    def start(self, name: str) -> None:
        elapsed = self._now() - self._started
        left = eta([p for _, p in self._plan], self._done, elapsed)
        self._done = min(self._done + 1, len(self._plan))
        print(line(self._done, len(self._plan), name, elapsed, left), file=self._out, flush=True)

    def note(self, text: str) -> None:
        print(f"        {text}", file=self._out, flush=True)

    def elapsed(self) -> float:
        return self._now() - self._started
