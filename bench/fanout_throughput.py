"""Fan-out throughput: `walfeed worker` processes vs the design-independent ceiling, side by side in one run.

    .venv/bin/python -m bench.fanout_throughput [--runs 3] [--posts 60] [--small-events 1000] [--processes 2]
                                                [--group-max N] [--out DIR] [--json FILE]
                                                [--embedder none|running|broken]

The ceiling (STYLE.md "Ceilings in benchmarks") is the bare set-based statement writing the same rows:
SET_BASED below (posts JOIN follows, plus the authors' own rows, ON CONFLICT DO NOTHING), 100 posts per statement
(fewer if needed to keep all K busy), on K connections, K = --processes = the worker processes
(WALFEED_WORKER_CONCURRENCY 1 each unless set).

Each run measures, for authors with 10 followers (--small-events posts) and with 1,000 followers (--posts posts),
the workers fanning out N fresh posts and the ceiling writing the rows of N other fresh posts, interleaved (the
order alternates from run to run). Reported per audience: worker rows/s ÷ ceiling rows/s, median over runs; for
10-follower authors also events/s. For 1,000-follower authors also, labelled apart, the old ceiling: the worker's
per-post statements of before the batch worker (ADR 0024; LEGACY, frozen here: the baseline of "no worse than
today").

For 10-follower authors each side's CPU per post is reported by part (the worker processes, this database's
backends by application, RabbitMQ, this process) and its WAL per post (records touching this database's
relations, bytes without full-page images, pg_walinspect): on a machine busy with other work the wall-clock ratio
is noise, these are not (docs/adr/0026).

Posts are written as the api writes them (services/api/sql.py CREATE_POST: the post and its post.created outbox
row in one statement); their events are read back from the outbox and published to `{prefix}.events` as the
relay publishes them (services/cdc_relay/publisher.py EventProperties, routes.py: each alone to the events exchange
and for the workers to the grouped exchange, docs/adr/0115; with --group-max above 1, default
WALFEED_RELAY_GROUP_MAX, grouped as the relay groups a read of READ_BATCH events: docs/adr/0095), on a confirming
channel. The workers are paused (SIGSTOP) while a batch is published and resumed (SIGCONT) when the clock starts,
so the publisher's speed is not measured. A post is done when all its timeline rows exist: a primary-key probe of
its last follower's row, then a full count, polled with a deadline (wait_done: its polls take at most WATCH_DUTY of
the time). Worker and api settings in this process's environment (e.g. WALFEED_WORKER_BATCH_SIZE) reach the
workers unchanged. Uses its own database and
AMQP prefix and removes both at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import resource
import signal
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pika
import psycopg

from bench.lib import dbload, e2e, entry, figures, infra, proc
from services.cdc_relay import routes
from services.cdc_relay.config import RelaySettings
from services.cdc_relay.messages import EVENTS, GROUPED, SINGLE, EventProperties, group_properties, outgoing
from services.cdc_relay.relay import READ_BATCH
from services.core import events as ev
from services.core.topology import Topology
from testkit.processes import Process

Conn = psycopg.Connection[Any]
Post = tuple[int, int]  # (post id, author id)

SMALL, BIG = 10, 1000  # followers per author: the seeded authors (infra.SEED), and setup()'s
SEEDED = 100  # authors with SMALL followers each
PER_STATEMENT = 100  # posts per set-based statement
SET_BASED = """
INSERT INTO timelines (user_id, post_id, author_id)
SELECT r.user_id, r.post_id, r.author_id FROM (
    SELECT f.follower_id AS user_id, p.id AS post_id, p.author_id FROM posts p
    JOIN follows f ON f.followee_id = p.author_id WHERE p.id = ANY(%(post_ids)s)
    UNION ALL
    SELECT p.author_id, p.id, p.author_id FROM posts p WHERE p.id = ANY(%(post_ids)s)
) r
ORDER BY r.user_id, r.post_id
ON CONFLICT DO NOTHING
"""

# The worker's per-post statements before the batch worker (ADR 0024; services/worker/sql.py at 9950d22), frozen:
# the old ceiling, kept so that a rewritten worker is still compared with what it replaced ("no worse than today's
# ratio").
LEGACY_LOCK = "SELECT pg_advisory_xact_lock_shared(%(author_id)s)"
LEGACY_DECIDE = "UPDATE posts SET fanned_out = true WHERE id = %(post_id)s AND fanned_out IS NULL RETURNING fanned_out"
LEGACY_OWN = """
INSERT INTO timelines (user_id, post_id, author_id)
SELECT p.author_id, p.id, p.author_id FROM posts p WHERE p.id = %(post_id)s AND p.deleted_at IS NULL
ON CONFLICT DO NOTHING
"""
LEGACY_CHUNK = """
WITH chunk AS (
    SELECT f.follower_id FROM follows f WHERE f.followee_id = %(author_id)s AND f.follower_id > %(after)s
    ORDER BY f.follower_id LIMIT %(limit)s
), alive AS (
    SELECT EXISTS (SELECT 1 FROM posts WHERE id = %(post_id)s AND deleted_at IS NULL) AS alive
), ins AS (
    INSERT INTO timelines (user_id, post_id, author_id)
    SELECT c.follower_id, %(post_id)s, %(author_id)s FROM chunk c, alive a WHERE a.alive
    ON CONFLICT DO NOTHING
)
SELECT (SELECT max(follower_id) FROM chunk), (SELECT count(*) FROM chunk)
"""
LEGACY_CHUNK_SIZE = 1000

# pg_walinspect (bench.main creates it in the bench database): WAL records touching one database's relations, in
# bytes without their full-page images (how many there are depends on when the last checkpoint was, not on the
# design), and the records' count.
WAL_OF_DATABASE = """
SELECT coalesce(sum(record_length - fpi_length), 0), count(*)
FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
WHERE block_ref LIKE %(rel)s
"""


def setup(conn: Conn, authors: int, followers: int) -> list[int]:
    """`authors` new users each followed by the same `followers` new users. Returns the author ids."""
    base = conn.execute("SELECT coalesce(max(id), 0) FROM users").fetchone()[0]  # type: ignore[index]
    ids = [r[0] for r in conn.execute(
        "INSERT INTO users (handle, token_hash) SELECT 'b' || g, sha256(('b' || g)::bytea) "
        "FROM generate_series(%s::bigint, %s::bigint) g RETURNING id", (base + 1, base + authors + followers))]
    chosen, fans = ids[:authors], ids[authors:]
    conn.execute("INSERT INTO follows (follower_id, followee_id) SELECT f, a FROM unnest(%s::bigint[]) f, "
                 "unnest(%s::bigint[]) a", (fans, chosen))
    conn.execute("UPDATE users SET follower_count = %s WHERE id = ANY(%s)", (followers, chosen))
    conn.execute("ANALYZE")
    return chosen


def new_posts(conn: Conn, authors: list[int], n: int) -> list[Post]:
    """n posts, round robin over `authors`, each with its outbox row: the api's own statement (e2e.write_post)."""
    return [(e2e.write_post(conn, authors[i % len(authors)], f"fan-out bench {i}"), authors[i % len(authors)])
            for i in range(n)]


