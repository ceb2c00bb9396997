"""bench/run_all.py's parsing of the three benchmark scripts' printed summaries and its Markdown report."""

from __future__ import annotations

import math
import os

from bench.lib import dbload, parse, proc, report

RELAY_OUT = """machine: nproc=2 (shared with other work), load average 3.90 3.60 2.42 before; events=10000 window=1000
| pair | relay ev/s | ceiling ev/s | ratio | relay CPU us/ev | ceiling CPU us/ev |
|---|---|---|---|---|---|
| 1 | 3,622 | 6,914 | 0.52 | 45.0 | 26.3 |
| median | 3,823 | 6,747 | 0.57 | 46.5 | 24.9 |
ratio relay/ceiling: median of per-pair ratios 0.57 (min 0.52, max 0.61; target >= 0.8)
lag commit -> consumer at 1000 ev/s for 4s: p50 8.2 ms, p99 75.3 ms, missing 0
"""
FANOUT_OUT = """run 1: 10 followers: worker 4,418 rows/s (402 events/s), set-based 115,578 rows/s, ratio 0.038 | 1,000 \
followers: worker 86,313 rows/s, set-based 153,630 rows/s, ratio 0.562; per-post statements 102,746 rows/s, ratio 0.84
median, 10-follower authors: worker 3,383 rows/s, set-based ceiling 115,578 rows/s, ratio 0.032 (2 processes vs 2 \
connections, 100 posts per statement; 3 runs)
median, 1,000-follower authors: worker 86,313 rows/s, set-based ceiling 153,630 rows/s, ratio 0.556 (2 processes)
median, 1,000-follower authors, against the worker's per-post statements of before issue 12 (old ceiling): worker \
86,313 rows/s, per-post statements 102,746 rows/s, ratio 0.71
10-follower authors: 308 events/s (200 events per run, 2 processes; median of 3 runs; issue 12's target >= 4,840)
"""
API_OUT = """setup: big has 100000 followers, small 10
POST /v1/posts, 10 followers:      p50  12.36 ms  p99  57.84 ms
POST /v1/posts, 100,000 followers: p50  11.31 ms  p99  84.96 ms
  p99 ratio big/small = 1.47 (target <= 1.2)
throughput, 16 clients: api   291.2 posts/s, pgbench same transaction  4023.7 tps, ratio 0.07 (target >= 0.5)
GET /v1/timeline first page (500 followed, 20 celebrities): p50   5.39 ms  p99  29.52 ms
"""


def test_relay_summary() -> None:
    f = parse.relay(RELAY_OUT)
    assert f["missing"] == []
    assert (f["ratio"], f["ratio_min"], f["ratio_max"]) == (0.57, 0.52, 0.61)
    assert (f["relay_events_per_s"], f["ceiling_events_per_s"]) == (3823.0, 6747.0)
    assert (f["relay_cpu_us_per_event"], f["ceiling_cpu_us_per_event"]) == (46.5, 24.9)
    assert (f["lag_p50_ms"], f["lag_p99_ms"]) == (8.2, 75.3)


def test_fanout_and_api_summaries() -> None:
    f = parse.fanout(FANOUT_OUT)
    assert f == {"ratio_small": 0.032, "worker_small_rows_per_s": 3383.0, "ceiling_small_rows_per_s": 115578.0,
                 "ratio_big": 0.556, "worker_big_rows_per_s": 86313.0, "ceiling_big_rows_per_s": 153630.0,
                 "ratio_big_per_post": 0.71, "per_post_rows_per_s": 102746.0, "small_events_per_s": 308.0,
                 "missing": []}
    a = parse.api(API_OUT)
    assert a["missing"] == []
    assert a["p99_ratio_big_small"] == 1.47
    assert (a["post_p99_ms_10_followers"], a["post_p99_ms_100k_followers"]) == (57.84, 84.96)
    assert (a["api_posts_per_s"], a["pgbench_tps"], a["throughput_ratio"]) == (291.2, 4023.7, 0.07)


API_PAIRS_OUT = """POST /v1/posts, 10 followers:      p50   2.00 ms  p99   4.00 ms
POST /v1/posts, 100,000 followers: p50   2.10 ms  p99   4.40 ms
  p99 ratio big/small = 1.10 (target <= 1.2)
pair  api posts/s  pgbench tps  ratio  loadgen CPU  api CPU  pgbench CPU  machine busy  (CPU in cores, of 2)
   1          900         2000   0.45         0.30     1.10         0.20   1.90/1.80
median: api 912 posts/s, pgbench 2,010 tps (8 connections, same statement), median ratio 0.45 (target >= 0.5)
bare HTTP stack, GET /healthz, same 16 clients: median 3000 req/s = 1.49 x pgbench (loadgen CPU 0.40, api CPU 1.00)
"""


