"""The api's own CPU per request, in one process: GET /v1/timeline and POST /v1/posts against the floor app's page
and post, no server, no network, no other process's CPU.

    .venv/bin/python -m bench.api_inprocess [--requests 3000] [--rounds 5] [--follows 500] [--json FILE]

Served benchmarks (bench.read_throughput) put the api, its server, Postgres and the load generator on the same
cores, so on a shared machine a difference of 10% in the api's code is lost in their noise. Here both ASGI apps
(the real one, `services.api.app.create_app`, and the floor, `bench.floor_app`: FastAPI, the bare page statement,
orjson; its post is the api's one-statement insert of a post and its outbox row, without auth or rate limit) run in
this process against the same database (seeded as bench.read_throughput seeds it, one reader
group), each called directly with an ASGI scope, one request at a time, `--requests` a round, interleaved; the
figure is the process's CPU time per request (time.process_time: the database's CPU is its own), and the ratio
floor / api per round, the median reported. What it leaves out is the server's share (granian's, the same for both
apps) and the database's (bench.read_throughput measures both).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from bench.lib import entry, figures, infra
from bench.read_throughput import seed


def scope(path: str, query: bytes, headers: list[tuple[bytes, bytes]], method: str = "GET") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "",
            "headers": [(b"host", b"bench"), *headers], "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}


async def start(app: Any) -> tuple[asyncio.Queue[dict[str, str]], asyncio.Task[None]]:
    """Runs the app's lifespan startup; `stop` ends it."""
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    started = asyncio.Event()
    await inbox.put({"type": "lifespan.startup"})

    async def send(message: dict[str, str]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            raise RuntimeError(message)

    task = asyncio.get_running_loop().create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                      inbox.get, send))
    await asyncio.wait_for(started.wait(), 30)
    return inbox, task


async def stop(lifespan: tuple[asyncio.Queue[dict[str, str]], asyncio.Task[None]]) -> None:
    inbox, task = lifespan
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(task, 30)


BODY = b'{"body": "a post of an ordinary length, written through the api in one process"}'


async def request(app: Any, asgi_scope: dict[str, Any]) -> int:
    statuses: list[int] = []
    body = BODY if asgi_scope["method"] == "POST" else b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(dict(asgi_scope), receive, send)
    return statuses[0]


async def cpu_per_request(app: Any, asgi_scope: dict[str, Any], n: int) -> float:
    """Microseconds of this process's CPU per request, after a warm-up (pool, prepared statements, caches)."""
    for _ in range(200):
        status = await request(app, asgi_scope)
    if status not in (200, 201):
        raise SystemExit(f"{asgi_scope['path']} answered {status}")
    started = time.process_time()
    for _ in range(n):
        await request(app, asgi_scope)
    return (time.process_time() - started) / n * 1e6


async def measure(url: str, user: int, args: argparse.Namespace) -> dict[str, list[float]]:
    os.environ.update({"WALFEED_DATABASE_URL": url, "WALFEED_API_POOL_MIN": "1", "WALFEED_API_POOL_MAX": "1",
                       "FLOOR_POOL": "1", "WALFEED_LOG_LEVEL": "WARNING",
                       # counted as always (the api's one-statement counted insert), never reached
                       "WALFEED_API_WRITE_LIMIT": "1000000", "WALFEED_API_WRITE_WINDOW": "86400"})
    from bench import floor_app
    from services.api.app import create_app
    from services.api.config import ApiSettings
    from services.core.settings import Settings
    api, floor = create_app(Settings.from_env(), ApiSettings.from_env()), floor_app.app()
    lifespans = [await start(app) for app in (api, floor)]
    while not api.state.token_cache.live:  # the revocation listener connected: the token cache serves
        await asyncio.sleep(0.05)
    auth = [(b"authorization", f"Bearer bench{user}".encode())]
    json = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
    cases = {"read": (api, scope("/v1/timeline", b"limit=20", auth)),
             "read floor": (floor, scope("/page", f"user={user}".encode(), [])),
             "write": (api, scope("/v1/posts", b"", auth + json, "POST")),
             "write floor": (floor, scope("/posts", f"author={user}".encode(), json, "POST"))}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    print(f"{'round':>5} {'read us':>8} {'floor us':>9} {'floor/api':>10} {'write us':>9} {'floor us':>9} "
          f"{'floor/api':>10}", flush=True)
    for r in range(args.rounds):
        for name, (app, asgi_scope) in cases.items():
            samples[name].append(await cpu_per_request(app, asgi_scope, args.requests))
        line = [f"{samples[k][-1]:.0f}" for k in cases]
        print(f"{r + 1:>5} {line[0]:>8} {line[1]:>9} {samples['read floor'][-1] / samples['read'][-1]:>10.2f} "
              f"{line[2]:>9} {line[3]:>9} {samples['write floor'][-1] / samples['write'][-1]:>10.2f}", flush=True)
    for lifespan in lifespans:
        await stop(lifespan)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per app and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--follows", type=int, default=500, help="authors the reader follows (>= 5)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    with infra.Resources(uuid.uuid4().hex[:6], infra.results_folder(None, "inprocess") / "logs") as res:
        url = res.database("inprocess")
        group = seed(url, 10, [args.follows])[0]
        samples = asyncio.run(measure(url, group.first, args))
    result: dict[str, float] = {}
    for kind in ("read", "write"):
        ratios = [f / a for f, a in zip(samples[f"{kind} floor"], samples[kind], strict=True)]
        result |= {f"api_us_per_{kind}": statistics.median(samples[kind]),
                   f"floor_us_per_{kind}": statistics.median(samples[f"{kind} floor"]),
                   f"{kind}_floor_over_api": statistics.median(ratios)}
        print(f"{kind}: medians of {args.rounds} rounds: api {result[f'api_us_per_{kind}']:.0f} us, floor app "
              f"{result[f'floor_us_per_{kind}']:.0f} us; floor / api {result[f'{kind}_floor_over_api']:.2f}")
    print(f"load average {entry.load_avg()}")
    figures.write(args.json, result, samples=samples, follows=args.follows, requests=args.requests)
    return 0


if __name__ == "__main__":
    entry.run(main)
