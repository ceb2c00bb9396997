"""WAL per timeline row, and what the relay's slot pays to skip it (docs/capacity.md).

    .venv/bin/python -m bench.timeline_wal [--posts 2000] [--followers 150]

Creates its own database (bench/lib/infra.py `Resources`; dropped with its slot at the end, also on Ctrl-C) with
20,000 users, 1,000 authors of --followers followers each (spread over the users) and --posts posts, and a wal2json
slot of its own. Then, after a CHECKPOINT, fans the posts out with the set-based statement (100 posts per statement,
as the fan-out bench's ceiling does) in four quarters and prints the WAL bytes per timeline row of each: the
records touching this database's relations (pg_walinspect: the heap row, three index entries, and the full-page
images of pages first touched since the checkpoint), so other databases' writes on a shared server are not counted.
Last, it reads the slot once with the relay's table filter (only the outbox), in a backend of its own, and prints
that backend's CPU per timeline row skipped: what a walsender spends decoding, as logical decoding reads every WAL
record of the server since the slot's start, whatever the filter keeps (other databases' writes meanwhile count too:
run it on a quiet server).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from bench import fanout_throughput as ft
from bench.lib import entry, infra, proc

SEED = """
INSERT INTO users (handle, token_hash) SELECT 'u' || g, sha256(('t' || g)::bytea) FROM generate_series(1, 20000) g;
INSERT INTO follows (follower_id, followee_id)
    SELECT 1 + (a * 7919 + k * 104729) %% 20000, a FROM generate_series(1, 1000) a, generate_series(1, %(followers)s) k
    WHERE 1 + (a * 7919 + k * 104729) %% 20000 <> a ON CONFLICT DO NOTHING;
INSERT INTO posts (author_id, body)
    SELECT 1 + (g %% 1000), 'a post body of about fifty characters, like many do' FROM generate_series(1, %(posts)s) g;
"""
WAL_OF_DATABASE = """
SELECT coalesce(sum(record_length), 0) FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
WHERE block_ref LIKE %(rel)s
"""  # the fan-out bench's ft.WAL_OF_DATABASE, with the full-page images
DECODE = ("SELECT count(*) FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'format-version', '2', "
          "'add-tables', 'public.outbox')")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--posts", type=int, default=2000)
    parser.add_argument("--followers", type=int, default=150, help="followers per author (at most 20,000)")
    args = parser.parse_args()
    with infra.Resources(uuid.uuid4().hex[:6], Path(tempfile.gettempdir())) as res:  # starts no process to log
        url = res.database("wal")
        with psycopg.connect(url, autocommit=True) as conn:
            psycopg.ClientCursor(conn).execute(SEED, {"posts": args.posts, "followers": args.followers})
            slot = res.slot(url, "wal")  # after the seed, as decoding reads the WAL from the slot's start
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            rel = f"%/{conn.execute('SELECT oid FROM pg_database WHERE datname = current_database()').fetchone()[0]}/%"  # type: ignore[index]
            conn.execute("CHECKPOINT")
            ids = [int(r[0]) for r in conn.execute("SELECT id FROM posts ORDER BY id").fetchall()]
            quarter, total_rows = -(-len(ids) // 4), 0
            for q in range(4):
                part = ids[q * quarter:(q + 1) * quarter]
                start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
                for at in range(0, len(part), ft.PER_STATEMENT):
                    conn.execute(ft.SET_BASED, {"post_ids": part[at:at + ft.PER_STATEMENT]})
                end = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
                size = conn.execute(WAL_OF_DATABASE, {"start": start, "end": end, "rel": rel}).fetchone()[0]  # type: ignore[index]
                rows = conn.execute("SELECT count(*) FROM timelines WHERE post_id = ANY(%s)", (part,)).fetchone()[0]  # type: ignore[index]
                total_rows += int(rows)
                print(f"quarter {q + 1}: {int(rows):,} timeline rows, {float(size) / int(rows):.0f} bytes of WAL "
                      f"per row", flush=True)
            pid = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
            cpu, started = proc.cpu_seconds(pid) or 0.0, time.perf_counter()
            kept = conn.execute(DECODE, (slot,)).fetchone()[0]  # type: ignore[index]
            spent, wall = (proc.cpu_seconds(pid) or 0.0) - cpu, time.perf_counter() - started
            print(f"decoding it (wal2json, outbox only): {kept} messages kept, {wall:.2f} s, {spent:.2f} s of CPU = "
                  f"{spent / total_rows * 1e6:.2f} µs per timeline row skipped")
    return 0


if __name__ == "__main__":
    entry.run(main)
