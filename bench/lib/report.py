"""The report: medians over runs, the ratio table and the Markdown rendering. Pure (tests/unit/test_bench_report.py).

The report is a plain dict (written as report.json): `e2e` (source -> rate -> runs and medians), `load`
(source -> phase -> rates per second), `ratios` (name -> runs and medians) and `meta`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.lib.stats import median_of

# name, script, figure, its ceiling, ratio, target, unit, what the ceiling is
RATIOS: tuple[tuple[str, str, str, str, str, str, str], ...] = (
    ("relay ÷ bare publisher", "relay", "relay_events_per_s", "ceiling_events_per_s", "ratio", ">= 0.8", "events/s"),
    ("fan-out ÷ set-based SQL, 10 followers", "fanout", "worker_small_rows_per_s", "ceiling_small_rows_per_s",
     "ratio_small", ">= 0.5", "rows/s"),
    ("fan-out ÷ set-based SQL, 1,000 followers", "fanout", "worker_big_rows_per_s", "ceiling_big_rows_per_s",
     "ratio_big", "-", "rows/s"),
    ("fan-out ÷ per-post statements (old ceiling), 1,000 followers", "fanout", "worker_big_rows_per_s",
     "per_post_rows_per_s", "ratio_big_per_post", ">= today's", "rows/s"),
    ("API posts ÷ pgbench", "api", "api_posts_per_s", "pgbench_tps", "throughput_ratio", ">= 0.5", "posts/s"),
    ("POST p99: 100k ÷ 10 followers", "api", "post_p99_ms_100k_followers", "post_p99_ms_10_followers",
     "p99_ratio_big_small", "<= 1.2", "ms"),
)


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float | int) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def script_medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Median of every numeric figure over the runs of one script (a figure missing from a run is skipped)."""
    keys = sorted({k for r in runs for k, v in r.items() if isinstance(v, int | float)})
    return {k: median_of([{k: float(r[k])} for r in runs if isinstance(r.get(k), int | float)], k) for k in keys}


def ratio_rows(scripts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name, script, figure, ceiling, ratio, target, unit in RATIOS:
        med = scripts.get(script, {}).get("median", {})
        runs = len(scripts.get(script, {}).get("runs", []))
        rows.append({"name": name, "value": med.get(figure, math.nan), "ceiling": med.get(ceiling, math.nan),
                     "ratio": med.get(ratio, math.nan), "target": target, "unit": unit, "runs": runs})
    return rows


def e2e_table(e2e: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["| source | asked posts/s | achieved posts/s | p50 ms | p95 ms | p99 ms | max ms | not visible | "
             "to broker p50 ms | to broker p99 ms | runs |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for source, by_rate in e2e.items():
        for rate, entry in by_rate.items():
            m = entry["median"]
            lines.append(f"| {source} | {rate} | {fmt(m.get('achieved'))} | {fmt(m.get('p50'))} | "
                         f"{fmt(m.get('p95'))} | {fmt(m.get('p99'))} | {fmt(m.get('max'))} | "
                         f"{fmt(m.get('unfinished'), 0)} | {fmt(m.get('broker_p50'))} | {fmt(m.get('broker_p99'))} | "
                         f"{len(entry['runs'])} |")
    return lines


def load_table(load: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[str]:
    lines = ["| source | phase | xact/s | tup_returned/s | tup_fetched/s | blks_hit/s | source backend CPU % | "
             "source process CPU % | all bench backends CPU % |", "|---|---|---|---|---|---|---|---|---|"]
    for source, phases in load.items():
        for phase, d in phases.items():
            lines.append(
                f"| {source} | {phase} | {fmt(d.get('xact_commit_per_s'))} | {fmt(d.get('tup_returned_per_s'))} | "
                f"{fmt(d.get('tup_fetched_per_s'))} | {fmt(d.get('blks_hit_per_s'))} | "
                f"{fmt(100 * d.get('source_backend_cpu_s_per_s', math.nan), 2)} | "
                f"{fmt(100 * d.get('source_process_cpu_s_per_s', math.nan), 2)} | "
                f"{fmt(100 * d.get('backend_cpu_s_per_s', math.nan), 2)} |")
    return lines


def tables_table(tables: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float]]]]) -> list[str]:
    """Where the rows were read, per source and phase: the tables read most, rows/s by sequential scans and index
    entries/s by index scans (bench/lib/dbload.py scan_delta)."""
    lines = ["| source | phase | tables read most: rows/s by seq scan + index entries/s by index scan |",
             "|---|---|---|"]
    for source, phases in tables.items():
        for phase, by_table in phases.items():
            cells = [f"{t} {fmt(d.get('seq_tup_read', 0.0), 0)} + {fmt(d.get('idx_tup_read', 0.0), 0)}"
                     for t, d in by_table.items()]
            lines.append(f"| {source} | {phase} | {'; '.join(cells)} |")
    return lines


