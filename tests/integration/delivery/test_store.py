"""The delivery worker's batch statements against a real Postgres (services/delivery/store.py, sql.py): one try
per delivery from its target's rate however many of a batch share the target, and a batch's outcomes on their rows
and their webhooks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from services.core.db import make_pool
from services.delivery import policy
from services.delivery.processing import Record
from services.delivery.store import Store
from tests.integration.delivery import world

pytestmark = pytest.mark.integration

Db = psycopg.Connection[Any]
URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    pool: ConnectionPool = make_pool(database_url, max_size=2, autocommit=True)
    pool.open()
    yield Store(pool)
    pool.close()


def _deliveries(db: Db, *hooks: int) -> list[int]:
    owner, actor = world.user(db, "someone"), world.user(db, "actor")
    return [world.notify(db, owner, actor, webhook_id=hook) for hook in hooks]


def test_a_batch_takes_one_try_per_delivery_from_its_targets_rate(db: Db, store: Store) -> None:
    owner = world.user(db, "owner")
    busy, other = (world.webhook(db, owner, URL, "whsec_AAAA") for _ in range(2))
    ids = _deliveries(db, busy, busy, busy, other)
    # Burst 2 at 1/s: two of the busy webhook's three go now, the third is over; the other webhook's goes.
    loaded = store.load_many(ids, rate=1.0, burst=2)
    assert [loaded[i][1] for i in ids] == [True, True, False, True]
    assert {loaded[i][0].target for i in ids} == {f"webhook:{busy}", f"webhook:{other}"}
    assert store.wait(f"webhook:{busy}", rate=1.0, burst=2) > 0.5
    assert [taken for _, taken in store.load_many(ids[3:], rate=1.0, burst=2).values()] == [True]


def test_without_a_rate_every_delivery_is_taken_and_a_missing_one_is_absent(db: Db, store: Store) -> None:
    hook = world.webhook(db, world.user(db, "owner"), URL, "whsec_AAAA")
    ids = _deliveries(db, hook, hook)
    loaded = store.load_many([*ids, 999_999], rate=0.0, burst=1)
    assert sorted(loaded) == ids and all(taken for _, taken in loaded.values())


def test_a_batch_of_outcomes_is_recorded_on_each_row_and_its_webhook(db: Db, store: Store) -> None:
    owner = world.user(db, "owner")
    mixed, gone, failing = (world.webhook(db, owner, URL, "whsec_AAAA") for _ in range(3))
    ok, retry, dead, still = _deliveries(db, mixed, mixed, gone, failing)
    store.record_many([
        Record(ok, policy.DELIVERED, attempts=1, failed=False, code=204),
        Record(retry, policy.RETRYING, attempts=1, failed=True, code=500, error="HTTP 500", excerpt="oops",
               delay=30.0),
        Record(dead, policy.DEAD, attempts=1, failed=True, code=410, error="HTTP 410", disable="HTTP 410 Gone"),
        Record(still, policy.RETRYING, attempts=2, failed=True, error="timeout", delay=60.0),
    ])
    rows = {i: world.delivery(db, i) for i in (ok, retry, dead, still)}
    assert [rows[i]["status"] for i in (ok, retry, dead, still)] == ["DELIVERED", "RETRYING", "DEAD", "RETRYING"]
    assert rows[retry]["response_excerpt"] == "oops" and rows[retry]["next_attempt_at"] is not None
    assert rows[ok]["next_attempt_at"] is None and rows[still]["attempts"] == 2
    assert world.webhook_row(db, mixed)["failing_since"] is None  # a success in the batch ends the run
    assert world.webhook_row(db, gone)["disabled_reason"] == "HTTP 410 Gone"
    assert world.webhook_row(db, failing)["failing_since"] is not None
    # A row settled meanwhile keeps its status.
    store.record_many([Record(ok, policy.DEAD, attempts=2, failed=True, error="late")])
    assert world.delivery(db, ok)["status"] == "DELIVERED"


def test_hosts_budgets_are_shared_by_every_process_and_start_again_each_window(
        db: Db, store: Store, database_url: str) -> None:
    other_pool: ConnectionPool = make_pool(database_url, max_size=1, autocommit=True)  # another worker's
    other_pool.open()
    try:
        other = Store(other_pool)
        first = store.take_hosts({"hooks.example.com": 3, "b.example": 1}, window=3600.0)
        second = other.take_hosts({"hooks.example.com": 2}, window=3600.0)
        assert first["hooks.example.com"].hits == 3 and first["b.example"].hits == 1
        assert second["hooks.example.com"].hits == 5  # counted together
        assert 0 < second["hooks.example.com"].left <= 3600.0
        db.execute("UPDATE delivery_host_budgets SET window_start = window_start - 3600")  # an hour later
        db.commit()
        assert other.take_hosts({"hooks.example.com": 1}, window=3600.0)["hooks.example.com"].hits == 1
    finally:
        other_pool.close()


def test_what_a_receiver_makes_us_store_is_bounded(db: Db, store: Store) -> None:
    hook = world.webhook(db, world.user(db, "owner"), URL, "whsec_AAAA")
    (delivery_id,) = _deliveries(db, hook)
    store.record_many([Record(delivery_id, policy.RETRYING, attempts=1, failed=True, code=503,
                              error="E\x00" * 100_000, excerpt="é" * 10_000, delay=1.0, disable="D" * 100_000)])
    row = world.delivery(db, delivery_id)
    assert len(row["last_error"].encode()) <= policy.ERROR_BYTES and "\x00" not in row["last_error"]
    assert len(row["response_excerpt"].encode()) <= policy.EXCERPT_BYTES
    assert len(world.webhook_row(db, hook)["disabled_reason"].encode()) <= policy.ERROR_BYTES
