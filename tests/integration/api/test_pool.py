"""The api's pool checks a connection on checkout only when it has been idle (services/api/db.py): a connection
returned less than RECENT_SECONDS ago is trusted, an older one gets a round trip first and is replaced when dead."""

from __future__ import annotations

import asyncio
import time

import psycopg

from services.api import db


async def _backend(conn: psycopg.AsyncConnection[dict[str, object]]) -> int:
    row = await (await conn.execute("SELECT pg_backend_pid() AS pid")).fetchone()
    assert row is not None
    return int(str(row["pid"]))


def _terminate(database_url: str, pid: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def _dead_connection_served(database_url: str, idle: float) -> tuple[bool, int, int]:
    """Kills the pool's one connection while it is idle, waits `idle` seconds and uses the pool again: whether that
    use failed, and the backend before and after."""
    pool = db.make_pool(database_url, min_size=1, max_size=1, timeout=5, options=db.session_options(2.0))
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            before = await _backend(conn)
        _terminate(database_url, before)
        deadline = time.monotonic() + idle
        while time.monotonic() < deadline:  # the idle time itself is what is tested
            await asyncio.sleep(0.05)
        failed = False
        try:
            async with pool.connection() as conn:
                after = await _backend(conn)
        except psycopg.OperationalError:
            failed = True
            async with pool.connection() as conn:  # the broken one was dropped on its way back
                after = await _backend(conn)
        return failed, before, after
    finally:
        await pool.close()


def test_a_connection_idle_past_the_window_is_checked_and_replaced(database_url: str) -> None:
    failed, before, after = asyncio.run(_dead_connection_served(database_url, db.RECENT_SECONDS + 0.3))
    assert not failed  # the check found it dead: the caller got a new one
    assert after != before


def test_a_connection_just_returned_is_trusted_and_dropped_when_it_fails(database_url: str) -> None:
    """Within the window no round trip is spent on a check: a request on a connection that died meanwhile fails
    (the api answers it 503 database-unavailable), and the pool replaces that connection. Had the return not been
    stamped, the check would have run and found it dead."""
    failed, before, after = asyncio.run(_dead_connection_served(database_url, 0.0))
    assert failed
    assert after != before
