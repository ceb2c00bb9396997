"""Timeline reads per second and per core: the api's GET /v1/timeline against the bare database.

    .venv/bin/python -m bench.read_throughput [--readers 200] [--follows 200] [--seconds 6] [--pairs 3] [--clients 16]

For the capacity plan (docs/capacity.md): what one core of api and one core of Postgres serve. Creates its own
database (bench/lib/infra.py; dropped at the end), seeds 2,000 authors with 40 posts each (the first 20 are
celebrities: their posts are pulled, merged at read time) and --readers readers who follow --follows authors each,
4 of them celebrities, with the worker's capped timeline materialized (newest 800 pushed rows, floor below), starts
the real `walfeed api` (--workers processes) and measures, in pairs run one after the other:

1. api: first pages (20 posts) of random readers over --clients keep-alive connections, closed loop;
2. design: pgbench running the api's read statement itself (HOME_ABOVE_FLOOR: materialized rows merged with
   the pulled followees' and the reader's own posts) with the same connections as the api's pools;
3. bare: pgbench reading a page of a reader's materialized timeline joined with posts, one statement: the cheapest
   way the database serves a page of 20 posts (the ceiling; it skips the celebrity merge, which the design pays).

For each: requests/s and the CPU of the api processes, of the database's backends and of the load generator, in
cores; CPU per read is what the capacity plan scales. No worker runs and nothing is written: reads only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from bench.lib import closedloop, entry, infra
from bench.lib.cpumeter import CpuMeter
from services.api import sql
from testkit.processes import free_port

AUTHORS, CELEBRITIES, POSTS_EACH, CAP = 2000, 20, 40, 800

SEED = """
INSERT INTO users (id, handle, token_hash, follower_count) OVERRIDING SYSTEM VALUE
    SELECT g, 'u' || g, sha256(('bench' || g)::bytea), CASE WHEN g <= %(celebrities)s THEN 20000 ELSE 0 END
    FROM generate_series(1, %(authors)s + %(readers)s) g;
SELECT setval(pg_get_serial_sequence('users', 'id'), %(authors)s + %(readers)s);
-- each reader: 4 celebrities and follows - 4 other authors, spread deterministically
INSERT INTO follows (follower_id, followee_id)
    SELECT r, 1 + (r * 7 + k) %% %(celebrities)s
    FROM generate_series(%(authors)s + 1, %(authors)s + %(readers)s) r, generate_series(0, 3) k
    UNION
    SELECT r, %(celebrities)s + 1 + (r * 37 + k * 13) %% (%(authors)s - %(celebrities)s)
    FROM generate_series(%(authors)s + 1, %(authors)s + %(readers)s) r, generate_series(0, %(follows)s - 5) k;
UPDATE users u SET following_count = c.n FROM (SELECT follower_id, count(*) n FROM follows GROUP BY 1) c
    WHERE u.id = c.follower_id;
INSERT INTO posts (author_id, body, fanned_out)
    SELECT u, 'post ' || g || ' of ' || u, u > %(celebrities)s
    FROM generate_series(1, %(authors)s) u, generate_series(1, %(posts)s) g ORDER BY g, u;
-- the worker's capped timeline: the newest pushed posts of the followed authors, older ones below the floor
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT r, x.id, x.author_id FROM generate_series(%(authors)s + 1, %(authors)s + %(readers)s) r
    CROSS JOIN LATERAL (SELECT p.id, p.author_id FROM follows f JOIN posts p ON p.author_id = f.followee_id
                        WHERE f.follower_id = r AND p.fanned_out ORDER BY p.id DESC LIMIT %(cap)s) x;
UPDATE users u SET timeline_floor = m.floor FROM (SELECT user_id, min(post_id) floor FROM timelines GROUP BY 1) m
    WHERE u.id = m.user_id;
