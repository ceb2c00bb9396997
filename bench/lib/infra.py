"""The bench's own resources on the shared servers and the walfeed processes it starts; all removed at the end.

Every database is named `walfeed_bench_e2e_<tag>_<source>`, every AMQP prefix `wfbench_<tag>_<source>`: never the
default `walfeed` database, slot or prefix. `Resources` is a context manager: leaving it (normally, on an error or
on Ctrl-C) stops the processes it started, deletes the AMQP names and drops the databases with their slots.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx
import pika
import psycopg
from psycopg import sql

from services.consumer import broker
from services.core.migrate import apply_schema, ensure_slot
from services.core.topology import Topology
from testkit import resources
from testkit.infra import Infra
from testkit.processes import Process
from testkit.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN = os.environ.get("WALFEED_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
AMQP = os.environ.get("WALFEED_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
INFRA = Infra(PG_ADMIN, AMQP)

SEED = """
INSERT INTO users (handle, token_hash)
SELECT 'bench' || g, sha256(('bench' || g)::bytea) FROM generate_series(1, %(authors)s + %(fans)s) g;
INSERT INTO follows (follower_id, followee_id)
SELECT a.id + %(authors)s * (1 + k) , a.id FROM users a, generate_series(0, %(per_author)s - 1) k
WHERE a.id <= %(authors)s;
UPDATE users u SET follower_count = c.n FROM (
    SELECT followee_id, count(*) AS n FROM follows GROUP BY followee_id) c WHERE c.followee_id = u.id;
UPDATE users u SET following_count = c.n FROM (
    SELECT follower_id, count(*) AS n FROM follows GROUP BY follower_id) c WHERE c.follower_id = u.id;
-- A history (HISTORY posts per author, fanned out, their events published and processed), so that ANALYZE sees
-- tables in use: statistics of empty tables make every generic plan a sequential scan, and a process that cached
-- one keeps it as the table grows (this server runs without autovacuum: nothing re-analyzes them).
INSERT INTO posts (author_id, body, fanned_out)
SELECT a, 'history ' || h, true FROM generate_series(1, %(history)s) h, generate_series(1, %(authors)s) a;
INSERT INTO timelines (user_id, post_id, author_id)
SELECT p.author_id, p.id, p.author_id FROM posts p
UNION ALL SELECT f.follower_id, p.id, p.author_id FROM posts p JOIN follows f ON f.followee_id = p.author_id;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, published_at)
SELECT gen_random_uuid(), 'post', p.id::text, 'post.created',
       jsonb_build_object('post_id', p.id, 'author_id', p.author_id), now() FROM posts p;
INSERT INTO processed_events (consumer, event_id) SELECT 'fanout', id FROM outbox;
ANALYZE;
"""
HISTORY = 50  # posts per author already there when a bench starts

# Lookups by key that every post costs the pipeline (worker: posts, processed events, outbox rows; the watcher:
# timelines). After SEED their generic plans, the ones a process caches, must be index scans.
KEY_LOOKUPS = (
    "SELECT fanned_out FROM posts WHERE id = $1",
    "SELECT 1 FROM processed_events WHERE consumer = 'fanout' AND event_id = $1::uuid",
    "SELECT payload FROM outbox WHERE id = $1::uuid",
    "SELECT 1 FROM timelines WHERE user_id = $1 AND post_id = $2",
)


def check_plans(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """RuntimeError unless every KEY_LOOKUPS generic plan is an index scan (plan_cache_mode=force_generic_plan)."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    try:
        for i, lookup in enumerate(KEY_LOOKUPS):
            conn.execute(f"PREPARE bench_lookup_{i} AS {lookup}")  # constants above
            args = ", ".join("NULL" for _ in range(lookup.count("$")))
            plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN EXECUTE bench_lookup_{i}({args})"))
            if "Seq Scan" in plan:
                raise RuntimeError(f"the seeded statistics plan a sequential scan for {lookup!r}:\n{plan}")
    finally:
        conn.execute("DEALLOCATE ALL")
        conn.execute("RESET plan_cache_mode")


