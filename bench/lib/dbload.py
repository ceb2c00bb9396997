"""Database load of a phase: pg_stat_database counters and CPU of the Postgres backends, before/after deltas.

pg_stat_statements needs shared_preload_libraries (a server restart, not done on the shared Postgres), so the
load is measured from what any server offers: pg_stat_database of the bench database (transactions, rows
returned/fetched/written, buffer hits and reads) and the user+system CPU time (/proc/<pid>/stat) of every backend
connected to it plus its walsender, grouped by application_name ("walfeed-relay" is the CDC relay's walsender,
"walfeed-poller" the polling source's connection, "walfeed-bench-watcher" the bench's own watcher). `Snapshot` is
taken by `take()`; `delta()` is pure. `scans()` / `scan_delta()` name the tables the rows were read from
(pg_stat_user_tables / _indexes of the bench database).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.lib.proc import cpu_seconds as cpu_seconds  # also this module's, for bench/run_all.py
from bench.lib.proc import spent

COUNTERS = ("xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated",
            "tup_deleted", "blks_hit", "blks_read")
STAT_DATABASE = f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = %s"
BACKENDS = """
SELECT pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid()
"""


@dataclass(frozen=True)
class Snapshot:
    at: float
    counters: dict[str, int]
    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (application, CPU seconds)


def take(conn: psycopg.Connection[Any], dbname: str) -> Snapshot:
    """Counters and backend CPU now. `conn` is an autocommit connection to another database (not counted)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(STAT_DATABASE, (dbname,)).fetchone()
    counters = dict(zip(COUNTERS, (int(v) for v in row), strict=True)) if row else dict.fromkeys(COUNTERS, 0)
    cpu: dict[int, tuple[str, float]] = {}
    for pid, app in conn.execute(BACKENDS, (dbname,)).fetchall():
        seconds = cpu_seconds(int(pid))
        if seconds is not None:
            cpu[int(pid)] = (str(app), seconds)
    return Snapshot(time.monotonic(), counters, cpu)


def delta(before: Snapshot, after: Snapshot, source_apps: tuple[str, ...]) -> dict[str, float]:
    """Per-second rates over the phase: counters, CPU of all bench backends, CPU of the source's backends.

    A backend that appeared during the phase counts from zero; one that ended is not seen at the end (its CPU is
    lost: the bench keeps its connections for the whole phase, so this only concerns short-lived ones); see
    bench/lib/proc.py `spent`.
    """
    seconds = max(after.at - before.at, 1e-9)
    out: dict[str, float] = {"seconds": seconds}
    for key in COUNTERS:
        out[f"{key}_per_s"] = (after.counters.get(key, 0) - before.counters.get(key, 0)) / seconds
    by_app = spent(before.cpu, after.cpu)
    out["backend_cpu_s_per_s"] = sum(by_app.values()) / seconds
    out["source_backend_cpu_s_per_s"] = sum(cpu for app, cpu in by_app.items() if app in source_apps) / seconds
    for app, cpu in by_app.items():
        out[f"cpu_s_per_s[{app}]"] = cpu / seconds
    return out


# Where the rows come from: per table, rows read by sequential scans (tup_returned's heap side) and index entries
# read by index scans (its index side), and the scans themselves. Read in the bench database itself.
SCANS = """
SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables
"""
INDEX_READS = "SELECT relname, sum(idx_tup_read) FROM pg_stat_user_indexes GROUP BY relname"
SCAN_FIELDS = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch", "idx_tup_read")


def scans(conn: psycopg.Connection[Any]) -> dict[str, dict[str, int]]:
    """table -> SCAN_FIELDS counters now; `conn` is an autocommit connection to the bench database."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    out = {str(r[0]): dict(zip(SCAN_FIELDS[:4], (int(v) for v in r[1:]), strict=True))
           for r in conn.execute(SCANS).fetchall()}
    for table, read in conn.execute(INDEX_READS).fetchall():
        out.setdefault(str(table), {})["idx_tup_read"] = int(read or 0)
    return out


def scan_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], seconds: float,
               top: int = 4) -> dict[str, dict[str, float]]:
    """Per-second scan counters of the `top` tables by rows read (seq_tup_read + idx_tup_read). Pure."""
    rates = {t: {k: (v - before.get(t, {}).get(k, 0)) / max(seconds, 1e-9) for k, v in c.items()}
             for t, c in after.items()}
    ranked = sorted(rates, key=lambda t: -(rates[t].get("seq_tup_read", 0) + rates[t].get("idx_tup_read", 0)))
    return {t: rates[t] for t in ranked[:top]}