def outbox_events(conn: Conn, posts: list[Post]) -> list[ev.Event]:
    """The post.created events of `posts`, as their outbox rows hold them (what the relay would publish)."""
    rows = conn.execute("SELECT id, type, aggregatetype, aggregateid, created_at, payload FROM outbox "
                        "WHERE type = 'post.created' AND aggregateid = ANY(%s)", ([str(p) for p, _ in posts],))
    return [ev.Event(r[0], r[1], r[2], r[3], r[4], ev.validate_payload(r[1], r[5])) for r in rows]


def publish(channel: Any, topology: Topology, events: list[ev.Event], group_max: int) -> None:
    """As the relay does (services/cdc_relay/routes.py): routing key = type, persistent, JSON, message id; each event
    alone to the events exchange (not mandatory: no queue of this bench is bound there) and to the grouped exchange,
    where the workers' queue is bound, with `group_max` above 1 what one read of the relay holds (READ_BATCH events)
    grouped as it groups them (grouping.py); each message confirmed by the broker."""
    exchanges = {EVENTS: topology.events_exchange, SINGLE: topology.events_exchange,
                 GROUPED: topology.grouped_exchange}
    for start in range(0, len(events), READ_BATCH):
        read = [outgoing(e, 2 * (start + i)) for i, e in enumerate(events[start:start + READ_BATCH])]
        for m in routes.relay(read, group_max):
            props = EventProperties(m.message_id, m.type, m.timestamp) if m.traceparents is None else \
                group_properties(m)
            channel.basic_publish(exchanges[m.route], m.type, m.body, props, mandatory=m.route != SINGLE)


