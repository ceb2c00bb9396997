"""Postgres failover with the real processes (docs/adr/0091): a private primary and its streaming standby
(testkit/pgcluster.py), the relay and a worker given one multi-host URL (`target_session_attrs=read-write`),
writers writing posts; the primary crashes (immediate stop), the standby is promoted, the writers go on there.

Every outbox row the new primary holds reaches the broker; duplicates are at most what the relay republished from
its checkpoint; timelines converge to the definition. Writes the old primary acknowledged and never sent to the
standby are gone from the new primary, events and all: Postgres' asynchronous replication window, shown with a
standby cut off before the crash, and closed by synchronous_standby_names (the commit is not acknowledged)."""

from __future__ import annotations

import io
import random
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from services.api import sql as api_sql
from services.cli import rebuild
from services.core.settings import Settings
from testkit.pgcluster import Node, PgCluster, dbname
from testkit.processes import Process, Processes
from testkit.waiting import eventually
from tests.integration.relay.conftest import Watcher, checkpointed, watcher  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

USERS, FOLLOWS_EACH = 20, 5
FAST = {"WALFEED_RELAY_CHECKPOINT_INTERVAL": "0.5", "WALFEED_RELAY_STATUS_INTERVAL": "1",
        "WALFEED_RELAY_STANDBY_INTERVAL": "0.5", "WALFEED_RELAY_METRICS_PORT": "0",
        "WALFEED_WORKER_METRICS_PORT": "0"}


def both_hosts(cluster: PgCluster, db: str) -> str:
    """libpq multi-host: whichever of the two accepts writes (the primary, then the promoted standby)."""
    hosts = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    return f"postgresql://postgres@{hosts}/{db}?target_session_attrs=read-write&connect_timeout=3"


def setup_users(url: str) -> None:
    rnd = random.Random(17)
    with psycopg.connect(url) as conn:
        ids = [conn.execute("INSERT INTO users (handle, token_hash) VALUES (%s, sha256(%s::bytea)) RETURNING id",
                            (f"u{i}", f"u{i}")).fetchone()[0] for i in range(USERS)]  # type: ignore[index]
        for follower in ids:
            for followee in rnd.sample([i for i in ids if i != follower], FOLLOWS_EACH):
                conn.execute("INSERT INTO follows (follower_id, followee_id) VALUES (%s, %s)", (follower, followee))


