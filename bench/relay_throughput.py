"""Relay throughput and lag benchmark (a script, not a test).

1. Throughput: a backlog of N outbox events (default 100,000) relayed to RabbitMQ, events/s from the first
   message reaching the queue to the last, versus the ceiling: a bare pika publisher with asynchronous confirms,
   same window, same body size, same broker, in the same run. The runs are interleaved in --pairs pairs (relay,
   ceiling, relay, ceiling...) so that a change of load on the shared machine hits both alike; the result is the
   median of the per-pair ratios relay / ceiling (and the medians of each side). CPU seconds per event of the
   relay process (one thread, docs/adr/0014; from its first message to its last) and of the ceiling are printed
   too, with the broker's and Postgres' over the same interval: on a 2-core machine shared with the broker they
   decide most of the ratio.
2. Lag: at a steady --rate events/s (default 1,000), commit -> consumer receipt (an upper bound of commit ->
   broker confirm), p50 and p99.

Traces (docs/adr/0072): with --traced every row carries a trace context as the api writes it, which the relay
copies into the `traceparent` header, and the ceiling publishes the same header; with --otlp URL the relay also
exports its send spans there (`--otlp sink`: a local endpoint that accepts and discards them, bench/lib/otlp_sink.py).
Without either, rows have no trace context, as before the column existed. --lag-seconds 0 skips the lag run.

Creates its own database, slot and AMQP names (bench/lib/infra.py, on WALFEED_BENCH_PG_URL and
WALFEED_BENCH_AMQP_URL) and removes them, also on Ctrl-C; the relay's log goes to <--out>/logs. Usage:
    .venv/bin/python -m bench.relay_throughput [--events 100000] [--pairs 5] [--window 1000] [--rate 1000]
                                               [--out DIR] [--lag-seconds 15] [--traced] [--otlp URL|sink]
                                               [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import psycopg

from bench.lib import entry, figures, infra, otlp_sink, proc
from bench.lib.stats import percentile
from services.cdc_relay.confirms import ConfirmBook
from services.cdc_relay.messages import Outgoing, outgoing
from services.core.events import Event
from services.core.topology import Topology
from testkit.resources import event_ids

INSERT = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), 'post', g::text, 'post.created', jsonb_build_object('post_id', g, 'author_id', 1)
FROM generate_series(%s::int, %s::int) AS g
"""
# --traced: each row with a trace context of its own, as the api writes it (services/core/tracecontext.py).
INSERT_TRACED = """
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext)
SELECT gen_random_uuid(), 'post', g::text, 'post.created', jsonb_build_object('post_id', g, 'author_id', 1),
       'traceparent=00-' || md5(g::text) || '-' || left(md5(g::text || 's'), 16) || '-01'
FROM generate_series(%s::int, %s::int) AS g
"""
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"  # the ceiling's header with --traced


class Queue:
    """Counts what arrived in a queue bound to `#` on the events exchange (an observer of infra.Resources, not
    durable: the broker keeps its messages off disk, as before the bench shared the harness's observer). A second
    one takes what the relay publishes to the grouped exchange for walfeed's queues (docs/adr/0115), so that it is
    routed as in production; it is emptied with the first."""

    def __init__(self, res: infra.Resources, prefix: str) -> None:
        self.exchange, self.name = Topology(prefix).events_exchange, res.observer(prefix, durable=False)
        self.grouped = res.observer(prefix, durable=False, grouped=True)
        self.conn = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
        self.ch = self.conn.channel()

    def depth(self) -> int:
        return int(self.ch.queue_declare(self.name, passive=True).method.message_count)

    def purge(self) -> None:
        self.ch.queue_purge(self.name)
        self.ch.queue_purge(self.grouped)

    def close(self) -> None:
        self.conn.close()


