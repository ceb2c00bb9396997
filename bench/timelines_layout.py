"""Fan-out throughput into partitioned vs plain timelines, interleaved in one run (docs/adr/0093).

    .venv/bin/python -m bench.timelines_layout [--runs 5] [--posts 60] [--small-events 1000] [--processes 2]

Two databases cloned from one seeded template: `partitioned` (timelines as the migrations leave it, 012) and
`plain` (converted back to the single table of 001_schema.sql, same columns and indexes), each with its own
`walfeed worker` processes and AMQP prefix. Each run measures, for both layouts in alternating order, what
bench/fanout_throughput.py measures (run_pair: the workers fanning out fresh posts, and the set-based ceiling
writing the rows of other fresh posts, both into timelines) for 10- and 1,000-follower authors. Reported per
layout: median rows/s of the workers and of the ceiling; and partitioned / plain, the median over runs of each
run's ratio. Absolute rows/s depend on what else the machine runs; the ratios are the comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import uuid
from typing import Any

import pika
import psycopg

from bench import fanout_throughput as ft
from bench.lib import entry, infra
from services.core.topology import Topology

LAYOUTS = ("partitioned", "plain")
# The single table of 001_schema.sql, rows kept: the layout before migration 012.
PLAIN = """
CREATE TABLE timelines_plain (user_id bigint NOT NULL, post_id bigint NOT NULL, author_id bigint NOT NULL,
                              PRIMARY KEY (user_id, post_id));
INSERT INTO timelines_plain SELECT user_id, post_id, author_id FROM timelines;
DROP TABLE timelines;
ALTER TABLE timelines_plain RENAME TO timelines;
CREATE INDEX timelines_user_author_idx ON timelines (user_id, author_id);
CREATE INDEX timelines_post_idx ON timelines (post_id);
ANALYZE timelines;
"""
KEYS = ("worker_rows_per_s", "set_based_rows_per_s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--posts", type=int, default=60, help="posts per run, side and layout, 1,000 followers")
    parser.add_argument("--small-events", type=int, default=1000, help="the same, authors with 10 followers")
    parser.add_argument("--processes", type=int, default=2, help="worker processes = ceiling connections")
    args = parser.parse_args()
    k = args.processes
    logs = infra.results_folder(None, "layout") / "logs"
    print(f"worker logs in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res, contextlib.ExitStack() as stack:
        urls = res.seeded_databases(list(LAYOUTS), ft.SEEDED, ft.SMALL)
        with psycopg.connect(urls["plain"], autocommit=True) as conn, conn.transaction():
            conn.execute(PLAIN)
        amqp = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
        stack.callback(amqp.close)
        channel = amqp.channel()
        channel.confirm_delivery()
        benches: dict[str, tuple[ft.Bench, list[int], list[int]]] = {}
        admin = stack.enter_context(infra.admin())
        for layout in LAYOUTS:
            topology = Topology(res.prefix(layout))
            env = infra.passthrough({"WALFEED_DATABASE_URL": urls[layout], "WALFEED_AMQP_URL": infra.AMQP,
                                     "WALFEED_AMQP_PREFIX": topology.prefix, "WALFEED_CELEBRITY_THRESHOLD": "100000",
                                     "WALFEED_WORKER_CONCURRENCY": "1", "WALFEED_WORKER_METRICS_PORT": "0",
                                     "WALFEED_LOG_LEVEL": "WARNING"})
            workers = [res.start(f"{layout}-worker-{i}", ["worker"], env) for i in range(k)]
            conn = stack.enter_context(psycopg.connect(urls[layout], autocommit=True))
            ceiling = [stack.enter_context(psycopg.connect(urls[layout], autocommit=True)) for _ in range(k)]
            bench = ft.Bench(conn, ceiling, channel, topology, workers, admin)
            small = bench.authors(list(range(1, ft.SEEDED + 1)))
            big = bench.authors(ft.setup(conn, authors=10, followers=ft.BIG))
            bench.worker(ft.new_posts(conn, small, 20), ft.SMALL + 1)  # warm-up
            bench.worker(ft.new_posts(conn, big, 4), ft.BIG + 1)
            benches[layout] = (bench, small, big)
        runs: dict[tuple[str, int], list[dict[str, float]]] = {
            (lay, f): [] for lay in LAYOUTS for f in (ft.SMALL, ft.BIG)}
        for r in range(args.runs):
            for followers, n in ((ft.SMALL, args.small_events), (ft.BIG, args.posts)):
                for layout in (LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]):
                    bench, small, big = benches[layout]
                    authors = small if followers == ft.SMALL else big
                    runs[(layout, followers)].append(ft.run_pair(bench, authors, n, followers, r, legacy=False))
                line = ", ".join(f"{lay} worker {runs[(lay, followers)][-1]['worker_rows_per_s']:,.0f} / set-based "
                                 f"{runs[(lay, followers)][-1]['set_based_rows_per_s']:,.0f} rows/s" for lay in LAYOUTS)
                print(f"run {r + 1}, {followers} followers: {line}", flush=True)
        report(runs, args)
    return 0


def report(runs: dict[tuple[str, int], list[dict[str, Any]]], args: argparse.Namespace) -> None:
    for followers in (ft.SMALL, ft.BIG):
        for layout in LAYOUTS:
            got = runs[(layout, followers)]
            print(f"median, {followers}-follower authors, {layout}: worker {ft.median(got, KEYS[0]):,.0f} rows/s, "
                  f"set-based ceiling {ft.median(got, KEYS[1]):,.0f} rows/s, worker / ceiling "
                  f"{statistics.median(g[KEYS[0]] / g[KEYS[1]] for g in got):.3f}")
        for key in KEYS:
            ratio = statistics.median(p[key] / q[key] for p, q in zip(runs[("partitioned", followers)],
                                                                     runs[("plain", followers)], strict=True))
            print(f"median of per-run ratios, {followers}-follower authors, {key}: partitioned / plain {ratio:.3f}")
    print(f"({args.runs} runs, {args.processes} worker processes per layout, layouts alternating A B / B A)")


if __name__ == "__main__":
    entry.run(main)
