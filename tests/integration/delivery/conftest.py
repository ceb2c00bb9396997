"""Fixtures of the delivery tests: the relay and `walfeed deliver` as real processes, a real HTTP receiver."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.core import signing
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Process, Processes
from tests.integration.delivery import receiver as receiver_mod

pytestmark = pytest.mark.integration


# Backoff base and cap in fractions of a second, so retries take seconds; the receiver is on 127.0.0.1 over http.
DELIVER_ENV = {
    "WALFEED_DELIVERY_RETRY_BASE": "0.4",
    "WALFEED_DELIVERY_RETRY_CAP": "1",
    "WALFEED_DELIVERY_MAX_ATTEMPTS": "4",
    "WALFEED_DELIVERY_CONNECT_TIMEOUT": "1",
    "WALFEED_DELIVERY_TIMEOUT": "2",
    "WALFEED_DELIVERY_RATE": "0",
    "WALFEED_DELIVERY_CONCURRENCY": "4",
    "WALFEED_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    "WALFEED_WEBHOOK_ALLOW_HTTP": "true",
    "WALFEED_DELIVERY_METRICS_PORT": "0",
}
RELAY_ENV = {"WALFEED_RELAY_METRICS_PORT": "0", "WALFEED_RELAY_STATUS_INTERVAL": "1"}


@pytest.fixture
def channel(infra: Infra) -> Iterator[Channel]:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        yield conn.channel()
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()


@pytest.fixture
def secrets() -> list[str]:
    """The receiver's secrets: [0] signs every webhook the tests register, [1] is an old one (rotation)."""
    return [signing.generate_secret(), signing.generate_secret()]


@pytest.fixture
def receiver(secrets: list[str]) -> Iterator[receiver_mod.Receiver]:
    with receiver_mod.running(secrets) as running:
        yield running


class StartPipeline(Protocol):
    def __call__(self, channel: str = "webhook", **env: str) -> Process: ...


@pytest.fixture
def start_pipeline(processes: Processes) -> StartPipeline:
    """Starts `walfeed deliver --channel C` (with DELIVER_ENV plus `env`) and the relay that feeds it."""
    started: list[str] = []

    def start(channel: str = "webhook", **env: str) -> Process:
        worker = processes.start(f"deliver-{channel}-{len(processes.all)}", "deliver", "--channel", channel,
                                 env={**DELIVER_ENV, **env})
        if not started:
            started.append("relay")
            processes.start("relay", "relay", env=RELAY_ENV)
        return worker
    return start


def dead_letters(channel: Channel, topology: Topology, name: str = "webhook") -> list[tuple[Any, bytes]]:
    out: list[tuple[Any, bytes]] = []
    while True:
        method, props, body = channel.basic_get(topology.delivery_dead_queue(name), auto_ack=True)
        if method is None:
            return out
        out.append((props, body))
