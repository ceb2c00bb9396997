"""Wait for a state by polling with a deadline. Never sleep to wait for something."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Call `probe` until it returns a truthy value (returned) or `timeout` passes (AssertionError).

    Exceptions from the probe count as "not yet" until the deadline; the last one is chained.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last = probe()
            error = None
            if last:
                return last
        except Exception as exc:
            error = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or probe!r}; last: {last!r}") from error
        time.sleep(interval)  # the poll interval, not a wait for a state
