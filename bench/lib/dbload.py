"""Database load of a phase: pg_stat_database counters and CPU of the Postgres backends, before/after deltas.

pg_stat_statements needs shared_preload_libraries (a server restart, not done on the shared Postgres), so the
load is measured from what any server offers: pg_stat_database of the bench database (transactions, rows
returned/fetched/written, buffer hits and reads) and the user+system CPU time (/proc/<pid>/stat) of every backend
connected to it plus its walsender, grouped by application_name ("walfeed-relay" is the CDC relay's walsender,
"walfeed-poller" the polling source's connection). `Snapshot` is taken by `take()`; `delta()` is pure.
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
    return out
