"""End-to-end latency: post commit (client side, after COMMIT returns) to its rows in ALL followers' timelines.

Writers insert each post and its `post.created` outbox row in one transaction with the API's own statements
(services/api/sql.py, as services/api/store.py runs them), paced to a steady
rate. A watcher polls for the posts not complete yet that the fan-out has reached (`watcher`) every few ms: a
post is visible once its fan-out decision is recorded, which commits with its `expected` rows (its followers' plus
the author's own; `verify` counts them after the run). The time of
visibility is the start of the watcher's query that first saw them (its snapshot), so a latency is exact to
within one watcher period. The API is not used: its read path merges undecided posts at read time, so a post
is "visible" through the API at once; the rows in `timelines` are what the relay and the worker deliver.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
import psycopg
from psycopg.types.json import Jsonb

from bench.lib.stats import due, send_time
from services.api import sql as api_sql
from services.core import events
from services.core.events import Event

WATCH_BATCH = 2000  # oldest pending posts checked per watcher query


@dataclass
class Book:
    """Commit and visibility times (time.monotonic) per post id, shared by writers and the watcher."""

    committed: dict[int, float] = field(default_factory=dict)
    visible: dict[int, float] = field(default_factory=dict)
    published: dict[int, float] = field(default_factory=dict)  # received from the events exchange
    polls: int = 0
    probes: int = 0  # primary-key probes the watcher made (its cost on Postgres)
    errors: int = 0  # writes that failed
    poll_seconds: float = 0.0
    waiting: dict[int, None] = field(default_factory=dict)  # committed, not visible yet: the backlog
    lock: threading.Lock = field(default_factory=threading.Lock)

    def commit(self, post_id: int, at: float) -> None:
        with self.lock:
            self.committed[post_id] = at
            self.waiting[post_id] = None

    def pending(self, limit: int, upto: int | None = None) -> list[int]:
        """The `limit` smallest ids committed and not visible yet, of those at or below `upto` if given. Costs the
        backlog, not every post of the run: at 4,000 posts/s a run holds 100,000s of posts."""
        with self.lock:
            ids = list(self.waiting) if upto is None else [p for p in self.waiting if p <= upto]
        return heapq.nsmallest(limit, ids)


# The API's own statements: one CREATE_POST (post + outbox row in one statement) where the API has it, else its
# earlier INSERT_POST + INSERT_OUTBOX pair in one pipelined transaction. Looked up at run time: the API evolves.
CREATE_POST: str | None = getattr(api_sql, "CREATE_POST", None)
# The trace context the api stores with each event (docs/adr/0072): the same bytes per row as a traced request's.
TRACE = "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def write_post(conn: psycopg.Connection[Any], author: int, body: str) -> int:
    """One post and its post.created outbox row, committed when this returns (`conn` is in autocommit)."""
    params = {"author": author, "body": body, "key": None, "hash": None, "trace": TRACE}
    if CREATE_POST is not None:
        row = conn.execute(CREATE_POST, params).fetchone()
        assert row is not None
        return int(row[0])
    with conn.pipeline(), conn.transaction():
        row = conn.execute(vars(api_sql)["INSERT_POST"], params).fetchone()
        assert row is not None
        post_id = int(row[0])
        event = Event.new(events.POST_CREATED, post_id, {"post_id": post_id, "author_id": author})
        outbox = {"id": event.id, "aggregatetype": event.aggregate_type, "aggregateid": event.aggregate_id,
                  "type": event.type, "payload": Jsonb(event.payload), "trace": TRACE}
        conn.execute(vars(api_sql)["INSERT_OUTBOX"], outbox)
    return post_id


LATE = 0.5  # seconds after the last post's due time at which writers that fell behind stop


def schedule_end(started: float, total: int, rate: float) -> float:
    return started + send_time(total, rate) + LATE


# One writer: (book, authors, rate, total, index, writers, started, stop, done), as `writer` below without its url.
Write = Callable[[Book, int, float, int, int, int, float, threading.Event, threading.Barrier], None]


def writer(url: str, book: Book, authors: int, rate: float, total: int, index: int, writers: int,
           started: float, stop: threading.Event, done: threading.Barrier) -> None:
    """Posts index, index + writers, ... each at its due time (never early; late ones go at once, until the schedule
    is over: then the rest is not written). A post that fails is counted in `book.errors` and not retried. Then
    waits at `done` for the other writers, connection still open (the barrier's action sees every writer's
    backend)."""
    rng = random.Random(index)
    with psycopg.connect(url, autocommit=True, application_name="walfeed-bench") as conn:
        for n in range(index, total, writers):
            if stop.is_set():
                return
            if time.monotonic() > schedule_end(started, total, rate):
                break  # writers that fell behind stop with the schedule: a run lasts its seconds
            wait = started + send_time(n, rate) - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing of the load generator
            author = rng.randint(1, authors)
            try:
                post_id = write_post(conn, author, f"bench post {n}")
            except psycopg.Error:  # a failed write is a figure of the run (errors), not the end of this writer
                with book.lock:
                    book.errors += 1
                continue
            book.commit(post_id, time.monotonic())
        with contextlib.suppress(threading.BrokenBarrierError):
            done.wait(60)


PROBE = """
SELECT t.post_id FROM unnest(%s::bigint[], %s::bigint[]) AS k(user_id, post_id)
JOIN timelines t ON t.user_id = k.user_id AND t.post_id = k.post_id
"""
COUNT = "SELECT post_id, count(*) FROM timelines WHERE post_id = ANY(%s) GROUP BY post_id"
# A small audience is fanned out in the transaction that records the post's decision (services/worker, ADR 0024),
# so a decided post is visible in all its timelines: one key probe of posts per post, through a LATERAL subquery the
# planner cannot flatten. Probing timelines instead reads every partition (docs/adr/0093): PROBE is planned as a
# scan of all of them, COUNT probes each partition's post index, per poll. `verify` checks, untimed, that it holds.
DECIDED = """
SELECT p.id FROM unnest(%s::bigint[]) AS i(id)
CROSS JOIN LATERAL (SELECT id FROM posts WHERE id = i.id AND fanned_out IS NOT NULL OFFSET 0) p
"""
VERIFIED = 5000  # posts whose rows `verify` counts after a run, at most
FRONTIER = "SELECT max(post_id) FROM timelines"


def watcher(url: str, book: Book, stop: threading.Event, period: float) -> None:
    """Two steps per poll, to keep its own load on Postgres small whatever the backlog:

    1. the fan-out frontier, `max(post_id)` of timelines (one entry of each partition's timelines_post_idx, read
       backwards): a post above it has no row at all yet, so only pending posts at or below it are candidates. With
       a backlog of thousands, the candidates are the posts in flight in the workers, not the whole backlog;
    2. a primary-key probe of each candidate's decision (DECIDED): recorded in the transaction that writes a small
       audience's rows, so a decided post is visible to all its followers.

    Never a prepared statement (prepare_threshold=None): each poll is planned for the table as it is then. A generic
    plan cached while `timelines` was small is a sequential scan, kept however large the table grows (without
    autovacuum nothing invalidates it)."""
    with psycopg.connect(url, autocommit=True, application_name="walfeed-bench-watcher",
                         prepare_threshold=None) as conn:
        while not stop.is_set():
            begun = time.monotonic()
            if book.waiting:
                row = conn.execute(FRONTIER).fetchone()
                candidates = book.pending(WATCH_BATCH, upto=row[0] if row and row[0] is not None else 0)
                found = [r[0] for r in conn.execute(DECIDED, (candidates,)).fetchall()] if candidates else []
                with book.lock:
                    for post_id in found:
                        if post_id not in book.visible:
                            book.visible[post_id] = begun
                            book.waiting.pop(post_id, None)
                    book.polls += 1
                    book.probes += len(candidates)
                    book.poll_seconds += time.monotonic() - begun
            spent = time.monotonic() - begun
            time.sleep(max(period - spent, 2 * spent))  # the watcher's period; at most a third of a backend


def verify(url: str, book: Book, expected: int) -> None:
    """After a run, untimed: the posts the watcher timed as visible (up to VERIFIED of them, the latest) have all
    `expected` rows; else the watcher's premise (a decided small post has its rows) is wrong and so are the figures."""
    with book.lock:
        posts = sorted(book.visible)[-VERIFIED:]
    if not posts:
        return
    with psycopg.connect(url, autocommit=True, application_name="walfeed-bench-watcher") as conn:
        counts: dict[int, int] = dict(conn.execute(COUNT, (posts,)).fetchall())
    short = [(p, counts.get(p, 0)) for p in posts if counts.get(p, 0) < expected]
    if short:
        raise RuntimeError(f"{len(short)} posts timed as visible have fewer than {expected} rows, e.g. {short[:5]}")


