"""How one home-timeline page is read, decided without I/O.

Materialized rows are complete only at or above the user's `timeline_floor`; below it the page comes from
posts + follows. A page whose range straddles the floor reads the part above it first, then, only if that part
ran out, the part below. Each page fetches `limit + 1` rows to know whether another page exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from services.api.cursor import MAX_ID

Row = TypeVar("Row")


@dataclass(frozen=True, slots=True)
class Segment:
    source: Literal["materialized", "fan_in"]
    before: int  # ids strictly below
    floor: int  # ids at or above (0 for fan_in)


def first_segment(before: int | None, floor: int) -> Segment:
    """Where the page starts: above the floor from the materialized timeline, else fan-in."""
    start = MAX_ID if before is None else before
    if start > floor:
        return Segment("materialized", start, floor)
    return Segment("fan_in", start, 0)


def next_segment(current: Segment, rows_so_far: int, fetch: int) -> Segment | None:
    """After the materialized part returned fewer rows than wanted, continue below the floor (if anything is)."""
    if current.source == "materialized" and rows_so_far < fetch and current.floor > 1:
        return Segment("fan_in", current.floor, 0)
    return None


def cut(rows: Sequence[Row], limit: int) -> tuple[list[Row], bool]:
    """The page (at most `limit` rows) and whether more rows exist after it."""
    return list(rows[:limit]), len(rows) > limit