@dataclass(frozen=True)
class Source:
    """One way of getting outbox events to the broker: `walfeed relay --source <kind>` with its settings."""

    name: str
    kind: str  # "cdc" or "poll"
    env: Mapping[str, str]

    @property
    def apps(self) -> tuple[str, ...]:
        """application_name of its Postgres backends (dbload.py)."""
        return ("walfeed-relay",) if self.kind == "cdc" else ("walfeed-poller",)


SOURCES = (
    Source("cdc", "cdc", {}),
    Source("poll-1s", "poll", {"WALFEED_POLL_INTERVAL": "1.0"}),
    Source("poll-100ms", "poll", {"WALFEED_POLL_INTERVAL": "0.1"}),
)


def admin() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(PG_ADMIN, autocommit=True, application_name="walfeed-bench-admin")


def db_url(name: str) -> str:
    return psycopg.conninfo.make_conninfo(PG_ADMIN, dbname=name, application_name="walfeed-bench")


def drop_database(name: str) -> None:
    """Drop a bench database and any slot in it (the test harness's teardown, shared)."""
    resources.drop_database(INFRA, name)


def delete_amqp(prefix: str, queues: list[str]) -> None:
    resources.delete_amqp_names(AMQP, Topology(prefix), queues)


def declare_amqp(prefix: str) -> None:
    """The worker's topology, declared before any publisher starts (the relay holds unroutable events)."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    try:
        broker.declare(conn.channel(), Topology(prefix).fanout)
    finally:
        conn.close()


def results_folder(out: Path | None, kind: str = "") -> Path:
    """`out`, or bench/results/<timestamp>[-<kind>]; with its logs/ subfolder created."""
    folder = out or ROOT / "bench" / "results" / "-".join(filter(None, [dt.datetime.now().strftime("%Y%m%d-%H%M%S"),
                                                                        kind]))
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    return folder


def wait_ready(client: httpx.Client, timeout: float = 60.0) -> None:
    """Until the api at the client's base URL answers /readyz with 200; AssertionError after `timeout`."""
    eventually(lambda: client.get("/readyz").status_code == 200, timeout=timeout,
               what=f"the api at {client.base_url} to answer /readyz")


def passthrough(env: Mapping[str, str]) -> dict[str, str]:
    """A bench's settings for its processes, less the process settings (WALFEED_WORKER_*, WALFEED_API_*) set in the
    bench's own environment: those reach the processes unchanged (Resources.start starts from os.environ), so whoever
    runs a bench can set e.g. WALFEED_WORKER_BATCH_SIZE."""
    return {k: v for k, v in env.items() if not (k.startswith(("WALFEED_WORKER_", "WALFEED_API_")) and k in os.environ)}


def token(user_id: int) -> str:
    """The bearer token of a seeded user: SEED stores sha256('bench' || g) for the g-th user, whose id is g."""
    return f"bench{user_id}"


def queue_depth(prefix: str) -> int:
    """Messages ready in the fan-out queue now (not counting those delivered to a worker and not acked yet)."""
    conn = pika.BlockingConnection(pika.URLParameters(AMQP))
    try:
        return int(conn.channel().queue_declare(Topology(prefix).fanout_queue, passive=True).method.message_count)
    finally:
        conn.close()


def _done(action: Callable[[], None]) -> bool:
    action()
    return True


