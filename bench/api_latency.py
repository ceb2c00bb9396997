"""API benchmark: constant-cost writes, throughput against the bare database, timeline reads.

    .venv/bin/python -m bench.api_latency [--requests 300] [--seconds 6] [--clients 16] [--out DIR] [--json FILE]

Creates its own database (bench/lib/infra.py, on WALFEED_BENCH_PG_URL; dropped at the end, also on Ctrl-C),
starts the real `walfeed api` process on a free port (its log in <--out>/logs), and measures in one run:

1. POST /v1/posts p50/p99 for an author with 10 followers and one with 100,000 (interleaved requests), in
   --rounds rounds of --requests each: the ratio of the p99s, per round, and its median (must be <= 1.2). One
   p99 of the default 400 requests is its fifth-largest sample: one scheduler hiccup on a shared machine moves it
   by tens of percent, hence the median over rounds (the pooled p99s are printed too).
2. Posts per second with concurrent clients through the API (its write limiter counting each post, with a limit no
   run reaches; --no-rate-limit: without it) vs the floor app (bench/floor_app.py: a minimal FastAPI route running
   the same one-statement insert, sql.CREATE_POST, with the same server, processes and pool; target api / floor
   app >= 0.7) and vs pgbench running that statement with the same number of connections; medians of per-round
   ratios.
3. GET /v1/timeline p50/p99 (20 per page) for a user following 500 accounts of which 20 are celebrities:
   the first page, and every page of a scroll that goes below the timeline floor.

No worker runs: the numbers are the API's own cost (no fan-out happens in the request path anyway). --json FILE
writes the figures of the parts that ran (bench/lib/figures.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import httpx
import psycopg

from bench.lib import closedloop, entry, figures, infra, otlp_sink
from bench.lib.closedloop import load
from bench.lib.cpumeter import CpuMeter
from bench.lib.stats import percentile
from services.api import sql
from testkit.processes import free_port

SETUP = """
-- 100,000 followers for 'big', 10 for 'small'; 'reader' follows 500 authors, 20 of them celebrities.
INSERT INTO users (handle, token_hash) SELECT 'f' || i, sha256(('f' || i)::bytea) FROM generate_series(1, 100000) i;
INSERT INTO follows (follower_id, followee_id) SELECT id, %(big)s FROM users WHERE handle LIKE 'f%%';
INSERT INTO follows (follower_id, followee_id) SELECT id, %(small)s FROM users WHERE handle LIKE 'f%%' LIMIT 10;
UPDATE users SET follower_count = (SELECT count(*) FROM follows WHERE followee_id = users.id)
    WHERE id IN (%(big)s, %(small)s);
INSERT INTO users (handle, token_hash) SELECT 'a' || i, sha256(('a' || i)::bytea) FROM generate_series(1, 500) i;
INSERT INTO follows (follower_id, followee_id) SELECT %(reader)s, id FROM users WHERE handle LIKE 'a%%';
UPDATE users SET follower_count = 20000 WHERE handle IN (SELECT 'a' || i FROM generate_series(1, 20) i);
INSERT INTO posts (author_id, body, fanned_out)
    SELECT u.id, 'post ' || g, true
    FROM users u, generate_series(1, 40) g WHERE u.handle LIKE 'a%%' ORDER BY g, u.id;
UPDATE posts SET fanned_out = false
    WHERE author_id IN (SELECT id FROM users WHERE handle IN (SELECT 'a' || i FROM generate_series(1, 20) i));
-- the worker's capped timeline: newest 800 fanned-out rows, older ones trimmed below the floor
INSERT INTO timelines (user_id, post_id, author_id)
    SELECT %(reader)s, id, author_id FROM posts WHERE fanned_out ORDER BY id DESC LIMIT 800;
UPDATE users SET timeline_floor = (SELECT min(post_id) FROM timelines WHERE user_id = %(reader)s)
    WHERE id = %(reader)s;
