"""`walfeed deliver --channel webhook` as a real process, fed by the real relay, posting to a real receiver that
verifies every signature with the Standard Webhooks reference library."""

from __future__ import annotations

import itertools
import signal
from typing import Any

import psycopg
import pytest
from pika.adapters.blocking_connection import BlockingChannel as Channel

from services.consumer import headers
from services.core import ssrf
from services.core.topology import Topology
from testkit.waiting import eventually
from tests.integration.delivery import world
from tests.integration.delivery.conftest import StartPipeline, dead_letters
from tests.integration.delivery.receiver import Receiver, Reply

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Db = psycopg.Connection[Any]


def _settled(db: Db, delivery_id: int, status: str, timeout: float = 60) -> dict[str, Any]:
    return eventually(lambda: (row := world.delivery(db, delivery_id))["status"] == status and row,
                      timeout=timeout, what=f"delivery {delivery_id} {status}")


def _hook(db: Db, receiver: Receiver, path: str, *replies: Reply, previous: str | None = None) -> tuple[int, int]:
    """A user with a webhook at `path` answering `replies`; (user id, webhook id)."""
    owner = world.user(db, path.strip("/").replace("-", "_")[:30])
    return owner, world.webhook(db, owner, receiver.script(path, *replies), receiver.secrets[0], previous)