POLL = 0.005  # seconds: the shortest interval between two polls of wait_done
# The share of the measured time wait_done's own queries may take (one backend's, plus this process's): a poll of
# 10,000 pending posts takes several ms, and polled back to back every 5 ms the watcher took about as much CPU as
# the workers' own backends on this 2-core machine (0.3 core against 0.4), CPU the ceiling's side never shares.
WATCH_DUTY = 0.2
WAIT_MAX = 0.02  # seconds: the longest wait between two polls, which bounds how late the last row can be seen
WATCH_CHUNK = 250  # posts a watcher query probes (e2e.DECIDED: why a post's decision says its rows are there)


def wait_done(conn: Conn, posts: list[Post], last: dict[int, int], rows_per_post: int, timeout: float) -> float:
    """Polls until every post looks done; returns the time (monotonic) of the poll that saw the last one (the caller
    then checks that every post has all its rows: `verify_rows`). Looks done: a small audience's post is decided
    (e2e.DECIDED); a large audience's, written in chunks in follower order, has its last follower's row (e2e.PROBE). A
    poll probes the pending posts oldest first, WATCH_CHUNK at a time, and stops at the first chunk that still has
    pending ones: the workers take posts in about the order they were published, so the newer ones are pending too,
    and a poll costs a chunk or two instead of the whole backlog (the watcher's CPU is the workers' side's). After a
    poll that took t seconds the next one waits max(POLL, t * (1 - WATCH_DUTY) / WATCH_DUTY), at most WAIT_MAX: the
    poll that sees the last one comes a few ms after it, WAIT_MAX at most: late, against the workers, never early."""
    pending, deadline = dict(posts), time.monotonic() + timeout
    while True:
        begun = time.monotonic()
        ids = sorted(pending)
        for at in range(0, len(ids), WATCH_CHUNK):
            chunk = ids[at:at + WATCH_CHUNK]
            done = (conn.execute(e2e.DECIDED, (chunk,)) if rows_per_post <= SMALL + 1 else
                    conn.execute(e2e.PROBE, ([last[pending[p]] for p in chunk], chunk)))
            found = [post_id for (post_id,) in done.fetchall()]
            for post_id in found:
                del pending[post_id]
            if len(found) < len(chunk):
                break
        if not pending:
            return begun
        if begun > deadline:
            raise TimeoutError(f"{len(pending)} of {len(posts)} posts not fanned out after {timeout:.0f} s")
        took = time.monotonic() - begun
        time.sleep(min(WAIT_MAX, max(POLL, took * (1 - WATCH_DUTY) / WATCH_DUTY)))  # a measurement's polling


def verify_rows(conn: Conn, posts: list[Post], rows_per_post: int) -> None:
    """Untimed, after `wait_done`: every post has all its timeline rows (e2e.COUNT), else it looked done too early
    and the run fails instead of reporting a time."""
    counts = dict(conn.execute(e2e.COUNT, ([p for p, _ in posts],)).fetchall())
    short = [(p, counts.get(p, 0)) for p, _ in posts if counts.get(p, 0) < rows_per_post]
    assert not short, f"posts that looked done before all their rows were there: {short[:5]}"