ANALYZE;
"""

def ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.50) * 1000:6.2f} ms  p99 {percentile(values, 0.99) * 1000:6.2f} ms"


def signup(client: httpx.Client, handle: str) -> tuple[int, dict[str, str]]:
    body = client.post("/v1/users", json={"handle": handle}).json()
    return int(body["id"]), {"Authorization": f"Bearer {body['token']}"}


def post_latency(client: httpx.Client, small: dict[str, str], big: dict[str, str], n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"small": [], "big": []}
    for i in range(n):
        for name, auth in (("small", small), ("big", big)) if i % 2 else (("big", big), ("small", small)):
            started = time.perf_counter()
            reply = client.post("/v1/posts", json={"body": f"latency {i}"}, headers=auth)
            times[name].append(time.perf_counter() - started)
            assert reply.status_code == 201, reply.text
    return times


def latency_rounds(client: httpx.Client, small: dict[str, str], big: dict[str, str], n: int,
                   rounds: int) -> dict[str, float]:
    """Per round, n interleaved posts per author and the ratio of their p99s; the median ratio is the result. Its
    figures: that ratio and the pooled p99s (ms)."""
    ratios: list[float] = []
    pooled: dict[str, list[float]] = {"small": [], "big": []}
    for r in range(rounds):
        lat = post_latency(client, small, big, n)
        ratios.append(percentile(lat["big"], 0.99) / percentile(lat["small"], 0.99))
        print(f"round {r + 1}: 10 followers {ms(lat['small'])} | 100,000 followers {ms(lat['big'])} | "
              f"p99 ratio {ratios[-1]:.2f}")
        for name in pooled:
            pooled[name] += lat[name]
    print(f"POST /v1/posts, 10 followers:      {ms(pooled['small'])}  ({rounds} x {n} requests)")
    print(f"POST /v1/posts, 100,000 followers: {ms(pooled['big'])}")
    print(f"  pooled p99 ratio {percentile(pooled['big'], 0.99) / percentile(pooled['small'], 0.99):.2f}; per round "
          f"{' '.join(f'{x:.2f}' for x in ratios)}")
    print(f"  p99 ratio big/small = {statistics.median(ratios):.2f} (median of {rounds} rounds; target <= 1.2)")
    return {"p99_ratio_big_small": statistics.median(ratios),
            "post_p99_ms_10_followers": percentile(pooled["small"], 0.99) * 1000,
            "post_p99_ms_100k_followers": percentile(pooled["big"], 0.99) * 1000}


def post_requests(auths: list[dict[str, str]]) -> list[bytes]:
    body = b'{"body": "bench post"}'
    return [(f"POST /v1/posts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {a['Authorization']}\r\n"
             f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body for a in auths]


HEALTHZ = [b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"]


def pgbench_script() -> str:
    """The api's post statement itself (sql.CREATE_POST), with pgbench variables for its parameters."""
    text = sql.CREATE_POST.replace("%(author)s", ":author").replace("%(body)s", "'bench post'")
    text = text.replace("%(key)s", "NULL::text").replace("%(hash)s", "NULL::bytea")
    text = text.replace("%(trace)s", "'traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'")
    assert "%(" not in text, text
    return "\\set author random(1, 500)\n" + " ".join(text.split()) + ";\n"


def pgbench_tps(url: str, clients: int, seconds: int) -> float:
    return closedloop.pgbench_tps(url, pgbench_script(), clients, seconds)


def floor_requests(authors: list[int]) -> list[bytes]:
    body = b'{"body": "bench post"}'
    return [(f"POST /posts?author={a} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(body)}\r\n\r\n").encode() + body for a in authors]


