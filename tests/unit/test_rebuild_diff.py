"""The pure part of `walfeed rebuild timelines` (services/cli/timeline_diff.py): what differs, and the repair plan."""

from __future__ import annotations

import random

from services.cli import timeline_diff as td

R = td.Row


def _seen(expected: list[td.Row], actual: list[td.Row], stray: tuple[td.Stray, ...] = (), floor: int = 0,
          user: int = 1) -> td.Observed:
    return td.Observed(user, floor, sorted(expected, reverse=True), actual, stray)


def test_missing_rows_are_the_expected_ones_not_materialized_and_stray_rows_are_reported_with_their_reason() -> None:
    stray = td.Stray(R(7, 3), "deleted")
    d = td.diff(_seen([R(10, 2), R(11, 2), R(12, 1)], [R(10, 2), R(7, 3)], (stray,)), cap=800)
    assert d.missing == (R(11, 2), R(12, 1))
    assert d.stray == (stray,)
    assert d.raise_floor_to is None and d.differs


def test_a_consistent_timeline_does_not_differ_whatever_valid_rows_lie_below_the_floor() -> None:
    d = td.diff(_seen([R(50, 2), R(60, 2)], [R(5, 2), R(50, 2), R(60, 2)], floor=40), cap=800)
    assert not d.differs


def test_a_row_with_the_wrong_author_is_stray_its_post_missing_and_both_authors_locked_exclusively() -> None:
    wrong = td.Stray(R(10, 9), "wrong author", post_author=2)
    d = td.diff(_seen([R(10, 2)], [R(10, 9)], (wrong,)), cap=800)
    assert d.missing == (R(10, 2),) and d.stray == (wrong,)
    assert td.repairs([d]) == [td.Repair([2, 9], [True, True], delete=[(1, 10)], insert=[(1, 10)])]


def test_more_than_twice_the_cap_above_the_floor_raises_it_to_the_cap_th_newest_and_fills_only_above() -> None:
    cap = 5
    expected = [R(i, 2) for i in range(100, 100 + 2 * cap + 1)]
    d = td.diff(_seen(expected, actual=[R(110, 2)]), cap=cap)
    newest = sorted(expected, reverse=True)[:cap]
    assert d.raise_floor_to == newest[-1].post_id
    assert set(d.missing) == set(newest) - {R(110, 2)}
    at_window = td.diff(_seen(expected[:2 * cap], actual=expected[:2 * cap]), cap=cap)
    assert not at_window.differs  # the soft cap: up to twice the cap above the floor is a timeline the worker keeps


def test_confirmed_keeps_only_what_both_reads_show() -> None:
    gone, kept = td.Stray(R(7, 3), "not followed"), td.Stray(R(8, 3), "deleted")
    first = td.Diff(1, (R(10, 2), R(11, 2)), (gone, kept), 0, 30)
    second = td.Diff(1, (R(11, 2), R(12, 2)), (kept,), 0, 31)
    both = td.confirmed(first, second)
    assert both.missing == (R(11, 2),) and both.stray == (kept,) and both.raise_floor_to == 31
    assert not td.confirmed(first, td.Diff(1)).differs


def test_repairs_lock_every_written_author_in_ascending_order_exclusively_where_rows_are_deleted() -> None:
    rng = random.Random(7)
    diffs = []
    for user in range(1, 40):
        missing = tuple(sorted({R(rng.randrange(1000), rng.randrange(1, 300)) for _ in range(rng.randrange(6))}))
        stray = tuple(td.Stray(R(rng.randrange(1000), rng.randrange(1, 300)), "deleted")
                      for _ in range(rng.randrange(3)))
        diffs.append(td.Diff(user, missing, stray))
    plan = td.repairs(diffs, max_authors=17)
    keys = [k for r in plan for k in r.keys]
    assert keys == sorted(set(keys)) and all(len(r.keys) <= 17 for r in plan)
    author_of = {(d.user_id, r.post_id): r.author_id for d in diffs for r in d.missing}
    stray_of = {(d.user_id, s.row.post_id): s.row.author_id for d in diffs for s in d.stray}
    assert sorted(p for r in plan for p in r.insert) == sorted(author_of)
    assert sorted(p for r in plan for p in r.delete) == sorted(stray_of)
    for r in plan:
        mode = dict(zip(r.keys, r.exclusive, strict=True))
        assert all(author_of[p] in mode for p in r.insert)
        assert all(mode[stray_of[p]] for p in r.delete)  # deleting needs the exclusive lock (docs/adr/0073)
        assert r.insert == sorted(r.insert) and r.delete == sorted(r.delete)  # primary-key order, as the worker
        assert not any(mode[k] for k in r.keys if k not in {stray_of[p] for p in r.delete})


def test_describe_says_what_differs_in_one_line() -> None:
    d = td.Diff(4, (R(11, 2), R(12, 1)), (td.Stray(R(7, 3), "deleted"),), 0, None)
    assert td.describe(d) == "user 4: 2 missing (posts 11, 12); 1 stray (posts 7 deleted)"
    many = td.Diff(5, tuple(R(i, 1) for i in range(12)), (), 3, 40)
    assert td.describe(many, shown=2) == ("user 5: 12 missing (posts 0, 1, ... 10 more); floor 3 too low: more than "
                                          "2 x the cap of posts above it, to raise to 40")