def ratio_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| ratio | measured | ceiling (same run) | ratio (median) | target | runs |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {fmt(r['value'])} {r['unit']} | {fmt(r['ceiling'])} {r['unit']} | "
                     f"{fmt(r['ratio'], 2)} | {r['target']} | {r['runs']} |")
    return lines


CAPACITY_KINDS = (("SQL writers (the API's statements)", "sql"), ("HTTP writers (walfeed api)", "http"))


def capacity_table(scripts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The knee and the most posts/s delivered per writer kind (bench/capacity.py), medians over its runs."""
    med = scripts.get("capacity", {}).get("median", {})
    lines = ["| writers | knee, posts/s | most delivered, posts/s |", "|---|---|---|"]
    for label, kind in CAPACITY_KINDS:
        lines.append(f"| {label} | {fmt(med.get(f'knee_{kind}_posts_per_s', math.nan), 0)} | "
                     f"{fmt(med.get(f'max_delivered_{kind}_posts_per_s', math.nan), 0)} |")
    return lines


def notify_table(scripts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Mention -> webhook received at 100 posts/s (bench/notify_latency.py), medians over its runs."""
    med = scripts.get("notify", {}).get("median", {})
    return ["| posts/s written | p50 ms | p99 ms | missing after the drain |", "|---|---|---|---|",
            f"| {fmt(med.get('notify_posts_per_s', math.nan))} | {fmt(med.get('notify_p50_ms', math.nan))} | "
            f"{fmt(med.get('notify_p99_ms', math.nan))} | {fmt(med.get('notify_missing', math.nan), 0)} |"]


def run_notes(e2e: Mapping[str, Mapping[str, Sequence[Mapping[str, float]]]], drain: float) -> list[str]:
    """What the reader must know about the latency runs: rates not reached, posts that never became visible."""
    notes = []
    for source, by_rate in e2e.items():
        for rate, runs in by_rate.items():
            achieved = [r.get("achieved", math.nan) for r in runs]
            if any(a < 0.95 * float(rate) for a in achieved):
                notes.append(f"{source} at {rate} posts/s: the writers sustained "
                             f"{', '.join(f'{a:,.0f}' for a in achieved)} posts/s in the {len(runs)} run(s)")
            lost = [int(r.get("unfinished", 0)) for r in runs]
            if any(lost):
                notes.append(f"{source} at {rate} posts/s: {', '.join(map(str, lost))} posts not in all timelines "
                             f"{drain:.0f} s after the last commit (left out of the percentiles)")
    return notes


def markdown(report: Mapping[str, Any]) -> str:
    meta = report.get("meta", {})
    out = [f"# walfeed benchmark ({meta.get('mode', '?')} mode)", "",
           f"Machine: {meta.get('nproc', '?')} cores, load average {meta.get('load_before', '?')} before, "
           f"{meta.get('load_after', '?')} after; {meta.get('duration_s', 0):.0f} s in all. "
           f"Latency figures are medians over runs of each run's percentile.", "",
           "## End-to-end latency: post commit -> rows in all followers' timelines", "",
           "(\"to broker\": commit -> the post.created message reaching a consumer, the source alone.)", "",
           *e2e_table(report.get("e2e", {})), "",
           "## Database load per source (idle: no posts; rates: during the latency runs)", "",
           *load_table(report.get("load", {})), "",
           *([*tables_table(report["tables"]), ""] if report.get("tables") else []),
           "## Ratios against ceilings measured in the same run", "",
           *ratio_table(report.get("ratios", [])), ""]
    events = report.get("scripts", {}).get("fanout", {}).get("median", {}).get("small_events_per_s")
    if events is not None:
        out += [f"Fan-out of 10-follower authors' posts: {fmt(events, 0)} events/s with 2 worker processes "
                "(target: at least 10 x 484).", ""]
    if "capacity" in report.get("scripts", {}):
        out += ["## Capacity: the highest offered rate sustained (p99 < 1 s, no growing backlog; bench/capacity.py, "
                "report and plot in capacity/)", "", *capacity_table(report["scripts"]), ""]
    if "notify" in report.get("scripts", {}):
        out += ["## Notifications: post commit -> mention webhook received (bench/notify_latency.py, report in "
                "notify/)", "", *notify_table(report["scripts"]), ""]
    notes = report.get("notes", [])
    if notes:
        out += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(out)
