"""bench/run_all.py's report: the ratio rows and the Markdown over the figures the benchmarks write, and the database
and CPU deltas it is built from."""

from __future__ import annotations

import math
import os

from bench.lib import dbload, proc, report

# The figures as the benchmarks write them with --json (their figures_of, tests/unit/test_bench_figures.py)
RELAY = {"ratio": 0.57, "ratio_min": 0.52, "ratio_max": 0.61, "relay_events_per_s": 3823.0,
         "ceiling_events_per_s": 6747.0, "relay_cpu_us_per_event": 46.5, "ceiling_cpu_us_per_event": 24.9,
         "lag_p50_ms": 8.2, "lag_p99_ms": 75.3, "missing": []}
FANOUT = {"ratio_small": 0.032, "worker_small_rows_per_s": 3383.0, "ceiling_small_rows_per_s": 115578.0,
          "ratio_big": 0.556, "worker_big_rows_per_s": 86313.0, "ceiling_big_rows_per_s": 153630.0,
          "ratio_big_per_post": 0.71, "per_post_rows_per_s": 102746.0, "small_events_per_s": 308.0, "missing": []}
API = {"p99_ratio_big_small": 1.47, "post_p99_ms_10_followers": 57.84, "post_p99_ms_100k_followers": 84.96,
       "api_posts_per_s": 291.2, "pgbench_tps": 4023.7, "throughput_ratio": 0.07, "timeline_first_p99_ms": 29.52,
       "missing": []}


