"""db.Lease: a pooled connection's round trip as pool.connection() makes it, with failures translated."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace, TracebackType

import pytest
from psycopg.pq import TransactionStatus

from services.api.db import Lease


class Conn:
    def __init__(self, status: TransactionStatus) -> None:
        self.pgconn = SimpleNamespace(transaction_status=status)
        self.exits: list[type[BaseException] | None] = []

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self.exits.append(kind)


class Pool:
    def __init__(self, conn: Conn | None = None, failure: Exception | None = None) -> None:
        self.conn, self.failure = conn, failure
        self.returned: list[Conn] = []

    async def getconn(self, timeout: float) -> Conn:
        if self.failure is not None:
            raise self.failure
        assert self.conn is not None
        return self.conn

    async def putconn(self, conn: Conn) -> None:
        self.returned.append(conn)


class Translated(Exception):
    pass


def translate(error: BaseException) -> BaseException | None:
    return Translated(str(error)) if isinstance(error, OSError) else None


async def use(pool: Pool, failure: Exception | None = None) -> None:
    async with Lease(pool, 1.0, translate) as conn:  # type: ignore[arg-type]
        assert conn is pool.conn  # type: ignore[comparison-overlap]
        if failure is not None:
            raise failure


def test_an_idle_connection_goes_back_without_a_commit() -> None:
    pool = Pool(Conn(TransactionStatus.IDLE))
    asyncio.run(use(pool))
    assert pool.returned == [pool.conn] and pool.conn is not None and pool.conn.exits == []


@pytest.mark.parametrize("status", [TransactionStatus.INTRANS, TransactionStatus.INERROR, TransactionStatus.ACTIVE])
def test_an_open_transaction_is_ended_by_the_connection_before_it_goes_back(status: TransactionStatus) -> None:
    pool = Pool(Conn(status))
    with pytest.raises(ValueError):
        asyncio.run(use(pool, ValueError("boom")))
    assert pool.conn is not None and pool.conn.exits == [ValueError] and pool.returned == [pool.conn]
    asyncio.run(use(pool))
    assert pool.conn.exits == [ValueError, None]


def test_failures_of_the_database_are_translated_wherever_they_happen() -> None:
    with pytest.raises(Translated):
        asyncio.run(use(Pool(failure=OSError("no pool"))))
    pool = Pool(Conn(TransactionStatus.IDLE))
    with pytest.raises(Translated) as raised:
        asyncio.run(use(pool, OSError("lost")))
    assert isinstance(raised.value.__cause__, OSError) and pool.returned == [pool.conn]
    with pytest.raises(KeyError):  # other errors pass as they are
        asyncio.run(use(pool, KeyError("k")))
