"""Fan-out throughput: `walfeed worker` processes vs the bare SQL ceiling, side by side in one run.

    .venv/bin/python bench/fanout_throughput.py [--runs 3] [--posts 60] [--processes 2]

- rows/s for posts of authors with 1,000 followers: K worker processes (concurrency 1 each) consuming real
  post.created messages, vs the same statements (services/worker/sql.py: decision, own row, keyset chunks under the
  author lock) issued directly on K connections. Ratio worker / ceiling per run, median over runs (target >= 0.8).
- events/s for authors with 10 followers (per-message overhead), and the workers' peak RSS (VmHWM).
Uses its own database and AMQP prefix and removes both at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pika
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.core import events as ev
from services.core.migrate import apply_schema, ensure_database
from services.core.topology import Topology
from services.worker import broker
from services.worker import sql as q
from services.worker.fanout import FANOUT_CHUNK_SIZE

PG = os.environ.get("WALFEED_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
AMQP = os.environ.get("WALFEED_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2F")
Conn = psycopg.Connection[Any]


def setup(conn: Conn, authors: int, followers: int) -> list[int]:
    """`authors` users each followed by the same `followers` users. Returns the author ids."""
    base = conn.execute("SELECT coalesce(max(id), 0) FROM users").fetchone()[0]  # type: ignore[index]
    ids = [r[0] for r in conn.execute(
        "INSERT INTO users (handle, token_hash) SELECT 'b' || g, sha256(('b' || g)::bytea) "
        "FROM generate_series(%s::bigint, %s::bigint) g RETURNING id", (base + 1, base + authors + followers))]
    chosen, fans = ids[:authors], ids[authors:]
    conn.execute("INSERT INTO follows (follower_id, followee_id) SELECT f, a FROM unnest(%s::bigint[]) f, "
                 "unnest(%s::bigint[]) a", (fans, chosen))
    conn.execute("UPDATE users SET follower_count = %s WHERE id = ANY(%s)", (followers, chosen))
    conn.commit()
    conn.execute("ANALYZE")
    return chosen


def new_posts(conn: Conn, authors: list[int], n: int) -> list[tuple[int, int]]:
    rows = conn.execute("INSERT INTO posts (author_id, body) SELECT a, 'bench' FROM "
                        "(SELECT (%s::bigint[])[1 + g %% %s] AS a FROM generate_series(1, %s) g) s "
                        "RETURNING id, author_id", (authors, len(authors), n)).fetchall()
    conn.commit()
    return [(r[0], r[1]) for r in rows]


def ceiling_one(url: str, posts: list[tuple[int, int]]) -> None:
    with psycopg.connect(url) as conn:
        for post_id, author in posts:
            with conn.transaction():
                conn.execute(q.LOCK_AUTHOR_SHARED, {"author_id": author})
                conn.execute(q.RECORD_DECISION, {"post_id": post_id, "push": True})
                conn.execute(q.INSERT_OWN, {"post_id": post_id})
            after = 0
            while True:
                with conn.transaction():
                    conn.execute(q.LOCK_AUTHOR_SHARED, {"author_id": author})
                    row = conn.execute(q.FANOUT_CHUNK, {"author_id": author, "post_id": post_id, "after": after,
                                                        "limit": FANOUT_CHUNK_SIZE}).fetchone()
                assert row is not None
                if row[1] < FANOUT_CHUNK_SIZE:
                    break
                after = row[0]


def ceiling(url: str, posts: list[tuple[int, int]], k: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(k) as pool:
        list(pool.map(lambda i: ceiling_one(url, posts[i::k]), range(k)))
    return time.perf_counter() - started


def count(conn: Conn, sql: str) -> int:
    n = conn.execute(sql).fetchone()[0]  # type: ignore[index]
    conn.rollback()
    return int(n)


def through_worker(conn: Conn, channel: Any, topology: Topology, posts: list[tuple[int, int]]) -> float:
    """Seconds from the first publish until every post's fan-out is recorded complete."""
    target = count(conn, "SELECT count(*) FROM processed_events") + len(posts)
    started = time.perf_counter()
    for post_id, author in posts:
        event = ev.Event.new(ev.POST_CREATED, post_id, {"post_id": post_id, "author_id": author})
        channel.basic_publish(topology.events_exchange, event.type, ev.encode(event),
                              pika.BasicProperties(message_id=str(event.id), delivery_mode=2))
    while count(conn, "SELECT count(*) FROM processed_events") < target:
        time.sleep(0.01)  # polling interval of a measurement, not a wait for a fixed time
    return time.perf_counter() - started


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--posts", type=int, default=60, help="posts per run and side (1,000 followers each)")
    parser.add_argument("--processes", type=int, default=2, help="worker processes = ceiling connections")
    parser.add_argument("--small-events", type=int, default=1000, help="events for authors with 10 followers")
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    dbname, prefix = f"walfeed_bench_{tag}", f"wfbench_{tag}"
    url = psycopg.conninfo.make_conninfo(PG, dbname=dbname)
    ensure_database(url)
    apply_schema(url)
    topology = Topology(prefix)
    amqp = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = amqp.channel()
    broker.declare(channel, topology)
    env = {**os.environ, "WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": AMQP, "WALFEED_AMQP_PREFIX": prefix,
           "WALFEED_CELEBRITY_THRESHOLD": "100000", "WALFEED_WORKER_CONCURRENCY": "1",
           "WALFEED_WORKER_METRICS_PORT": "0", "WALFEED_LOG_LEVEL": "WARNING"}
    workers = [subprocess.Popen([sys.executable, "-m", "services.cli", "worker"], env=env,
                                cwd=Path(__file__).resolve().parents[1]) for _ in range(args.processes)]
    try:
        with psycopg.connect(url) as conn:
            big = setup(conn, authors=10, followers=1000)
            small = setup(conn, authors=100, followers=10)
            through_worker(conn, channel, topology, new_posts(conn, big, 4))  # warm-up
            ratios, worker_rates, ceiling_rates = [], [], []
            rows_per_post = 1000 + 1
            for run in range(args.runs):
                a, b = new_posts(conn, big, args.posts), new_posts(conn, big, args.posts)
                if run % 2 == 0:
                    w, c = through_worker(conn, channel, topology, a), ceiling(url, b, args.processes)
                else:
                    c, w = ceiling(url, b, args.processes), through_worker(conn, channel, topology, a)
                wr, cr = args.posts * rows_per_post / w, args.posts * rows_per_post / c
                worker_rates.append(wr)
                ceiling_rates.append(cr)
                ratios.append(wr / cr)
                print(f"run {run + 1}: worker {wr:,.0f} rows/s, ceiling {cr:,.0f} rows/s, ratio {wr / cr:.2f}")
            small_posts = new_posts(conn, small, args.small_events)
            seconds = through_worker(conn, channel, topology, small_posts)
        print(f"median: worker {statistics.median(worker_rates):,.0f} rows/s, ceiling "
              f"{statistics.median(ceiling_rates):,.0f} rows/s, ratio {statistics.median(ratios):.2f} "
              f"({args.processes} processes x 1 thread vs {args.processes} connections, 1,000 followers/author)")
        print(f"10-follower authors: {args.small_events / seconds:,.0f} events/s "
              f"({args.small_events} events, {args.processes} processes)")
        print("peak RSS per worker: " + ", ".join(f"{peak_rss_mb(w.pid):.0f} MB" for w in workers))
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            w.wait(60)
        for queue in topology.queues():
            channel.queue_delete(queue)
        for exchange in topology.exchanges():
            channel.exchange_delete(exchange)
        amqp.close()
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                psycopg.sql.Identifier(dbname)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
