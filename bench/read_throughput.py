"""Timeline reads per second and per core: the api's GET /v1/timeline against the framework's floor and the database.

    .venv/bin/python -m bench.read_throughput [--readers 200] [--follows 50,500,5000] [--seconds 6] [--pairs 3]
                                             [--clients 16] [--workers 2] [--pool 4] [--json FILE]

For the capacity plan (docs/capacity.md): what one core of api and one core of Postgres serve. Creates its own
database (bench/lib/infra.py; dropped at the end), seeds 50,020 authors with 4 posts each, spread over time (the
first 20 are celebrities: their posts are pulled, merged at read time; they post ten times as often, 40 each) and,
for each --follows value, --readers readers who follow that many authors, 4 of them celebrities, with the worker's
capped timeline materialized (newest 800 pushed rows, floor below), starts the real `walfeed api` (--workers
processes, pool --pool each) and the floor app (bench/floor_app.py: same server, processes and pool) and measures,
in rounds run one after the other:

1. api: first pages (20 posts) of random readers over --clients keep-alive connections, closed loop;
2. floor: the same clients against a minimal FastAPI app running the bare page statement (4.) and answering its
   rows as JSON with orjson, no auth: the framework's floor for a page; `api / floor app` is what walfeed's own
   code (auth, the read's design, validation, middleware, the response) costs on top of FastAPI and its server;
3. design: pgbench running the api's read statement itself (HOME_ABOVE_FLOOR: materialized rows merged with
   the pulled followees' and the reader's own posts), naming each reader's partition of timelines as the api does
   (a script per partition, with its first reader of the group: docs/adr/0153), with the same connections as the api's
   pools and the api's session settings (its generic plan: at Postgres's default pgbench would plan this
   statement at every run);
4. bare: pgbench reading a page of a reader's materialized timeline joined with posts, one statement (the floor
   app's: its 20 ids, then each post by key): the cheapest way the database serves a page of 20 posts (the
   ceiling; it skips the celebrity merge, which the design pays).

The world is ten times larger than the largest follow list, as any real one is larger: with 5,020 authors a reader
following 5,000 followed all of them, his timeline was the server's newest posts, and the bare page written as a
plain join was planned as a merge join down posts_pkey that read just its 20 posts; a reader following 50 had the
same plan read ~3,900 posts for 20 (and ~20,000 in this world). The ceiling measured something no production
server sees at either end (docs/results.md "The bench's world").

For each: requests/s and the CPU of the server under test (api or floor app), of the database's backends and of
the load generator, in cores; CPU per read is what the capacity plan scales. Ratios are medians of the per-round
ratios. No worker runs and nothing is written: reads only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import dict_row

from bench import floor_app
from bench.lib import closedloop, entry, infra
from bench.lib.cpumeter import CpuMeter
from services.api import partitions, sql
from services.api.db import session_options
from services.api.partitions import Layout
from testkit.processes import free_port
from testkit.waiting import eventually

AUTHORS, CELEBRITIES, POSTS_EACH, CAP = 50020, 20, 4, 800

USERS = """
INSERT INTO users (id, handle, token_hash, follower_count) OVERRIDING SYSTEM VALUE
    SELECT g, 'u' || g, sha256(('bench' || g)::bytea), CASE WHEN g <= %(celebrities)s THEN 20000 ELSE 0 END
    FROM generate_series(1, %(users)s) g;
SELECT setval(pg_get_serial_sequence('users', 'id'), %(users)s);
-- spread over the history: an author's g-th of n posts at (g - phase) / n of it, each author with a phase of their
-- own (posts of different authors interleave, none in lockstep); celebrities post ten times as often
INSERT INTO posts (author_id, body, fanned_out)
    SELECT u, 'post ' || g || ' of ' || u, u > %(celebrities)s
    FROM generate_series(1, %(authors)s) u,
         LATERAL (SELECT CASE WHEN u <= %(celebrities)s THEN %(posts)s * 10 ELSE %(posts)s END AS n) c,
         LATERAL generate_series(1, c.n) g
    ORDER BY (g - (u * 7919 %% 1000) / 1000.0) / c.n, u;
