"""Reads on a streaming replica (WALFEED_DATABASE_READ_URL, docs/adr/0092): which server answers a read, the
bounded wait for the replica to replay the caller's writes, and the fall back to the primary when it lags past
that bound, is busy waiting for others, or is down. Writes report their WAL position here (`written`).

Each pooled replica connection remembers the last replay position it saw, so a read whose token is already
replayed costs no extra round trip; the check runs on the connection that then reads, so it holds whatever
server the read URL leads to (one standby, or several behind a TCP balancer).

A token is the client's word: one beyond any position this process knows the primary reached is checked against
the primary's current position (`trusted`). Every real token is at or below it (it was taken after its write
committed there); one beyond it names no write and is dropped, so a forged `FFFFFFFF/FFFFFFFF` makes a read wait for
nothing but the caller's own writes through this process. Lowering it to the primary's position instead would make
each such read wait for the replica to replay whatever anyone wrote last, in a waiter slot other readers need. A
real token from a write through another process costs that one primary query at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram
from psycopg_pool import PoolTimeout

from services.api import readafter
from services.api.db import Pool
from services.api.readafter import WriteMemory

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn = psycopg.AsyncConnection[dict[str, Any]]
Work = Callable[[Conn], Awaitable[T]]

ACQUIRE_TIMEOUT: Final = 0.5  # seconds for a replica connection; beyond, the replica counts as down
WRITTEN: Final = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS lsn"
# NULL on a server that never was a standby (the read URL names a primary: everything committed is there).
REPLAYED: Final = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS lsn"
STANDBY: Final = ("SELECT pg_is_in_recovery() AS standby, "
                  "(pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replayed")


@dataclass(frozen=True, slots=True)
class Health:
    status: str  # ok | unreachable | not-a-standby
    lag_bytes: int | None = None


class Replica:
    def __init__(self, pool: Pool, *, wait: float, retry: float, max_waiters: int, memory: WriteMemory,
                 registry: CollectorRegistry, primary: Pool | None = None) -> None:
        self.pool = pool
        self.primary = primary  # asked for its current position when a token is beyond what is known of it
        self.primary_lsn = 0  # the highest position this process saw the primary at: never beyond the primary's
        self.wait = wait
        self.retry = retry
        self.max_waiters = max_waiters
        self.memory = memory
        self.down_until = 0.0
        self.waiting = 0
        self._seen: weakref.WeakKeyDictionary[Conn, int] = weakref.WeakKeyDictionary()
        self.reads = Counter("walfeed_api_replica_reads", "Replica-eligible reads by the server that answered "
                             "(replica|primary) and why", ["server", "reason"], registry=registry)
        self.waited = Histogram("walfeed_api_read_after_wait_seconds", "How long reads waited for the replica to "
                                "replay the caller's write", registry=registry,
                                buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))

    async def written(self, conn: Conn, user: int) -> int:
        """After `user`'s write committed on `conn` (the primary): the position their reads must see."""
        row = await (await conn.execute(WRITTEN)).fetchone()
        assert row is not None
        lsn = int(row["lsn"])
        self.memory.remember(user, lsn)
        self.primary_lsn = max(self.primary_lsn, lsn)
        return lsn

    async def trusted(self, token: int) -> int | None:
        """`token`, or None when it is beyond the primary's current position: no write reached it, so there is
        nothing to wait for. The primary is asked only for a token beyond every position this process saw it at.
        Without a primary pool to ask (unit tests), a token beyond what is known stays as it is."""
        if token <= self.primary_lsn or self.primary is None:
            return token
        async with self.primary.connection() as conn:
            row = await (await conn.execute(WRITTEN)).fetchone()
        assert row is not None
        self.primary_lsn = max(self.primary_lsn, int(row["lsn"]))
        return token if token <= self.primary_lsn else None

    async def run(self, token: int | None, remembered: int | None, work: Work[T],
                  primary: Callable[[], Awaitable[T]]) -> T:
        """`work` on a replica connection that has replayed what the caller must see (the later of their `token`,
        if `trusted`, and the position of their write `remembered` by this process), else `primary()` (which runs
        it there); either way counted in walfeed_api_replica_reads_total by the server that answered and why."""
        reason = "replica-down"
        if token is not None and time.monotonic() >= self.down_until:
            token = await self.trusted(token)
        after = readafter.wanted(token, remembered)
        if time.monotonic() >= self.down_until:
            try:
                async with self.pool.connection(timeout=ACQUIRE_TIMEOUT) as conn:
                    reason = "no-token" if after is None else await self._caught_up(conn, after)
                    if reason in ("no-token", "replayed", "waited"):
                        result = await work(conn)
                        self.reads.labels("replica", reason).inc()
                        return result
            except psycopg.errors.QueryCanceled:
                raise  # the statement timeout: the same 503 as on the primary (deps.database_errors)
            except psycopg.errors.SerializationFailure:
                reason = "recovery-conflict"  # replay removed rows this read needed: the primary has them
            except readafter.NotReplayed:
                reason = "not-replayed"  # a row the read must find is on the primary only, so far
            except (PoolTimeout, psycopg.OperationalError) as exc:
                self.mark_down(exc)
                reason = "replica-error"
        self.reads.labels("primary", reason).inc()
        return await primary()

    async def _caught_up(self, conn: Conn, after: int) -> str:
        """replayed | waited | lagging (not within the bound) | busy (too many reads waiting already)."""
        if self._seen.get(conn, -1) >= after or await self._replayed(conn, after):
            return "replayed"
        if self.waiting >= self.max_waiters:
            return "busy"
        self.waiting += 1
        started = time.monotonic()
        try:
            for delay in readafter.poll_delays(self.wait):
                await asyncio.sleep(delay)  # the poll interval of a bounded wait for replay
                if await self._replayed(conn, after):
                    return "waited"
            return "lagging"
        finally:
            self.waiting -= 1
            self.waited.observe(time.monotonic() - started)

    async def _replayed(self, conn: Conn, after: int) -> bool:
        row = await (await conn.execute(REPLAYED)).fetchone()
        if row is None or row["lsn"] is None:
            return True
        self._seen[conn] = int(row["lsn"])
        return int(row["lsn"]) >= after

    def mark_down(self, exc: BaseException) -> None:
        """Reads go to the primary for `retry` seconds; then one of them tries the replica again."""
        if time.monotonic() >= self.down_until:
            log.warning("read replica unavailable: reads go to the primary",
                        extra={"error": repr(exc), "retry_seconds": self.retry})
        self.down_until = time.monotonic() + self.retry

    async def health(self, primary_lsn: int) -> Health:
        """Reachability and replay lag in bytes behind `primary_lsn` (for /readyz); unreachable marks it down."""
        try:
            async with self.pool.connection(timeout=1.0) as conn:
                row = await (await conn.execute(STANDBY)).fetchone()
        except (PoolTimeout, psycopg.Error) as exc:
            self.mark_down(exc)
            return Health("unreachable")
        assert row is not None
        self.primary_lsn = max(self.primary_lsn, primary_lsn)
        if not row["standby"]:
            return Health("not-a-standby")
        return Health("ok", max(0, primary_lsn - int(row["replayed"] or 0)))
