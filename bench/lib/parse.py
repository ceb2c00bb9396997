"""Figures out of the printed summaries of bench/relay_throughput.py, fanout_throughput.py, api_latency.py,
capacity.py and notify_latency.py.

Those scripts print for people and have no JSON output yet; these parsers look for the summary lines by their
words, not by position, accept thousands separators and extra spaces, and report which figure they could not find
(`missing`) rather than failing. Pure: unit-tested in tests/unit/test_bench_parse.py.
"""

from __future__ import annotations

import re
from typing import Any

NUM = r"([-+]?[\d,]*\.?\d+(?:[eE][-+]?\d+)?)"


def number(text: str) -> float:
    return float(text.replace(",", ""))


def _find(patterns: dict[str, str], text: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    missing: list[str] = []
    for key, pattern in patterns.items():
        found = re.findall(pattern, text, flags=re.IGNORECASE | re.MULTILINE)
        if not found:
            missing.append(key)
            continue
        last = found[-1]  # the summary is printed after the per-run lines
        figures[key] = number(last if isinstance(last, str) else last[0])
    figures["missing"] = missing
    return figures


RELAY = {
    "ratio": r"ratio relay/ceiling: median of per-pair ratios\s+" + NUM,
    "ratio_min": r"ratio relay/ceiling:.*\(min\s+" + NUM,
    "ratio_max": r"ratio relay/ceiling:.*max\s+" + NUM,
    "relay_events_per_s": r"^\|\s*median\s*\|\s*" + NUM,
    "ceiling_events_per_s": r"^\|\s*median\s*\|[^|]*\|\s*" + NUM,
    "relay_cpu_us_per_event": r"^\|\s*median\s*\|(?:[^|]*\|){3}\s*" + NUM,
    "ceiling_cpu_us_per_event": r"^\|\s*median\s*\|(?:[^|]*\|){4}\s*" + NUM,
    "lag_p50_ms": r"lag commit -> consumer.*?p50\s+" + NUM + r"\s*ms",
    "lag_p99_ms": r"lag commit -> consumer.*?p99\s+" + NUM + r"\s*ms",
}

SMALL, BIG, OLD = r"^median, 10-follower authors:", r"^median, 1,000-follower authors:", r"^median, 1,000-follower.*old"
FANOUT = {  # worker ÷ the set-based ceiling per audience; worker ÷ the per-post statements (old ceiling), 1,000
    "ratio_small": SMALL + r".*ratio\s+" + NUM,
    "worker_small_rows_per_s": SMALL + r"\s*worker\s+" + NUM,
    "ceiling_small_rows_per_s": SMALL + r".*set-based ceiling\s+" + NUM,
    "ratio_big": BIG + r".*ratio\s+" + NUM,
    "worker_big_rows_per_s": BIG + r"\s*worker\s+" + NUM,
    "ceiling_big_rows_per_s": BIG + r".*set-based ceiling\s+" + NUM,
    "ratio_big_per_post": OLD + r".*ratio\s+" + NUM,
    "per_post_rows_per_s": OLD + r".*per-post statements\s+" + NUM,
    "small_events_per_s": r"^10-follower authors:\s*" + NUM,
}

API = {
    "p99_ratio_big_small": r"p99 ratio big/small\s*=\s*" + NUM,
    "post_p99_ms_10_followers": r"POST /v1/posts, 10 followers:.*?p99\s+" + NUM,
    "post_p99_ms_100k_followers": r"POST /v1/posts, 100,000 followers:.*?p99\s+" + NUM,
    # "median: api N posts/s, pgbench N tps (...), median ratio R" (pairs), or the earlier one-run line
    # "throughput, 16 clients: api N posts/s, pgbench same transaction N tps, ratio R"
    "api_posts_per_s": r"(?:^throughput,.*?|^median:\s*)api\s+" + NUM + r"\s*posts/s",
    "pgbench_tps": r"(?:^throughput,|^median:\s*api).*?pgbench(?: same transaction)?\s+" + NUM + r"\s*tps",
    "throughput_ratio": r"(?:^throughput,|^median:\s*api).*?ratio\s+" + NUM,
    "timeline_first_p99_ms": r"GET /v1/timeline first page.*?p99\s+" + NUM,
}


CAPACITY = {
    "knee_sql_posts_per_s": r"knee, SQL writers:\s*" + NUM,
    "knee_http_posts_per_s": r"knee, HTTP writers:\s*" + NUM,
    "max_delivered_sql_posts_per_s": r"^max delivered, SQL writers:\s*" + NUM,
    "max_delivered_http_posts_per_s": r"^max delivered, HTTP writers:\s*" + NUM,
}


NOTIFY = {  # "mention -> webhook received at 100.0 posts/s: p50 8.2 ms, p99 36.1 ms, missing 0"
    "notify_posts_per_s": r"^mention -> webhook received at\s+" + NUM + r"\s*posts/s",
    "notify_p50_ms": r"^mention -> webhook received.*?p50\s+" + NUM + r"\s*ms",
    "notify_p99_ms": r"^mention -> webhook received.*?p99\s+" + NUM + r"\s*ms",
    "notify_missing": r"^mention -> webhook received.*?missing\s+" + NUM,
}


def relay(text: str) -> dict[str, Any]:
    return _find(RELAY, text)


def fanout(text: str) -> dict[str, Any]:
    return _find(FANOUT, text)


def api(text: str) -> dict[str, Any]:
    return _find(API, text)


def capacity(text: str) -> dict[str, Any]:
    return _find(CAPACITY, text)


def notify(text: str) -> dict[str, Any]:
    return _find(NOTIFY, text)


PARSERS = {"relay": relay, "fanout": fanout, "api": api, "capacity": capacity, "notify": notify}