def test_api_summary_with_interleaved_pairs() -> None:
    a = parse.api(API_PAIRS_OUT)
    assert a["missing"] == ["timeline_first_p99_ms"]
    assert (a["api_posts_per_s"], a["pgbench_tps"], a["throughput_ratio"]) == (912.0, 2010.0, 0.45)
    assert a["p99_ratio_big_small"] == 1.10


CAPACITY_OUT = """| sql | 250 | 249 | 248 | 12.8 | 105.7 | 1 | -2 | 0 | 0 | n/a | 0.09 | 0.33 | sustained |
- knee, SQL writers: 1,000 posts/s
- knee, HTTP writers: 0 posts/s
- http: steps 2000 not run: a lower step did not drain
max delivered, SQL writers: 1,012 posts/s
max delivered, HTTP writers: 204 posts/s
"""


def test_fanout_rows_put_both_ceilings_side_by_side() -> None:
    f = parse.fanout(FANOUT_OUT)
    rows = {r["name"]: r for r in report.ratio_rows({"fanout": {"runs": [f], "median": report.script_medians([f])}})}
    assert rows["fan-out ÷ set-based SQL, 10 followers"]["ratio"] == 0.032
    assert rows["fan-out ÷ set-based SQL, 1,000 followers"]["ceiling"] == 153630.0
    old = rows["fan-out ÷ per-post statements (old ceiling), 1,000 followers"]
    assert (old["value"], old["ceiling"], old["ratio"]) == (86313.0, 102746.0, 0.71)


def test_capacity_summary_and_its_report_section() -> None:
    c = parse.capacity(CAPACITY_OUT)
    assert c == {"knee_sql_posts_per_s": 1000.0, "knee_http_posts_per_s": 0.0, "max_delivered_sql_posts_per_s": 1012.0,
                 "max_delivered_http_posts_per_s": 204.0, "missing": []}
    scripts = {"capacity": {"runs": [c], "median": report.script_medians([c])}}
    md = report.markdown({"scripts": scripts, "ratios": report.ratio_rows(scripts)})
    assert "| SQL writers (the API's statements) | 1,000 | 1,012 |" in md
    assert "| HTTP writers (walfeed api) | 0 | 204 |" in md
    assert "## Capacity" not in report.markdown({"scripts": {}})  # not run: no section


NOTIFY_OUT = """| 100 | 99.4 | 146.9 | 137.2 | 26.2 | 87.0 | 254.4 | 512.4 | 414 | 29 | 0 | 0 | 0 | 0 |
mention -> webhook received at 99.4 posts/s: p50 26.2 ms, p99 1,254.4 ms, missing 29
results in /tmp/x
"""


def test_notify_summary_and_its_report_section() -> None:
    n = parse.notify(NOTIFY_OUT)
    assert n == {"notify_posts_per_s": 99.4, "notify_p50_ms": 26.2, "notify_p99_ms": 1254.4, "notify_missing": 29.0,
                 "missing": []}
    scripts = {"notify": {"runs": [n], "median": report.script_medians([n])}}
    assert "| 99.4 | 26.2 | 1,254 | 29 |" in report.markdown({"scripts": scripts})
    assert "## Notifications" not in report.markdown({"scripts": {}})  # not run: no section
    assert set(parse.notify("")["missing"]) == set(parse.NOTIFY)


def test_a_changed_or_failed_output_names_what_is_missing() -> None:
    f = parse.relay("Traceback (most recent call last):\n  ...\nConnectionError\n")
    assert set(f["missing"]) == set(parse.RELAY)
    assert parse.fanout("")["missing"] == list(parse.FANOUT)


def test_ratio_rows_take_medians_of_runs() -> None:
    api_runs = [parse.api(API_OUT), parse.api(API_OUT.replace("ratio 0.07", "ratio 0.09"))]
    scripts = {"api": {"runs": api_runs, "median": report.script_medians(api_runs)},
               "relay": {"runs": [parse.relay(RELAY_OUT)], "median": report.script_medians([parse.relay(RELAY_OUT)])}}
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
