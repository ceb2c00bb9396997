"""The Mastodon layer's costs: the home timeline through Mastodon's route against /v1/timeline, and live streams.

    .venv/bin/python -m bench.mastodon_read [--part read,streams] [--readers 200] [--follows 50] [--seconds 5]
                                            [--pairs 5] [--clients 16] [--workers 1] [--pool 4]
                                            [--streams 1000] [--rate 100] [--posts 1000] [--json FILE]

read: the same readers, the same page (20 posts, the merged home timeline with celebrities' pulled posts, seeded as
bench/read_throughput.py seeds it), read through `GET /api/v1/timelines/home?limit=20` (Mastodon's Status and
Account entities, Link header) and `GET /v1/timeline?limit=20` in alternating rounds of one run, closed loop over
--clients keep-alive connections (bench/lib/closedloop.py). The figure is `mastodon / v1`: the median of the
per-round ratios of requests/s (the target is at least 0.9).

streams: one api process (--workers 1), the relay; --streams readers each hold `GET /api/v1/streaming/user` open
(raw sockets on one event loop), each following one of 100 authors; the api worker's resident memory before and
after gives the memory per idle stream. Then --posts posts at --rate a second (POST /v1/posts, the commit is when
its 201 arrives) and, for every post, the time until each of its author's streaming followers received the
`update`: p50 / p99 / max over all deliveries, and the deliveries missed (none expected).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import read_throughput as reads
from bench.lib import closedloop, entry, infra, stats
from bench.lib import figures as figure_file
from testkit.processes import children_of, free_port
from testkit.waiting import eventually


def _requests(path: str, first: int, last: int) -> list[bytes]:
    return [(f"GET {path}?limit=20 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             f"Authorization: Bearer {infra.token(user)}\r\n\r\n").encode() for user in range(first, last + 1)]


def read_part(res: infra.Resources, args: argparse.Namespace) -> dict[str, Any]:
    url = res.database("mastodon_read")
    group = reads.seed(url, args.readers, [args.follows])[0]
    port = free_port()
    api = res.start("api-read", ["api", "--port", str(port)], {
        "WALFEED_DATABASE_URL": url, "WALFEED_API_WORKERS": str(args.workers),
        "WALFEED_API_POOL_MAX": str(args.pool), "WALFEED_API_POOL_MIN": str(min(4, args.pool)),
        "WALFEED_LOG_LEVEL": "WARNING"})
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
        auth = {"Authorization": f"Bearer {infra.token(group.first)}"}
        v1 = [p["id"] for p in client.get("/v1/timeline", params={"limit": 20}, headers=auth).json()["items"]]
        masto = [int(s["id"]) for s in client.get("/api/v1/timelines/home", params={"limit": 20},
                                                   headers=auth).json()]
        assert v1 == masto and len(v1) == 20, (v1, masto)  # the same page
    runs = {"v1": _requests("/v1/timeline", group.first, group.last),
            "mastodon": _requests("/api/v1/timelines/home", group.first, group.last)}
    for requests in runs.values():  # warm-up: pools, prepared statements, caches
        closedloop.load(port, requests, b"HTTP/1.1 200", args.clients, 1.0)
    rates: dict[str, list[float]] = {k: [] for k in runs}
    print(f"read: {args.readers} readers following {args.follows} (4 celebrities), {args.workers} api process(es) "
          f"x pool {args.pool}, {args.clients} clients, nproc {os.cpu_count()}")
    for i in range(args.pairs):
        for kind in (("v1", "mastodon") if i % 2 == 0 else ("mastodon", "v1")):
            rates[kind].append(closedloop.load(port, runs[kind], b"HTTP/1.1 200", args.clients, args.seconds))
        print(f"  round {i + 1}: v1 {rates['v1'][-1]:.0f}/s, mastodon {rates['mastodon'][-1]:.0f}/s, "
              f"ratio {rates['mastodon'][-1] / rates['v1'][-1]:.3f}", flush=True)
    if args.profile:  # FILE.v1 and FILE.mastodon
        for kind, requests in runs.items():
            closedloop.profiled_load(port, api.pid, requests, b"HTTP/1.1 200", args.clients, args.seconds,
                                     f"{args.profile}.{kind}")
    res.stop(api)
    ratio = statistics.median(m / v for m, v in zip(rates["mastodon"], rates["v1"], strict=True))
    summary = {"v1_reads_per_s": statistics.median(rates["v1"]),
               "mastodon_reads_per_s": statistics.median(rates["mastodon"]), "mastodon_over_v1": ratio}
    print(f"read: median v1 {summary['v1_reads_per_s']:.0f}/s, mastodon {summary['mastodon_reads_per_s']:.0f}/s; "
          f"mastodon / v1 {ratio:.3f} (median of per-round ratios)")
    return {"summary": summary, "rates": rates}


AUTHORS = 100
STREAM_SEED = """
INSERT INTO users (id, handle, token_hash) OVERRIDING SYSTEM VALUE
    SELECT g, 'u' || g, sha256(('bench' || g)::bytea) FROM generate_series(1, %(users)s) g;
