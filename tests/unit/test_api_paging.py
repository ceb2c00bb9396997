"""The page decision (services/api/paging.py): which part of a range is read below the floor, and how the two
parts make the page, checked against a reference that reads the whole range at once."""

from hypothesis import given
from hypothesis import strategies as st

from services.api.cursor import MAX_ID
from services.api.paging import Range, below_floor, combine, cut


def test_newest_first_continues_below_the_floor_only_when_the_page_is_short() -> None:
    page = Range(before=600, fetch=21)
    assert below_floor(page, floor=500, rows_above=3) == Range(0, 500, "newest", 18)
    assert below_floor(page, floor=500, rows_above=21) is None  # page full
    assert below_floor(page, floor=0, rows_above=3) is None  # nothing below floor 0
    assert below_floor(page, floor=1, rows_above=3) is None  # ids start at 1
    assert below_floor(Range(before=400, fetch=21), floor=500, rows_above=0) == Range(0, 400, "newest", 21)


def test_oldest_first_reads_below_the_floor_first_whatever_came_above() -> None:
    page = Range(after=100, order="oldest", fetch=21)
    assert below_floor(page, floor=500, rows_above=21) == Range(100, 500, "oldest", 21)
    assert below_floor(Range(after=499, order="oldest"), floor=500, rows_above=0) is None  # nothing in (499, 500)
    assert below_floor(Range(after=600, order="oldest"), floor=500, rows_above=0) is None


def test_cut() -> None:
    assert cut([1, 2, 3], 2) == ([1, 2], True)
    assert cut([1, 2], 2) == ([1, 2], False)


def _read(ids: list[int], after: int, before: int, newest: bool, fetch: int) -> list[int]:
    inside = sorted((i for i in ids if after < i < before), reverse=newest)
    return inside[:fetch]


@given(st.sets(st.integers(1, 300), max_size=80), st.integers(0, 320), st.integers(0, 320), st.booleans(),
       st.integers(1, 30), st.integers(0, 320))
def test_two_parts_read_what_one_read_of_the_whole_range_would(ids: set[int], a: int, b: int, newest: bool,
                                                               fetch: int, floor: int) -> None:
    after, before = min(a, b), max(a, b)
    page = Range(after, before if before else MAX_ID, "newest" if newest else "oldest", fetch)
    above_ids = [i for i in ids if i >= floor]
    above = _read(above_ids, max(page.after, floor - 1), page.before, newest, fetch)
    rest = below_floor(page, floor, len(above))
    below = [] if rest is None else _read([i for i in ids if i < floor], rest.after, rest.before, newest, rest.fetch)
    assert combine(page, above, below) == _read(sorted(ids), page.after, page.before, newest, fetch)
