"""Broker restart and Postgres crash mid-stream. These disturb the SHARED services: run them alone, at the end:
    .venv/bin/python -m pytest -m chaos tests/integration/relay
"""

from __future__ import annotations

import subprocess
import threading
from collections import Counter

import pika
import pytest

from services.core.topology import Topology
from testkit.infra import Infra
from testkit.resources import declare_observer
from testkit.waiting import eventually
from tests.integration.relay.conftest import StartRelay, Watcher, write_events

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.slow]


def _retrying_writer(database_url: str, total: int, written: list[str]) -> None:
    while len(written) < total:
        try:
            written.extend(write_events(database_url, min(50, total - len(written)), per_txn=5))
        except Exception:
            threading.Event().wait(0.2)


def _report(name: str, expected: set[str], watcher: Watcher) -> None:
    counts = Counter(watcher.ids())
    duplicated = sum(1 for n in counts.values() if n > 1)
    print(f"\n{name}: {len(expected)} events, {len(watcher.messages)} deliveries, {duplicated} ids duplicated")
    assert set(counts) >= expected


def test_broker_restart_mid_stream(infra: Infra, topology: Topology, database_url: str,
                                   start_relay: StartRelay) -> None:
    # a durable queue: the watcher's transient queue would not survive the restart
    queue = declare_observer(infra.amqp_url, topology, "durable")
    # walfeed's queues' copies (docs/adr/0115) must be taken too, or the relay holds every position
    grouped = declare_observer(infra.amqp_url, topology, "durable.grouped", exchange=topology.grouped_exchange)
    start_relay()
    written: list[str] = []
    writer = threading.Thread(target=_retrying_writer, args=(database_url, 2000, written))
    writer.start()
    eventually(lambda: len(written) > 300, timeout=60, what="writes under way")
    subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True)
    subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True)
    writer.join(120)
    expected = set(written)
    got: Counter[str] = Counter()

    def all_arrived() -> bool:
        c = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
        try:
            channel = c.channel()
            while (m := channel.basic_get(queue, auto_ack=True))[0] is not None:
                got[str(m[1].message_id)] += 1
        finally:
            c.close()
        return expected.issubset(got)

    try:
        eventually(all_arrived, timeout=120, interval=1.0, what="every event after the broker restart")
        print(f"\nbroker restart: {len(expected)} events, {sum(got.values())} deliveries, "
              f"{sum(1 for n in got.values() if n > 1)} ids duplicated")
    finally:  # only the queue: the relay still publishes to the exchange until teardown stops it
        c = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
        for name in (queue, grouped):
            c.channel().queue_delete(name)
        c.close()


def test_postgres_immediate_stop_mid_stream(database_url: str, watcher: Watcher,
                                            start_relay: StartRelay) -> None:
    relay = start_relay()
    written: list[str] = []
    writer = threading.Thread(target=_retrying_writer, args=(database_url, 2000, written))
    writer.start()
    eventually(lambda: watcher.pump() > 300, timeout=60, what="stream under way")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "stop", "-m", "immediate"],
                   check=True, capture_output=True)
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "start"],
                   check=True, capture_output=True)
    writer.join(180)
    expected = set(written)
    eventually(lambda: watcher.has_all(expected), timeout=120, interval=0.5, what="every event after the crash")
    _report("postgres immediate stop", expected, watcher)
    assert relay.running()