def relay_env(url: str, slot: str, prefix: str, window: int) -> dict[str, str]:
    return {"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": infra.AMQP, "WALFEED_AMQP_PREFIX": prefix,
            "WALFEED_SLOT": slot, "WALFEED_RELAY_WINDOW": str(window), "WALFEED_RELAY_METRICS_PORT": "0",
            "WALFEED_LOG_LEVEL": "WARNING"}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a child process (all its threads)."""
    seconds = proc.cpu_seconds(pid)
    if seconds is None:
        raise RuntimeError(f"process {pid} is gone")
    return seconds


def wait_depth(queue: Queue, count: int, timeout: float = 900.0, on_first: Callable[[], None] = lambda: None) -> float:
    """Seconds from the first message in the queue to `count` messages."""
    deadline = time.monotonic() + timeout
    first: float | None = None
    while time.monotonic() < deadline:
        depth = queue.depth()
        now = time.monotonic()
        if depth and first is None:
            first = now
            on_first()
        if depth >= count:
            assert first is not None
            return max(now - first, 1e-6)
        time.sleep(0.02)
    raise TimeoutError(f"{queue.name}: fewer than {count} messages after {timeout}s")


@dataclass(frozen=True)
class Run:
    rate: float  # events/s
    cpu_per_event: float  # CPU seconds of the publishing process per event
    others: dict[str, float]  # CPU seconds per event of the broker and of Postgres over the same interval
    busy: float  # cores busy on the machine over the interval


GROUPS = {"beam.smp": "broker", "postgres": "postgres"}  # process name (/proc/<pid>/comm) -> group


class MachineCpu:
    """Where the CPU of a run went besides the publishing process, between this snapshot and `since()`: the CPU
    of every broker process (the Erlang VM), of every Postgres process on the server, and busy cores of the whole
    machine. "postgres" is every process of the server, not logical decoding alone: the relay's walsender decoding
    the WAL plus the checkpointer, WAL writer, autovacuum workers and any other backend busy on the shared server
    at the time. Counted pid by pid (bench/lib/proc.py `spent`): a process started in between counts from zero,
    one that exited is dropped."""

    def __init__(self) -> None:
        self.processes, self.machine = proc.by_name(GROUPS), proc.machine_ticks()

    def since(self, events: int) -> tuple[dict[str, float], float]:
        """CPU seconds per event of each group since the snapshot, and cores busy on the machine."""
        spent = proc.spent(self.processes, proc.by_name(GROUPS))
        cores = proc.cores_busy(self.machine, proc.machine_ticks())
        return {group: spent.get(name, 0.0) / events for name, group in GROUPS.items()}, cores


def run_timeout(events: int) -> float:
    """Seconds a run of `events` may take, relay or ceiling: then it fails instead of hanging."""
    return max(120.0, events / 200)


def relay_run(res: infra.Resources, url: str, env: dict[str, str], queue: Queue, events: int,
              traced: bool = False) -> Run:
    queue.purge()
    with psycopg.connect(url) as conn:
        conn.execute("TRUNCATE outbox")  # not decoded (actions=insert): keeps the database small across runs
        for start in range(1, events + 1, 1000):
            conn.execute(INSERT_TRACED if traced else INSERT, (start, min(start + 999, events)))
            conn.commit()
    relay = res.start("relay", ["relay"], env)
    try:
        cpu_at_first: list[float] = []
        machine: list[MachineCpu] = []

        def on_first() -> None:
            cpu_at_first.append(cpu_seconds(relay.pid))
            machine.append(MachineCpu())

        seconds = wait_depth(queue, events, timeout=run_timeout(events), on_first=on_first)
        others, busy = machine[0].since(events)
        return Run(events / seconds, (cpu_seconds(relay.pid) - cpu_at_first[0]) / events, others, busy)
    finally:
        res.stop(relay)


def sample_message() -> Outgoing[int]:
    event = Event.new("post.created", 12345, {"post_id": 12345, "author_id": 1})
    return outgoing(event, 0)


def ceiling_run(queue: Queue, events: int, window: int, traced: bool = False) -> Run:
    """A bare pika publisher: persistent, mandatory, async confirms with a window that each ack frame refills at
    once, on pika's SelectConnection and its IOLoop (the relay's adapter), one thread, nothing else. A nack, a closed
    channel or the relay run's time limit ends it with an error instead of a rate."""
    queue.purge()
    message = sample_message()
    book: ConfirmBook[int] = ConfirmBook()
    props = pika.BasicProperties(message_id=message.message_id, type=message.type, content_type="application/json",
                                 timestamp=message.timestamp, delivery_mode=2,
                                 headers={"traceparent": TRACEPARENT} if traced else None)
    sent = 0
    started = cpu0 = 0.0
    channel: Any = None
    conn: pika.SelectConnection  # opened below, before its IOLoop runs any of these callbacks
    machine: MachineCpu | None = None
    result: Run | None = None
    failed: object = None  # why the run ended before every message was confirmed

    def fill() -> None:
        nonlocal sent
        while sent < events and len(book) < window:
            channel.basic_publish(queue.exchange, message.type, message.body, props, mandatory=True)
            book.sent(message.message_id, sent)
            sent += 1

    def end(why: object) -> None:
        nonlocal failed
        if result is None and failed is None:
            failed = why
        if not (conn.is_closing or conn.is_closed):
            conn.close()

    def on_confirm(frame: pika.frame.Method) -> None:
        nonlocal result
        method = frame.method
        if not isinstance(method, pika.spec.Basic.Ack):
            end(f"the broker nacked delivery tag {method.delivery_tag}")
            return
        book.acked(method.delivery_tag, method.multiple)
        if sent - len(book) < events:
            fill()
            return
        elapsed, cpu = time.monotonic() - started, time.process_time() - cpu0
        assert machine is not None
        others, busy = machine.since(events)
        result = Run(events / elapsed, cpu / events, others, busy)
        conn.close()

    def on_selected(_frame: Any) -> None:
        nonlocal machine, started, cpu0
        machine = MachineCpu()
        started, cpu0 = time.monotonic(), time.process_time()
        fill()

    def on_channel(opened: Any) -> None:
        nonlocal channel
        channel = opened
        channel.add_on_close_callback(lambda _channel, reason: end(f"channel closed: {reason!r}"))
        channel.confirm_delivery(ack_nack_callback=on_confirm, callback=on_selected)

    conn = pika.SelectConnection(pika.URLParameters(infra.AMQP),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda _c, _e: conn.ioloop.stop())
    conn.ioloop.call_later(run_timeout(events), lambda: end(f"not done after {run_timeout(events):.0f} s"))
    conn.ioloop.start()
    conn.ioloop.close()
    if result is None:
        raise RuntimeError(f"the ceiling run ended before every message was confirmed ({sent - len(book)} of "
                           f"{events}): {failed}")
    return result