def set_based(conns: list[Conn], posts: list[Post]) -> float:
    """Seconds for SET_BASED over `posts`, spread over the (open) connections: PER_STATEMENT posts a statement, or
    fewer when there are too few posts to give every connection one (60 posts on 2 connections: 2 x 30)."""
    size = min(PER_STATEMENT, -(-len(posts) // len(conns)))
    chunks = [[p for p, _ in posts[i:i + size]] for i in range(0, len(posts), size)]

    def one(conn: Conn, mine: list[list[int]]) -> None:
        for ids in mine:
            conn.execute(SET_BASED, {"post_ids": ids})

    return _timed(conns, lambda i: one(conns[i], chunks[i::len(conns)]))


def per_post(conns: list[Conn], posts: list[Post]) -> float:
    """Seconds for the LEGACY per-post statements over `posts` on the (open) connections: the old ceiling."""
    def one(conn: Conn, mine: list[Post]) -> None:
        for post_id, author in mine:
            with conn.transaction():
                conn.execute(LEGACY_LOCK, {"author_id": author})
                conn.execute(LEGACY_DECIDE, {"post_id": post_id})
                conn.execute(LEGACY_OWN, {"post_id": post_id})
            after = 0
            while True:
                with conn.transaction():
                    conn.execute(LEGACY_LOCK, {"author_id": author})
                    row = conn.execute(LEGACY_CHUNK, {"author_id": author, "post_id": post_id, "after": after,
                                                      "limit": LEGACY_CHUNK_SIZE}).fetchone()
                assert row is not None
                if row[1] < LEGACY_CHUNK_SIZE:
                    break
                after = row[0]

    return _timed(conns, lambda i: one(conns[i], posts[i::len(conns)]))


def _timed(conns: list[Conn], work: Callable[[int], None]) -> float:
    """Seconds for work(0) .. work(k - 1) on k threads, one per connection (opened before the clock starts)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(conns)) as pool:
        list(pool.map(work, range(len(conns))))
    return time.perf_counter() - started


class Bench:
    def __init__(self, conn: Conn, ceiling: list[Conn], channel: Any, topology: Topology,
                 workers: list[Process], admin: Conn) -> None:
        self.conn, self.ceiling, self.channel, self.topology, self.workers = conn, ceiling, channel, topology, workers
        self.admin = admin
        self.dbname = str(conn.info.dbname)
        self.last: dict[int, int] = {}
        self.cpu: dict[str, float] = {}  # CPU seconds per part of the last side measured (`_cpu`)
        # WAL bytes (without full-page images) and records of this database's relations written by the last side
        self.wal: tuple[float, float] = (math.nan, math.nan)
        self.dboid = int(conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
                         .fetchone()[0])  # type: ignore[index]

    def _cpu(self) -> proc.Processes:
        """CPU seconds now of the parts a side may use: the worker processes, this database's backends by
        application (the workers', and the bench's: the watcher, or the ceiling), RabbitMQ (shared with whatever
        else uses it on this machine) and this process (the watcher's polling, on the workers' side)."""
        seen: proc.Processes = {}
        for w in self.workers:
            seen.update(proc.tree(w.pid, "worker"))
        backends = dbload.take(self.admin, self.dbname).cpu
        seen.update({pid: (f"postgres:{app}", cpu) for pid, (app, cpu) in backends.items()})
        seen.update({pid: ("rabbitmq", cpu) for pid, (_name, cpu) in proc.by_name({"beam.smp"}).items()})
        own = resource.getrusage(resource.RUSAGE_SELF)
        seen[os.getpid()] = ("bench", own.ru_utime + own.ru_stime)
        return seen

    def _lsn(self) -> str:
        return str(self.admin.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0])  # type: ignore[index]

    def _wal(self, start: str, end: str) -> tuple[float, float]:
        """WAL bytes (without full-page images) and records between two flushed positions that touch this
        database's relations: the server's WAL holds every database's (other benches', other helpers'), these are
        this side's. Commit records name no relation and are left out (a few dozen bytes per transaction). NaN
        without pg_walinspect (PostgreSQL 15+, contrib)."""
        try:
            row = self.conn.execute(WAL_OF_DATABASE, {"start": start, "end": end, "rel": f"%/{self.dboid}/%"})
            size, records = row.fetchone()  # type: ignore[misc]
            return float(size), float(records)
        except psycopg.Error:
            return math.nan, math.nan

    def ceiling_side(self, posts: list[Post]) -> float:
        """Seconds for SET_BASED over `posts` (made beforehand); the CPU and WAL it took in self.cpu, self.wal."""
        before, start = self._cpu(), self._lsn()
        seconds = set_based(self.ceiling, posts)
        self.cpu = proc.spent(before, self._cpu())
        self.wal = self._wal(start, self._lsn())
        return seconds

    def authors(self, ids: list[int]) -> list[int]:
        rows = self.conn.execute("SELECT followee_id, max(follower_id) FROM follows WHERE followee_id = ANY(%s) "
                                 "GROUP BY followee_id", (ids,)).fetchall()
        self.last.update({int(a): int(f) for a, f in rows})
        return ids

    def worker(self, posts: list[Post], rows_per_post: int, group_max: int = 1) -> float:
        """Seconds the workers take from a queue holding every event of `posts`, grouped as the relay groups them
        with WALFEED_RELAY_GROUP_MAX = `group_max`, to the last row."""
        events = outbox_events(self.conn, posts)
        assert len(events) == len(posts), "every post has its outbox row"
        self._signal(signal.SIGSTOP)
        try:
            publish(self.channel, self.topology, events, group_max)
            before, start = self._cpu(), self._lsn()
        finally:
            self._signal(signal.SIGCONT)
        started = time.monotonic()
        seconds = wait_done(self.conn, posts, self.last, rows_per_post, timeout=300.0) - started
        self.cpu = proc.spent(before, self._cpu())
        self.wal = self._wal(start, self._lsn())
        verify_rows(self.conn, posts, rows_per_post)  # after the meters: it reads every partition's post index
        return seconds

    def _signal(self, sig: int) -> None:
        for w in self.workers:
            w.send(sig)


def run_pair(bench: Bench, authors: list[int], n: int, followers: int, order: int, legacy: bool,
             groups: tuple[int, ...] | list[int] = (1,)) -> dict[str, float]:
    """One interleaved measurement for one audience: the workers (one side per value of `groups`, the first named
    "worker", the others "worker_g<N>"), the set-based ceiling (and the old one), order rotated."""
    rows = followers + 1
    sides: dict[str, Callable[[], float]] = {
        side(g, i): functools.partial(lambda g: bench.worker(new_posts(bench.conn, authors, n), rows, g), g)
        for i, g in enumerate(groups)}  # bound per side: a lambda alone would see the loop's last g
    sides["set_based"] = lambda: bench.ceiling_side(new_posts(bench.conn, authors, n))
    if legacy:
        sides["per_post"] = lambda: per_post(bench.ceiling, new_posts(bench.conn, authors, n))
    names = list(sides)
    names = names[order % len(names):] + names[:order % len(names)]
    seconds: dict[str, float] = {}
    out: dict[str, float] = {}
    for name in names:
        seconds[name] = sides[name]()
        if name != "per_post":  # CPU microseconds per post, by part
            out.update({f"{name}_cpu_us:{part}": cpu * 1e6 / n for part, cpu in bench.cpu.items()})
            out[f"{name}_wal_per_post"], out[f"{name}_wal_records_per_post"] = (v / n for v in bench.wal)
    out.update({f"{name}_rows_per_s": n * rows / s for name, s in seconds.items()})
    out.update({f"{name}_events_per_s": n / s for name, s in seconds.items() if name.startswith("worker")})
    return out


def side(group_max: int, index: int) -> str:
    """The name of a worker side: the first (`--group-max`'s first value) is "worker"."""
    return "worker" if index == 0 else f"worker_g{group_max}"


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def figures_of(runs: dict[int, list[dict[str, float]]], group_max: list[int]) -> dict[str, float]:
    """What --json writes (bench/lib/figures.py): the first --group-max value's worker against both ceilings, medians
    of the runs (ratios: medians of the per-run ratios); for each further value its ratios to the set-based ceiling
    and to the first worker in the same runs (`groups_<g>_...`)."""
    def ratio(followers: int, worker: str, ceiling: str) -> float:
        return statistics.median(r[f"{worker}_rows_per_s"] / r[ceiling] for r in runs[followers])

    first = side(group_max[0], 0)
    out = {"ratio_small": ratio(SMALL, first, "set_based_rows_per_s"),
           "worker_small_rows_per_s": median(runs[SMALL], f"{first}_rows_per_s"),
           "ceiling_small_rows_per_s": median(runs[SMALL], "set_based_rows_per_s"),
           "ratio_big": ratio(BIG, first, "set_based_rows_per_s"),
           "worker_big_rows_per_s": median(runs[BIG], f"{first}_rows_per_s"),
           "ceiling_big_rows_per_s": median(runs[BIG], "set_based_rows_per_s"),
           "ratio_big_per_post": ratio(BIG, first, "per_post_rows_per_s"),
           "per_post_rows_per_s": median(runs[BIG], "per_post_rows_per_s"),
           "small_events_per_s": median(runs[SMALL], f"{first}_events_per_s")}
    for i, g in enumerate(group_max[1:], 1):
        other = side(g, i)
        out[f"groups_{g}_ratio_small"] = ratio(SMALL, other, "set_based_rows_per_s")
        out[f"groups_{g}_ratio_big"] = ratio(BIG, other, "set_based_rows_per_s")
        out[f"groups_{g}_over_first_small"] = ratio(SMALL, other, f"{first}_rows_per_s")
        out[f"groups_{g}_over_first_big"] = ratio(BIG, other, f"{first}_rows_per_s")
    return out


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--posts", type=int, default=60, help="posts per run and side, authors with 1,000 followers")
    parser.add_argument("--small-events", type=int, default=1000,
                        help="posts per run and side, authors with 10 followers")
    parser.add_argument("--processes", type=int, default=2, help="worker processes = ceiling connections")
    parser.add_argument("--group-max", type=lambda v: [int(g) for g in v.split(",")],
                        default=[RelaySettings.from_env().group_max],
                        help="events per message as the relay groups them (WALFEED_RELAY_GROUP_MAX; ADR 0095); "
                             "several, comma-separated (1,20): one worker side each, in the same runs")
    parser.add_argument("--out", type=Path, help="folder for the workers' logs (default bench/results/<ts>-fanout)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file (bench/lib/figures.py)")
    parser.add_argument("--embedder", choices=["none", "running", "broken"], default="none",
                        help="also run `walfeed embedder` on the same events: with the local model, or "
                             "broken (an Ollama URL nobody listens on: every batch fails, is counted and acked)")
    args = parser.parse_args()
    k = args.processes
    logs = infra.results_folder(args.out, "fanout") / "logs"
    print(f"worker logs in {logs}", flush=True)
    with infra.Resources(uuid.uuid4().hex[:6], logs) as res:
        url = res.seeded_databases(["fanout"], SEEDED, SMALL)["fanout"]
        topology = Topology(res.prefix("fanout"))
        env = infra.passthrough({"WALFEED_DATABASE_URL": url, "WALFEED_AMQP_URL": infra.AMQP,
                                 "WALFEED_AMQP_PREFIX": topology.prefix, "WALFEED_CELEBRITY_THRESHOLD": "100000",
                                 "WALFEED_WORKER_CONCURRENCY": "1", "WALFEED_WORKER_METRICS_PORT": "0",
                                 "WALFEED_LOG_LEVEL": "WARNING"})
        workers = [res.start(f"fanout-worker-{i}", ["worker"], env) for i in range(k)]
        if args.embedder != "none":  # its backfill left out (settle of an hour): it embeds the events' posts only
            broken = {"WALFEED_EMBEDDER": "ollama", "WALFEED_EMBEDDER_URL": "http://127.0.0.1:9",
                      "WALFEED_EMBEDDER_MODEL": "broken"} if args.embedder == "broken" else {}
            res.start("fanout-embedder", ["embedder"], {**env, "WALFEED_EMBEDDER_METRICS_PORT": "0",
                                                         "WALFEED_EMBED_SETTLE_SECONDS": "3600", **broken})
            print(f"embedder {args.embedder}", flush=True)
        params = pika.URLParameters(infra.AMQP)
        # No heartbeats: the connection sits idle while a side's posts are written, which on a loaded machine took
        # longer than two heartbeat intervals, and the broker closed it.
        params.heartbeat = 0
        amqp = pika.BlockingConnection(params)
        try:
            channel = amqp.channel()
            channel.confirm_delivery()
            with contextlib.ExitStack() as stack:
                conn = stack.enter_context(psycopg.connect(url, autocommit=True))
                ceiling = [stack.enter_context(psycopg.connect(url, autocommit=True)) for _ in range(k)]
                admin = stack.enter_context(infra.admin())
                with contextlib.suppress(psycopg.Error):  # superuser and contrib; else WAL is reported as nan
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                bench = Bench(conn, ceiling, channel, topology, workers, admin)
                small = bench.authors(list(range(1, SEEDED + 1)))
                big = bench.authors(setup(conn, authors=10, followers=BIG))
                bench.worker(new_posts(conn, small, 20), SMALL + 1)  # warm-up: connections, prepared statements
                bench.worker(new_posts(conn, big, 4), BIG + 1)
                runs: dict[int, list[dict[str, float]]] = {SMALL: [], BIG: []}
                for r in range(args.runs):
                    for followers, authors, n in ((SMALL, small, args.small_events), (BIG, big, args.posts)):
                        runs[followers].append(run_pair(bench, authors, n, followers, r, legacy=followers == BIG,
                                                        groups=args.group_max))
                    s, b = runs[SMALL][-1], runs[BIG][-1]
                    print(f"run {r + 1}: 10 followers: worker {s['worker_rows_per_s']:,.0f} rows/s "
                          f"({s['worker_events_per_s']:,.0f} events/s), set-based "
                          f"{s['set_based_rows_per_s']:,.0f} rows/s, "
                          f"ratio {s['worker_rows_per_s'] / s['set_based_rows_per_s']:.3f} | 1,000 followers: worker "
                          f"{b['worker_rows_per_s']:,.0f} rows/s, set-based {b['set_based_rows_per_s']:,.0f} rows/s, "
                          f"ratio {b['worker_rows_per_s'] / b['set_based_rows_per_s']:.3f}; per-post statements "
                          f"{b['per_post_rows_per_s']:,.0f} rows/s, ratio "
                          f"{b['worker_rows_per_s'] / b['per_post_rows_per_s']:.2f}" + "".join(
                              f" | groups of {g}: ratio {s[f'{side(g, 1)}_rows_per_s'] / s['set_based_rows_per_s']:.3f}"
                              f" (10 followers), {b[f'{side(g, 1)}_rows_per_s'] / b['set_based_rows_per_s']:.3f} "
                              "(1,000)" for g in args.group_max[1:]), flush=True)
            report(runs, args, k, workers)
            figures.write(args.json, figures_of(runs, args.group_max),
                          meta={k: v for k, v in vars(args).items() if k != "json"})
        finally:
            amqp.close()
    return 0


def report(runs: dict[int, list[dict[str, float]]], args: argparse.Namespace, k: int,
           workers: list[Process]) -> None:
    def ratio(followers: int, worker: str, ceiling: str) -> float:
        return statistics.median(r[f"{worker}_rows_per_s"] / r[ceiling] for r in runs[followers])

    n = len(runs[SMALL])
    sides = [(side(g, i), g) for i, g in enumerate(args.group_max)]
    for name, g in sides:
        grouped = f"events grouped as the relay groups them with WALFEED_RELAY_GROUP_MAX={g}"
        for followers, label in ((SMALL, "10"), (BIG, "1,000")):
            print(f"median, {label}-follower authors, {grouped}: worker "
                  f"{median(runs[followers], f'{name}_rows_per_s'):,.0f} rows/s, set-based ceiling "
                  f"{median(runs[followers], 'set_based_rows_per_s'):,.0f} rows/s, ratio "
                  f"{ratio(followers, name, 'set_based_rows_per_s'):.3f} ({k} processes vs {k} connections, up to "
                  f"{PER_STATEMENT} posts per statement; {n} runs)")
        print(f"median, 1,000-follower authors, {grouped}, against the worker's per-post statements of before issue "
              f"12 (old ceiling): ratio {ratio(BIG, name, 'per_post_rows_per_s'):.2f} (per-post statements "
              f"{median(runs[BIG], 'per_post_rows_per_s'):,.0f} rows/s)")
        print(f"10-follower authors, {grouped}: {median(runs[SMALL], f'{name}_events_per_s'):,.0f} events/s "
              f"({args.small_events} events per run, {k} processes; median of {n} runs; target >= 4,840)")
    for name, g in sides[1:]:
        print(f"groups of {g} ÷ one event a message (WALFEED_RELAY_GROUP_MAX={args.group_max[0]}), same runs: "
              f"10-follower authors {ratio(SMALL, name, 'worker_rows_per_s'):.2f}, 1,000-follower "
              f"{ratio(BIG, name, 'worker_rows_per_s'):.2f} (medians of the per-run ratios)")
    labelled = [(name, f"workers, groups of {g}") for name, g in sides] + [("set_based", "set-based ceiling")]
    for name, label in labelled:
        parts = sorted({k.split(":", 1)[1] for r in runs[SMALL] for k in r if k.startswith(f"{name}_cpu_us:")})
        cpu = {part: statistics.median(r.get(f"{name}_cpu_us:{part}", 0.0) for r in runs[SMALL]) for part in parts}
        print(f"CPU per post, 10-follower authors, {label} (us, median): "
              + ", ".join(f"{part} {us:.0f}" for part, us in sorted(cpu.items(), key=lambda kv: -kv[1]))
              + f"; total {sum(cpu.values()):.0f} (rabbitmq: every user of the shared broker)")
    print("WAL per post, 10-follower authors (records touching this database's relations, bytes without full-page "
          "images, median): " + ", ".join(
              f"{label} {median(runs[SMALL], f'{name}_wal_per_post'):,.0f} B in "
              f"{median(runs[SMALL], f'{name}_wal_records_per_post'):.1f} records" for name, label in labelled))
    print("peak RSS per worker: " + ", ".join(f"{peak_rss_mb(w.pid):.0f} MB" for w in workers))


if __name__ == "__main__":
    entry.run(main)