"""
# One group of readers (ids first..last), each following 4 celebrities and follows - 4 other authors, spread
# deterministically (13 is prime to AUTHORS - CELEBRITIES: the follows - 4 of a reader are distinct).
READERS = """
INSERT INTO follows (follower_id, followee_id)
    SELECT r, 1 + (r * 7 + k) %% %(celebrities)s
    FROM generate_series(%(first)s, %(last)s) r, generate_series(0, 3) k
    UNION
    SELECT r, %(celebrities)s + 1 + (r * 37 + k * 13) %% (%(authors)s - %(celebrities)s)
    FROM generate_series(%(first)s, %(last)s) r, generate_series(0, %(follows)s - 5) k;
UPDATE users u SET following_count = c.n FROM (SELECT follower_id, count(*) n FROM follows
    WHERE follower_id BETWEEN %(first)s AND %(last)s GROUP BY 1) c WHERE u.id = c.follower_id;
-- the worker's capped timeline: the newest pushed posts of the followed authors, older ones below the floor
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT r, x.id, x.author_id FROM generate_series(%(first)s, %(last)s) r
    CROSS JOIN LATERAL (SELECT p.id, p.author_id FROM follows f JOIN posts p ON p.author_id = f.followee_id
                        WHERE f.follower_id = r AND p.fanned_out ORDER BY p.id DESC LIMIT %(cap)s) x;
UPDATE users u SET timeline_floor = m.floor FROM (SELECT user_id, min(post_id) floor FROM timelines
    WHERE user_id BETWEEN %(first)s AND %(last)s GROUP BY 1) m WHERE u.id = m.user_id;
