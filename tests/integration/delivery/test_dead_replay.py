"""`walfeed dead` on a delivery channel's dead queue, with the real relay, `walfeed deliver` and a receiver: a dead
delivery is listed, and a replay makes it happen again (its row PENDING, then DELIVERED with the same
`webhook-id`); a letter whose delivery cannot be made again stays dead, saying why (docs/operations.md)."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.core.topology import Topology
from testkit.waiting import eventually
from tests.integration.delivery import world
from tests.integration.delivery.conftest import StartPipeline
from tests.integration.delivery.receiver import Receiver, Reply
from tests.integration.ops.conftest import command, depth

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Db = psycopg.Connection[Any]
QUEUE = "deliveries.webhook.dead"


@pytest.fixture
def walfeed(walfeed_env: dict[str, str]) -> Any:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command(*args), env={**os.environ, **walfeed_env, **env}, text=True,
                              capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    return run


def _settled(db: Db, delivery_id: int, status: str) -> dict[str, Any]:
    return eventually(lambda: (row := world.delivery(db, delivery_id))["status"] == status and row,
                      timeout=60, what=f"delivery {delivery_id} {status}")


def _dead(db: Db, receiver: Receiver, channel: Channel, topology: Topology, path: str, *replies: Reply,
          letters: int = 1) -> tuple[int, int]:
    """A webhook at `path` answering `replies` and one delivery to it, settled DEAD with its letter in the dead
    queue (`letters` there in all); (webhook id, delivery id)."""
    owner = world.user(db, path.strip("/"))
    hook = world.webhook(db, owner, receiver.script(path, *replies), receiver.secrets[0])
    delivery_id = world.notify(db, owner, world.user(db, f"{path.strip('/')}_actor"), webhook_id=hook)
    _settled(db, delivery_id, "DEAD")
    dead = topology.delivery_dead_queue("webhook")
    eventually(lambda: depth(channel, dead) == letters, timeout=30, what="the dead letter")
    return hook, delivery_id


def test_a_delivery_dead_on_400_is_listed_and_once_replayed_is_delivered_with_its_webhook_id(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology,
        walfeed: Any) -> None:
    start_pipeline()
    _, delivery_id = _dead(db, receiver, channel, topology, "/bad", Reply(400), Reply(200))  # then fixed

    ls = walfeed("dead", "ls", "--queue", QUEUE)
    assert ls.returncode == 0, ls.stderr
    line = next(line for line in ls.stdout.splitlines() if line.startswith(topology.delivery_dead_queue("webhook")))
    assert line.split()[1:] == ["HTTP", "<n>", "delivery.webhook", "1", line.split()[-1]]
    show = walfeed("dead", "show", "--queue", QUEUE)
    assert '"x-walfeed-attempts":1' in show.stdout and "x-walfeed-dead-at" in show.stdout, show.stdout

    no_db = walfeed("dead", "replay", "--queue", QUEUE, WALFEED_DATABASE_URL="postgresql://127.0.0.1:1/walfeed")
    assert no_db.returncode == 1 and "database unreachable at WALFEED_DATABASE_URL" in no_db.stderr, no_db.stderr
    eventually(lambda: depth(channel, topology.delivery_dead_queue("webhook")) == 1, timeout=10,
               what="the letter back in place")

    replayed = walfeed("dead", "replay", "--queue", QUEUE)
    assert replayed.returncode == 0 and "1 of 1 replayed" in replayed.stderr, replayed.stderr
    row = _settled(db, delivery_id, "DELIVERED")
    assert row["attempts"] == 1  # counted from zero again, as the api's retry does
    first, second = receiver.to("/bad")
    assert first.webhook_id == second.webhook_id and second.verified_by == (0,)
    assert depth(channel, topology.delivery_dead_queue("webhook")) == 0


def test_a_delivery_of_a_disabled_webhook_stays_dead_until_the_webhook_is_enabled(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology,
        walfeed: Any) -> None:
    start_pipeline()
    hook, delivery_id = _dead(db, receiver, channel, topology, "/gone", Reply(410), Reply(200))  # 410 disables it

    dry = walfeed("dead", "replay", "--dry-run", "--queue", QUEUE)
    assert dry.returncode == 0 and "0 would be replayed" in dry.stdout and "is disabled" in dry.stderr, dry
    kept = walfeed("dead", "replay", "--queue", QUEUE)
    assert kept.returncode == 1 and f"delivery {delivery_id}'s webhook is disabled" in kept.stderr, kept.stderr
    assert "0 of 1 replayed" in kept.stderr
    assert world.delivery(db, delivery_id)["status"] == "DEAD"
    assert depth(channel, topology.delivery_dead_queue("webhook")) == 1

    db.execute("UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL "
               "WHERE id = %s", (hook,))  # what POST /v1/webhooks/{id}/enable does
    db.commit()
    replayed = walfeed("dead", "replay", "--queue", QUEUE)
    assert replayed.returncode == 0 and "1 of 1 replayed" in replayed.stderr, replayed.stderr
    _settled(db, delivery_id, "DELIVERED")
    assert len(receiver.to("/gone")) == 2


def test_a_replay_interrupted_after_its_reset_is_finished_and_a_delivery_settled_meanwhile_stays_dead(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology,
        walfeed: Any) -> None:
    start_pipeline()
    _, interrupted = _dead(db, receiver, channel, topology, "/reset", Reply(400), Reply(200))
    _, settled = _dead(db, receiver, channel, topology, "/settled", Reply(400), Reply(200), letters=2)
    # A replay killed between its reset and its publish leaves the row PENDING with no message to carry it; the
    # other was delivered meanwhile (the api's retry).
    db.execute("UPDATE deliveries SET status = 'PENDING', attempts = 0 WHERE id = %s", (interrupted,))
    db.execute("UPDATE deliveries SET status = 'DELIVERED' WHERE id = %s", (settled,))
    db.commit()

    replayed = walfeed("dead", "replay", "--queue", QUEUE)
    assert replayed.returncode == 1 and "1 of 2 replayed" in replayed.stderr, replayed.stderr
    assert f"delivery {settled} is DELIVERED, no longer DEAD" in replayed.stderr
    _settled(db, interrupted, "DELIVERED")
    assert len(receiver.to("/reset")) == 2 and len(receiver.to("/settled")) == 1
    assert depth(channel, topology.delivery_dead_queue("webhook")) == 1
