"""Mention -> webhook received latency, through the real processes.

    .venv/bin/python -m bench.notify_latency [--rate 100] [--seconds 30] [--drain 60] [--recipients 100] [--out DIR]
                                              [--json FILE]

One database (seeded as bench/lib/infra.py SEED: 100 authors with 10 followers each and a history), AMQP prefix and
slot, with the real processes: `walfeed relay`, 2 `walfeed worker`s (the fan-out, which shares the machine and the
relay with the notifications as in production), `walfeed notifier` and `walfeed deliver --channel webhook`, with
their default settings (the per-webhook rate limit on) except what the bench's environment sets. --recipients
users, none of them an author, each own one webhook subscribed to mentions, pointing at a local receiver: a uvicorn
process of its own (bench/lib/webhook_receiver.py, so that it and the writers never wait for each other's GIL)
that verifies every signature with the Standard Webhooks reference library and records when each request arrived.

Writers: paced threads issuing the API's own statement for a post (bench/lib/e2e.py write_post) at --rate posts/s
for --seconds, each post naming one or two recipients (`@handle`). Not `walfeed api`: the figure starts at the
commit, which a SQL writer sees exactly (the statement returns when it is committed) and an HTTP client only when
the response arrives; the api's cost is measured by bench/api_latency.py and bench/capacity.py. A mention's latency
is from its post's commit to the receiver taking the request (time.monotonic in both processes: one machine clock).
After the writing phase the bench waits up to --drain seconds for the rest; what has not arrived then is
`missing`. CPU per component (cores) is measured over the writing phase.

Writes report.md and report.json to bench/results/<timestamp>-notify/ (or --out), the processes' logs and the
receiver's records in logs/. Everything it creates is removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pika
import psycopg

from bench.capacity import Meter, Pipeline
from bench.lib import e2e, entry, figures, infra, mentions, stats
from bench.lib.report import fmt
from bench.run_all import AUTHORS, PER_AUTHOR, process_env
from services.core import signing
from services.core.topology import Topology
from testkit.processes import Process, free_port
from testkit.waiting import eventually

WORKERS = 2
RECEIVER = "bench.lib.webhook_receiver:create"
# Each recipient: one webhook to the receiver, and a history of delivered mentions (HISTORY posts' worth, as
# infra.SEED gives the other tables one) so that ANALYZE sees tables in use, not empty ones.
WEBHOOKS = """
INSERT INTO webhooks (owner_id, url, events, secret)
SELECT u, %(url)s || u, '{mention}', %(secret)s FROM generate_series(%(first)s, %(first)s + %(count)s - 1) u;
INSERT INTO notifications (recipient_id, kind, actor_id, post_id, event_id)
SELECT w.owner_id, 'mention', p.author_id, p.id, gen_random_uuid()
FROM posts p JOIN webhooks w ON w.owner_id - %(first)s = p.id %% %(count)s;
INSERT INTO deliveries (notification_id, channel, webhook_id, recipient_id, status, attempts, last_status_code)
SELECT n.id, 'webhook', w.id, n.recipient_id, 'DELIVERED', 1, 204 FROM notifications n
JOIN webhooks w ON w.owner_id = n.recipient_id;
INSERT INTO processed_events (consumer, event_id) SELECT 'notifier', id FROM outbox;
ANALYZE;
"""


def handle(user_id: int) -> str:
    """The handle of a seeded user: infra.SEED names the g-th user 'bench' || g."""
    return f"bench{user_id}"


@dataclass
class Book:
    """Post id -> (commit time, recipients it mentions), written by the writer threads."""

    posts: dict[int, tuple[float, tuple[int, ...]]] = field(default_factory=dict)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Load:
    url: str
    rate: float
    total: int
    writers: int
    first: int  # recipients: first .. first + count - 1
    count: int


def writer(load: Load, book: Book, index: int, started: float, stop: threading.Event) -> None:
    """Posts index, index + writers, ... each at its due time (never early; late ones at once, until the schedule is
    over). A failed write is counted, not retried."""
    rng = random.Random(index)
    with psycopg.connect(load.url, autocommit=True, application_name="walfeed-bench") as conn:
        for n in range(index, load.total, load.writers):
            if stop.is_set() or time.monotonic() > e2e.schedule_end(started, load.total, load.rate):
                return
            wait = started + stats.send_time(n, load.rate) - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing of the load generator
            users = mentions.targets(rng, load.first, load.count)
            try:
                post_id = e2e.write_post(conn, rng.randint(1, AUTHORS), mentions.body(n, map(handle, users)))
            except psycopg.Error:
                with book.lock:
                    book.errors += 1
                continue
            committed = time.monotonic()
            with book.lock:
                book.posts[post_id] = (committed, users)


def receipts(path: Path, offset: int = 0) -> tuple[list[mentions.Receipt], int]:
    """The receiver's complete lines from byte `offset` on, and the offset after them."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[:data.rfind(b"\n") + 1]
    return [mentions.Receipt.parse(line) for line in complete.decode().splitlines()], offset + len(complete)


