"""Token changes reach every api process: each LISTENs on one channel; a rotation or revocation NOTIFYs in the
statement that changes the token (sql.SET_TOKEN), so the notification is sent when it commits (ADR 0035).

While the listening connection is down, or its health check fails, the cache is off (authcache.TokenCache.live):
a process never serves a cached token while it could have missed a change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import psycopg

from services.api.authcache import Forgets
from services.core import backoff

log = logging.getLogger(__name__)

CHANNEL: Final = "walfeed_token_changed"
HEALTH_CHECK_SECONDS: Final = 5.0  # a dead connection is noticed within this plus statement_timeout


async def listen(url: str, cache: Forgets, options: str) -> None:
    """Run until cancelled: keep a LISTEN connection, forget the users whose token changed."""
    attempt = 0
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                    url, autocommit=True, application_name="walfeed-api-listener", options=options) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                cache.listening(True)
                attempt = 0
                log.info("token change listener connected")
                while True:
                    async for note in conn.notifies(timeout=HEALTH_CHECK_SECONDS):
                        cache.forget_user(int(note.payload))
                    await conn.execute("SELECT 1")  # no news for a while: is the connection still there?
        except (psycopg.Error, OSError, ValueError) as exc:
            log.warning("token change listener lost; token cache off until it reconnects",
                        extra={"error": repr(exc)})
        finally:
            cache.listening(False)
        attempt += 1
        await asyncio.sleep(backoff.delay(attempt, 0.1, 5.0))  # reconnecting, not waiting for a state
