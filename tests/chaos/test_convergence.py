"""Convergence under faults: a workload through the real processes while a seeded schedule kills,
restarts, blocks and cuts everything; then nothing may be lost and every timeline must equal its definition.

Sizes come from the environment so CI runs a short version and an operator a long one:
  WALFEED_CHAOS_SECONDS (default 45), WALFEED_CHAOS_FAULTS (default 8),
  WALFEED_CHAOS_SEED (default 3: its 8 faults restart the broker and Postgres among others; "random" draws
  one, printed so the run can be replayed),
  WALFEED_CHAOS_KINDS (comma-separated fault kinds, default all of tests/chaos/schedule.py FAULTS).
Runs twice: each event its own message on the grouped exchange too, and grouped there (WALFEED_RELAY_GROUP_MAX=20, ADR
0095); the events exchange carries every event alone either way (ADR 0115), and both exchanges are observed.
  python -m pytest tests/chaos -m chaos -s   # with WALFEED_CHAOS_SECONDS=300 WALFEED_CHAOS_FAULTS=25
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import urllib.parse
import uuid
from collections import Counter

import httpx
import pika
import psycopg
import pytest

from services.cdc_relay.relay import READ_AHEAD
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Processes, free_port
from testkit.proxy import TcpProxy
from testkit.resources import declare_observer, event_ids
from testkit.waiting import eventually
from tests.chaos.check import TimelineDiff, classify_delivery, diff_timelines, expected_timelines
from tests.chaos.faults import NORMAL_WATERMARK, Targets, _run
from tests.chaos.schedule import FAULTS, make_schedule
from tests.chaos.workload import Account, Acknowledged, client, sign_up

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]

USERS = 24
CLIENTS = 3
CELEBRITY_THRESHOLD = 4   # low, so authors cross it up and down during the run
POISON = 3                # malformed messages injected on purpose: the only ones allowed in the dead queue
RELAY_WINDOW = 200
CONVERGE_TIMEOUT = 180.0


def _amqp_via(url: str, port: int) -> str:
    parts = urllib.parse.urlsplit(url)
    netloc = f"{parts.username}:{parts.password}@127.0.0.1:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _amqp_target(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5672


def _timeline(base: str, account: Account) -> list[int]:
    ids, cursor = [], None
    while True:
        params: dict[str, str | int] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        resp = httpx.get(f"{base}/v1/timeline", headers=account.auth, params=params, timeout=10)
        resp.raise_for_status()
        body = resp.json()
        ids += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            return ids


def _drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> tuple[list[str], int]:
    """The ids of the events in `queue` (each of a group apart), and how many messages held them."""
    ids: list[str] = []
    messages = 0
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return ids, messages
        ids += event_ids(props, body)
        messages += 1


EXPLAIN_POSTS = """
SELECT p.id, p.author_id, p.fanned_out, p.deleted_at IS NOT NULL AS deleted,
       EXISTS (SELECT 1 FROM timelines t WHERE t.user_id = %(user)s AND t.post_id = p.id) AS row_in_timeline,
       EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = %(user)s AND f.followee_id = p.author_id) AS follows
