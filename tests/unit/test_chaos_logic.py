"""The chaos suite's own pure parts: the seeded schedule and the Jepsen-style classification."""

from tests.chaos.check import classify_delivery, diff_timelines, expected_timelines
from tests.chaos.schedule import FAULTS, make_schedule


def test_schedule_is_a_function_of_the_seed() -> None:
    assert make_schedule(7, 300, 25) == make_schedule(7, 300, 25)
    assert make_schedule(7, 300, 25) != make_schedule(8, 300, 25)


def test_schedule_spreads_faults_in_order_inside_the_window() -> None:
    faults = make_schedule(3, 100, 20)
    assert len(faults) == 20
    assert [f.at for f in faults] == sorted(f.at for f in faults)
    assert all(f.at >= 0 and f.at + f.hold <= 80 for f in faults)
    assert {f.kind for f in faults} <= set(FAULTS)


def test_classification_counts_lost_duplicated_unexpected() -> None:
    d = classify_delivery(committed=["a", "b", "c"], seen=["a", "a", "a", "c", "x", "poison"], injected=["poison"])
    assert d.lost == {"b"}
    assert d.unexpected == {"x"}
    assert d.duplicated == {"a": 2} and d.duplicates == 2
    assert d.published == 2


def test_expected_timelines_follow_the_definition() -> None:
    want = expected_timelines(users=[1, 2, 3], follows=[(1, 2)], live_posts={10: 2, 11: 1, 12: 3})
    assert want == {1: [11, 10], 2: [10], 3: [12]}


def test_diff_reports_missing_extra_repeated_and_order() -> None:
    diffs = diff_timelines({1: [3, 2, 1]}, {1: [2, 3, 3, 9]})
    (d,) = diffs
    assert (d.missing, d.extra, d.repeated, d.out_of_order) == ([1], [9], [3], True)
    assert diff_timelines({1: [2, 1]}, {1: [2, 1]}) == []
