"""The api under two ASGI servers, side by side: uvicorn (httptools, uvloop), as `walfeed api` runs it, and granian.

    .venv/bin/python -m bench.asgi_servers [--seconds 5] [--rounds 3] [--clients 16] [--workers 2] [--pool 4]
                                           [--json FILE]

Seeds a database as bench.read_throughput does (readers following 50 authors), starts the same app twice on it with
the same processes and pool: `walfeed api` (uvicorn) and granian (`--interface asgi --loop uvloop`, the app from
services.api.main:worker_app, the factory uvicorn's workers use). Then, in rounds, for each request kind
(GET /healthz, GET /v1/timeline, POST /v1/posts with the write limiter counting) one closed-loop run against each
server, one after the other: requests/s, the server's CPU per request, and granian / uvicorn per round (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import uuid
from pathlib import Path

import httpx

from bench.lib import closedloop, entry, infra
from bench.lib.cpumeter import CpuMeter
from bench.read_throughput import requests, seed
from testkit.processes import Process, free_port


def post_requests(first: int, last: int) -> list[bytes]:
    body = b'{"body": "bench post"}'
    return [(f"POST /v1/posts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {infra.token(user)}\r\n"
             f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
            for user in range(first, last + 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logs = infra.results_folder(None, "servers") / "logs"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        return run(res, args)


def run(res: infra.Resources, args: argparse.Namespace) -> int:
    url = res.database("servers")
    group = seed(url, 200, [50])[0]
    env = {"WALFEED_DATABASE_URL": url, "WALFEED_API_WORKERS": str(args.workers),
           "WALFEED_API_POOL_MAX": str(args.pool), "WALFEED_API_POOL_MIN": str(min(4, args.pool)),
           "WALFEED_LOG_LEVEL": "WARNING", "WALFEED_API_WRITE_LIMIT": "1000000"}
    ports = {"uvicorn": free_port(), "granian": free_port()}
    servers = {
        "uvicorn": res.start("uvicorn", ["api", "--port", str(ports["uvicorn"])], env),
        "granian": granian(res, ports["granian"], env, args.workers)}
    for port in ports.values():
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            infra.wait_ready(client)
    kinds = {"healthz": ([b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"], b"HTTP/1.1 200"),
             "timeline": (requests(group.first, group.last), b"HTTP/1.1 200"),
             "post": (post_requests(group.first, group.last), b"HTTP/1.1 201")}
    for reqs, expect in kinds.values():  # warm-up
        for port in ports.values():
            closedloop.load(port, reqs, expect, args.clients, 1.0)
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {k: {s: [] for s in servers} for k in kinds}
    print(f"api under each server: {args.workers} processes x pool {args.pool}; {args.clients} clients; "
          f"nproc {os.cpu_count()}")
    print(f"{'round':>5} {'kind':>9} {'server':>8} {'req/s':>8} {'cores':>6} {'ms/req':>7}")
    for i in range(args.rounds):
        for kind, (reqs, expect) in kinds.items():
            for name, proc in servers.items():
                with CpuMeter(proc.pid, window=(1.0, args.seconds - 1.0)) as cpu:
                    rate = closedloop.load(ports[name], reqs, expect, args.clients, args.seconds)
                samples[kind][name].append((rate, cpu.api))
                print(f"{i + 1:>5} {kind:>9} {name:>8} {rate:>8.0f} {cpu.api:>6.2f} {cpu.api / rate * 1000:>7.3f}",
                      flush=True)
    summary = {}
    for kind, by in samples.items():
        ratio = statistics.median(g[0] / u[0] for g, u in zip(by["granian"], by["uvicorn"], strict=True))
        summary[kind] = {"granian_over_uvicorn": ratio, **{
            f"{name}_per_s": statistics.median(r for r, _ in s) for name, s in by.items()}, **{
            f"{name}_ms": statistics.median(c / r * 1000 for r, c in s) for name, s in by.items()}}
        print(f"{kind}: uvicorn {summary[kind]['uvicorn_per_s']:.0f}/s ({summary[kind]['uvicorn_ms']:.3f} ms CPU), "
              f"granian {summary[kind]['granian_per_s']:.0f}/s ({summary[kind]['granian_ms']:.3f} ms CPU); granian / "
              f"uvicorn {ratio:.2f} (median of per-round ratios)")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"meta": vars(args) | {"json": None}, "summary": summary,
                                         "samples": samples}, indent=2))
    return 0


def granian(res: infra.Resources, port: int, env: dict[str, str], workers: int) -> Process:
    """The api's worker factory under granian's own command line."""
    return res.start("granian", ["--interface", "asgi", "--factory", "--loop", "uvloop", "--workers", str(workers),
                                 "--host", "127.0.0.1", "--port", str(port), "--no-ws", "--log-level", "warning",
                                 "services.api.main:worker_app"], env,
                     command=[str(Path(sys.executable).parent / "granian")])

if __name__ == "__main__":
    entry.run(main)
