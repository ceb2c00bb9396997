"""Webhook delivery throughput benchmark (a script, not a test).

Deliveries/s of `walfeed deliver --channel webhook` draining a backlog of N deliveries (default 3,000, spread over
--webhooks webhooks of one local receiver, so the per-target rate limit runs its statement for every try without
holding any back), versus the ceiling: a bare httpx client posting the same signed payloads to the same receiver
with the same concurrency (threads sharing one connection pool, as the worker's threads do). The receiver is a
uvicorn process answering 204 to every POST. Runs are interleaved in --pairs pairs (worker, client, ...) so a
change of load on the shared machine hits both alike; the result is the median of the per-pair ratios.

The worker's rate is N over the span from its first to its last recorded delivery (`deliveries.updated_at`), so
start-up is not counted; the messages are published straight to the events exchange (the relay is measured by
bench/relay_throughput.py). Creates its own database and AMQP names (bench/lib/infra.py) and removes them, also on
Ctrl-C. Usage:
    .venv/bin/python -m bench.delivery_throughput [--deliveries 3000] [--pairs 3] [--concurrency 16] [--out DIR]
                                                  [--json FILE]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pika
import psycopg

from bench.lib import entry, figures, infra, proc
from services.core import events as ev
from services.core import signing
from services.core.topology import Topology
from services.delivery import broker, payload
from testkit.processes import free_port
from testkit.waiting import eventually

SECRET = signing.generate_secret()

SEED = (
    "INSERT INTO users (handle, token_hash) VALUES ('owner', sha256('owner')), ('actor', sha256('actor'))",
    "INSERT INTO webhooks (owner_id, url, events, secret) "
    "SELECT 1, %(url)s, '{follow,mention}', %(secret)s FROM generate_series(1, %(webhooks)s)",
    "INSERT INTO notifications (recipient_id, kind, actor_id, event_id) "
    "SELECT 1, 'follow', 2, gen_random_uuid() FROM generate_series(1, %(n)s)",
    "INSERT INTO deliveries (notification_id, channel, webhook_id, recipient_id) "
    "SELECT n.id, 'webhook', 1 + n.id %% %(webhooks)s, 1 FROM notifications n",
)
RESET = ("UPDATE deliveries SET status = 'PENDING', attempts = 0, updated_at = now()", "TRUNCATE delivery_rate_limits")
SPAN = ("SELECT count(*) FILTER (WHERE status = 'DELIVERED'), "
        "extract(epoch FROM max(updated_at) - min(updated_at)) FROM deliveries")


async def receiver_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The local receiver: reads the request and answers 204."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def seed(url: str, n: int, webhooks: int, receiver: str) -> list[int]:
    """N pending deliveries spread over `webhooks` webhooks of the receiver. Returns their ids."""
    with psycopg.connect(url) as conn:
        for statement in SEED:
            conn.execute(statement, {"url": receiver, "secret": SECRET, "webhooks": webhooks, "n": n})
        conn.execute("ANALYZE")
        return [r[0] for r in conn.execute("SELECT id FROM deliveries ORDER BY id").fetchall()]


def publish_backlog(topology: Topology, ids: list[int]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
    try:
        channel = conn.channel()
        broker.declare(channel, topology, "webhook", 100_000)
        channel.confirm_delivery()
        for delivery_id in ids:
            event = ev.Event.new(ev.DELIVERY_WEBHOOK, delivery_id, {"delivery_id": delivery_id})
            channel.basic_publish(topology.events_exchange, ev.DELIVERY_WEBHOOK, ev.encode(event),
                                  pika.BasicProperties(message_id=str(event.id), delivery_mode=2))
    finally:
        conn.close()


def worker_run(res: infra.Resources, db_url: str, prefix: str, ids: list[int], concurrency: int,
               run: int) -> tuple[float, float]:
    """(deliveries/s, worker CPU ms per delivery from its first delivery on)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for statement in RESET:
            conn.execute(statement)
    publish_backlog(Topology(prefix), ids)
    env = {"WALFEED_DATABASE_URL": db_url, "WALFEED_AMQP_URL": infra.AMQP, "WALFEED_AMQP_PREFIX": prefix,
           "WALFEED_DELIVERY_CONCURRENCY": str(concurrency), "WALFEED_WEBHOOK_ALLOW_HTTP": "true",
           "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8", "WALFEED_LOG_LEVEL": "WARNING",
           "WALFEED_DELIVERY_METRICS_PORT": "0"}
    worker = res.start(f"deliver-webhook-{run}", ["deliver", "--channel", "webhook"], env)
    try:
        def span() -> tuple[int, float]:
            with psycopg.connect(db_url, autocommit=True) as conn:
                row = conn.execute(SPAN).fetchone()
            assert row is not None
            return row[0], float(row[1] or 0)
        eventually(lambda: span()[0] > 0, timeout=60, interval=0.01, what="a first delivery")
        first = span()[0], proc.cpu_seconds(worker.pid) or 0.0
        eventually(lambda: span()[0] == len(ids), timeout=600, interval=0.2, what="every delivery DELIVERED")
        cpu = ((proc.cpu_seconds(worker.pid) or 0.0) - first[1]) / (len(ids) - first[0]) * 1000
    finally:
        res.stop(worker, timeout=30)
    return len(ids) / span()[1], cpu


