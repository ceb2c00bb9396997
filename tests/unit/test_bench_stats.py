"""Pure parts of bench/run_all.py: percentiles, medians over runs, pacing, time buckets, progress lines."""

from __future__ import annotations

import io
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.lib import progress, stats


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert stats.percentile(values, 0.50) == 50.0
    assert stats.percentile(values, 0.95) == 95.0
    assert stats.percentile(values, 0.99) == 99.0
    assert stats.percentile(values, 1.0) == 100.0
    assert stats.percentile([7.0], 0.99) == 7.0
    assert math.isnan(stats.percentile([], 0.5))
    with pytest.raises(ValueError, match="quantile"):
        stats.percentile(values, 1.5)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=200),
       st.floats(min_value=0.0, max_value=1.0))
def test_percentile_is_a_sample_and_monotonic(values: list[float], q: float) -> None:
    p = stats.percentile(values, q)
    assert p in values
    assert stats.percentile(values, min(1.0, q + 0.1)) >= p


def test_summary_and_medians_over_runs() -> None:
    s = stats.summary([1.0, 2.0, 3.0, 4.0])
    assert (s["p50"], s["max"], s["count"]) == (2.0, 4.0, 4.0)
    runs = [{"p99": 10.0, "achieved": 90.0}, {"p99": 30.0, "achieved": math.nan}, {"p99": 20.0, "achieved": 110.0}]
    assert stats.medians(runs) == {"p99": 20.0, "achieved": 100.0}
    assert stats.medians([]) == {}


def test_pacing_sends_the_first_post_at_once_and_never_more_than_the_total() -> None:
    assert stats.due(-0.1, 100, 10) == 0
    assert stats.due(0.0, 100, 10) == 1
    assert stats.due(0.0099, 100, 10) == 1
    assert stats.due(0.01, 100, 10) == 2
    assert stats.due(60.0, 100, 10) == 10
    assert stats.send_time(250, 1000) == 0.25


@given(st.integers(min_value=1, max_value=5000), st.floats(min_value=0.0, max_value=30.0))
def test_due_matches_send_times(rate: int, elapsed: float) -> None:
    n = stats.due(elapsed, rate, 10**9)
    assert stats.send_time(n - 1, rate) <= elapsed + 1e-9
    assert stats.send_time(n, rate) > elapsed - 1e-9


def test_buckets_count_per_second_from_the_start() -> None:
    assert stats.buckets([0.1, 0.5, 1.2, 3.9, -1.0], start=0.0) == [2, 1, 0, 1]
    assert stats.buckets([], start=0.0) == []
    assert stats.buckets([10.0, 10.4], start=10.0, width=0.5) == [2]


def test_progress_lines_and_eta() -> None:
    assert progress.clock(5) == "5s"
    assert progress.clock(185) == "3m05s"
    assert progress.clock(3720) == "1h02m"
    assert progress.eta([10, 10, 20], done=0, elapsed=0) == 40
    assert progress.eta([10, 10, 20], done=1, elapsed=20) == 60  # twice as slow as planned so far
    assert progress.eta([10, 10], done=2, elapsed=5) == 0
    now = iter([0.0, 0.0, 12.0])
    out = io.StringIO()
    p = progress.Progress([("a", 10.0), ("b", 30.0)], out=out, now=lambda: next(now))
    p.start("a")
    p.start("b")
    first, second = out.getvalue().splitlines()
    assert first.startswith("[ 1/2] a") and "ETA    40s" in first
    assert second.startswith("[ 2/2] b") and "elapsed    12s" in second


def test_the_planned_phases_fit_the_time_limits() -> None:
    from bench import run_all
    from bench.lib import infra

    full = run_all.plan(run_all.FULL, infra.SOURCES, with_scripts=True)
    quick = run_all.plan(run_all.QUICK, infra.SOURCES, with_scripts=True)
    assert sum(s for _, s in full) < 17 * 60
    assert sum(s for _, s in quick) < 6 * 60  # 5.5 before bench/notify_latency.py
    assert sum(1 for name, _ in full if "idle" in name) == len(infra.SOURCES)  # once per source


def test_writers_for_a_rate() -> None:
    from bench import run_all

    assert [run_all.writers_for(r) for r in (50, 100, 250, 500, 1000, 5000)] == [1, 1, 1, 2, 4, 4]


def test_the_book_hands_the_watcher_the_oldest_waiting_posts_the_fan_out_can_have_reached() -> None:
    from bench.lib import e2e

    book = e2e.Book()
    for post_id in (12, 10, 11, 13, 14):  # commits of several writers arrive out of id order
        book.commit(post_id, at=float(post_id))
    assert book.pending(2) == [10, 11]
    assert book.pending(10, upto=12) == [10, 11, 12]
    book.waiting.pop(11)  # visible
    assert book.pending(10, upto=13) == [10, 12, 13]
    assert book.committed[11] == 11.0  # its commit time stays for the latency
