"""How one home-timeline page is read, decided without I/O (docs/adr/0096).

A page is the posts in an open range after < id < before, in one of two orders: `newest` first (the page just
below `before`: scrolling back; or the newest page above `after`) or `oldest` first (the page just above `after`:
paging towards newer posts). Materialized rows are complete only at or above the reader's `timeline_floor`; below
it the page comes from posts + follows. The part at or above the floor is always read first (one statement, which
also returns the floor); the part below it only when the range reaches below the floor and, newest first, the
first part did not fill the page. Each page fetches `limit + 1` rows to know whether another page exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from services.api.cursor import MAX_ID

Row = TypeVar("Row")
Order = Literal["newest", "oldest"]


@dataclass(frozen=True, slots=True)
class Range:
    """Post ids strictly between `after` and `before`, read in `order`, at most `fetch` of them."""

    after: int = 0
    before: int = MAX_ID
    order: Order = "newest"
    fetch: int = 21


def below_floor(page: Range, floor: int, rows_above: int) -> Range | None:
    """The part of the page still to read below the floor, after the part at or above it returned `rows_above`
    rows; None when nothing is left to read there."""
    before = min(page.before, floor)
    if before <= page.after + 1:  # no id lies below the floor within the range
        return None
    if page.order == "newest":
        return None if rows_above >= page.fetch else Range(page.after, before, "newest", page.fetch - rows_above)
    return Range(page.after, before, "oldest", page.fetch)  # those come first: every one is older than the rest


def combine(page: Range, above: Sequence[Row], below: Sequence[Row]) -> list[Row]:
    """The page's rows in its order from the two parts (each in that order)."""
    rows = [*above, *below] if page.order == "newest" else [*below, *above]
    return rows[:page.fetch]


def cut(rows: Sequence[Row], limit: int) -> tuple[list[Row], bool]:
    """The page (at most `limit` rows) and whether more rows exist after it."""
    return list(rows[:limit]), len(rows) > limit
