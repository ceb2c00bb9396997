"""The home read through the parent timelines against the same read naming the reader's partition, as the api runs
them: database CPU per read, several connections at once.

    .venv/bin/python -m bench.read_partition [--follows 500,5000] [--rounds 6] [--reads 1500] [--connections 8]

The api runs its reads as generic plans (services/api/db.py session_options): planned once per connection without
the reader's id. Through the parent (sql.HOME_ABOVE_FLOOR) the plan holds all 32 partitions of timelines and
Postgres 15 locks them all before it prunes to one; naming the reader's partition (sql.home_above_floor, with its
plan-time check: docs/adr/0153) it holds one. Here `--connections` threads, each with its own connection and the
api's session settings, read first pages of random readers of a group (bench.read_throughput's data: 200 readers
per --follows value, 4 celebrities among the followed), `--reads` each, every statement prepared as psycopg
prepares the api's (so a connection holds the named texts of every partition it has read, as the api's do); the
two ways alternate, `--rounds` rounds. The figure is the CPU of the connections' backends per read (from /proc, so
the Python client's own CPU is left out), median of the rounds, and the ratio named / parent per round.

Then, the statement alone at pgbench's pace (`--pgbench-seconds`, 0 to skip): pgbench with `--connections`
connections runs each way for one reader (one script each, so each connection prepares it once), alternating,
`--rounds` runs each; reads/s, medians, and the ratio per round. Every connection reads the same partition there,
so its locks meet on the same lock-manager partitions: the contention many backends meet on a large server. A
script per reader is not an option: pgbench prepares each script on each connection, and the parent's generic plan
takes milliseconds to plan over 32 partitions (a script per partition had made it look a third dearer than it is).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from bench import read_throughput
from bench.lib import closedloop, infra
from services.api import partitions, sql
from services.api.db import session_options

TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) a backend has used, from /proc/<pid>/stat (the database runs on this machine)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def read(conn: psycopg.Connection[Any], layout: partitions.Layout | None, user: int) -> int:
    params = {"user": user, "after": 0, "before": 2**63 - 1, "limit": 21}
    if layout is None:
        query = sql.HOME_ABOVE_FLOOR["newest"]
    else:
        part = layout.of(user)
        query = sql.home_above_floor("newest", part.schema, part.name, part.constraint)
    rows = conn.execute(query, params, prepare=True).fetchall()
    assert rows and rows[0]["placed"], rows[:1]
    return len(rows)


def round_of(conns: list[psycopg.Connection[Any]], layout: partitions.Layout | None, readers: list[int],
             reads: int) -> float:
    """Backend CPU (us) per read of `reads` random first pages on each connection at once."""
    pids = [conn.info.backend_pid for conn in conns]
    before = sum(backend_cpu(pid) for pid in pids)

    def work(conn: psycopg.Connection[Any], seed: int) -> None:
        pick = random.Random(seed)
        for _ in range(reads):
            read(conn, layout, pick.choice(readers))

    threads = [threading.Thread(target=work, args=(conn, i)) for i, conn in enumerate(conns)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return (sum(backend_cpu(pid) for pid in pids) - before) / (reads * len(conns)) * 1e6


def same_reader(url: str, layout: partitions.Layout, user: int, follows: int, args: argparse.Namespace) -> str:
    part = layout.of(user)
    scripts = {"parent": read_throughput.design_statement(),
               "named": read_throughput.design_statement(
                   sql.home_above_floor("newest", part.schema, part.name, part.constraint))}
    runs: dict[str, list[float]] = {way: [] for way in scripts}
    for i in range(args.rounds):
        for way in ("parent", "named") if i % 2 == 0 else ("named", "parent"):
            runs[way].append(closedloop.pgbench_tps(url, read_throughput.pgbench_script(scripts[way], user, user),
                                                    args.connections, args.pgbench_seconds, session_options(30.0)))
    ratio = statistics.median(n / p for p, n in zip(runs["parent"], runs["named"], strict=True))
    spread = ", ".join(f"{k} {[round(x) for x in v]}" for k, v in runs.items())
    return (f"{follows:>7} {statistics.median(runs['parent']):>15.0f} {statistics.median(runs['named']):>14.0f} "
            f"{ratio:>13.2f}   runs {spread}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--follows", default="500,5000", help="authors each reader follows, comma-separated")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each way, alternating")
    parser.add_argument("--reads", type=int, default=1500, help="reads per connection in a round")
    parser.add_argument("--connections", type=int, default=8, help="connections reading at once")
    parser.add_argument("--pgbench-seconds", type=float, default=10.0, help="each pgbench run (0: none)")
    args = parser.parse_args()
    follows = [int(x) for x in str(args.follows).split(",") if x]
    logs = infra.results_folder(None, "read-partition") / "logs"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("reads")
        groups = read_throughput.seed(url, 200, follows)
        options = session_options(30.0)
        ways: dict[str, list[psycopg.Connection[Any]]] = {
            way: [psycopg.connect(url, autocommit=True, row_factory=dict_row, options=options)
                  for _ in range(args.connections)] for way in ("parent", "named")}
        layout = partitions.Layout.parse(ways["named"][0].execute(partitions.LAYOUT).fetchall())
        assert layout is not None, "timelines is not hash-partitioned"
        print(f"{args.connections} connections, {args.reads} reads each a round, {args.rounds} rounds; "
              f"nproc {os.cpu_count()}")
        print(f"{'follows':>7} {'parent us/read':>15} {'named us/read':>14} {'parent/named':>13}  (database CPU)")
        try:
            for group in groups:
                readers = list(range(group.first, group.last + 1))
                for way, conns in ways.items():  # warm-up: every reader's statement prepared on every connection
                    round_of(conns, layout if way == "named" else None, readers, 2 * len(readers))
                runs: dict[str, list[float]] = {"parent": [], "named": []}
                for i in range(args.rounds):
                    for way in ("parent", "named") if i % 2 == 0 else ("named", "parent"):
                        runs[way].append(round_of(ways[way], layout if way == "named" else None, readers,
                                                  args.reads))
                ratio = statistics.median(p / n for p, n in zip(runs["parent"], runs["named"], strict=True))
                spread = ", ".join(f"{k} {[round(x) for x in v]}" for k, v in runs.items())
                print(f"{group.follows:>7} {statistics.median(runs['parent']):>15.0f} "
                      f"{statistics.median(runs['named']):>14.0f} {ratio:>13.2f}   runs {spread}", flush=True)
            if args.pgbench_seconds > 0:
                print(f"{'follows':>7} {'parent reads/s':>15} {'named reads/s':>14} {'named/parent':>13}  (pgbench, "
                      f"one reader)")
                for group in groups:
                    print(same_reader(url, layout, group.first, group.follows, args), flush=True)
        finally:
            for conns in ways.values():
                for conn in conns:
                    conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
