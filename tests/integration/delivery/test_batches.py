"""What the batched delivery worker adds (docs/adr/0082): deliveries that reach the worker together, admitted with
one statement and recorded with one, still each get their own outcome, rate limit and retry. The deliveries of a
test are written in one transaction, so the relay publishes them together and the worker takes them as one batch
(or a few: the assertions hold either way)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.delivery import world
from tests.integration.delivery.conftest import StartPipeline
from tests.integration.delivery.receiver import Receiver, Reply

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Db = psycopg.Connection[Any]


def _status(db: Db, delivery_id: int) -> str:
    return str(world.delivery(db, delivery_id)["status"])


def _together(db: Db, receiver: Receiver, *paths: tuple[str, tuple[Reply, ...]]) -> list[tuple[int, int]]:
    """One webhook per path, each with one delivery, all written in one transaction: [(delivery id, webhook id)]."""
    owner, actor = world.user(db, "owner"), world.user(db, "actor")
    hooks = [world.webhook(db, owner, receiver.script(path, *replies), receiver.secrets[0]) for path, replies in paths]
    made = [(world.notify(db, owner, actor, webhook_id=hook, commit=False), hook) for hook in hooks]
    db.commit()
    return made


def test_a_hanging_receiver_holds_up_no_other_delivery_of_its_batch(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Long enough for the others to settle on a busy machine; four connections open at once to one receiver there
    # once took a second try (a connect past DELIVER_ENV's 1 s, it seems), so the connect timeout is longer too.
    start_pipeline(WALFEED_DELIVERY_TIMEOUT="20", WALFEED_DELIVERY_CONNECT_TIMEOUT="5")
    (hang, _), (failing, _), (gone, gone_hook), (fine, _) = _together(
        db, receiver, ("/hang", (Reply(200, hang=60), Reply(200))), ("/failing", (Reply(500), Reply(200))),
        ("/gone", (Reply(410),)), ("/fine", (Reply(204),)))
    # Each of the other three gets its own outcome while the first still waits for its answer.
    eventually(lambda: [_status(db, d) for d in (failing, gone, fine)] == ["DELIVERED", "DEAD", "DELIVERED"],
               timeout=20, what="the others settled")
    assert world.delivery(db, hang)["attempts"] == 0 and len(receiver.to("/hang")) == 1
    assert world.delivery(db, fine)["attempts"] == 1
    assert world.delivery(db, failing)["attempts"] == 2, (world.delivery(db, failing), receiver.to("/failing"))
    assert world.webhook_row(db, gone_hook)["disabled_reason"] is not None
    # The hanging one times out on its own clock and is retried.
    eventually(lambda: _status(db, hang) == "DELIVERED", timeout=60, what="the hanging one delivered")
    first, second = receiver.to("/hang")
    assert second.at - first.at >= 20.0 and first.webhook_id == second.webhook_id == str(hang)
    assert world.delivery(db, hang)["attempts"] == 2


def test_a_rate_limited_target_in_a_batch_spends_no_attempt_and_holds_up_no_other_target(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    start_pipeline(WALFEED_DELIVERY_RATE="2", WALFEED_DELIVERY_BURST="1")
    owner, actor = world.user(db, "owner"), world.user(db, "actor")
    busy = world.webhook(db, owner, receiver.script("/busy", Reply(200)), receiver.secrets[0])
    other = world.webhook(db, owner, receiver.script("/other", Reply(200)), receiver.secrets[0])
    ids = [world.notify(db, owner, actor, webhook_id=busy, commit=False) for _ in range(3)]
    lone = world.notify(db, owner, actor, webhook_id=other, commit=False)
    db.commit()
    eventually(lambda: all(_status(db, d) == "DELIVERED" for d in [*ids, lone]), timeout=60, what="all delivered")
    assert [world.delivery(db, d)["attempts"] for d in [*ids, lone]] == [1, 1, 1, 1]
    busy_times = sorted(r.at for r in receiver.to("/busy"))
    assert len(busy_times) == 3 and busy_times[-1] - busy_times[0] >= 2 * 0.5 * 0.9  # 3 tries at 2/s
    (other_request,) = receiver.to("/other")
    assert other_request.at < busy_times[-1]  # not behind the busy target's waits


def test_a_worker_killed_mid_batch_sends_again_only_what_it_had_not_recorded(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    worker = start_pipeline(WALFEED_DELIVERY_TIMEOUT="60")
    (held, _), (first, _), (second, _) = _together(
        db, receiver, ("/held", (Reply(200, hang=60), Reply(200))), ("/first", (Reply(200),)),
        ("/second", (Reply(200),)))
    eventually(lambda: receiver.to("/held") and _status(db, first) == _status(db, second) == "DELIVERED",
               timeout=30, what="the batch under way")
    worker.kill()
    receiver.release.set()  # the killed worker's request ends; the next one is answered at once
    start_pipeline()
    eventually(lambda: _status(db, held) == "DELIVERED", timeout=60, what="the held one delivered")
    requests = receiver.to("/held")
    assert len(requests) >= 2 and {r.webhook_id for r in requests} == {str(held)}
    assert world.delivery(db, held)["attempts"] == 1  # the killed try recorded nothing
    # The batch's recorded deliveries are not sent again, though their messages may come back unacked.
    assert len(receiver.to("/first")) == 1 and len(receiver.to("/second")) == 1
