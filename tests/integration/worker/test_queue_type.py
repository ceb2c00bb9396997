"""WALFEED_AMQP_QUEUE_TYPE on the machine's broker (one node: quorum queues work there too, with one member):
a quorum worker fans out, and a worker of the other type stops at start naming the setting (docs/adr/0090)."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import pika
import pika.exceptions
import psycopg
import pytest

from services.consumer import broker
from services.core import events as ev
from services.core.topology import Topology
from testkit.infra import Infra
from testkit.processes import Processes
from testkit.waiting import eventually
from tests.integration.worker import world
from tests.integration.worker.conftest import WORKER_ENV

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

QUORUM = {**WORKER_ENV, "WALFEED_AMQP_QUEUE_TYPE": "quorum"}


def test_a_quorum_worker_fans_out_and_a_classic_one_stops_at_start_naming_the_setting(
        infra: Infra, db: psycopg.Connection[Any], topology: Topology, processes: Processes) -> None:
    quorum = processes.start("quorum", "worker", env=QUORUM)
    eventually(lambda: "consuming" in quorum.log(), timeout=60, what="quorum worker consuming")
    author, follower = world.add_users(db, 2)
    world.follow(db, follower, author)
    post = world.post(db, author)
    conn = pika.BlockingConnection(pika.URLParameters(infra.amqp_url))
    try:
        channel = conn.channel()
        channel.confirm_delivery()
        world.publish(channel, topology, [post])
        eventually(functools.partial(_in_timeline, db, follower, post), timeout=60, what="post fanned out")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            broker.declare(conn.channel(), topology.fanout)  # classic arguments: the queues are quorum ones
        assert refused.value.reply_code == 406
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()

    classic = processes.start("classic", "worker", env=WORKER_ENV)
    assert classic.wait(60) == 2, classic.log()[-3000:]
    assert "WALFEED_AMQP_QUEUE_TYPE" in classic.log()
    assert quorum.stop(timeout=30) == 0, quorum.log()[-3000:]


def _in_timeline(db: psycopg.Connection[Any], user: int, post: ev.Event) -> bool:
    found = db.execute("SELECT 1 FROM timelines WHERE user_id = %s AND post_id = %s",
                       (user, post.payload["post_id"])).fetchone()
    db.rollback()
    return found is not None
