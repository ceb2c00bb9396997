"""The notification side of the live stream (docs/adr/0140): LISTEN on the channel a trigger on `notifications`
NOTIFYs when the notifier's transaction commits (db/init/021_mastodon.sql), as the api's token listener does
(services/api/revocations.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from services.api import listening

CHANNEL: Final = "walfeed_notification"


async def listen(url: str, options: str, on_note: Callable[[str], None], on_state: Callable[[bool], None]) -> None:
    """Run until cancelled: `on_note(payload)` for each notification, `on_state(listening)` on every change."""
    await listening.listen(url, CHANNEL, options, name="walfeed-api-streams", on_note=on_note, on_state=on_state,
                           connected="stream feed's notification listener connected",
                           lost="stream feed lost its notification listener; open streams ended")