def drain(path: Path, offset: int, book: Book, seconds: float) -> mentions.Match:
    """Until every mention of `book` was received or `seconds` passed; the match of the receipts from `offset`."""
    deadline = time.monotonic() + seconds
    while True:
        found = mentions.match(book.posts, receipts(path, offset)[0])
        if not found.missing or time.monotonic() > deadline:
            return found
        time.sleep(0.05)  # polling the receiver's records, bounded by the deadline


STATUSES = "SELECT status, count(*) FROM deliveries WHERE id > %s GROUP BY status ORDER BY status"
LAST_DELIVERY = "SELECT coalesce(max(id), 0) FROM deliveries"


def dead_letters(prefix: str) -> int:
    """Messages in the webhook channel's dead queue now."""
    conn = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
    try:
        queue = Topology(prefix).delivery_dead_queue("webhook")
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        conn.close()


def run(load: Load, path: Path, meter: Meter, drain_s: float) -> dict[str, Any]:
    """One paced run: its figures, with the run's deliveries by status and the dead queue after the drain (where
    the missing ones are)."""
    book, stop = Book(), threading.Event()
    offset = receipts(path)[1]
    with psycopg.connect(load.url, autocommit=True) as conn:
        before = conn.execute(LAST_DELIVERY).fetchone()
    started = time.monotonic() + 0.2
    threads = [threading.Thread(target=writer, args=(load, book, i, started, stop), daemon=True)
               for i in range(load.writers)]
    meter.start()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = meter.stop()
        wrote = time.monotonic() - started
        found = drain(path, offset, book, drain_s)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    with psycopg.connect(load.url, autocommit=True) as conn:
        statuses = {str(k): int(v) for k, v in conn.execute(STATUSES, (before[0] if before else 0,)).fetchall()}
    in_phase = [r for r in receipts(path, offset)[0] if r.verified and r.at <= started + wrote]
    summary = stats.summary(found.latencies_ms)
    expected = sum(len(users) for _, users in book.posts.values())
    return {"asked_posts_per_s": load.rate, "posts": len(book.posts), "posts_per_s": len(book.posts) / wrote,
            "mentions": expected, "mentions_per_s": expected / wrote, "received_per_s": len(in_phase) / wrote,
            "p50_ms": summary["p50"], "p95_ms": summary["p95"], "p99_ms": summary["p99"], "max_ms": summary["max"],
            "received": len(found.latencies_ms), "missing": found.missing, "repeats": found.repeats,
            "unexpected": found.unexpected, "unverified": found.unverified, "errors": book.errors,
            "wrote_s": wrote, "deliveries": statuses, "dead_letters": dead_letters(meter.pipe.prefix), "cpu": cpu}