"""

BARE = """
SELECT p.id, p.author_id, p.body, p.created_at FROM timelines t JOIN posts p ON p.id = t.post_id
WHERE t.user_id = :user ORDER BY t.post_id DESC LIMIT 20;
"""


def pgbench_script(statement: str, first: int, last: int) -> str:
    return f"\\set user random({first}, {last})\n" + " ".join(statement.split()) + ";\n"


def design_statement() -> str:
    """The api's read statement (sql.HOME_ABOVE_FLOOR, newest first) with pgbench variables: the first page, 21
    rows asked (the api asks one more than it shows, to know whether a next page exists)."""
    text = sql.HOME_ABOVE_FLOOR["newest"].as_string(None)
    text = text.replace("%(user)s", ":user").replace("%(before)s", "9223372036854775807")
    text = text.replace("%(after)s", "0").replace("%(limit)s", "21")
    assert "%(" not in text, text
    return text


def requests(first: int, last: int) -> list[bytes]:
    return [(f"GET /v1/timeline?limit=20 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             f"Authorization: Bearer {infra.token(user)}\r\n\r\n").encode() for user in range(first, last + 1)]


@dataclass
class Sample:
    rate: float
    api: float  # cores, over the run less its first and last second
    db: float  # the bench database's backends, likewise
    client: float  # this process and its children (pgbench), over the whole run

    def per_read_ms(self, cores: float) -> float:
        return cores / self.rate * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--follows", type=int, default=200, help="authors each reader follows (>= 5)")
    parser.add_argument("--seconds", type=float, default=6.0, help="duration of each measured run (>= 3)")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of api / design / bare")
    parser.add_argument("--clients", type=int, default=16, help="keep-alive HTTP connections")
    parser.add_argument("--workers", type=int, default=2, help="WALFEED_API_WORKERS")
    parser.add_argument("--pool", type=int, default=4, help="WALFEED_API_POOL_MAX per api process")
    parser.add_argument("--out", type=Path, help="folder for the api's log (default bench/results/<ts>-reads)")
    args = parser.parse_args()
    if args.seconds < 3:
        parser.error("--seconds must be at least 3")
    if args.follows < 5 or args.follows - 4 > AUTHORS - CELEBRITIES:
        parser.error(f"--follows must be between 5 and {AUTHORS - CELEBRITIES + 4}")
    logs = infra.results_folder(args.out, "reads") / "logs"
    print(f"api log in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        return run(res, args)


def run(res: infra.Resources, args: argparse.Namespace) -> int:
    url = res.database("reads")
    dbname = str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
    with psycopg.connect(url, autocommit=True) as conn:
        seed = {"authors": AUTHORS, "celebrities": CELEBRITIES, "readers": args.readers, "follows": args.follows,
                "posts": POSTS_EACH, "cap": CAP}
        psycopg.ClientCursor(conn).execute(SEED, seed)
        conn.execute("VACUUM (ANALYZE)")  # visibility map set, as autovacuum keeps it on a server that runs it
    first, last = AUTHORS + 1, AUTHORS + args.readers
    port = free_port()
    api = res.start("api", ["api", "--port", str(port)], {
        "WALFEED_DATABASE_URL": url, "WALFEED_API_WORKERS": str(args.workers), "WALFEED_API_POOL_MAX": str(args.pool),
        "WALFEED_API_POOL_MIN": str(min(4, args.pool)), "WALFEED_LOG_LEVEL": "WARNING"})
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
        page = client.get("/v1/timeline", params={"limit": 20},
                          headers={"Authorization": f"Bearer {infra.token(first)}"}).json()
        assert len(page["items"]) == 20, page
    reads = requests(first, last)
    connections = args.workers * args.pool
    design = pgbench_script(design_statement(), first, last)
    bare = pgbench_script(BARE, first, last)
    closedloop.load(port, reads, b"HTTP/1.1 200", args.clients, 1.0)  # warm-up: pools, prepared statements, caches
    print(f"{args.readers} readers following {args.follows} authors (4 celebrities); api {args.workers} processes x "
          f"pool {args.pool}; {args.clients} HTTP clients; pgbench {connections} connections; nproc {os.cpu_count()}")
    print(f"{'run':>4} {'kind':>7} {'reads/s':>9} {'api cores':>10} {'db cores':>9} {'client cores':>13} "
          f"{'api ms/read':>12} {'db ms/read':>11}")
    results: dict[str, list[Sample]] = {"api": [], "design": [], "bare": []}
    for i in range(args.pairs):
        runs: dict[str, Callable[[], float]] = {
            "api": lambda: closedloop.load(port, reads, b"HTTP/1.1 200", args.clients, args.seconds),
            "design": lambda: closedloop.pgbench_tps(url, design, connections, args.seconds),
            "bare": lambda: closedloop.pgbench_tps(url, bare, connections, args.seconds)}
        for kind, measured in runs.items():
            # the api and the database over the run less its first and last second (pgbench's backends live
            # inside it), the clients over the whole run
            with CpuMeter(api.pid, dbname, window=(1.0, args.seconds - 1.0)) as cpu:
                rate = measured()
            s = Sample(rate, cpu.api, cpu.db, cpu.loadgen + cpu.children)
            results[kind].append(s)
            print(f"{i + 1:>4} {kind:>7} {s.rate:>9.0f} {s.api:>10.2f} {s.db:>9.2f} {s.client:>13.2f} "
                  f"{s.per_read_ms(s.api):>12.3f} {s.per_read_ms(s.db):>11.3f}", flush=True)
    report(results)
    return 0


def report(results: dict[str, list[Sample]]) -> None:
    def med(kind: str, value: Callable[[Sample], float]) -> float:
        return statistics.median(value(s) for s in results[kind])

    api_rate, bare_rate = med("api", lambda s: s.rate), med("bare", lambda s: s.rate)
    ratios = [a.rate / b.rate for a, b in zip(results["api"], results["bare"], strict=True)]
    print(f"median reads/s: api {api_rate:.0f}, design statement {med('design', lambda s: s.rate):.0f}, "
          f"bare {bare_rate:.0f}; api / bare {statistics.median(ratios):.2f} (median of per-round ratios)")
    for kind in results:
        api, db, client = (med(kind, lambda s, part=part: s.per_read_ms(getattr(s, part)))  # type: ignore[misc]
                           for part in ("api", "db", "client"))
        print(f"  {kind:>6}: CPU per read: api {api:.3f} ms, database {db:.3f} ms, client {client:.3f} ms")
    api_ms, db_ms = med("api", lambda s: s.per_read_ms(s.api)), med("api", lambda s: s.per_read_ms(s.db))
    print(f"per core: an api core serves {1000 / api_ms:.0f} reads/s, a database core {1000 / db_ms:.0f} reads/s "
          f"(through the api); load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    entry.run(main)