def _scripts(**runs: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {name: {"runs": r, "median": report.script_medians(r)} for name, r in runs.items()}


def test_fanout_rows_put_both_ceilings_side_by_side() -> None:
    rows = {r["name"]: r for r in report.ratio_rows(_scripts(fanout=[FANOUT]))}
    assert rows["fan-out ÷ set-based SQL, 10 followers"]["ratio"] == 0.032
    assert rows["fan-out ÷ set-based SQL, 1,000 followers"]["ceiling"] == 153630.0
    old = rows["fan-out ÷ per-post statements (old ceiling), 1,000 followers"]
    assert (old["value"], old["ceiling"], old["ratio"]) == (86313.0, 102746.0, 0.71)


def test_capacity_figures_and_their_report_section() -> None:
    c = {"knee_sql_posts_per_s": 1000.0, "knee_http_posts_per_s": 0.0, "max_delivered_sql_posts_per_s": 1012.0,
         "max_delivered_http_posts_per_s": 204.0, "missing": []}
    scripts = _scripts(capacity=[c])
    md = report.markdown({"scripts": scripts, "ratios": report.ratio_rows(scripts)})
    assert "| SQL writers (the API's statements) | 1,000 | 1,012 |" in md
    assert "| HTTP writers (walfeed api) | 0 | 204 |" in md
    assert "## Capacity" not in report.markdown({"scripts": {}})  # not run: no section


def test_notify_figures_and_their_report_section() -> None:
    n = {"notify_posts_per_s": 99.4, "notify_p50_ms": 26.2, "notify_p99_ms": 1254.4, "notify_missing": 29.0,
         "missing": []}
    assert "| 99.4 | 26.2 | 1,254 | 29 |" in report.markdown({"scripts": _scripts(notify=[n])})
    assert "## Notifications" not in report.markdown({"scripts": {}})  # not run: no section


def test_ratio_rows_take_medians_of_runs() -> None:
    scripts = _scripts(api=[API, {**API, "throughput_ratio": 0.09}], relay=[RELAY])
    rows = {r["name"]: r for r in report.ratio_rows(scripts)}
    assert rows["API posts ÷ pgbench"]["ratio"] == 0.08
    assert rows["API posts ÷ pgbench"]["runs"] == 2
    assert rows["relay ÷ bare publisher"]["ceiling"] == 6747.0
    assert math.isnan(rows["fan-out ÷ set-based SQL, 10 followers"]["ratio"])  # not run: n/a, not a number


def test_markdown_has_every_table() -> None:
    rep = {
        "meta": {"mode": "quick", "nproc": 2, "load_before": "1.00", "load_after": "2.00", "duration_s": 180.0},
        "e2e": {"cdc": {"100": {"runs": [{}], "median": {"achieved": 100.0, "p50": 7.5, "p95": 29.8, "p99": 55.0,
                                                           "max": 78.5, "unfinished": 0.0, "broker_p50": 2.0,
                                                           "broker_p99": 9.0}}}},
        "load": {"poll-100ms": {"idle": {"xact_commit_per_s": 10.6, "source_backend_cpu_s_per_s": 0.0037}}},
        "ratios": report.ratio_rows({}),
        "notes": ["cdc at 1000 posts/s: the writers sustained only 417/s"],
    }
    rep["tables"] = {"cdc": {"1000/s": {"posts": {"seq_tup_read": 3_792_663.0, "idx_tup_read": 1.0},
                                        "timelines": {"seq_tup_read": 0.0, "idx_tup_read": 3_927.0}}}}
    md = report.markdown(rep)
    assert "| cdc | 100 | 100.0 | 7.5 | 29.8 | 55.0 | 78.5 | 0 | 2.0 | 9.0 | 1 |" in md
    assert "| cdc | 1000/s | posts 3,792,663 + 1; timelines 0 + 3,927 |" in md
    assert "| poll-100ms | idle | 10.6 | n/a | n/a | n/a | 0.37 | n/a | n/a |" in md
    assert "| relay ÷ bare publisher | n/a events/s | n/a events/s | n/a | >= 0.8 | 0 |" in md
    assert "- cdc at 1000 posts/s: the writers sustained only 417/s" in md


def test_load_delta_counts_new_backends_from_zero_and_groups_the_source() -> None:
    before = dbload.Snapshot(10.0, {"xact_commit": 100, "tup_returned": 0},
                             {1: ("walfeed-poller", 2.0), 2: ("client backend", 5.0)})
    after = dbload.Snapshot(20.0, {"xact_commit": 200, "tup_returned": 50},
                            {1: ("walfeed-poller", 2.5), 2: ("client backend", 6.0), 3: ("client backend", 0.5)})
    d = dbload.delta(before, after, ("walfeed-poller",))
    assert d["seconds"] == 10.0
    assert d["xact_commit_per_s"] == 10.0
    assert d["tup_returned_per_s"] == 5.0
    assert d["source_backend_cpu_s_per_s"] == 0.05
    assert abs(d["backend_cpu_s_per_s"] - 0.2) < 1e-9


def test_process_cpu_is_counted_pid_by_pid_so_exits_and_starts_never_go_negative() -> None:
    before = {1: ("postgres", 10.0), 2: ("postgres", 50.0), 3: ("beam.smp", 7.0), 4: ("postgres", 9.0)}
    # 2 exited (dropped, not -50), 5 started (from zero), 4 is a reused pid (less CPU: from zero)
    after = {1: ("postgres", 10.5), 3: ("beam.smp", 8.0), 4: ("postgres", 0.25), 5: ("postgres", 0.25)}
    assert proc.spent(before, after) == {"postgres": 1.0, "beam.smp": 1.0}
    assert proc.cores_busy((100, 1000), (150, 1100)) == 0.5 * (os.cpu_count() or 1)


def test_run_notes_name_unreached_rates_and_invisible_posts() -> None:
    e2e = {"cdc": {"100": [{"achieved": 100.0, "unfinished": 0.0}] * 3,
                   "1000": [{"achieved": 918.0, "unfinished": 0.0}, {"achieved": 1000.0, "unfinished": 5.0}]}}
    assert report.run_notes(e2e, drain=40) == [
        "cdc at 1000 posts/s: the writers sustained 918, 1,000 posts/s in the 2 run(s)",
        "cdc at 1000 posts/s: 0, 5 posts not in all timelines 40 s after the last commit (left out of the percentiles)",
    ]


def test_scan_delta_ranks_tables_by_rows_read_per_second() -> None:
    before = {"posts": {"seq_tup_read": 100, "idx_tup_read": 0}, "users": {"seq_tup_read": 0, "idx_tup_read": 10}}
    after = {"posts": {"seq_tup_read": 2100, "idx_tup_read": 0}, "users": {"seq_tup_read": 0, "idx_tup_read": 30},
             "timelines": {"seq_tup_read": 0, "idx_tup_read": 400}}  # new since `before`: counts from zero
    d = dbload.scan_delta(before, after, seconds=2.0, top=2)
    assert list(d) == ["posts", "timelines"]
    assert d["posts"]["seq_tup_read"] == 1000.0
    assert d["timelines"]["idx_tup_read"] == 200.0
