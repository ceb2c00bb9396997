"""API benchmark: constant-cost writes, throughput against the bare database, timeline reads.

    .venv/bin/python bench/api_latency.py [--requests 300] [--seconds 6] [--clients 16]

Creates its own database (dropped at the end) on WALFEED_BENCH_PG_URL (default: the local superuser), starts
the real `walfeed api` process on a free port, and measures in one run:

1. POST /v1/posts p50/p99 for an author with 10 followers and one with 100,000 (interleaved requests);
   the ratio of the p99s must be <= 1.2.
2. Posts per second with concurrent clients through the API vs pgbench running the same transaction
   (INSERT post + INSERT outbox) with the same number of connections; target ratio >= 0.5.
3. GET /v1/timeline p50/p99 (20 per page) for a user following 500 accounts of which 20 are celebrities:
   the first page, and every page of a scroll that goes below the timeline floor.

No worker runs: the numbers are the API's own cost (no fan-out happens in the request path anyway).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.core.migrate import apply_schema  # noqa: E402

ADMIN = os.environ.get("WALFEED_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")

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

PGBENCH_SCRIPT = """\\set author random(1, 500)
BEGIN;
INSERT INTO posts (author_id, body) VALUES (:author, 'bench post') RETURNING id \\gset
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    VALUES (gen_random_uuid(), 'post', :id, 'post.created', jsonb_build_object('post_id', :id, 'author_id', :author));
END;
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:6.2f} ms  p99 {pct(values, 0.99) * 1000:6.2f} ms"


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


async def raw_post_loop(host: str, port: int, request: bytes, deadline: float) -> int:
    """One keep-alive connection sending the same prepared request until the deadline (a minimal wrk-like
    client: httpx would spend more CPU than the server on this 2-core machine)."""
    reader, writer = await asyncio.open_connection(host, port)
    done = 0
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            assert status.split()[1] == b"201", status
            done += 1
    finally:
        writer.close()
        await writer.wait_closed()
    return done


async def api_throughput(port: int, auths: list[dict[str, str]], clients: int, seconds: float) -> float:
    body = b'{"body": "throughput"}'
    requests = [(f"POST /v1/posts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {a['Authorization']}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
                for a in auths]
    started = time.perf_counter()
    counts = await asyncio.gather(*(raw_post_loop("127.0.0.1", port, requests[k % len(requests)],
                                                  started + seconds) for k in range(clients)))
    return sum(counts) / (time.perf_counter() - started)


def pgbench_tps(url: str, clients: int, seconds: int) -> float:
    binary = "/usr/lib/postgresql/15/bin/pgbench"
    if not os.path.exists(binary):
        binary = "pgbench"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(PGBENCH_SCRIPT)
    try:
        out = subprocess.run([binary, "-n", "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", script.name,
                              url], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    assert match, out
    return float(match.group(1))


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
        params: dict[str, object] = {"limit": 20, **({"cursor": cursor} if cursor else {})}
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
    parser.add_argument("--requests", type=int, default=300, help="posts per author for the latency test")
    parser.add_argument("--seconds", type=int, default=6, help="duration of each throughput run")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients / pgbench connections")
    parser.add_argument("--pool", type=int, default=4, help="WALFEED_API_POOL_MAX of the api under test")
    args = parser.parse_args()

    name = f"walfeed_bench_{uuid.uuid4().hex[:8]}"
    url = psycopg.conninfo.make_conninfo(ADMIN, dbname=name)
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]  # generated name
    port = free_port()
    env = {**os.environ, "WALFEED_DATABASE_URL": url, "WALFEED_API_POOL_MIN": str(min(4, args.pool)),
           "WALFEED_API_POOL_MAX": str(args.pool), "WALFEED_LOG_LEVEL": "WARNING"}
    api: subprocess.Popen[bytes] | None = None
    try:
        apply_schema(url)
        api = subprocess.Popen([sys.executable, "-m", "services.cli", "api", "--port", str(port)], env=env,
                               cwd=ROOT, stdin=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            for _ in range(200):
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)  # polling for the api to come up
            big_id, big = signup(client, "big")
            small_id, small = signup(client, "small")
            reader_id, reader = signup(client, "reader")
            with psycopg.connect(url, autocommit=True) as conn:  # several statements: client-side binding
                psycopg.ClientCursor(conn).execute(SETUP, {"big": big_id, "small": small_id, "reader": reader_id})  # type: ignore[arg-type]
            print(f"setup: big has {client.get(f'/v1/users/{big_id}', headers=big).json()['follower_count']} "
                  f"followers, small {client.get(f'/v1/users/{small_id}', headers=big).json()['follower_count']}")

            post_latency(client, small, big, 30)  # warm-up
            lat = post_latency(client, small, big, args.requests)
            ratio = pct(lat["big"], 0.99) / pct(lat["small"], 0.99)
            print(f"POST /v1/posts, 10 followers:      {ms(lat['small'])}")
            print(f"POST /v1/posts, 100,000 followers: {ms(lat['big'])}")
            print(f"  p99 ratio big/small = {ratio:.2f} (target <= 1.2)")

            authors = [signup(client, f"w{i}")[1] for i in range(args.clients)]
            rps = asyncio.run(api_throughput(port, authors, args.clients, args.seconds))
            tps = pgbench_tps(url, args.clients, args.seconds)
            print(f"throughput, {args.clients} clients: api {rps:7.1f} posts/s, pgbench same transaction "
                  f"{tps:7.1f} tps, ratio {rps / tps:.2f} (target >= 0.5)")

            first, scroll, pages = timeline_reads(client, reader, 200)
            print(f"GET /v1/timeline first page (500 followed, 20 celebrities): {ms(first)}")
            print(f"GET /v1/timeline scrolling {pages} pages (crosses the floor):  {ms(scroll)}")
    finally:
        if api is not None:
            api.send_signal(signal.SIGTERM)
            api.wait(30)
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