def client_run(url: str, ids: list[int], concurrency: int) -> tuple[float, float]:
    """The ceiling: the same signed payloads, posted by threads sharing one httpx client. (deliveries/s, this
    process's CPU ms per delivery)."""
    now = datetime.now(UTC)
    bodies = [payload.webhook_body(payload.Delivery(id=i, channel="webhook", status="PENDING", recipient_id=1,
                                                    created_at=now, notification_id=i, kind="follow", actor_id=2,
                                                    actor_handle="actor")) for i in ids]
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(limits=limits, timeout=15.0) as client:
        def post(i: int) -> None:
            body = bodies[i]
            headers = signing.headers(str(ids[i]), int(time.time()), body, [SECRET])
            headers["content-type"] = "application/json"
            assert client.post(url, content=body, headers=headers).status_code == 204
        start, cpu = time.monotonic(), time.process_time()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(post, range(len(ids))))
        return len(ids) / (time.monotonic() - start), (time.process_time() - cpu) / len(ids) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--webhooks", type=int, default=300, help="targets (each gets deliveries / webhooks)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, help="folder for the processes' logs (default bench/results/<ts>-deliver)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py)")
    args = parser.parse_args()
    logs = infra.results_folder(args.out, "deliver") / "logs"
    print(f"logs in {logs}", flush=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        res.start("receiver", ["bench.delivery_throughput:receiver_app", "--port", str(port), "--log-level", "warning",
                               "--no-access-log"], {}, module="uvicorn")
        eventually(lambda: httpx.post(url).status_code == 204, timeout=30, what="receiver up")
        db_url = res.database("delivery")
        prefix = res.prefix("delivery", declare=False)  # the worker declares its own queues
        ids = seed(db_url, args.deliveries, args.webhooks, url)
        pairs = []
        for n in range(args.pairs):
            worker, worker_cpu = worker_run(res, db_url, prefix, ids, args.concurrency, n)
            client, client_cpu = client_run(url, ids, args.concurrency)
            pairs.append((worker, client, worker_cpu))
            print(f"pair {n + 1}: worker {worker:,.0f}/s ({worker_cpu:.2f} ms CPU each), bare httpx "
                  f"{client:,.0f}/s ({client_cpu:.2f} ms CPU each), ratio {worker / client:.2f}", flush=True)
    found = figures_of(pairs)
    print(f"deliveries {args.deliveries}, webhooks {args.webhooks}, concurrency {args.concurrency}: "
          f"worker median {found['worker_per_s']:,.0f}/s, bare httpx median {found['client_per_s']:,.0f}/s, "
          f"ratio median {found['ratio']:.2f} (pairs {', '.join(f'{w / c:.2f}' for w, c, _ in pairs)}; "
          "target >= 0.7)")
    figures.write(args.json, found, meta={k: v for k, v in vars(args).items() if k != "json"})
    return 0


def figures_of(pairs: list[tuple[float, float, float]]) -> dict[str, float]:
    """What --json writes (bench/lib/figures.py), from (worker/s, bare client/s, worker CPU ms each) pairs: the
    median of the per-pair ratios and of each side."""
    return {"ratio": statistics.median(w / c for w, c, _ in pairs),
            "worker_per_s": statistics.median(w for w, _, _ in pairs),
            "client_per_s": statistics.median(c for _, c, _ in pairs),
            "worker_cpu_ms_per_delivery": statistics.median(cpu for _, _, cpu in pairs)}

if __name__ == "__main__":
    entry.run(main)
