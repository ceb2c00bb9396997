"""The api's async connection pool: autocommit connections with dict rows, checked on checkout only when idle.

services.core.db's pool checks every checkout with a round trip (`SELECT ''`). For the api that is one extra
round trip per request, as many as the post itself (ADR 0032). Here a connection that went back to the pool
less than `RECENT_SECONDS` ago is trusted; an older one is checked. If the database restarts in that window,
the request on a stale connection gets a 503 (Retry-After: 1) and the pool drops that connection on return.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

RECENT_SECONDS: Final = 1.0
# Statements each connection keeps prepared (psycopg's default is 100): the home read alone has a text per partition
# of timelines, order and form (128: docs/adr/0153 and 0155), and an evicted statement is planned again when it
# comes back.
PREPARED_MAX: Final = 256

Pool = AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]


class _RecentUse:
    """When each connection went back to the pool (weak keys: a discarded connection leaves no entry)."""

    def __init__(self) -> None:
        self.returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    def stamp(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.returned[conn] = time.monotonic()

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        returned = self.returned.get(conn)
        if returned is None or time.monotonic() - returned > RECENT_SECONDS:
            await AsyncConnectionPool.check_connection(conn)


class _StampingPool(AsyncConnectionPool[psycopg.AsyncConnection[dict[str, Any]]]):
    """Stamps each connection as it comes back. Not with the pool's `reset` callback: with one, psycopg_pool hands
    every returned connection to a worker task (a queue, a task switch), about 15 us of a 300 us read; here the
    connection goes back inline, as it does in a pool without callbacks (docs/adr/0112)."""

    def __init__(self, *args: Any, recent: _RecentUse, **kwargs: Any) -> None:
        super().__init__(*args, check=recent.check, **kwargs)
        self._recent = recent

    async def putconn(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        self._recent.stamp(conn)
        await super().putconn(conn)


class Lease:
    """`async with Lease(pool, timeout) as conn`: what `pool.connection(timeout)` does, without its two generator
    context managers (its own and the connection's), about 4% of a timeline read's instructions (docs/adr/0151):
    the connection goes back to the pool at the end, committed on success and rolled back on an error when a
    transaction is open (psycopg's connection context; with none open, as in autocommit between statements, both
    are no-ops and are skipped). `translate(error)`: the exception to raise instead of a failure of the pool or
    of the connection, from getting it to giving it back, or None to let it through (deps.database: 503s)."""

    __slots__ = ("_conn", "_pool", "_timeout", "_translate")

    def __init__(self, pool: Pool, timeout: float,
                 translate: Callable[[BaseException], BaseException | None] = lambda _: None) -> None:
        self._pool, self._timeout, self._translate = pool, timeout, translate

    async def __aenter__(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        try:
            self._conn = await self._pool.getconn(self._timeout)
        except Exception as exc:
            if (instead := self._translate(exc)) is not None:
                raise instead from exc
            raise
        return self._conn

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        conn = self._conn
        try:
            try:
                if conn.pgconn.transaction_status != TransactionStatus.IDLE:
                    await conn.__aexit__(kind, error, traceback)  # commit or roll back (a pooled one stays open)
            finally:
                await self._pool.putconn(conn)
        except Exception as exc:
            if (instead := self._translate(exc)) is not None:
                raise instead from exc
            raise
        if error is not None and (instead := self._translate(error)) is not None:
            raise instead from error


def session_options(statement_timeout: float) -> str:
    """libpq `options` of every api connection: each statement may run `statement_timeout` seconds at most, and a
    statement psycopg has prepared (from its 5th execution on a connection) runs its generic plan, planned once.
    Under Postgres's default a statement whose generic plan is estimated dearer than its custom ones is planned
    again at every execution: the home read's generic plan is priced over all 32 partitions of timelines, which
    it prunes to one when it starts, so it was planned anew for 0.6-0.8 ms each time, three times what it costs to
    run (docs/adr/0096; tests/integration/api/test_plans.py checks the generic plans). In UTC, so that timestamps
    arrive as datetimes in UTC, which orjson writes as the api's RFC 3339 (models.page_json)."""
    return (f"-c statement_timeout={max(1, round(statement_timeout * 1000))} "
            "-c plan_cache_mode=force_generic_plan -c TimeZone=UTC")


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    """Once per new connection (not per checkout)."""
    conn.prepared_max = PREPARED_MAX


def make_pool(url: str, *, min_size: int, max_size: int, timeout: float, options: str = "",
              name: str = "walfeed-api") -> Pool:
    """Not opened: `await pool.open(wait=False)` inside the event loop."""
    return _StampingPool(
        url, min_size=min_size, max_size=max_size, name=name, open=False, timeout=timeout,
        kwargs={"autocommit": True, "row_factory": dict_row, "options": options},
        connection_class=psycopg.AsyncConnection[dict[str, Any]], recent=_RecentUse(), configure=_configure,
    )
