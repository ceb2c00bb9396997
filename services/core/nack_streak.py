"""When a channel that only nacks is to be reopened. Pure: fed with the time and what the broker said.

RabbitMQ 3.10.8, seen here (docs/adr/0090): a channel opened while the quorum queues it publishes to are electing a
new leader (the relay reconnects within milliseconds of losing a node) nacks every publish to them from then on,
even once the new leader serves; a new channel publishes at once. The relay's nacked messages are retried with
backoff forever (docs/adr/0012) and its WAL position held, so nothing is lost, but nothing moves either. A channel
that has answered only nacks for REOPEN_AFTER seconds is closed and opened again (the publisher's reconnection,
which publishes the unconfirmed messages again). A broker that refuses for a real reason (no majority) costs one
reconnection per REOPEN_AFTER.
"""

from __future__ import annotations

from typing import Final

REOPEN_AFTER: Final = 10.0  # seconds of nothing but nacks (the publisher's retries come every 5 s at most)


class NackStreak:
    def __init__(self, reopen_after: float = REOPEN_AFTER) -> None:
        self._reopen_after = reopen_after
        self._since: float | None = None  # the first nack since the last ack (or since the channel opened)

    def acked(self) -> None:
        self._since = None

    def nacked(self, now: float) -> bool:
        """A nack at `now`; True when the channel has answered only nacks for `reopen_after` seconds."""
        if self._since is None:
            self._since = now
        return now - self._since >= self._reopen_after

    def reset(self) -> None:
        """A new channel."""
        self._since = None
