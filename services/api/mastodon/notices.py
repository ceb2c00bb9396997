"""The notification side of the live stream (docs/adr/0140): LISTEN on the channel a trigger on `notifications`
NOTIFYs when the notifier's transaction commits (db/init/021_mastodon.sql), as the api's token listener does
(services/api/revocations.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

import psycopg

from services.core import backoff

log = logging.getLogger(__name__)

CHANNEL: Final = "walfeed_notification"
HEALTH_CHECK_SECONDS: Final = 5.0  # a dead connection is noticed within this plus statement_timeout


async def listen(url: str, options: str, on_note: Callable[[str], None], on_state: Callable[[bool], None]) -> None:
    """Run until cancelled: `on_note(payload)` for each notification, `on_state(listening)` on every change."""
    attempt = 0
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                    url, autocommit=True, application_name="walfeed-api-streams", options=options) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                on_state(True)
                attempt = 0
                while True:
                    async for note in conn.notifies(timeout=HEALTH_CHECK_SECONDS):
                        on_note(note.payload)
                    await conn.execute("SELECT 1")  # no news for a while: is the connection still there?
        except (psycopg.Error, OSError) as exc:
            log.warning("stream feed lost its notification listener; open streams ended",
                        extra={"error": repr(exc)})
        on_state(False)
        attempt += 1
        await asyncio.sleep(backoff.delay(attempt, 0.1, 5.0))  # reconnecting, not waiting for a state
