"""bench/capacity.py's pure verdicts (bench/lib/knee.py): the backlog of a step, sustained or not, the knee."""

from __future__ import annotations

import math

from bench.lib import httpload, knee


def step(offered: int, **changes: float) -> dict[str, float]:
    base = {"offered": offered, "achieved": float(offered), "errors": 0, "p99": 100.0, "growth": 0.0,
            "second_half_commits": offered * 15.0, "unfinished": 0}
    return {**base, **changes}


def test_backlog_counts_committed_not_yet_visible_posts() -> None:
    commits = [0.1, 0.2, 0.3, 1.1, 1.2, 1.3]
    visible = [0.15, 0.9, 1.9]
    assert knee.backlog_at(commits, visible, 0.5) == 2  # 3 committed, 1 visible
    assert knee.backlog_at(commits, visible, 2.0) == 3
    g = knee.backlog_growth(commits, visible, seconds=2.0)
    assert (g["backlog_mid"], g["backlog_end"], g["growth"], g["second_half_commits"]) == (1, 3, 2, 3)
    assert g["delivered"] == 1.5  # 3 visible within the 2 s


def test_a_pipeline_that_keeps_up_has_a_flat_backlog_and_one_that_does_not_grows_in_proportion() -> None:
    commits = [i / 100 for i in range(1000)]  # 100 posts/s for 10 s
    keeps_up = knee.backlog_growth(commits, [t + 0.05 for t in commits], 10.0)
    assert abs(keeps_up["growth"]) <= 1 and keeps_up["backlog_end"] <= 6
    behind = knee.backlog_growth(commits, [t * 2 for t in commits if t * 2 <= 10.0], 10.0)  # delivers half
    assert behind["growth"] > knee.GROWTH_SHARE * behind["second_half_commits"]


def test_each_condition_of_a_sustained_step_is_named_when_it_fails() -> None:
    assert knee.failures(step(1000)) == []
    assert knee.failures(step(1000, achieved=900.0)) == ["writers reached 900 of 1,000 posts/s"]
    assert knee.failures(step(1000, p99=1000.0)) == ["p99 1,000 ms >= 1,000 ms"]
    assert knee.failures(step(1000, p99=math.nan)) != []  # nothing became visible
    assert knee.failures(step(1000, growth=751.0)) == ["backlog grew by 751 posts in the second half"]
    assert knee.failures(step(1000, growth=750.0)) == []  # 5% of 15,000
    assert knee.failures(step(1000, errors=2)) == ["2 writes failed"]
    assert knee.failures(step(1000, unfinished=3)) == ["3 posts not visible by the drain deadline"]


def test_the_knee_is_the_highest_rate_sustained_with_every_lower_one() -> None:
    steps = [step(2000, p99=5000.0), step(250), step(1000, growth=1e6), step(500), step(4000)]
    assert knee.knee(steps) == 500  # 4000 passing after failures is noise, not capacity
    assert knee.knee([step(250, achieved=10.0)]) == 0
    assert knee.knee([]) == 0


def test_the_knee_ratio_is_http_over_sql_of_one_run_and_absent_without_both() -> None:
    assert knee.ratio({"sql": 1000, "http": 250}) == 0.25
    assert knee.ratio({"sql": 1000, "http": 0}) == 0.0
    assert knee.ratio({"sql": 0, "http": 250}) is None
    assert knee.ratio({"http": 250}) is None
    assert knee.ratio({"sql": 1000}) is None


def test_any_two_kinds_have_a_ratio_and_the_floor_app_is_posted_to_without_auth() -> None:
    knees = {"sql": 1000, "http": 250, "floor": 500}
    assert (knee.ratio(knees, "floor"), knee.ratio(knees, "http", "floor")) == (0.5, 0.5)
    assert knee.ratio({"sql": 1000, "http": 250}, "floor") is None
    floor, api = httpload.request(7, 1, floor=True), httpload.request(7, 1)
    assert floor.startswith(b"POST /posts?author=7 HTTP/1.1\r\n") and b"Authorization" not in floor
    assert api.startswith(b"POST /v1/posts HTTP/1.1\r\n") and b"Authorization: Bearer " in api
    assert floor.endswith(b'{"body": "bench post 1"}') and api.endswith(b'{"body": "bench post 1"}')