def lag_run(res: infra.Resources, url: str, env: dict[str, str], prefix: str, rate: int,
            seconds: float) -> tuple[float, float, int]:
    """Commit -> consumer receipt at a steady rate, with the relay running. Returns p50, p99 (ms), count."""
    committed: dict[str, float] = {}
    received: dict[str, float] = {}
    conn = pika.BlockingConnection(pika.URLParameters(infra.AMQP))
    ch = conn.channel()
    queue = ch.queue_declare(f"{prefix}.bench.lag", exclusive=True).method.queue
    ch.queue_bind(queue, Topology(prefix).events_exchange, "#")
    # Walfeed's queues' copies (ADR 0115) must be taken too, or the relay holds its position: not timed.
    grouped = ch.queue_declare(f"{prefix}.bench.lag.grouped", exclusive=True).method.queue
    ch.queue_bind(grouped, Topology(prefix).grouped_exchange, "#")

    def seen(_c: object, _m: object, props: pika.BasicProperties, body: bytes) -> None:
        now = time.time()  # each event of a group (WALFEED_RELAY_GROUP_MAX above 1, ADR 0095) arrived now
        received.update((event_id, now) for event_id in event_ids(props, body))

    ch.basic_consume(queue, seen, auto_ack=True)
    ch.basic_consume(grouped, lambda *_: None, auto_ack=True)
    relay = res.start("relay-lag", ["relay"], env)
    stop_flag = threading.Event()

    def consume() -> None:
        while not stop_flag.is_set():
            conn.process_data_events(time_limit=0.05)

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        batch = max(1, rate // 100)  # a commit every 10 ms
        with psycopg.connect(url) as db:
            # The relay is up end to end (slot streamed, broker connected) once a probe event arrives.
            (probe,) = db.execute(INSERT.replace("\n", " ") + " RETURNING id", (0, 0)).fetchall()[0]
            db.commit()
            deadline = time.monotonic() + 60
            while str(probe) not in received:
                if time.monotonic() > deadline:
                    raise TimeoutError("the relay did not publish a probe event within 60 s")
                time.sleep(0.05)
            started = time.monotonic()
            sent = 0
            while time.monotonic() - started < seconds:
                rows = db.execute(INSERT.replace("\n", " ") + " RETURNING id", (1, batch)).fetchall()
                db.commit()
                now = time.time()
                for (event_id,) in rows:
                    committed[str(event_id)] = now
                sent += batch
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        deadline = time.monotonic() + 30
        while len(received) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop_flag.set()
        consumer.join()
        res.stop(relay)
        conn.close()
    lags = [(received[i] - t) * 1000 for i, t in committed.items() if i in received]
    missing = len(committed) - len(lags)
    return percentile(lags, 0.50), percentile(lags, 0.99), missing


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def print_cpu_split(relays: list[Run], ceilings: list[Run]) -> None:
    """Where the CPU of each run went, per event (medians over the runs): on a machine whose cores the broker and
    Postgres share, the ratio of the rates follows the ratio of these totals."""
    def split(runs: list[Run], own: str) -> tuple[float, str]:
        parts = {own: statistics.median(r.cpu_per_event for r in runs) * 1e6}
        for group in GROUPS.values():
            parts[group] = statistics.median(r.others[group] for r in runs) * 1e6
        total = sum(parts.values())
        return total, " + ".join(f"{name} {us:.1f}" for name, us in parts.items()) + f" = {total:.1f}"

    relay_total, relay_text = split(relays, "relay")
    ceiling_total, ceiling_text = split(ceilings, "publisher")
    print(f"CPU us per event, medians: relay run: {relay_text}; ceiling run: {ceiling_text}; "
          f"ceiling/relay totals {ceiling_total / relay_total:.2f}; machine busy "
          f"{statistics.median(r.busy for r in relays):.2f} / {statistics.median(c.busy for c in ceilings):.2f} "
          f"of {os.cpu_count()} cores")


def figures_of(relays: list[Run], ceilings: list[Run], lag: tuple[float, float, int] | None) -> dict[str, float]:
    """What --json writes (bench/lib/figures.py): the medians of the pairs, and the lag run's percentiles."""
    ratios = [r.rate / c.rate for r, c in zip(relays, ceilings, strict=True)]
    out = {"ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
           "relay_events_per_s": statistics.median(r.rate for r in relays),
           "ceiling_events_per_s": statistics.median(c.rate for c in ceilings),
           "relay_cpu_us_per_event": statistics.median(r.cpu_per_event for r in relays) * 1e6,
           "ceiling_cpu_us_per_event": statistics.median(c.cpu_per_event for c in ceilings) * 1e6}
    if lag is not None:
        out.update(lag_p50_ms=lag[0], lag_p99_ms=lag[1], lag_missing=float(lag[2]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=5, help="interleaved (relay, ceiling) pairs")
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--lag-seconds", type=float, default=15.0, help="0: no lag run")
    parser.add_argument("--traced", action="store_true", help="rows carry a trace context; the ceiling the header")
    parser.add_argument("--otlp", help="the relay exports its spans to this OTLP/HTTP endpoint ('sink': a local "
                        "one that discards them)")
    parser.add_argument("--out", type=Path, help="folder for the relay's log (default bench/results/<ts>-relay)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py)")
    args = parser.parse_args()
    logs = infra.results_folder(args.out, "relay") / "logs"
    print(f"machine: nproc={os.cpu_count()} (shared with other work), {load()} before; events={args.events} "
          f"window={args.window} body={len(sample_message().body)} bytes pairs={args.pairs}; relay log in {logs}")
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.database("relay")
        prefix = res.prefix("relay", declare=False)
        env = {**relay_env(url, res.slot(url, "relay"), prefix, args.window), **otlp_sink.endpoint(args.otlp)}
        queue = Queue(res, prefix)
        try:
            relays, ceilings = [], []
            print("| pair | relay ev/s | ceiling ev/s | ratio | relay CPU us/ev | ceiling CPU us/ev |")
            print("|---|---|---|---|---|---|")
            for pair in range(args.pairs):
                relays.append(relay_run(res, url, env, queue, args.events, args.traced))
                ceilings.append(ceiling_run(queue, args.events, args.window, args.traced))
                r, c = relays[-1], ceilings[-1]
                print(f"| {pair + 1} | {r.rate:,.0f} | {c.rate:,.0f} | {r.rate / c.rate:.2f} | "
                      f"{r.cpu_per_event * 1e6:.1f} | {c.cpu_per_event * 1e6:.1f} |", flush=True)
            ratios = [r.rate / c.rate for r, c in zip(relays, ceilings, strict=True)]
            print(f"| median | {statistics.median(r.rate for r in relays):,.0f} | "
                  f"{statistics.median(c.rate for c in ceilings):,.0f} | {statistics.median(ratios):.2f} | "
                  f"{statistics.median(r.cpu_per_event for r in relays) * 1e6:.1f} | "
                  f"{statistics.median(c.cpu_per_event for c in ceilings) * 1e6:.1f} |")
            print(f"ratio relay/ceiling: median of per-pair ratios {statistics.median(ratios):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target >= 0.8)")
            print_cpu_split(relays, ceilings)
            queue.purge()
            lag: tuple[float, float, int] | None = None
            if args.lag_seconds > 0:
                lag = p50, p99, missing = lag_run(res, url, env, prefix, args.rate, args.lag_seconds)
                print(f"lag commit -> consumer at {args.rate} ev/s for {args.lag_seconds:.0f}s: p50 {p50:.1f} ms, "
                      f"p99 {p99:.1f} ms, missing {missing}")
            figures.write(args.json, figures_of(relays, ceilings, lag),
                           meta={k: v for k, v in vars(args).items() if k != "json"})
        finally:
            queue.close()
    print(f"machine: nproc={os.cpu_count()}, {load()} after")
    return 0


if __name__ == "__main__":
    entry.run(main)
