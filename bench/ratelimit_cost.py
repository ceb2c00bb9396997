"""What the rate limiter costs per request (ADR 0033).

    .venv/bin/python -m bench.ratelimit_cost [--requests 2000] [--rounds 5] [--out DIR]

Creates its own database (bench/lib/infra.py; dropped at the end, also on Ctrl-C), then measures:
1. the limiter's statement (sql.RATE_LIMIT_HIT) on one async connection, against `SELECT 1` on the same one
   (the bare round trip), interleaved in rounds: microseconds per statement;
2. POST /v1/posts through two real `walfeed api` processes on the same database, one with the write limit on
   (high enough never to refuse) and one with it off, requests alternating between them: p50 and mean latency.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from bench.lib import entry, infra
from bench.lib.stats import percentile
from services.api import sql
from testkit.processes import free_port


async def statements(url: str, n: int, rounds: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        per: dict[str, list[float]] = {"SELECT 1": [], "RATE_LIMIT_HIT": []}
        for r in range(rounds + 1):  # round 0 warms up (prepared statements, caches)
            for name in per:
                started = time.perf_counter()
                for i in range(n):
                    if name == "SELECT 1":
                        await conn.execute("SELECT 1")
                    else:
                        await conn.execute(sql.RATE_LIMIT_HIT, {"limit_key": f"write:{i % 64}", "window": 60,
                                                                "cap": 10**9})
                if r:
                    per[name].append((time.perf_counter() - started) / n * 1e6)
        for name, values in per.items():
            print(f"{name:>15}: median of {rounds} rounds {statistics.median(values):7.1f} us/statement "
                  f"(rounds {', '.join(f'{v:.0f}' for v in values)})")
        extra = statistics.median(per["RATE_LIMIT_HIT"]) - statistics.median(per["SELECT 1"])
        print(f"limiter statement beyond a bare round trip: {extra:.1f} us")


def posts(bases: list[str], n: int) -> None:
    latencies: list[list[float]] = [[], []]
    with httpx.Client(timeout=30) as client:
        token = client.post(f"{bases[0]}/v1/users", json={"handle": "bench"}).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        for i in range(n + 100):  # the first 100: warm-up
            which = i % 2
            started = time.perf_counter()
            assert client.post(f"{bases[which]}/v1/posts", json={"body": "x"}, headers=auth).status_code == 201
            if i >= 100:
                latencies[which].append((time.perf_counter() - started) * 1e3)
    for label, values in zip(("limit on ", "limit off"), latencies, strict=True):
        print(f"POST /v1/posts {label}: p50 {percentile(values, 0.50):.3f} ms, mean {statistics.fmean(values):.3f} ms")
    print(f"difference of p50s: {(percentile(latencies[0], 0.50) - percentile(latencies[1], 0.50)) * 1e3:.0f} us")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, help="folder for the apis' logs (default bench/results/<ts>-ratelimit)")
    args = parser.parse_args()
    logs = infra.results_folder(args.out, "ratelimit") / "logs"
    print(f"api logs in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("ratelimit")
        asyncio.run(statements(url, args.requests, args.rounds))
        ports = [free_port(), free_port()]
        for port, limit in zip(ports, ("1000000", "0"), strict=True):
            res.start(f"api-write-limit-{limit}", ["api", "--port", str(port)],
                      {"WALFEED_DATABASE_URL": url, "WALFEED_LOG_LEVEL": "WARNING",
                       "WALFEED_API_WRITE_LIMIT": limit, "WALFEED_API_WRITE_WINDOW": "3600"})
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        for base in bases:
            with httpx.Client(base_url=base, timeout=30) as client:
                infra.wait_ready(client)
        posts(bases, args.requests)
    return 0


if __name__ == "__main__":
    entry.run(main)