SELECT setval(pg_get_serial_sequence('users', 'id'), %(users)s);
INSERT INTO follows (follower_id, followee_id)
    SELECT r, 1 + r %% %(authors)s FROM generate_series(%(authors)s + 1, %(users)s) r;
UPDATE users u SET follower_count = c.n FROM (SELECT followee_id, count(*) n FROM follows GROUP BY 1) c
    WHERE u.id = c.followee_id;
UPDATE users SET following_count = 1 WHERE id > %(authors)s;
ANALYZE;
"""


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class Listener:
    """One open stream: the receive time of each update's status id."""

    def __init__(self) -> None:
        self.received: dict[int, float] = {}
        self.opened = asyncio.Event()

    async def run(self, port: int, user: int, stop: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write((f"GET /api/v1/streaming/user HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: Bearer {infra.token(user)}\r\n\r\n").encode())
        await writer.drain()
        buffer = b""
        try:
            while not stop.is_set():
                chunk = await reader.read(65536)
                if not chunk:
                    return
                now = time.perf_counter()
                buffer += chunk
                if b":)" in buffer:
                    self.opened.set()
                while (at := buffer.find(b"event: update\ndata: ")) >= 0:
                    end = buffer.find(b"\n\n", at)
                    if end < 0:
                        break
                    status = json.loads(buffer[at + 20:end].split(b"\r\n", 1)[0])
                    self.received[int(status["id"])] = now
                    buffer = buffer[end + 2:]
                if len(buffer) > 1_000_000:
                    buffer = buffer[-65536:]
        finally:
            writer.close()


async def _streams(port: int, api_pid: int, args: argparse.Namespace) -> dict[str, Any]:
    before = _rss_kib(api_pid)
    stop = asyncio.Event()
    users = range(AUTHORS + 1, AUTHORS + 1 + args.streams)
    listeners = {u: Listener() for u in users}
    tasks = [asyncio.create_task(listeners[u].run(port, u, stop)) for u in users]
    opened = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(lst.opened.wait() for lst in listeners.values())), 120)
    opened = time.perf_counter() - opened
    await asyncio.sleep(1.0)  # the api settles (allocations of the last opens) before its memory is read
    after = _rss_kib(api_pid)
    per_stream = (after - before) * 1024 / args.streams
    print(f"streams: {args.streams} open in {opened:.1f} s; api RSS {before / 1024:.0f} -> {after / 1024:.0f} MiB: "
          f"{per_stream / 1024:.1f} KiB per idle stream", flush=True)
    committed: dict[int, tuple[int, float]] = {}
    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=limits) as client:
        started = time.perf_counter()

        async def post(i: int) -> None:
            await asyncio.sleep(max(0.0, started + i / args.rate - time.perf_counter()))  # the schedule, not a wait
            author = 1 + i % AUTHORS
            reply = await client.post("/v1/posts", json={"body": f"stream bench {i}"},
                                      headers={"Authorization": f"Bearer {infra.token(author)}"})
            reply.raise_for_status()
            committed[reply.json()["id"]] = (author, time.perf_counter())

        await asyncio.gather(*(post(i) for i in range(args.posts)))
        sent = time.perf_counter() - started
    expected = {(u, pid) for pid, (author, _) in committed.items() for u in users if 1 + u % AUTHORS == author}
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline and any(pid not in listeners[u].received for u, pid in expected):
        await asyncio.sleep(0.1)  # the poll interval of the bench's own wait for the last deliveries
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    latencies = [(listeners[u].received[pid] - committed[pid][1]) * 1000 for u, pid in expected
                 if pid in listeners[u].received]
    missed = len(expected) - len(latencies)
    summary = {"streams": args.streams, "kib_per_idle_stream": per_stream / 1024, "open_seconds": opened,
               "posts": len(committed), "posts_per_s": len(committed) / sent, "deliveries": len(expected),
               "missed": missed, **{f"latency_ms_{k}": v for k, v in stats.summary(latencies).items()}}
    print(f"streams: {len(committed)} posts at {summary['posts_per_s']:.0f}/s, {len(expected)} deliveries, "
          f"{missed} missed; commit -> client update p50 {stats.percentile(latencies, 0.5):.1f} ms, p99 "
          f"{stats.percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms", flush=True)
    return summary