@dataclass
class Writers:
    """Threads writing posts as the api does (api/sql.py CREATE_POST: the post and its outbox row, one
    transaction) to `url`; a failed write waits for `retarget`. `acked`: the bodies of the posts whose commit
    returned, each unique (post ids are not: a promoted standby's sequence hands out again the ids of writes it
    never received)."""

    url: str
    acked: list[str] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, count: int = 2) -> None:
        self._ready.set()
        for n in range(count):
            thread = threading.Thread(target=self._run, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def retarget(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def stop(self) -> None:
        self._stop.set()
        self._ready.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, n: int) -> None:
        rnd, seq = random.Random(n), 0
        while not self._stop.is_set():
            self._ready.wait()
            try:
                with psycopg.connect(self.url, connect_timeout=3) as conn:
                    while not self._stop.is_set():
                        seq += 1
                        body = f"writer {n} post {seq}"
                        params = {"author": rnd.randint(1, USERS), "body": body, "key": None, "hash": None,
                                  "trace": None}
                        with conn.transaction():
                            conn.execute(api_sql.CREATE_POST, params)
                        self.acked.append(body)
            except psycopg.OperationalError:
                self.failures += 1
                self._ready.clear()  # until the test points the writers at the new primary


def outbox_ids(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {str(r[0]) for r in conn.execute("SELECT id FROM outbox")}


def timelines_converged(url: str) -> bool:
    """Every user's timeline equals its definition (posts of whom they follow and their own, the cap and floor of
    ADR 0023 included): `walfeed rebuild timelines --all --check` finds no user that differs (ADR 0073)."""
    settings = Settings.from_env({"WALFEED_DATABASE_URL": url})
    return rebuild.run(settings, users=[], all_users=True, after=0, check=True, batch_size=100, settle=0,
                       out=io.StringIO(), progress=io.StringIO()) == 0


def republished(relay: Process) -> int:
    found = re.findall(r"recovered on a new primary.* republished=(\d+)", relay.log())
    assert found, "the relay did not recover on the new primary"
    return sum(int(n) for n in found)


@pytest.fixture
def pipeline(fresh_pg_cluster: PgCluster, processes: Processes, slot_name: str) -> Iterator[tuple[str, str]]:
    """(url on the primary, multi-host url) with users and follows, the relay and a worker running on it."""
    url = fresh_pg_cluster.migrated_database(slot_name)
    setup_users(url)
    multi = both_hosts(fresh_pg_cluster, dbname(url))
    env = {**FAST, "WALFEED_DATABASE_URL": multi, "WALFEED_SLOT": slot_name}
    processes.start("relay", "relay", env=env)
    processes.start("worker", "worker", env=env)
    yield url, multi


def crash_and_promote(cluster: PgCluster) -> Node:
    old, standby = cluster.primary, cluster.standbys[0]
    cluster.stop(old, "immediate")
    cluster.promote(standby)
    return standby


def test_a_crash_and_promotion_during_writes_loses_no_event(
        fresh_pg_cluster: PgCluster, pipeline: tuple[str, str], processes: Processes, watcher: Watcher,  # noqa: F811
        slot_name: str) -> None:
    cluster, (url, _multi) = fresh_pg_cluster, pipeline
    relay, worker = processes.all
    writers = Writers(url)
    writers.start()
    eventually(lambda: watcher.pump() >= 300 and checkpointed(url, slot_name), timeout=90,
               what="events published and a checkpoint before the crash")
    new = crash_and_promote(cluster)
    before_crash = len(writers.acked)
    new_url = new.url(dbname(url))
    writers.retarget(new_url)
    eventually(lambda: len(writers.acked) >= before_crash + 300, timeout=90, what="writes on the new primary")
    writers.stop()

    expected = outbox_ids(new_url)
    eventually(lambda: watcher.has_all(expected), timeout=120, what="every outbox row of the new primary published")
    counts = Counter(watcher.ids())
    extra = sum(n - 1 for n in counts.values())
    again = republished(relay)
    with psycopg.connect(new_url) as conn:
        kept = {str(r[0]) for r in conn.execute("SELECT body FROM posts")}
    gone = set(writers.acked) - kept  # acknowledged by the old primary, never replayed by the standby
    ghosts = set(counts) - expected  # their events, published by the old relay before the crash
    print(f"\nfailover: {len(expected)} outbox rows on the new primary, {len(watcher.messages)} deliveries, "
          f"{extra} extra copies, {again} republished from the checkpoint, {len(gone)} acknowledged posts lost to "
          f"asynchronous replication ({len(ghosts)} events of them published), writer failures {writers.failures}")
    assert extra <= again  # duplicates come from the republish only, bounded by the checkpoint's window
    assert again < before_crash  # the checkpoint bounded the republish: not the whole outbox
    eventually(lambda: timelines_converged(new_url), timeout=120, what="timelines converged on the new primary")
    for proc in (relay, worker):
        assert proc.stop(signal.SIGTERM, timeout=30) == 0, proc.log()[-3000:]


def cut_off(cluster: PgCluster, standby: Node) -> None:
    """The standby stops receiving WAL (its walreceiver cannot reach the primary any more)."""
    with psycopg.connect(standby.url(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1 user=postgres'")
        conn.execute("SELECT pg_reload_conf()")
    eventually(lambda: not cluster_streaming(standby), timeout=30, what="the standby cut off")


def cluster_streaming(standby: Node) -> bool:
    with psycopg.connect(standby.url(), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'").fetchone()
    return bool(row and row[0])


def test_writes_the_standby_never_received_are_gone_with_their_events_and_nothing_else_is(
        fresh_pg_cluster: PgCluster, pipeline: tuple[str, str], processes: Processes, watcher: Watcher,  # noqa: F811
        slot_name: str) -> None:
    cluster, (url, _multi) = fresh_pg_cluster, pipeline
    relay, _worker = processes.all
    standby = cluster.standbys[0]
    writers = Writers(url)
    writers.start()
    eventually(lambda: watcher.pump() >= 200 and checkpointed(url, slot_name), timeout=90, what="a checkpoint")
    cut_off(cluster, standby)
    lagging_from = len(writers.acked)
    eventually(lambda: len(writers.acked) >= lagging_from + 200, timeout=60, what="writes the standby never sees")
    new = crash_and_promote(cluster)
    acked_on_old = list(writers.acked)
    new_url = new.url(dbname(url))
    writers.retarget(new_url)
    eventually(lambda: len(writers.acked) >= len(acked_on_old) + 100, timeout=90, what="writes on the new primary")
    writers.stop()

    expected = outbox_ids(new_url)
    eventually(lambda: watcher.has_all(expected), timeout=120, what="every outbox row of the new primary published")
    with psycopg.connect(new_url) as conn:
        kept = {str(r[0]) for r in conn.execute("SELECT body FROM posts")}
    gone = set(acked_on_old) - kept
    print(f"\nlagging standby: {len(gone)} acknowledged posts gone with the old primary, "
          f"{len(set(watcher.ids()) - expected)} of their events published before the crash, "
          f"{republished(relay)} republished")
    assert len(gone) >= 200  # the replication window: Postgres', not the relay's
    # The worker's own writes in that window are gone too, and the broker no longer holds their events when the
    # checkpoint covered them: the runbook's step after a failover that lost writes repairs the timelines.
    repair = processes.start("rebuild", "rebuild", "timelines", "--all",
                             env={"WALFEED_DATABASE_URL": new_url, "WALFEED_SLOT": slot_name})
    assert repair.wait(120) == 0, repair.log()[-3000:]
    assert timelines_converged(new_url)


def test_synchronous_standby_names_acknowledges_no_commit_the_standby_lacks(fresh_pg_cluster: PgCluster) -> None:
    cluster = fresh_pg_cluster
    url = cluster.migrated_database()
    standby = cluster.standbys[0]
    with psycopg.connect(cluster.primary.url(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        conn.execute("SELECT pg_reload_conf()")
    setup_users(url)  # committed while the standby confirms: acknowledged
    cut_off(cluster, standby)
    outcome: list[str] = []

    def write() -> None:
        try:
            with psycopg.connect(url) as conn, conn.transaction():
                conn.execute(api_sql.CREATE_POST, {"author": 1, "body": "unacknowledged", "key": None, "hash": None,
                                                   "trace": None})
            outcome.append("acknowledged")
        except psycopg.OperationalError:
            outcome.append("connection lost")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    with pytest.raises(AssertionError):  # the commit waits for the standby, which is cut off
        eventually(lambda: outcome, timeout=3, what="the commit acknowledged")
    new = crash_and_promote(cluster)
    writer.join(30)
    assert outcome == ["connection lost"]  # never acknowledged, so never promised
    with psycopg.connect(new.url(dbname(url))) as conn:
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (USERS,)
        assert conn.execute("SELECT count(*) FROM posts").fetchone() == (0,)
