"""Token changes reach every api process: each LISTENs on one channel; a rotation or revocation NOTIFYs in the
statement that changes the token (sql.SET_TOKEN), so the notification is sent when it commits (ADR 0035).

While the listening connection is down, or its health check fails, the cache is off (authcache.TokenCache.live):
a process never serves a cached token while it could have missed a change.
"""

from __future__ import annotations

from typing import Final

from services.api import listening
from services.api.authcache import Forgets

CHANNEL: Final = "walfeed_token_changed"


async def listen(url: str, cache: Forgets, options: str) -> None:
    """Run until cancelled: keep a LISTEN connection, forget the users whose token changed."""
    await listening.listen(url, CHANNEL, options, name="walfeed-api-listener",
                           on_note=lambda payload: cache.forget_user(int(payload)), on_state=cache.listening,
                           connected="token change listener connected",
                           lost="token change listener lost; token cache off until it reconnects")