class Resources:
    """Databases, AMQP prefixes and processes of one bench run."""

    def __init__(self, tag: str, log_dir: Path) -> None:
        self.tag, self.log_dir = tag, log_dir
        self.databases: list[str] = []
        self.prefixes: dict[str, list[str]] = {}  # prefix -> queues declared under it beyond the topology's
        self.procs: list[Process] = []

    def __enter__(self) -> Resources:
        return self

    def __exit__(self, *_exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        """Stops the processes, then deletes the AMQP names and drops the databases, each retried for up to a minute
        (other suites on this machine restart Postgres and RabbitMQ); what still fails is named on stderr."""
        self.stop_all()
        removals: list[tuple[str, Callable[[], None]]] = [
            *((f"AMQP prefix {p}", functools.partial(delete_amqp, p, q)) for p, q in self.prefixes.items()),
            *((f"database {d}", functools.partial(drop_database, d)) for d in self.databases)]
        for what, remove in removals:
            try:
                eventually(functools.partial(_done, remove), timeout=60, interval=0.5, what=f"removing {what}")
            except AssertionError as exc:
                print(f"bench clean-up: could not remove {what}: {exc.__cause__!r}; remove it by hand", file=sys.stderr)

    def database(self, name: str) -> str:
        """An empty database with the schema applied. Returns its URL."""
        full = self._database_name(name)
        self.databases.append(full)
        with admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(full)))
        apply_schema(db_url(full))
        return db_url(full)

    def _database_name(self, name: str) -> str:
        return f"walfeed_bench_e2e_{self.tag}_{name}".replace("-", "_")

    def seeded_databases(self, names: list[str], authors: int, per_author: int) -> dict[str, str]:
        """A seeded template cloned once per name (CREATE DATABASE ... TEMPLATE). Returns name -> URL."""
        template_url, template = self.database("tpl"), self._database_name("tpl")
        with psycopg.connect(template_url, autocommit=True) as conn:
            psycopg.ClientCursor(conn).execute(SEED, {"authors": authors, "fans": authors * per_author,
                                                      "per_author": per_author, "history": HISTORY})
            check_plans(conn)
        urls = {}
        with admin() as conn:
            for name in names:
                full = self._database_name(name)
                self.databases.append(full)
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(full),
                                                                             sql.Identifier(template)))
                urls[name] = db_url(full)
        return urls

    def slot(self, url: str, name: str) -> str:
        slot = f"wfbench_{self.tag}_{name}".replace("-", "_")
        ensure_slot(url, slot)
        return slot

    def prefix(self, name: str, declare: bool = True) -> str:
        """An AMQP prefix of this run, with the worker's topology declared unless `declare` is false (a bench that
        counts what a publisher sends with an observer queue alone: no fan-out queue taking a copy)."""
        prefix = f"wfbench_{self.tag}_{name}".replace("-", "_")
        self.prefixes[prefix] = []
        if declare:
            declare_amqp(prefix)
        return prefix

    def observer(self, prefix: str, durable: bool = True, grouped: bool = False) -> str:
        """A queue `{prefix}.test.bench` bound to every event on the prefix's events exchange (the test harness's
        observer), or with `grouped` `{prefix}.test.bench.grouped` on its grouped exchange (docs/adr/0115), deleted
        with the prefix. Returns its name."""
        topology = Topology(prefix)
        queue = resources.declare_observer(AMQP, topology, "bench.grouped" if grouped else "bench", durable=durable,
                                           exchange=topology.grouped_exchange if grouped else None)
        self.prefixes[prefix].append(queue)
        return queue

    def start(self, log_name: str, args: list[str], env: Mapping[str, str], module: str = "services.cli",
              command: Sequence[str] | None = None) -> Process:
        """`python -m module *args` (walfeed's command line unless told), or `command *args`, with `env` over this
        process's environment, its output in the log folder (testkit's Process, in a session of its own: Ctrl-C
        reaches the bench only, and it stops them in order)."""
        proc = Process(log_name, args, {**os.environ, **env}, self.log_dir,
                       command=command or (sys.executable, "-m", module), own_session=True)
        self.procs.append(proc)
        return proc.start()

    def stop(self, proc: Process, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after `timeout` (said on stderr: the process did not stop by itself)."""
        try:
            proc.stop(signal.SIGTERM, timeout)
        except AssertionError as exc:
            print(f"bench: {exc}; killed", file=sys.stderr)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            with contextlib.suppress(Exception):
                self.stop(proc)