def listener(amqp_url: str, prefix: str, book: Book, ready: threading.Event, stop: threading.Event) -> None:
    """The source's own latency, apart from the worker: when each post.created reaches a consumer of
    `{prefix}.events` (an exclusive queue of this thread, gone with its connection)."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = conn.channel()
        queue = channel.queue_declare(f"{prefix}.bench.seen", exclusive=True, auto_delete=True).method.queue
        channel.queue_bind(queue, f"{prefix}.events", routing_key=events.POST_CREATED)

        def seen(_ch: object, _method: object, props: pika.BasicProperties, body: bytes) -> None:
            bodies = events.split_group(body) if props.content_type == events.GROUP_CONTENT_TYPE else [body]
            now = time.monotonic()
            with book.lock:
                for one in bodies:  # each event of a group (WALFEED_RELAY_GROUP_MAX above 1) arrived now
                    book.published.setdefault(int(json.loads(one)["payload"]["post_id"]), now)

        channel.basic_consume(queue, seen, auto_ack=True)
        ready.set()
        while not stop.is_set():
            conn.process_data_events(time_limit=0.05)
    finally:
        ready.set()
        if conn.is_open:  # else the broker closed it: what closed it is the error to report, not this
            conn.close()


@dataclass(frozen=True)
class Run:
    rate: float  # asked, posts/s
    achieved: float  # committed posts / writing seconds
    latencies_ms: list[float]
    to_broker_ms: list[float]  # commit -> received from the events exchange (the source alone)
    unfinished: int  # committed, not visible before the drain deadline
    commit_times: list[float]  # seconds from the start
    visible_times: list[float]
    watcher_period_ms: float  # mean time between the watcher's queries (the resolution of a latency)
    watcher_probes_per_s: float = 0.0  # its primary-key probes of posts (its own load on Postgres)
    pending_at_end: int = 0  # committed and not visible when the last writer finished
    errors: int = 0  # writes that failed
    wrote_seconds: float = 0.0  # from the first due post to the last writer's end


def run(url: str, amqp: tuple[str, str] | None, authors: int, expected: int,
        rate: float, seconds: float, drain: float, writers: int, watch_period: float = 0.005,
        write: Write | None = None, at_end: Callable[[], None] | None = None) -> Run:
    """One paced run; `amqp` is (broker URL, prefix) for the commit -> broker side measurement (None: none, and
    no second queue on the broker nor consumer thread in this process that the run's figures would pay for).
    `writers` threads run `write` (default `writer`: the API's statements over SQL); `at_end` is called once every
    writer is done, before they close their connections and before the drain. However it ends (Ctrl-C too), every
    thread is stopped and joined before this returns: the databases are dropped after it."""
    write = write or functools.partial(writer, url)
    book, stop, ready = Book(), threading.Event(), threading.Event()
    threads: list[threading.Thread] = []
    done: threading.Barrier | None = None

    failed: list[BaseException] = []

    def guarded(target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except BaseException as exc:  # a thread that fails ends the run, which raises it (figures would be wrong)
            failed.append(exc)
            stop.set()
            if done is not None:
                done.abort()

    def start(target: Callable[..., None], *args: object) -> threading.Thread:
        thread = threading.Thread(target=guarded, args=(target, *args), daemon=True)
        threads.append(thread)
        thread.start()
        return thread

    try:
        if amqp is not None:
            start(listener, *amqp, book, ready, stop)
            ready.wait(10)
        total = max(1, due(seconds, rate, 10**9) - 1)
        start(watcher, url, book, stop, watch_period)
        started = time.monotonic() + 0.2
        done = threading.Barrier(writers, action=at_end)
        writing = [start(write, book, authors, rate, total, i, writers, started, stop, done)
                   for i in range(writers)]
        for thread in writing:
            thread.join()
        wrote = time.monotonic() - started
        pending_at_end = len(book.waiting)
        deadline = time.monotonic() + drain
        while book.waiting and time.monotonic() < deadline and not failed:
            time.sleep(0.05)  # waiting for the pipeline to drain, bounded
    finally:
        stop.set()
        if done is not None:
            done.abort()
        for thread in threads:
            thread.join(10)  # a writer or the watcher sees `stop` within a pacing step or a query
    if failed:
        raise RuntimeError(f"a thread of the run failed: {failed[0]!r}") from failed[0]
    verify(url, book, expected)
    with book.lock:
        lat = [(book.visible[p] - t) * 1000 for p, t in book.committed.items() if p in book.visible]
        unfinished = len(book.committed) - len(lat)
        to_broker = [(book.published[p] - t) * 1000 for p, t in book.committed.items() if p in book.published]
        commits = sorted(t - started for t in book.committed.values())
        visibles = sorted(t - started for t in book.visible.values())
        watched = time.monotonic() - started
        period = (watched * 1000 / book.polls) if book.polls else float("nan")
        probes = book.probes / watched
    return Run(rate, len(book.committed) / wrote, lat, to_broker, unfinished, commits, visibles, period, probes,
               pending_at_end, book.errors, wrote)