def streams_part(res: infra.Resources, args: argparse.Namespace) -> dict[str, Any]:
    url = res.database("mastodon_streams")
    with psycopg.connect(url, autocommit=True) as conn:
        psycopg.ClientCursor(conn).execute(STREAM_SEED, {"users": AUTHORS + args.streams, "authors": AUTHORS})
    prefix = res.prefix("streams")
    slot = res.slot(url, "streams")
    env = {"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_PREFIX": prefix, "WALFEED_SLOT": slot, "WALFEED_AMQP_URL":
           infra.AMQP, "WALFEED_LOG_LEVEL": "WARNING", "WALFEED_API_WORKERS": "1", "WALFEED_API_WRITE_LIMIT": "0",
           "WALFEED_MASTODON_STREAMS_MAX": str(args.streams + 10), "WALFEED_RELAY_METRICS_PORT": "0"}
    port = free_port()
    api = res.start("api-streams", ["api", "--port", str(port)], env)
    res.start("relay", ["relay"], env)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        infra.wait_ready(client)
    # granian's worker: the largest child of the api (its others are multiprocessing's helpers)
    worker_pid = eventually(lambda: max(children_of(api.pid), key=_rss_kib, default=None), timeout=30,
                            what="the api worker")
    return asyncio.run(_streams(port, worker_pid, args))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", default="read,streams", help="read, streams or both (comma-separated)")
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--follows", type=int, default=50, help="authors each reader follows (>= 5)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each measured round")
    parser.add_argument("--pairs", type=int, default=5, help="rounds of each route, alternating")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="api processes of the read part")
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--streams", type=int, default=1000, help="streams held open in the streams part")
    parser.add_argument("--rate", type=float, default=100.0, help="posts per second in the streams part")
    parser.add_argument("--posts", type=int, default=1000)
    parser.add_argument("--out", type=Path, help="folder for the processes' logs")
    parser.add_argument("--profile", metavar="FILE", help="py-spy the api during one extra run of each route in the "
                                                          "read part; collapsed stacks to FILE.v1, FILE.mastodon")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    parts = set(args.part.split(","))
    logs = infra.results_folder(args.out, "mastodon") / "logs"
    print(f"logs in {logs}", flush=True)
    figures: dict[str, Any] = {"meta": {k: v for k, v in vars(args).items() if not isinstance(v, Path)},
                               "nproc": os.cpu_count()}
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        if "read" in parts:
            figures["read"] = read_part(res, args)
        if "streams" in parts:
            figures["streams"] = streams_part(res, args)
    print(f"load average {entry.load_avg()}")
    numbers: dict[str, float] = {}
    if "read" in figures:
        numbers["mastodon_over_v1"] = figures["read"]["summary"]["mastodon_over_v1"]
    if "streams" in figures:
        found = figures["streams"]
        numbers |= {"kib_per_idle_stream": found["kib_per_idle_stream"], "stream_p50_ms": found["latency_ms_p50"],
                    "stream_p99_ms": found["latency_ms_p99"], "stream_missed": found["missed"]}
    figure_file.write(args.json, numbers, **figures)
    return 0


if __name__ == "__main__":
    entry.run(main)
