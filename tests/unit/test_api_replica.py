"""Replica.run counts every replica-eligible read once, by who answered and why, also the ones it hands to the
primary (walfeed_api_replica_reads_total, docs/adr/0092). Without a server: a replica marked down, a pool that
times out. The replica's own answers are counted on a real standby (tests/integration/api/test_read_replica.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import cast

from prometheus_client import CollectorRegistry
from psycopg_pool import PoolTimeout

from services.api.db import Pool
from services.api.readafter import WriteMemory
from services.api.replica import Replica


class TimingOutPool:
    @contextlib.asynccontextmanager
    async def connection(self, timeout: float) -> AsyncIterator[None]:
        raise PoolTimeout(f"no connection within {timeout} s")
        yield


def _replica(pool: object, registry: CollectorRegistry) -> Replica:
    return Replica(cast(Pool, pool), wait=0.1, retry=5.0, max_waiters=1, memory=WriteMemory(10.0),
                   registry=registry)


def _primary_reads(registry: CollectorRegistry) -> dict[str, float | None]:
    return {reason: registry.get_sample_value("walfeed_api_replica_reads_total",
                                              {"server": "primary", "reason": reason})
            for reason in ("replica-down", "replica-error")}


async def _on_primary() -> str:
    return "from the primary"


def test_a_read_while_the_replica_is_down_is_counted_once_as_replica_down() -> None:
    registry = CollectorRegistry()
    replica = _replica(None, registry)  # never touched: the replica is down
    replica.down_until = time.monotonic() + 60
    assert asyncio.run(replica.run(None, None, lambda conn: _on_primary(), _on_primary)) == "from the primary"
    assert _primary_reads(registry) == {"replica-down": 1.0, "replica-error": None}


def test_a_replica_that_fails_marks_itself_down_and_its_read_is_counted_once_as_replica_error() -> None:
    registry = CollectorRegistry()
    replica = _replica(TimingOutPool(), registry)
    assert asyncio.run(replica.run(None, None, lambda conn: _on_primary(), _on_primary)) == "from the primary"
    assert replica.down_until > time.monotonic()
    assert _primary_reads(registry) == {"replica-down": None, "replica-error": 1.0}


class PrimaryAt:
    """A primary pool whose current position is `lsn`; counts the queries."""

    def __init__(self, lsn: int) -> None:
        self.lsn, self.asked = lsn, 0

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[PrimaryAt]:
        yield self

    async def execute(self, query: str) -> PrimaryAt:
        self.asked += 1
        return self

    async def fetchone(self) -> dict[str, int]:
        return {"lsn": self.lsn}


def test_a_token_beyond_the_primary_is_dropped_asking_only_beyond_what_is_known() -> None:
    primary = PrimaryAt(1000)
    replica = Replica(cast(Pool, None), wait=0.1, retry=5.0, max_waiters=1, memory=WriteMemory(10.0),
                      registry=CollectorRegistry(), primary=cast(Pool, primary))
    assert asyncio.run(replica.trusted(2**64 - 1)) is None and primary.asked == 1  # no write reached it
    assert asyncio.run(replica.trusted(900)) == 900 and primary.asked == 1  # below what is known: not asked
    assert asyncio.run(replica.trusted(1000)) == 1000 and primary.asked == 1
    primary.lsn = 1500  # another process wrote since
    assert asyncio.run(replica.trusted(1200)) == 1200 and primary.asked == 2
    assert asyncio.run(replica.trusted(1501)) is None and primary.asked == 3