def start(res: infra.Resources, url: str, receiver: Process) -> Pipeline:
    pipe = Pipeline("sql", url, res.prefix("notify"))
    env = infra.passthrough({**process_env(url, pipe.prefix, res.slot(url, "notify"), infra.SOURCES[0]),
                             "WALFEED_NOTIFIER_METRICS_PORT": "0", "WALFEED_DELIVERY_METRICS_PORT": "0",
                             "WALFEED_WEBHOOK_ALLOW_HTTP": "true", "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"})
    # The delivery worker first: it declares the delivery queues, without which the relay holds the notifier's
    # delivery events (docs/notifications.md).
    pipe.procs["delivery"] = [res.start("deliver-webhook", ["deliver", "--channel", "webhook"], env)]
    pipe.procs["notifier"] = [res.start("notifier", ["notifier"], env)]
    pipe.procs["workers"] = [res.start(f"worker-{i}", ["worker"], env) for i in range(WORKERS)]
    pipe.procs["relay"] = [res.start("relay", ["relay"], env)]
    pipe.procs["receiver"] = [receiver]
    return pipe


def start_receiver(res: infra.Resources, port: int, secret: str, path: Path) -> Process:
    proc = res.start("receiver", ["--factory", RECEIVER, "--port", str(port), "--log-level", "warning",
                                  "--no-access-log"],
                     {"WALFEED_BENCH_WEBHOOK_SECRET": secret, "WALFEED_BENCH_RECEIPTS": str(path)}, module="uvicorn")
    eventually(lambda: httpx.post(f"http://127.0.0.1:{port}/").status_code == 400, timeout=30,
               what="the webhook receiver to answer")
    return proc


def markdown(result: Mapping[str, Any]) -> str:
    meta, r = result["meta"], result["run"]
    cpu = r["cpu"]
    components = [c for c in cpu if c not in ("machine", "postgres_by_application")]
    return "\n".join([
        "# walfeed: mention -> webhook received", "",
        f"Machine: {meta['nproc']} cores, load average {meta['load_before']} before, {meta['load_after']} after. "
        f"{meta['authors']} authors, {meta['recipients']} recipients with a webhook each; {meta['seconds']:.0f} s "
        f"at {meta['rate']:,.0f} posts/s asked, each naming 1 or 2 recipients; drain up to {meta['drain']:.0f} s. "
        f"Settings from the environment: {meta['settings'] or 'none (defaults)'}.", "",
        "| posts/s asked | posts/s written | mentions/s | webhooks received/s (writing phase) | p50 ms | p95 ms | "
        "p99 ms | max ms | received | missing after the drain | repeats | unexpected | unverified | write errors |",
        "|---" * 14 + "|",
        f"| {fmt(r['asked_posts_per_s'], 0)} | {fmt(r['posts_per_s'])} | {fmt(r['mentions_per_s'])} | "
        f"{fmt(r['received_per_s'])} | {fmt(r['p50_ms'])} | {fmt(r['p95_ms'])} | {fmt(r['p99_ms'])} | "
        f"{fmt(r['max_ms'])} | {r['received']:,} | {r['missing']:,} | {r['repeats']} | {r['unexpected']} | "
        f"{r['unverified']} | {r['errors']} |", "",
        "The run's deliveries by status after the drain: "
        + (", ".join(f"{k} {v:,}" for k, v in r["deliveries"].items()) or "none")
        + f"; the webhook dead queue holds {r['dead_letters']:,} letters (`walfeed dead ls` says why).", "",
        "CPU over the writing phase, in cores:", "",
        "| " + " | ".join(components) + " | machine busy |", "|---" * (len(components) + 1) + "|",
        "| " + " | ".join(fmt(cpu[c], 2) for c in components) + f" | {fmt(cpu.get('machine'), 2)} |", "",
        "Latency: a post's commit (the writer's statement returned) to the receiver taking a verified request for "
        "one of its mentions; missing mentions are left out of the percentiles. postgres: the backends of the "
        "bench database and its walsender; rabbitmq: the whole broker, shared with whatever else runs here; "
        "loadgen: this process (writers, and reading the receiver's records during the drain).", ""])


