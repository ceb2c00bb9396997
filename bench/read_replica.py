"""Read replica benchmark (docs/adr/0092): what the replica path costs per request, against the primary only.

    .venv/bin/python -m bench.read_replica [--rounds 400]

Starts its own private primary + streaming standby (testkit/pgcluster.py, removed at the end) and two real
`walfeed api` processes on the same database: `replica` (WALFEED_DATABASE_READ_URL set) and `primary` (unset).
Each round, interleaved: a post through each (the replica api also reads the write's WAL position: one round
trip more), then GET /v1/posts/{id} of that post right after it by its writer, with the token on `replica` (the
read waits for replay or falls back), then the same read by another user (no token, and only its own signup
remembered: the replica answers whether it has replayed the post or not, and 404 when not).
Prints p50/p99 per kind of the requests that found the post, and the median of the per-round ratios replica/primary
over the rounds where both found it. Another user's reads that answered 404 are not reads of the post: they are
counted apart, with their p50/p99 and total time (time spent for no post: a client has to ask again). Last, how
the replica api's reads were answered (its metrics, which count those 404s among the reads the replica answered).
Sequential requests: latency, not throughput.
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

from bench.lib import entry
from bench.lib.stats import percentile
from services.api.readafter import HEADER
from testkit import pgcluster
from testkit.processes import Processes, free_port
from testkit.waiting import eventually

KINDS = ("post", "read_own", "read_other")
MISSED = "read_other_404"  # another user's read that found no post: the replica had not replayed it yet


def _timed(client: httpx.Client, method: str, path: str, **kwargs: object) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    reply = client.request(method, path, **kwargs)  # type: ignore[arg-type]
    return time.perf_counter() - started, reply


def _round(client: httpx.Client, auth: dict[str, str], other_auth: dict[str, str],
           with_token: bool) -> dict[str, float]:
    """Seconds per kind of request; the other user's read under MISSED, not "read_other", when it answered 404."""
    spent, posted = _timed(client, "POST", "/v1/posts", json={"body": "bench"}, headers=auth)
    assert posted.status_code == 201, posted.text
    token = {HEADER: posted.headers[HEADER]} if with_token else {}
    own, reply = _timed(client, "GET", f"/v1/posts/{posted.json()['id']}", headers={**auth, **token})
    assert reply.status_code == 200, reply.text
    other, reply = _timed(client, "GET", f"/v1/posts/{posted.json()['id']}", headers=other_auth)
    assert reply.status_code in (200, 404), reply.text
    return {"post": spent, "read_own": own, ("read_other" if reply.status_code == 200 else MISSED): other}


def _ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5) * 1000:.2f} ms p99 {percentile(values, 0.99) * 1000:.2f} ms"


def report(samples: dict[str, list[dict[str, float]]], rounds: int) -> None:
    """p50/p99 per kind and api of the requests that found the post, and the median of the per-round ratios
    replica/primary over the rounds where both found it; then the 404s apart: how many, and how long they took."""
    for kind in KINDS:
        row = []
        for name in ("replica", "primary"):
            values = [s[kind] for s in samples[name] if kind in s]
            row.append(f"{name} {_ms(values)}" + ("" if len(values) == rounds else f" ({len(values)} reads)"))
        ratios = [r[kind] / p[kind] for r, p in zip(samples["replica"], samples["primary"], strict=True)
                  if kind in r and kind in p]
        median = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(f"{kind:10s} {' | '.join(row)} | median ratio {median}"
              + ("" if len(ratios) == rounds else f" (of the {len(ratios)} rounds where both found the post)"))
    for name in ("replica", "primary"):
        missed = [s[MISSED] for s in samples[name] if MISSED in s]
        if missed:
            print(f"{name}: {len(missed)} of {rounds} reads by another user answered 404 (post not replayed yet), "
                  f"not counted as reads above: {_ms(missed)}, {sum(missed) * 1000:.1f} ms in all, spent for no post "
                  f"(a client has to ask again)")
        else:
            print(f"{name}: no read by another user answered 404")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    print(f"load average before: {entry.load_avg()}")
    with pgcluster.provide() as cluster, tempfile.TemporaryDirectory(prefix="walfeed-bench-") as tmp:
        url = cluster.migrated_database()
        replica_url = cluster.standbys[0].url(str(psycopg.conninfo.conninfo_to_dict(url)["dbname"]))
        common = {"WALFEED_DATABASE_URL": url, "WALFEED_API_SIGNUP_LIMIT": "0", "WALFEED_API_WRITE_LIMIT": "0"}
        procs = Processes(common, Path(tmp))
        ports = {"replica": free_port(), "primary": free_port()}
        try:
            procs.start("replica", "api", "--port", str(ports["replica"]),
                        env={"WALFEED_DATABASE_READ_URL": replica_url})
            procs.start("primary", "api", "--port", str(ports["primary"]))
            clients = {name: httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
                       for name, port in ports.items()}
            auth: dict[str, list[dict[str, str]]] = {}
            for name, client in clients.items():
                eventually(lambda c=client: c.get("/readyz").status_code == 200,  # type: ignore[misc]
                           timeout=60, what=f"{name} ready")
                auth[name] = [{"Authorization": "Bearer " + client.post(
                    "/v1/users", json={"handle": f"{role}_{name}"}).json()["token"]} for role in ("writer", "reader")]
            samples: dict[str, list[dict[str, float]]] = {"replica": [], "primary": []}
            for i in range(args.rounds):
                for name in (("replica", "primary") if i % 2 == 0 else ("primary", "replica")):
                    writer, reader = auth[name]
                    samples[name].append(_round(clients[name], writer, reader, with_token=name == "replica"))
            metrics = clients["replica"].get("/metrics").text
            for client in clients.values():
                client.close()
        finally:
            for proc in procs.all:
                proc.stop(signal.SIGTERM, timeout=30)
            procs.kill_all()
    print(f"{args.rounds} interleaved rounds; load average after: {entry.load_avg()}")
    report(samples, args.rounds)
    for reason, server, value in re.findall(
            r'walfeed_api_replica_reads_total\{reason="([^"]+)",server="([^"]+)"\} (\S+)', metrics):
        print(f"replica api reads answered by the {server} ({reason}): {float(value):.0f}")
    return 0


if __name__ == "__main__":
    entry.run(main)