"""

BARE = floor_app.PAGE.replace("%(user)s", ":user")  # the floor app's statement, for pgbench


def pgbench_script(statement: str, first: int, last: int) -> str:
    """One line for pgbench: SQL comments dropped first (joined, a `--` would comment out the rest)."""
    text = " ".join(line.split("--")[0] for line in statement.splitlines())
    return f"\\set user random({first}, {last})\n" + " ".join(text.split()) + ";\n"


def design_statement(statement: bytes = sql.HOME_ABOVE_FLOOR["newest"]) -> str:
    """The api's read statement (newest first; through the parent unless another is given) with pgbench
    variables: the first page, 21 rows asked (the api asks one more than it shows, to know whether a next page
    exists)."""
    text = statement.decode()
    text = text.replace("%(user)s", ":user").replace("%(before)s", "9223372036854775807")
    text = text.replace("%(after)s", "0").replace("%(limit)s", "21")
    assert "%(" not in text, text
    return text


def design_scripts(url: str, group: Group, named: bool = True) -> list[str]:
    """The read as the api sends it (docs/adr/0153): the statement naming the reader's partition
    (`partition_scripts`); not `named`: the statement through the parent for any reader of the group, one script."""
    if not named:
        return [pgbench_script(design_statement(), group.first, group.last)]
    with psycopg.connect(url, row_factory=dict_row) as conn:
        layout = Layout.parse(conn.execute(partitions.LAYOUT).fetchall())
    assert layout is not None, "timelines is not hash-partitioned"
    return partition_scripts(layout, group, lambda part: sql.home_above_floor("newest", part.schema, part.name,
                                                                              part.constraint))


def partition_scripts(layout: Layout, group: Group, statement: Callable[[partitions.Partition], bytes]) -> list[str]:
    """pgbench scripts of `statement(partition)`: for the first reader of the group in each partition of timelines,
    its partition's text, a script of its own. pgbench prepares each script on each connection, so a script per
    reader would mostly measure planning (a generic plan over 32 partitions costs milliseconds)."""
    first: dict[str, int] = {}
    for user in range(group.first, group.last + 1):
        first.setdefault(layout.of(user).name, user)
    return [pgbench_script(design_statement(statement(layout.of(user))), user, user) for user in first.values()]


def requests(first: int, last: int) -> list[bytes]:
    return [(f"GET /v1/timeline?limit=20 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             f"Authorization: Bearer {infra.token(user)}\r\n\r\n").encode() for user in range(first, last + 1)]


def floor_requests(first: int, last: int) -> list[bytes]:
    return [f"GET /page?user={user} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode() for user in range(first, last + 1)]


@dataclass
class Sample:
    rate: float
    api: float  # cores of the HTTP server under test (the api, or the floor app), over the run less its ends
    db: float  # the bench database's backends, likewise
    client: float  # this process and its children (pgbench), over the whole run

    def per_read_ms(self, cores: float) -> float:
        return cores / self.rate * 1000


@dataclass(frozen=True)
class Group:
    """Readers first..last, each following `follows` authors."""

    follows: int
    first: int
    last: int


KINDS = ("api", "floor", "design", "bare")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readers", type=int, default=200, help="readers per --follows value")
    parser.add_argument("--follows", default="50,500,5000",
                        help="authors each reader follows (>= 5, comma-separated: a group of readers for each)")
    parser.add_argument("--seconds", type=float, default=6.0, help="duration of each measured run (>= 3)")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of api / floor / design / bare")
    parser.add_argument("--clients", type=int, default=16, help="keep-alive HTTP connections")
    parser.add_argument("--workers", type=int, default=2, help="WALFEED_API_WORKERS (and the floor app's processes)")
    parser.add_argument("--pool", type=int, default=4, help="WALFEED_API_POOL_MAX per api process (and floor app)")
    parser.add_argument("--server", choices=["granian", "uvicorn"], default="granian",
                        help="WALFEED_API_SERVER of the api, and the floor app's server")
    parser.add_argument("--out", type=Path, help="folder for the api's log (default bench/results/<ts>-reads)")
    parser.add_argument("--json", type=Path, help="also write the samples and medians to this file")
    parser.add_argument("--profile", metavar="FILE", help="py-spy the api during one extra run of the first --follows "
                                                          "group after the rounds; collapsed stacks to FILE")
    args = parser.parse_args()
    args.follows = [int(x) for x in str(args.follows).split(",") if x]
    if args.seconds < 3:
        parser.error("--seconds must be at least 3")
    if not args.follows or any(f < 5 or f - 4 > AUTHORS - CELEBRITIES for f in args.follows):
        parser.error(f"--follows takes values between 5 and {AUTHORS - CELEBRITIES + 4}")
    logs = infra.results_folder(args.out, "reads") / "logs"
    print(f"api log in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        return run(res, args)


def seed(url: str, readers: int, follows: list[int]) -> list[Group]:
    groups = [Group(f, AUTHORS + 1 + i * readers, AUTHORS + (i + 1) * readers) for i, f in enumerate(follows)]
    common = {"authors": AUTHORS, "celebrities": CELEBRITIES, "posts": POSTS_EACH, "cap": CAP}
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(USERS, {**common, "users": AUTHORS + readers * len(groups)})
        for g in groups:
            cursor.execute(READERS, {**common, "first": g.first, "last": g.last, "follows": g.follows})
        conn.execute("VACUUM (ANALYZE)")  # visibility map set, as autovacuum keeps it on a server that runs it
    return groups


def run(res: infra.Resources, args: argparse.Namespace) -> int:
    url = res.database("reads")
    dbname = str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])
    groups = seed(url, args.readers, args.follows)
    port, floor_port = free_port(), free_port()
    api = res.start("api", ["api", "--port", str(port)], {
        "WALFEED_DATABASE_URL": url, "WALFEED_API_WORKERS": str(args.workers), "WALFEED_API_POOL_MAX": str(args.pool),
        "WALFEED_API_POOL_MIN": str(min(4, args.pool)), "WALFEED_LOG_LEVEL": "WARNING",
        "WALFEED_API_SERVER": args.server})
    floor = res.start("floor", ["--port", str(floor_port), "--workers", str(args.workers), "--pool", str(args.pool),
                                "--server", args.server], {"WALFEED_DATABASE_URL": url}, module="bench.floor_app")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
        for g in groups:
            page = client.get("/v1/timeline", params={"limit": 20},
                              headers={"Authorization": f"Bearer {infra.token(g.first)}"}).json()
            assert len(page["items"]) == 20, page
    with httpx.Client(base_url=f"http://127.0.0.1:{floor_port}", timeout=30) as client:
        eventually(lambda: _answers(client, groups[0].first), timeout=60, what="the floor app to answer")
    connections = args.workers * args.pool
    print(f"{args.readers} readers for each of {', '.join(map(str, args.follows))} followed authors (4 celebrities); "
          f"api and floor app on {args.server}, {args.workers} processes x pool {args.pool}; {args.clients} HTTP "
          f"clients; pgbench {connections} connections; nproc {os.cpu_count()}")
    print(f"{'run':>4} {'follows':>7} {'kind':>7} {'reads/s':>9} {'srv cores':>10} {'db cores':>9} "
          f"{'client cores':>13} {'srv ms/read':>12} {'db ms/read':>11}")
    results: dict[int, dict[str, list[Sample]]] = {g.follows: {k: [] for k in KINDS} for g in groups}
    for g in groups:  # warm-up: pools, prepared statements, caches
        closedloop.load(port, requests(g.first, g.last), b"HTTP/1.1 200", args.clients, 1.0)
        closedloop.load(floor_port, floor_requests(g.first, g.last), b"HTTP/1.1 200", args.clients, 1.0)
    designs = {g.follows: design_scripts(url, g) for g in groups}  # the layout read once, not every round
    for i in range(args.pairs):
        for g in groups:
            reads, floors = requests(g.first, g.last), floor_requests(g.first, g.last)
            design = designs[g.follows]
            bare = pgbench_script(BARE, g.first, g.last)
            runs: dict[str, tuple[int, Callable[[], float]]] = {
                "api": (api.pid, partial(closedloop.load, port, reads, b"HTTP/1.1 200", args.clients, args.seconds)),
                "floor": (floor.pid, partial(closedloop.load, floor_port, floors, b"HTTP/1.1 200", args.clients,
                                             args.seconds)),
                # as the api runs it: its generic plan (services/api/db.py session_options); the bare statement
                # at Postgres's default, whose per-reader custom plans serve it best
                "design": (api.pid, partial(closedloop.pgbench_tps, url, design, connections, args.seconds,
                                            session_options(30.0))),
                "bare": (api.pid, partial(closedloop.pgbench_tps, url, bare, connections, args.seconds))}
            for kind, (pid, measured) in runs.items():
                # the server and the database over the run less its first and last second (pgbench's backends
                # live inside it), the clients over the whole run
                with CpuMeter(pid, dbname, window=(1.0, args.seconds - 1.0)) as cpu:
                    rate = measured()
                s = Sample(rate, cpu.api, cpu.db, cpu.loadgen + cpu.children)
                results[g.follows][kind].append(s)
                print(f"{i + 1:>4} {g.follows:>7} {kind:>7} {s.rate:>9.0f} {s.api:>10.2f} {s.db:>9.2f} "
                      f"{s.client:>13.2f} {s.per_read_ms(s.api):>12.3f} {s.per_read_ms(s.db):>11.3f}", flush=True)
    summary = {follows: report(follows, r) for follows, r in results.items()}
    if args.profile:
        closedloop.profiled_load(port, api.pid, requests(groups[0].first, groups[0].last), b"HTTP/1.1 200",
                                 args.clients, args.seconds, args.profile)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({
            "meta": {"readers": args.readers, "workers": args.workers, "pool": args.pool, "clients": args.clients,
                     "server": args.server,
                     "seconds": args.seconds, "pairs": args.pairs, "nproc": os.cpu_count()},
            "follows": {str(f): {"summary": summary[f], "samples": {k: [asdict(s) for s in v] for k, v in r.items()}}
                        for f, r in results.items()}}, indent=2))
    return 0


def _answers(client: httpx.Client, user: int) -> bool:
    try:
        return client.get("/page", params={"user": user}).status_code == 200
    except httpx.TransportError:
        return False


def report(follows: int, results: dict[str, list[Sample]]) -> dict[str, float]:
    def med(kind: str, value: Callable[[Sample], float]) -> float:
        return statistics.median(value(s) for s in results[kind])

    def ratio(a: str, b: str) -> float:  # the median of the per-round ratios (same run, one after the other)
        return statistics.median(x.rate / y.rate for x, y in zip(results[a], results[b], strict=True))

    out = {f"{k}_reads_per_s": med(k, lambda s: s.rate) for k in KINDS}
    out |= {"api_over_floor": ratio("api", "floor"), "api_over_bare": ratio("api", "bare"),
            "floor_over_bare": ratio("floor", "bare")}
    print(f"following {follows}: median reads/s: api {out['api_reads_per_s']:.0f}, floor app "
          f"{out['floor_reads_per_s']:.0f}, design statement {out['design_reads_per_s']:.0f}, bare "
          f"{out['bare_reads_per_s']:.0f}; api / floor app {out['api_over_floor']:.2f}, api / bare "
          f"{out['api_over_bare']:.2f} (medians of per-round ratios)")
    for kind in KINDS:
        api, db, client = (med(kind, lambda s, part=part: s.per_read_ms(getattr(s, part)))  # type: ignore[misc]
                           for part in ("api", "db", "client"))
        out[f"{kind}_server_ms_per_read"], out[f"{kind}_db_ms_per_read"] = api, db
        print(f"  {kind:>6}: CPU per read: server {api:.3f} ms, database {db:.3f} ms, client {client:.3f} ms")
    return out


if __name__ == "__main__":
    entry.run(main)
