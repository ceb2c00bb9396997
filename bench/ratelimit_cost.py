"""What the rate limiter costs per request (ADR 0033).

    .venv/bin/python bench/ratelimit_cost.py [--requests 2000] [--rounds 5]

Creates its own database (dropped at the end), then measures:
1. the limiter's statement (sql.RATE_LIMIT_HIT) on one async connection, against `SELECT 1` on the same one
   (the bare round trip), interleaved in rounds: microseconds per statement;
2. POST /v1/posts through two real `walfeed api` processes on the same database, one with the write limit on
   (high enough never to refuse) and one with it off, requests alternating between them: p50 and mean latency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api_latency import bench_database, free_port, wait_ready  # noqa: E402
from bench.lib.stats import percentile  # noqa: E402
from services.api import sql  # noqa: E402
from services.core.migrate import apply_schema  # noqa: E402


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
                        await conn.execute(sql.RATE_LIMIT_HIT, {"key": f"write:{i % 64}", "window": 60,
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
    args = parser.parse_args()
    with bench_database() as url:
        apply_schema(url)
        asyncio.run(statements(url, args.requests, args.rounds))
        apis: list[subprocess.Popen[bytes]] = []
        try:
            ports = [free_port(), free_port()]
            for port, limit in zip(ports, ("1000000", "0"), strict=True):
                env = {**os.environ, "WALFEED_DATABASE_URL": url, "WALFEED_LOG_LEVEL": "WARNING",
                       "WALFEED_API_WRITE_LIMIT": limit, "WALFEED_API_WRITE_WINDOW": "3600"}
                apis.append(subprocess.Popen([sys.executable, "-m", "services.cli", "api", "--port", str(port)],
                                             env=env, cwd=ROOT, stdin=subprocess.DEVNULL))
            bases = [f"http://127.0.0.1:{port}" for port in ports]
            for base in bases:
                with httpx.Client(base_url=base, timeout=30) as client:
                    wait_ready(client, tries=400)
            posts(bases, args.requests)
        finally:
            for api in apis:
                api.send_signal(signal.SIGTERM)
                api.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
