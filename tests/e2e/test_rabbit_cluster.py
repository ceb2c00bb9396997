"""The relay and a worker, real processes, on a real three-node RabbitMQ cluster with quorum queues (docs/adr/0090):
during a burst of posts the node leading the fan-out queue is killed, restarted, then the next leader is killed.

Nothing is lost: every outbox event reaches an observer quorum queue bound to every event, and every timeline
converges to the definition. The relay confirmed WAL positions past every event, and the events it had published
and not yet had confirmed when its node died were published again (a position confirmed for one of those would be
an event missing from the observer, as nothing else would ever publish it again). Every duplicate is a publish the
relay counted as a republish: at most its window on each connection lost, plus its retries of nacked publishes
(a publish nacked because one quorum queue refused it during an election leaves a copy in the others); the worker
settles at most those and its prefetch on each connection lost, once more each.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

import pika
import psycopg
import pytest

from services.core import queues
from services.core.amqp import declare_events_exchange, node_parameters
from services.core.topology import Topology
from testkit import metrics
from testkit.processes import Processes, free_port
from testkit.rabbit_cluster import RabbitCluster
from testkit.resources import event_ids
from testkit.waiting import eventually
from tests.integration.worker import world

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

RELAY_WINDOW = 100  # small, so that the duplicate bound below means something
PREFETCH = 100
POSTS_PER_SECOND = 100  # the writer's pace: the burst lasts through both node losses
LOST = "broker connection lost"
RESENT = re.compile(r"broker connected .*resend=(\d+)")


class Writer(threading.Thread):
    """Posts by random authors, one transaction each with its outbox row (as the api writes them), at a pace."""

    def __init__(self, database_url: str, authors: list[int]) -> None:
        super().__init__(name="writer", daemon=True)
        self._url, self._authors = database_url, authors
        self.stopping = threading.Event()
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self._url) as conn:
                while not self.stopping.wait(1 / POSTS_PER_SECOND):
                    world.post(conn, self._authors[self.written % len(self._authors)])
                    self.written += 1
        except BaseException as exc:
            self.error = exc


def _counted(metrics_port: int, series: str) -> dict[str, int]:
    """The samples of a counter on a process's /metrics, by their labels."""
    found = metrics.samples(metrics.scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
    return {key[len(series):]: round(value) for key, value in found.items() if key.startswith(series + "{")}


def _settled(metrics_port: int) -> int:
    """Messages the worker settled (walfeed_worker_messages_total, every type and outcome)."""
    return sum(_counted(metrics_port, "walfeed_worker_messages_total").values())


def _timeline_rows(db: psycopg.Connection[Any]) -> int:
    count = db.execute("SELECT count(*) FROM timelines").fetchone()[0]  # type: ignore[index]
    db.rollback()
    return int(count)


def _kill_leader_and_see_progress(cluster: RabbitCluster, queue: str, db: psycopg.Connection[Any]) -> str:
    """Kill the node leading `queue`; wait until timelines grow again (the burst flows through the failover)."""
    leader = eventually(lambda: cluster.leaders([queue]).get(queue), timeout=60, what=f"{queue} has a leader")
    before = _timeline_rows(db)
    cluster.kill(cluster.node(leader))
    eventually(lambda: _timeline_rows(db) > before + 200, timeout=120, what="fan-out going on after the kill")
    return leader


def _observed(url: str, queue: str) -> Counter[str]:
    seen: Counter[str] = Counter()
    conn = pika.BlockingConnection(node_parameters(url))
    try:
        channel = conn.channel()
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return seen
            seen.update(event_ids(props, body))
    finally:
        conn.close()


def test_losing_the_leading_node_twice_during_a_burst_loses_nothing_and_bounds_duplicates(
        rabbit_cluster: RabbitCluster, processes: Processes, walfeed_env: dict[str, str], database_url: str,
        db: psycopg.Connection[Any], amqp_prefix: str, slot_name: str) -> None:
    cluster, topology = rabbit_cluster, Topology(amqp_prefix)
    worker_metrics, relay_metrics = free_port(), free_port()
    env = {"WALFEED_AMQP_URL": cluster.url, "WALFEED_AMQP_QUEUE_TYPE": "quorum",
           "WALFEED_RELAY_WINDOW": str(RELAY_WINDOW), "WALFEED_RELAY_METRICS_PORT": str(relay_metrics),
           "WALFEED_WORKER_PREFETCH": str(PREFETCH), "WALFEED_WORKER_METRICS_PORT": str(worker_metrics)}
    observer = f"{amqp_prefix}.observer"
    conn = pika.BlockingConnection(node_parameters(cluster.url))
    channel = conn.channel()
    declare_events_exchange(channel, topology)
    channel.queue_declare(observer, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_bind(observer, topology.events_exchange, routing_key="#")
    conn.close()

    users = world.add_users(db, 30)
    for i, follower in enumerate(users):
        for k in (1, 2, 3, 5, 8):
            world.follow(db, follower, users[(i + k) % len(users)])
    worker = processes.start("worker", "worker", env=env)
    eventually(lambda: "consuming" in worker.log(), timeout=60, what="worker consuming")
    relay = processes.start("relay", "relay", env=env)
    writer = Writer(database_url, users)
    writer.start()
    try:
        eventually(lambda: _timeline_rows(db) > 500, timeout=120, what="the burst fanned out")
        first = _kill_leader_and_see_progress(cluster, topology.fanout_queue, db)
        cluster.boot(cluster.node(first))
        cluster.await_running(cluster.node(first))
        second = _kill_leader_and_see_progress(cluster, topology.fanout_queue, db)
        assert second != first  # the restarted node is a follower until the next election
        cluster.boot(cluster.node(second))
        cluster.await_running(cluster.node(second))
    finally:
        writer.stopping.set()
        writer.join(30)
    assert writer.error is None, writer.error
    end = db.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    db.rollback()

    eventually(lambda: not world.problems(db), timeout=240, interval=1, what="timelines converged")
    confirmed = eventually(lambda: _confirmed_past(db, slot_name, end), timeout=60,
                           what="the relay confirmed every event's position")
    outbox = {str(r[0]) for r in db.execute("SELECT id FROM outbox").fetchall()}
    db.rollback()
    eventually(lambda: _settled(worker_metrics) >= len(outbox), timeout=60, what="the worker settled every event")
    seen = _observed(cluster.url, observer)
    relay_lost, worker_lost = relay.log().count(LOST), worker.log().count(LOST)
    resent = RESENT.findall(relay.log())[1:]  # republished on each reconnection (the first: the start)
    republished = {labels.split('"')[1]: n
                   for labels, n in _counted(relay_metrics, "walfeed_relay_events_republished_total").items()}
    report = (f"{writer.written} posts, {len(outbox)} events; observer: {sum(seen.values())} messages, "
              f"{len(seen)} distinct; worker settled {_settled(worker_metrics)}; connections lost: relay "
              f"{relay_lost}, worker {worker_lost}; relay republished on reconnecting "
              f"{resent}; relay republished in all {republished}; nodes killed {first}, {second}; "
              f"confirmed {confirmed}")
    print(report)

    assert outbox <= set(seen), f"lost: {sorted(outbox - set(seen))[:10]} ({report})"
    assert relay_lost >= 1, f"the relay was connected to the first node killed: {report}"
    for proc in (relay, worker):  # besides the relay's own reopening of a channel that only nacked (nack_streak.py)
        killed = proc.log().count(LOST) - proc.log().count(f"{LOST}, reconnecting error=ConnectionClosedByClient")
        assert killed <= 2, f"{proc.name} lost its connection only with the two nodes killed: {report}"
    # Every extra copy the observer holds is one the relay published again, and counted: after a lost connection
    # (at most its window each time), or after a nack. A quorum queue refusing a publish during its election makes
    # the broker nack it, while the observer, led elsewhere, keeps its copy (ADR 0090): the relay retries such a
    # nack until the whole publish is confirmed, so each retry can leave one more copy in the observer.
    # Which queues keep a nacked publish's copy depends on which of them refused it: the observer's duplicates and
    # the fan-out queue's differ, and each is at most the relay's counted republishes.
    relay_copies = republished["reconnected"] + republished["nacked"]
    assert republished["reconnected"] <= relay_lost * RELAY_WINDOW, report
    assert sum(seen.values()) - len(seen) <= relay_copies, report
    worker_duplicates = _settled(worker_metrics) - len(outbox)
    assert 0 <= worker_duplicates <= relay_copies + worker_lost * PREFETCH, report
    _no_dead_letters(cluster, topology)
    for proc in (relay, worker):
        assert proc.stop(timeout=30) == 0, proc.log()[-3000:]

    # The tools on a cluster whose first node is down; a message over the delivery limit reaches the dead queue.
    cluster.kill(cluster.nodes[0])
    try:
        _redeliver_past_the_limit(cluster, topology)
        dead = processes.start("dead", "dead", "show", env=env)
        assert dead.wait(60) == 0, dead.log()[-3000:]
        assert f"dead-lettered by the broker: delivery_limit from {topology.fanout_queue}" in dead.log()
        status = processes.start("status", "status", env=env)
        assert status.wait(60) == 0, status.log()[-3000:]
        assert topology.fanout_queue in status.log() and "broker unreachable" not in status.log()
    finally:
        cluster.boot(cluster.nodes[0])
        cluster.await_running(cluster.nodes[0])


def _redeliver_past_the_limit(cluster: RabbitCluster, topology: Topology) -> None:
    """A message returned to the fan-out queue unsettled more often than its delivery limit, as a consumer that a
    message crashes every time returns it: the broker dead-letters it into the dead queue (at-least-once)."""
    queue = topology.fanout_queue
    eventually(lambda: cluster.leaders([queue]).get(queue) not in (None, "", cluster.nodes[0].name), timeout=60,
               what=f"{queue} led by a running node")
    eventually(lambda: _publish_poison(cluster, topology), timeout=60, what="the poison message published")
    conn = pika.BlockingConnection(node_parameters(cluster.url))
    try:
        channel = conn.channel()
        for _ in range(queues.DELIVERY_LIMIT + 1):
            method = eventually(lambda: channel.basic_get(topology.fanout_queue)[0], timeout=30,
                                what="the poison message back in the queue")
            channel.basic_nack(method.delivery_tag, requeue=True)
    finally:
        conn.close()
    eventually(lambda: _dead_letters(cluster, topology) == 1, timeout=60, what="the poison message dead-lettered")


def _dead_letters(cluster: RabbitCluster, topology: Topology) -> int:
    """Messages in the dead queue, asked on a connection of its own each time: a passive declare refused while the
    dead queue elects its leader (its leader may have been on the node just killed) closes the channel it ran on."""
    conn = pika.BlockingConnection(node_parameters(cluster.url))
    try:
        return int(conn.channel().queue_declare(topology.dead_queue, passive=True).method.message_count)
    finally:
        conn.close()


def _publish_poison(cluster: RabbitCluster, topology: Topology) -> bool:
    """On a channel of its own each try: a channel that met a quorum queue electing its leader keeps nacking
    (services/core/nack_streak.py)."""
    conn = pika.BlockingConnection(node_parameters(cluster.url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        channel.basic_publish(topology.settle_exchange, topology.fanout_queue, b"{}", pika.BasicProperties(
            message_id="poison", type="post.created", delivery_mode=2), mandatory=True)
        return True
    finally:
        conn.close()


def _confirmed_past(db: psycopg.Connection[Any], slot: str, end: str) -> str | None:
    row = db.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s "
                     "AND confirmed_flush_lsn >= %s::pg_lsn", (slot, end)).fetchone()
    db.rollback()
    return None if row is None else str(row[0])


def _no_dead_letters(cluster: RabbitCluster, topology: Topology) -> None:
    dead = _dead_letters(cluster, topology)
    assert dead == 0, f"{dead} dead letters: a node loss must not spend attempts or reach the delivery limit"
