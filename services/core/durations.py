"""Durations as operators write them (`90s`, `15m`, `6h`, `7d`, `1d12h`, `0`): parsed once, errors say the form."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_PART: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
FORM: Final = "a number with a unit s, m, h, d or w, e.g. 90s, 15m, 6h, 7d, 1d12h, or 0"


class DurationError(ValueError):
    """Not a duration; the message says what one looks like."""


def parse(text: str) -> timedelta:
    value = text.strip().lower()
    if value == "0":
        return timedelta(0)
    parts = _PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise DurationError(f"{text!r} is not a duration: expected {FORM}")
    try:
        return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))
    except OverflowError:  # past timedelta's 999,999,999 days
        raise DurationError(f"{text!r} is longer than any duration walfeed can wait") from None


def render(delta: timedelta) -> str:
    """`3d4h`, `12m5s`, `0s`: the two largest units, for ages in tables."""
    seconds = max(0, int(delta.total_seconds()))
    out: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not out):
            out.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(out) == 2:
            break
    return "".join(out)
