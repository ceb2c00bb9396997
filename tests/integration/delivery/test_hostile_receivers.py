"""Receivers that answer to hurt (docs/notifications.md, "Hostile receivers"): whatever one webhook's receiver
sends, the other deliveries of its batch get their own outcome, once, and the hostile one runs out of attempts."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
import pytest

from testkit.waiting import eventually
from tests.integration.delivery import receiver as receiver_mod
from tests.integration.delivery import world
from tests.integration.delivery.conftest import StartPipeline
from tests.integration.delivery.receiver import Receiver, Reply

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

Db = psycopg.Connection[Any]

RETRY_AFTER_MAX = 2.0  # seconds: the 400-digit Retry-After is clamped to this
# Retry-After values that raised while the batch's outcomes were recorded (ValueError, OverflowError).
HOSTILE_RETRY_AFTER = {"/superscript": "\u00b2", "/huge": "9" * 400,
                       "/far-date": "Mon, 01 Jan 100000000000000000000 00:00:00 GMT"}


def _status(db: Db, delivery_id: int) -> str:
    return str(world.delivery(db, delivery_id)["status"])


def test_a_hostile_retry_after_neither_repeats_the_batch_nor_escapes_the_attempt_limit(
        db: Db, receiver: Receiver, secrets: list[str], start_pipeline: StartPipeline) -> None:
    with receiver_mod.running(secrets) as hostile:
        owner, actor = world.user(db, "owner"), world.user(db, "actor")
        hostile_hooks = {path: world.webhook(db, owner, hostile.script(path, Reply(503, {"Retry-After": value})),
                                             secrets[0]) for path, value in HOSTILE_RETRY_AFTER.items()}
        healthy_hooks = [world.webhook(db, owner, receiver.script(f"/fine-{i}", Reply(204)), secrets[0])
                         for i in range(4)]
        # One transaction: the relay publishes them together and the worker takes them as one batch (or a few).
        bad = {path: world.notify(db, owner, actor, webhook_id=hook, commit=False)
               for path, hook in hostile_hooks.items()}
        good = [world.notify(db, owner, actor, webhook_id=hook, commit=False) for hook in healthy_hooks]
        db.commit()
        start_pipeline(WALFEED_DELIVERY_RETRY_AFTER_MAX=str(RETRY_AFTER_MAX))
        eventually(lambda: all(_status(db, d) == "DEAD" for d in bad.values()), timeout=60,
                   what="the hostile ones dead after their attempts")
        assert all(_status(db, d) == "DELIVERED" for d in good)
        for i, delivery_id in enumerate(good):  # once each: no batch sent again for another's answer
            assert [r.webhook_id for r in receiver.to(f"/fine-{i}")] == [str(delivery_id)]
        for path, delivery_id in bad.items():
            row = world.delivery(db, delivery_id)
            assert row["attempts"] == 4 and row["last_error"] == "attempts exhausted (4): HTTP 503", row
            requests = hostile.to(path)
            assert len(requests) == 4, (path, len(requests))
            gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
            # Backoff 0.4 s doubling to 1 s; Retry-After at most RETRY_AFTER_MAX; slack for a busy machine.
            assert all(0.3 <= gap <= RETRY_AFTER_MAX + 6.0 for gap in gaps), (path, gaps)
            if path == "/huge":  # a valid delay-seconds past the longest honoured: waits the longest
                assert all(gap >= RETRY_AFTER_MAX for gap in gaps), gaps


def test_a_host_over_its_budget_gets_the_rest_in_later_windows_and_no_attempt_is_spent(
        db: Db, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    window = 3.0
    owner, actor = world.user(db, "owner"), world.user(db, "actor")
    hooks = [world.webhook(db, owner, receiver.script(f"/h{i}", Reply(204)), receiver.secrets[0]) for i in range(5)]
    ids = [world.notify(db, owner, actor, webhook_id=hook, commit=False) for hook in hooks]
    db.commit()
    start_pipeline(WALFEED_DELIVERY_HOST_LIMIT="2", WALFEED_DELIVERY_HOST_WINDOW=str(window))
    eventually(lambda: all(_status(db, d) == "DELIVERED" for d in ids), timeout=60, what="all delivered")
    assert [world.delivery(db, d)["attempts"] for d in ids] == [1] * 5
    times = sorted(r.at for i in range(5) for r in receiver.to(f"/h{i}"))
    assert len(times) == 5
    # Two per window: the fifth is two windows after the window of the first.
    assert times[-1] - times[0] > window, times