def settings() -> str:
    names = ("WALFEED_WORKER_", "WALFEED_NOTIFIER_", "WALFEED_DELIVERY_", "WALFEED_WEBHOOK_")
    return ", ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(names))


def figures_of(run: Mapping[str, Any]) -> dict[str, float]:
    """What --json writes (bench/lib/figures.py): posts/s written, mention -> webhook p50/p99, missing after the
    drain."""
    return {"notify_posts_per_s": float(run["posts_per_s"]), "notify_p50_ms": float(run["p50_ms"]),
            "notify_p99_ms": float(run["p99_ms"]), "notify_missing": float(run["missing"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100.0, help="posts/s (default 100)")
    parser.add_argument("--seconds", type=float, default=30.0, help="writing time (default 30)")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds to wait for the last webhooks (60)")
    parser.add_argument("--recipients", type=int, default=100, help="users with a webhook, mentioned (default 100)")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results/<timestamp>-notify)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py)")
    args = parser.parse_args()
    if args.rate <= 0 or args.seconds <= 0 or not 1 <= args.recipients <= AUTHORS * PER_AUTHOR:
        parser.error(f"--rate and --seconds must be positive, --recipients 1..{AUTHORS * PER_AUTHOR}")
    out = infra.results_folder(args.out, "notify")
    path = out / "logs" / "receipts.txt"
    path.touch()
    meta: dict[str, Any] = {"nproc": os.cpu_count(), "load_before": entry.load_avg(), "rate": args.rate,
                            "seconds": args.seconds, "drain": args.drain, "authors": AUTHORS,
                            "recipients": args.recipients, "workers": WORKERS, "settings": settings()}
    secret, port, first = signing.generate_secret(), free_port(), AUTHORS + 1  # the first fan: not an author
    with infra.Resources(uuid.uuid4().hex[:6], out / "logs") as res, infra.admin() as admin:
        url = res.seeded_databases(["notify"], AUTHORS, PER_AUTHOR)["notify"]
        with psycopg.connect(url, autocommit=True) as conn:
            psycopg.ClientCursor(conn).execute(WEBHOOKS, {"url": f"http://127.0.0.1:{port}/hook/", "secret": secret,
                                                          "first": first, "count": args.recipients})
        pipe = start(res, url, start_receiver(res, port, secret, path))
        meter = Meter(pipe, admin)

        def load(rate: float, seconds: float) -> Load:
            total = max(1, stats.due(seconds, rate, 10**9) - 1)
            return Load(url, rate, total, max(2, min(32, math.ceil(rate / 100))), first, args.recipients)

        warm = run(load(10, 2.0), path, meter, drain_s=20.0)  # connections, prepared statements, queues declared
        if not warm["received"]:
            raise RuntimeError(f"warm-up: none of {warm['mentions']} webhooks received in 20 s; see the logs in "
                               f"{out / 'logs'}")
        print(f"{args.seconds:.0f} s at {args.rate:,.0f} posts/s", file=sys.stderr, flush=True)
        result = {"meta": meta, "run": run(load(args.rate, args.seconds), path, meter, args.drain)}
    meta["load_after"] = entry.load_avg()
    (out / "report.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "report.md").write_text(markdown(result))
    print(markdown(result))
    r = result["run"]
    figures.write(args.json, figures_of(r), report=str(out / "report.json"))
    print(f"mention -> webhook received at {r['posts_per_s']:,.1f} posts/s: p50 {r['p50_ms']:.1f} ms, "
          f"p99 {r['p99_ms']:.1f} ms, missing {r['missing']}")
    print(f"results in {out}")
    return 1 if r["missing"] or r["errors"] or r["unverified"] else 0


if __name__ == "__main__":
    entry.run(main)