def test_500_500_200_is_delivered_on_the_third_attempt_with_backoff_and_one_webhook_id(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner, hook = _hook(db, receiver, "/flaky", Reply(500), Reply(500), Reply(200))
    actor = world.user(db, "actor")
    start_pipeline()
    delivery_id = world.notify(db, owner, actor, webhook_id=hook)
    row = _settled(db, delivery_id, "DELIVERED")
    requests = receiver.to("/flaky")
    assert row["attempts"] == 3 and row["last_status_code"] == 200 and row["next_attempt_at"] is None
    assert [r.webhook_id for r in requests] == [str(delivery_id)] * 3
    assert all(r.verified_by == (0,) for r in requests)
    gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
    assert gaps[0] >= 0.4 * 0.8 and gaps[1] >= 0.8 * 0.8, gaps  # base 0.4 s, doubling, at most a fifth less
    body = requests[0].json
    assert body["type"] == "notification.follow" and set(body) == {"type", "timestamp", "data"}
    assert body["data"]["actor"] == {"id": actor, "handle": "actor"}  # type: ignore[index]
    assert receiver.secrets[0] not in requests[0].body.decode()
    assert world.webhook_row(db, hook)["failing_since"] is None  # the success ended the run of failures


def test_429_with_retry_after_2_waits_at_least_2_seconds(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner, hook = _hook(db, receiver, "/busy", Reply(429, {"Retry-After": "2"}), Reply(200))
    start_pipeline()
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    _settled(db, delivery_id, "DELIVERED")
    first, second = receiver.to("/busy")
    assert second.at - first.at >= 2.0


def test_410_gone_disables_the_webhook_and_kills_the_delivery_at_once(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology) -> None:
    owner, hook = _hook(db, receiver, "/gone", Reply(410))
    start_pipeline()
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    row = _settled(db, delivery_id, "DEAD")
    assert row["attempts"] == 1 and row["last_status_code"] == 410
    webhook = world.webhook_row(db, hook)
    assert webhook["disabled_at"] is not None and "410" in webhook["disabled_reason"]
    (props, _), = eventually(lambda: dead_letters(channel, topology), what="dead letter")
    assert props.headers[headers.REASON] == "HTTP 410"
    second = world.notify(db, owner, world.user(db, "actor2"), webhook_id=hook)
    assert "webhook disabled" in _settled(db, second, "DEAD")["last_error"]
    assert len(receiver.to("/gone")) == 1


def test_400_is_dead_at_once_with_its_reason_in_the_dead_queue(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology) -> None:
    owner, hook = _hook(db, receiver, "/bad", Reply(400))
    start_pipeline()
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    row = _settled(db, delivery_id, "DEAD")
    assert row["attempts"] == 1 and row["last_error"] == "HTTP 400" and row["response_excerpt"] == '{"ok": true}'
    (props, body), = eventually(lambda: dead_letters(channel, topology), what="dead letter")
    assert props.headers[headers.REASON] == "HTTP 400" and props.headers[headers.ATTEMPTS] == 1
    assert str(delivery_id).encode() in body
    webhook = world.webhook_row(db, hook)
    assert webhook["disabled_at"] is None and webhook["failing_since"] is not None  # a run of failures began
    assert len(receiver.to("/bad")) == 1


def test_a_receiver_hanging_past_the_timeout_is_retried(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner, hook = _hook(db, receiver, "/slow", Reply(200, hang=30), Reply(200))
    start_pipeline()
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    row = _settled(db, delivery_id, "DELIVERED")
    first, second = receiver.to("/slow")
    assert row["attempts"] == 2 and second.at - first.at >= 2.0  # WALFEED_DELIVERY_TIMEOUT
    assert first.webhook_id == second.webhook_id


def test_an_address_not_allowed_is_refused_at_delivery(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline, channel: Channel, topology: Topology) -> None:
    # Registered when it was allowed (or its name resolved elsewhere): at delivery 127.0.0.2 is not in the list.
    owner = world.user(db, "owner")
    hook = world.webhook(db, owner, f"http://127.0.0.2:{receiver.port}/inside", receiver.secrets[0])
    worker = start_pipeline(WALFEED_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32")
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    row = _settled(db, delivery_id, "DEAD")
    assert row["last_error"] == ssrf.NOT_PUBLIC and row["last_status_code"] is None  # no address for the owner
    (props, _), = eventually(lambda: dead_letters(channel, topology), what="dead letter")
    assert props.headers[headers.REASON] == ssrf.NOT_PUBLIC
    assert "127.0.0.2 is a loopback address" in worker.log()  # the detail is the operator's
    assert receiver.requests == []


def test_during_a_rotation_a_receiver_holding_either_secret_accepts(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner = world.user(db, "owner")
    hook = world.webhook(db, owner, receiver.url("/rotated"), receiver.secrets[0], previous=receiver.secrets[1])
    start_pipeline()
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    _settled(db, delivery_id, "DELIVERED")
    (request,) = receiver.to("/rotated")
    assert request.verified_by == (0, 1)
    assert len(request.headers["webhook-signature"].split(" ")) == 2


def test_a_worker_killed_mid_delivery_delivers_again_with_the_same_webhook_id(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner, hook = _hook(db, receiver, "/held", Reply(200, hang=60), Reply(200))
    worker = start_pipeline(WALFEED_DELIVERY_TIMEOUT="60")
    delivery_id = world.notify(db, owner, world.user(db, "actor"), webhook_id=hook)
    eventually(lambda: receiver.to("/held"), what="the first request")
    worker.kill()
    start_pipeline()
    _settled(db, delivery_id, "DELIVERED")
    first, second = receiver.to("/held")[:2]
    assert first.webhook_id == second.webhook_id == str(delivery_id)
    assert world.delivery(db, delivery_id)["attempts"] == 1  # the killed try recorded nothing


def test_rate_limit_spaces_tries_to_one_target_without_spending_attempts(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    owner, hook = _hook(db, receiver, "/limited", Reply(200))
    start_pipeline(WALFEED_DELIVERY_RATE="4", WALFEED_DELIVERY_BURST="1")
    actor = world.user(db, "actor")
    ids = [world.notify(db, owner, actor, webhook_id=hook) for _ in range(5)]
    for delivery_id in ids:
        assert _settled(db, delivery_id, "DELIVERED")["attempts"] == 1
    times = sorted(r.at for r in receiver.to("/limited"))
    assert len(times) == 5 and times[-1] - times[0] >= 4 * 0.25 * 0.9  # 5 tries at 4/s: a second at least


def test_a_webhook_worker_declares_the_email_queues_too_and_stops_cleanly_on_sigterm(
        db: Db, start_pipeline: StartPipeline, channel: Channel, topology: Topology) -> None:
    worker = start_pipeline()
    eventually(lambda: "consuming" in worker.log(), what="consuming")
    # Without an email worker, a delivery.email event still has a queue: the relay never holds on it.
    assert channel.queue_declare(topology.delivery_queue("email"), passive=True).method.message_count == 0
    assert worker.stop(signal.SIGTERM) == 0
