"""Fixtures of the operations commands' tests: run `walfeed` as a command, a broker channel with the worker's
topology declared (as a worker declares it)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from services.consumer import broker
from services.core.topology import Topology
from testkit.infra import Infra

pytestmark = pytest.mark.integration

Walfeed = Callable[..., subprocess.CompletedProcess[str]]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "services.cli", *args]


@pytest.fixture
def walfeed(walfeed_env: dict[str, str]) -> Walfeed:
    """Runs `walfeed ARGS...` with this test's environment; returns the finished process (text output)."""

    def run(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command(*args), env={**os.environ, **walfeed_env, **(env or {})}, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    return run


@pytest.fixture
def channel(infra: Infra, topology: Topology) -> Iterator[BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        ch = conn.channel()
        broker.declare(ch, topology.fanout)
        ch.confirm_delivery()
        yield ch
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()


def depth(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def drain(channel: BlockingChannel, queue: str) -> list[tuple[pika.BasicProperties, bytes]]:
    out: list[tuple[pika.BasicProperties, bytes]] = []
    while True:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((props, body))