def throughput(port: int, api_pid: int, floor: tuple[int, int], url: str, authors: list[tuple[int, dict[str, str]]],
               args: argparse.Namespace) -> dict[str, object]:
    """In rounds: api run, floor app run (bench/floor_app.py: a minimal FastAPI route running sql.CREATE_POST), pgbench
    run; plus the bare HTTP stack (GET /healthz) under the same load."""
    connections = args.pool * args.workers
    floor_port, floor_pid = floor
    requests, floors = post_requests([a for _, a in authors]), floor_requests([i for i, _ in authors])
    load(port, requests, b"HTTP/1.1 201", args.clients, 1.0)  # warm-up: connections, prepared statements
    load(floor_port, floors, b"HTTP/1.1 201", args.clients, 1.0)
    runs: dict[str, list[float]] = {"api": [], "floor": [], "pgbench": [], "healthz": [], "api_cores": [],
                                    "floor_cores": []}
    print(f"{'pair':>4} {'api posts/s':>12} {'floor posts/s':>14} {'pgbench tps':>12} {'api/floor':>10} "
          f"{'api/pgb':>8} {'loadgen CPU':>12} {'api CPU':>8} {'floor CPU':>10} {'machine busy':>13}  "
          f"(CPU in cores, of {os.cpu_count()})")
    for i in range(args.pairs):
        with CpuMeter(api_pid) as a:
            runs["api"].append(load(port, requests, b"HTTP/1.1 201", args.clients, args.seconds))
        with CpuMeter(floor_pid) as f:
            runs["floor"].append(load(floor_port, floors, b"HTTP/1.1 201", args.clients, args.seconds))
        with CpuMeter(api_pid) as b:
            runs["pgbench"].append(pgbench_tps(url, connections, args.seconds))
        runs["api_cores"].append(a.api)
        runs["floor_cores"].append(f.api)
        print(f"{i + 1:>4} {runs['api'][-1]:>12.0f} {runs['floor'][-1]:>14.0f} {runs['pgbench'][-1]:>12.0f} "
              f"{runs['api'][-1] / runs['floor'][-1]:>10.2f} {runs['api'][-1] / runs['pgbench'][-1]:>8.2f} "
              f"{a.loadgen:>12.2f} {a.api:>8.2f} {f.api:>10.2f} {a.busy:>6.2f}/{b.busy:<6.2f}")
        with CpuMeter(api_pid) as h:
            runs["healthz"].append(load(port, HEALTHZ, b"HTTP/1.1 200", args.clients, args.seconds / 2))
    med = {k: statistics.median(v) for k, v in runs.items()}
    summary: dict[str, object] = {
        "api_posts_per_s": med["api"], "floor_posts_per_s": med["floor"], "pgbench_tps": med["pgbench"],
        "healthz_per_s": med["healthz"],
        "api_over_floor": statistics.median(x / y for x, y in zip(runs["api"], runs["floor"], strict=True)),
        "api_over_pgbench": statistics.median(x / y for x, y in zip(runs["api"], runs["pgbench"], strict=True)),
        "api_ms_per_post": statistics.median(c / r * 1000 for c, r in zip(runs["api_cores"], runs["api"], strict=True)),
        "floor_ms_per_post": statistics.median(c / r * 1000 for c, r in zip(runs["floor_cores"], runs["floor"],
                                                                            strict=True)),
        "runs": runs}
    print(f"median: api {med['api']:.0f} posts/s, floor app {med['floor']:.0f} posts/s, pgbench {med['pgbench']:.0f} "
          f"tps ({connections} connections, same statement); api / floor app {summary['api_over_floor']:.2f}, api / "
          f"pgbench {summary['api_over_pgbench']:.2f} (medians of per-round ratios)")
    print(f"CPU per post: api {summary['api_ms_per_post']:.3f} ms, floor app {summary['floor_ms_per_post']:.3f} ms")
    print(f"bare HTTP stack, GET /healthz, same {args.clients} clients: median {med['healthz']:.0f} req/s "
          f"= {med['healthz'] / med['pgbench']:.2f} x pgbench (loadgen CPU {h.loadgen:.2f}, api CPU {h.api:.2f})")
    print(f"nproc {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return summary


def throughput_figures(summary: Mapping[str, object]) -> dict[str, float]:
    """The throughput run's figures under the names run_all's report reads (bench/lib/report.py RATIOS)."""
    names = {"api_posts_per_s": "api_posts_per_s", "pgbench_tps": "pgbench_tps",
             "throughput_ratio": "api_over_pgbench", "floor_posts_per_s": "floor_posts_per_s",
             "api_over_floor": "api_over_floor", "api_ms_per_post": "api_ms_per_post"}
    return {name: float(value) for name, key in names.items() if isinstance(value := summary.get(key), int | float)}


def timeline_reads(client: httpx.Client, auth: dict[str, str], n: int) -> tuple[list[float], list[float], int]:
    first: list[float] = []
    for _ in range(n):
        started = time.perf_counter()
        reply = client.get("/v1/timeline", params={"limit": 20}, headers=auth)
        first.append(time.perf_counter() - started)
        assert reply.status_code == 200 and len(reply.json()["items"]) == 20
    scroll: list[float] = []
    cursor, pages = None, 0
    while pages < 60:
        params: dict[str, str | int] = {"limit": 20, **({"cursor": cursor} if cursor else {})}
        started = time.perf_counter()
        page = client.get("/v1/timeline", params=params, headers=auth).json()
        scroll.append(time.perf_counter() - started)
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return first, scroll, pages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="posts per author per latency round")
    parser.add_argument("--rounds", type=int, default=5, help="latency rounds (the p99 ratio is their median)")
    parser.add_argument("--seconds", type=int, default=6, help="duration of each throughput run")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP keep-alive connections")
    parser.add_argument("--pool", type=int, default=4, help="WALFEED_API_POOL_MAX (per worker process)")
    parser.add_argument("--workers", type=int, default=2, help="WALFEED_API_WORKERS of the api under test")
    parser.add_argument("--server", choices=["granian", "uvicorn"], default="granian",
                        help="WALFEED_API_SERVER of the api, and the floor app's server")
    parser.add_argument("--pairs", type=int, default=3, help="api/pgbench throughput pairs (ABAB)")
    parser.add_argument("--only", choices=["latency", "throughput", "timeline"], help="run one part only")
    parser.add_argument("--profile", metavar="FILE", help="py-spy (if installed) the api during one extra post "
                                                          "run; collapsed stacks to FILE")
    parser.add_argument("--out", type=Path, help="folder for the api's log (default bench/results/<ts>-api)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py), with "
                        "the throughput runs")
    parser.add_argument("--no-rate-limit", dest="rate_limit", action="store_false",
                        help="the api without its write limiter's statement (default: counted, limit 1,000,000/min)")
    parser.add_argument("--otlp", help="the api exports its spans to this OTLP/HTTP endpoint ('sink': a local one "
                        "that discards them; docs/adr/0072)")
    args = parser.parse_args()
    logs = infra.results_folder(args.out, "api") / "logs"
    print(f"api log in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        return run(res, args)


def run(res: infra.Resources, args: argparse.Namespace) -> int:
    url = res.database("api")
    port = free_port()
    env = {"WALFEED_DATABASE_URL": url, "WALFEED_API_POOL_MIN": str(min(4, args.pool)),
           "WALFEED_API_POOL_MAX": str(args.pool), "WALFEED_LOG_LEVEL": "WARNING",
           "WALFEED_API_WORKERS": str(args.workers), "WALFEED_API_SERVER": args.server,
           # the write path as in production, the limiter counting every post, with a limit no run reaches
           "WALFEED_API_SIGNUP_LIMIT": "0", "WALFEED_API_WRITE_LIMIT": "1000000" if args.rate_limit else "0",
           **otlp_sink.endpoint(args.otlp)}
    api = res.start("api", ["api", "--port", str(port)], env)
    floor_port = free_port()
    floor = res.start("floor", ["--port", str(floor_port), "--workers", str(args.workers), "--pool", str(args.pool),
                                "--server", args.server], {"WALFEED_DATABASE_URL": url}, module="bench.floor_app")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
        big_id, big = signup(client, "big")
        small_id, small = signup(client, "small")
        reader_id, reader = signup(client, "reader")
        with psycopg.connect(url, autocommit=True) as conn:  # several statements: client-side binding
            psycopg.ClientCursor(conn).execute(SETUP, {"big": big_id, "small": small_id, "reader": reader_id})
        print(f"setup: big has {client.get(f'/v1/users/{big_id}', headers=big).json()['follower_count']} "
              f"followers, small {client.get(f'/v1/users/{small_id}', headers=big).json()['follower_count']}")

        print(f"api and floor app on {args.server}: {args.workers} worker process(es), pool {args.pool} each; "
              f"{args.clients} HTTP clients")
        found: dict[str, float] = {}
        details: dict[str, object] = {"meta": {k: v for k, v in vars(args).items() if k != "json"}}
        if args.only in (None, "latency"):
            post_latency(client, small, big, 30)  # warm-up
            found.update(latency_rounds(client, small, big, args.requests, args.rounds))
        if args.only in (None, "throughput"):
            authors = [signup(client, f"w{i}") for i in range(args.clients)]
            summary = throughput(port, api.pid, (floor_port, floor.pid), url, authors, args)
            details["throughput"] = summary
            found.update(throughput_figures(summary))
            if args.profile:
                closedloop.profiled_load(port, api.pid, post_requests([a for _, a in authors]), b"HTTP/1.1 201",
                                         args.clients, args.seconds, args.profile)
        if args.only in (None, "timeline"):
            first, scroll, pages = timeline_reads(client, reader, 200)
            print(f"GET /v1/timeline first page (500 followed, 20 celebrities): {ms(first)}")
            print(f"GET /v1/timeline scrolling {pages} pages (crosses the floor):  {ms(scroll)}")
            found["timeline_first_p99_ms"] = percentile(first, 0.99) * 1000
        figures.write(args.json, found, **details)
    return 0


if __name__ == "__main__":
    entry.run(main)
