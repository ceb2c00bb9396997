"""Which source a home-timeline page reads: materialized rows above the floor, fan-in below it."""

from services.api.cursor import MAX_ID
from services.api.paging import Segment, cut, first_segment, next_segment


def test_first_page_starts_above_the_floor() -> None:
    assert first_segment(None, 0) == Segment("materialized", MAX_ID, 0)
    assert first_segment(None, 500) == Segment("materialized", MAX_ID, 500)


def test_page_below_the_floor_reads_fan_in_only() -> None:
    assert first_segment(500, 500) == Segment("fan_in", 500, 0)
    assert first_segment(20, 500) == Segment("fan_in", 20, 0)


def test_short_materialized_part_continues_below_the_floor() -> None:
    above = first_segment(600, 500)
    assert next_segment(above, rows_so_far=3, fetch=21) == Segment("fan_in", 500, 0)
    assert next_segment(above, rows_so_far=21, fetch=21) is None  # page full
    assert next_segment(first_segment(600, 0), rows_so_far=3, fetch=21) is None  # nothing below floor 0
    assert next_segment(first_segment(600, 1), rows_so_far=3, fetch=21) is None  # ids start at 1
    assert next_segment(Segment("fan_in", 500, 0), rows_so_far=0, fetch=21) is None


def test_cut_tells_whether_more_rows_exist() -> None:
    assert cut([5, 4, 3], 2) == ([5, 4], True)
    assert cut([5, 4], 2) == ([5, 4], False)
    assert cut([], 2) == ([], False)
