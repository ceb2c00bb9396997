"""One LISTEN connection kept open (Postgres NOTIFY), for the api's listeners: token changes (revocations.py) and
new notifications for the live streams (mastodon/notices.py). While it is down the listener is told so
(`on_state(False)`): what it serves from what it heard must stop until it is back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import psycopg
from psycopg import sql

from services.core import backoff

log = logging.getLogger(__name__)

HEALTH_CHECK_SECONDS: Final = 5.0  # a dead connection is noticed within this plus statement_timeout


async def listen(url: str, channel: str, options: str, *, name: str, on_note: Callable[[str], None],
                 on_state: Callable[[bool], None], connected: str, lost: str) -> None:
    """Run until cancelled: `on_note(payload)` for each notification on `channel`, `on_state(listening)` whenever
    the connection comes or goes; `connected` and `lost` are the log messages of either."""
    attempt = 0
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=name,
                                                             options=options) as conn:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                on_state(True)
                attempt = 0
                log.info(connected)
                while True:
                    async for note in conn.notifies(timeout=HEALTH_CHECK_SECONDS):
                        on_note(note.payload)
                    await conn.execute("SELECT 1")  # no news for a while: is the connection still there?
        except (psycopg.Error, OSError, ValueError) as exc:
            log.warning(lost, extra={"error": repr(exc)})
        finally:
            on_state(False)
        attempt += 1
        await asyncio.sleep(backoff.delay(attempt, 0.1, 5.0))  # reconnecting, not waiting for a state