FROM posts p WHERE p.id = ANY(%(ids)s) ORDER BY p.id
"""


def _explain(database_url: str, diffs: list[TimelineDiff], failure: BaseException | None = None) -> str:
    """What the database says about each wrong timeline entry: enough to tell a worker bug from a read bug.
    `failure`: the error of the last probe, when it raised instead of comparing (`diffs` are then older)."""
    lines = [f"{len(diffs)} timelines differ from their definition"]
    if failure is not None:
        before = (f"{len(diffs)} timelines differed from their definition at the last probe that answered" if diffs
                  else "no probe answered")
        lines = [f"the last timeline probe failed: {failure!r}; {before}"]
    with psycopg.connect(database_url) as conn:
        for d in diffs[:5]:
            floor = conn.execute("SELECT timeline_floor FROM users WHERE id = %s", (d.user,)).fetchone()
            lines.append(f"user {d.user} (floor {floor and floor[0]}): missing {d.missing[:10]} extra {d.extra[:10]} "
                         f"repeated {d.repeated[:10]} out_of_order {d.out_of_order}")
            ids = [*d.missing[:10], *d.extra[:10], *d.repeated[:10]]
            for row in conn.execute(EXPLAIN_POSTS, {"user": d.user, "ids": ids}).fetchall():
                lines.append(f"    post {row}")
    return "\n".join(lines)


@pytest.mark.parametrize("group_max", ["1", "20"])
def test_the_system_converges_with_nothing_lost(
    group_max: str, infra: Infra, walfeed_env: dict[str, str], database_url: str, slot_name: str,
    topology: Topology, processes: Processes, amqp_extra_queues: list[str],
) -> None:
    seconds = float(os.environ.get("WALFEED_CHAOS_SECONDS", "45"))
    count = int(os.environ.get("WALFEED_CHAOS_FAULTS", "8"))
    seed_text = os.environ.get("WALFEED_CHAOS_SEED", "3")
    seed = random.randrange(2**32) if seed_text == "random" else int(seed_text)
    kinds = tuple(k for k in os.environ.get("WALFEED_CHAOS_KINDS", ",".join(FAULTS)).split(",") if k)
    schedule = make_schedule(seed, seconds, count, kinds)
    print(f"\nchaos: seed={seed} seconds={seconds} faults={count} group_max={group_max} "
          f"(replay: WALFEED_CHAOS_SEED={seed})")

    pg = psycopg.conninfo.conninfo_to_dict(database_url)
    relay_db = TcpProxy((str(pg.get("host", "127.0.0.1")), int(str(pg.get("port", 5432)))))
    relay_amqp = TcpProxy(_amqp_target(infra.amqp_url))
    worker_amqp = TcpProxy(_amqp_target(infra.amqp_url))
    # Both kinds of consumer (docs/adr/0115): one of the events exchange, as one that is not walfeed's reads it, and
    # one of the grouped exchange, as walfeed's queues read it.
    observe = declare_observer(infra.amqp_url, topology)
    observe_grouped = declare_observer(infra.amqp_url, topology, "observe.grouped", exchange=topology.grouped_exchange)
    amqp_extra_queues += [observe, observe_grouped]  # deleted with the topology at teardown, also if the test fails
    admin = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    channel = admin.channel()

    common = {"WALFEED_CELEBRITY_THRESHOLD": str(CELEBRITY_THRESHOLD), "WALFEED_RELAY_METRICS_PORT": "0",
              "WALFEED_WORKER_METRICS_PORT": "0", "WALFEED_RELAY_WINDOW": str(RELAY_WINDOW),
              "WALFEED_RELAY_GROUP_MAX": group_max}
    relay_env = {**common, "WALFEED_DATABASE_URL": psycopg.conninfo.make_conninfo(
        database_url, host="127.0.0.1", port=relay_db.port), "WALFEED_AMQP_URL": _amqp_via(
        infra.amqp_url, relay_amqp.port)}
    worker_env = {**common, "WALFEED_AMQP_URL": _amqp_via(infra.amqp_url, worker_amqp.port)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    workers = [processes.start(f"worker{i}", "worker", env=worker_env) for i in range(2)]
    api = processes.start("api", "api", "--port", str(port), env=common)
    relays = [processes.start(f"relay{i}", "relay", env=relay_env) for i in range(2)]  # one active, one standby
    eventually(lambda: httpx.get(f"{base}/readyz").status_code == 200, timeout=60, what="api ready")

    def restart_api() -> None:
        api.start()

    targets = Targets(relays, workers, api, relay_db, relay_amqp, worker_amqp,
                      infra.pg_admin_url, slot_name, restart_api)
    poison_ids = [f"poison-{uuid.uuid4()}" for _ in range(POISON)]
    for pid in poison_ids:  # a body no consumer can parse, routed to walfeed's queues like a real event
        channel.basic_publish(topology.grouped_exchange, "post.created", b"\x00 not json",
                              pika.BasicProperties(message_id=pid, delivery_mode=2))
    admin.close()

    accounts = sign_up(base, USERS)
    acked = Acknowledged()
    stop = threading.Event()
    clients = [threading.Thread(target=client, args=(base, accounts, acked, stop, seed + i)) for i in range(CLIENTS)]
    started = time.monotonic()
    for t in clients:
        t.start()
    try:
        for fault in schedule:
            if stop.wait(max(0.0, started + fault.at - time.monotonic())):  # the schedule's clock, not a state wait
                break
            targets.apply(fault)
            targets.ensure_running()
        stop.wait(max(0.0, started + seconds - time.monotonic()))  # let the workload run its full length
    finally:
        stop.set()
        for t in clients:
            t.join(120)
        relay_amqp.resume()
        with contextlib.suppress(Exception):
            _run("rabbitmqctl", "-q", "set_vm_memory_high_watermark", NORMAL_WATERMARK)
    faults_over = time.monotonic()
    targets.ensure_running()

    # --- quiesce: the relay has confirmed everything committed, the queues are empty, timelines converge
    with psycopg.connect(database_url, autocommit=True) as conn:
        target_lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]

    def relay_caught_up() -> bool:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                               "WHERE slot_name = %s", (target_lsn, slot_name)).fetchone()
            return bool(row and row[0])

    eventually(relay_caught_up, timeout=CONVERGE_TIMEOUT, interval=0.5, what="slot confirmed past the workload")

    with psycopg.connect(database_url) as conn:
        users = [r[0] for r in conn.execute("SELECT id FROM users").fetchall()]
        follows = [(r[0], r[1]) for r in conn.execute("SELECT follower_id, followee_id FROM follows").fetchall()]
        live: dict[int, int] = dict(conn.execute("SELECT id, author_id FROM posts WHERE deleted_at IS NULL").fetchall())
        all_posts = {r[0]: r[1] for r in conn.execute("SELECT id, deleted_at FROM posts").fetchall()}
        created_events = {r[0] for r in conn.execute(
            "SELECT (payload->>'post_id')::bigint FROM outbox WHERE type = 'post.created'").fetchall()}
        committed = [str(r[0]) for r in conn.execute("SELECT id FROM outbox").fetchall()]
        fanout = [str(r[0]) for r in conn.execute("SELECT id FROM outbox WHERE aggregatetype IN ('post', 'follow')")]

    # every acknowledged post exists with its event; every acknowledged delete holds
    assert set(acked.posts) <= set(all_posts), "acknowledged posts missing from the database"
    assert set(acked.posts) <= created_events, "acknowledged posts without a post.created event"
    assert all(all_posts[p] is not None for p in acked.deleted), "acknowledged deletes not applied"

    expected = expected_timelines(users, follows, live)
    by_id = {a.id: a for a in accounts}

    diffs: list[TimelineDiff] = []

    def converged() -> bool:
        actual = {u: _timeline(base, by_id[u]) for u in expected}
        diffs[:] = diff_timelines(expected, actual)
        return not diffs

    try:
        eventually(converged, timeout=CONVERGE_TIMEOUT, interval=0.5, what="timelines equal their definition")
    except AssertionError as timed_out:
        print(_explain(database_url, diffs, timed_out.__cause__))  # eventually() chains the last probe's error
        raise
    finally:
        converge_seconds = time.monotonic() - faults_over
    admin = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    channel = admin.channel()
    eventually(lambda: channel.queue_declare(topology.fanout_queue, passive=True).method.message_count == 0
               and channel.queue_declare(topology.retry_queue, passive=True).method.message_count == 0,
               timeout=CONVERGE_TIMEOUT, what="fan-out and retry queues drained")
    seen, messages = _drain(channel, observe_grouped)
    single, single_messages = _drain(channel, observe)
    dead, _ = _drain(channel, topology.dead_queue)
    admin.close()
    for proxy in (relay_db, relay_amqp, worker_amqp):
        proxy.close()

    delivery = classify_delivery(fanout, seen, injected=poison_ids)
    alone = classify_delivery(committed, single)
    relay_faults = sum(f.kind in {"kill_relay", "restart_broker", "restart_postgres", "kill_walsender",
                                  "cut_relay_db", "stall_relay_amqp"} for f in targets.done)
    injected = Counter(f.kind for f in targets.done)
    print(
        "\n".join([
            "chaos summary",
            f"  seed {seed}, {seconds:.0f}s, faults injected {len(targets.done)}: "
            + ", ".join(f"{k}={n}" for k, n in sorted(injected.items())),
            f"  acknowledged: {len(acked.posts)} posts, {len(acked.deleted)} deletes, {acked.follows} follows, "
            f"{acked.unfollows} unfollows, {acked.reads} reads; gave up {acked.gave_up}",
            f"  events committed {len(committed)}, published {delivery.published}, lost {len(delivery.lost)}, "
            f"duplicated {delivery.duplicates} ({len(delivery.duplicated)} ids), unexpected "
            f"{len(delivery.unexpected)}; {len(seen)} events observed in {messages} messages",
            f"  events exchange: published {alone.published}, lost {len(alone.lost)}, duplicated {alone.duplicates}, "
            f"unexpected {len(alone.unexpected)}; {len(single)} events in {single_messages} messages",
            f"  dead letters {len(dead)} (injected poison {POISON})",
            f"  timelines: {len(expected)} users, converged {converge_seconds:.1f}s after the last fault",
        ])
    )
    assert not delivery.lost, f"lost events: {sorted(delivery.lost)[:10]}"
    assert not alone.lost, f"events lost to the events exchange: {sorted(alone.lost)[:10]}"
    assert not alone.unexpected and single_messages == len(single), "the events exchange carried a group"
    assert group_max == "1" or messages < len(seen), "the relay grouped no events"
    assert not delivery.unexpected, f"unexpected events: {sorted(delivery.unexpected)[:10]}"
    # Unconfirmed at the broker: a window of messages, each up to group_max events, and never more events than the
    # relay holds read ahead.
    in_flight = RELAY_WINDOW * min(int(group_max), READ_AHEAD)
    assert delivery.duplicates <= in_flight * (relay_faults + 1), "more duplicates than the in-flight window"
    assert alone.duplicates <= RELAY_WINDOW * READ_AHEAD * (relay_faults + 1), "more duplicates than held read ahead"
    assert sorted(dead) == sorted(poison_ids), f"dead queue holds {dead}"
