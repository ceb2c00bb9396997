"""Capped exponential backoff with full jitter. Pure."""

from __future__ import annotations

import random


def delay(attempt: int, base: float, cap: float, rand: random.Random | None = None) -> float:
    """Seconds to wait before try number `attempt` (1-based): uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(cap, base * (2.0 ** min(max(0, attempt - 1), 62)))  # a hostile attempt header: no overflow
    return (rand or random).uniform(0, ceiling)
