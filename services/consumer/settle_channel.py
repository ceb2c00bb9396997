"""The channel a consumer publishes its retry copies and dead letters on, with publisher confirms, opened again when
it has answered nothing but nacks for a while.

RabbitMQ 3.10.8 (docs/adr/0090): a channel opened while the quorum queues it publishes to elect a new leader nacks
every publish to them from then on, even once the new leader serves; a new channel publishes at once. A consumer's
settle publish nacked returns the original to its queue (requeue), which counts toward its delivery limit, so a
settle channel stuck that way would send a failing message round until the broker dead-letters it. Like the relay's
publisher (services/cdc_relay/publisher.py), a settle channel that has answered only nacks for
nack_streak.REOPEN_AFTER seconds is closed and a new one opened: the publish that tipped it still fails (its
original is requeued as before); the next goes to the new channel.

`basic_publish` is BlockingChannel's, so the broker modules publish through either; runs on the connection's thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import pika
import pika.exceptions

from services.core.nack_streak import NackStreak

log = logging.getLogger(__name__)


class Publishes(Protocol):
    """What the broker modules need of a channel to settle a message: a confirmed, mandatory publish that raises
    pika's NackError or UnroutableError when the broker did not take it."""

    def basic_publish(self, exchange: str, routing_key: str, body: bytes,
                      properties: pika.BasicProperties | None = None, mandatory: bool = False) -> None: ...


class Confirming(Publishes, Protocol):
    """What a settle channel needs of the channels it opens (pika's BlockingChannel, services/consumer/connection.py
    Channel)."""

    def confirm_delivery(self) -> object: ...

    def close(self) -> object: ...


C = TypeVar("C", bound=Confirming)
C_co = TypeVar("C_co", bound=Confirming, covariant=True)


class Opens(Protocol[C_co]):
    """What a settle channel needs of its connection."""

    def channel(self) -> C_co: ...


class SettleChannel(Generic[C]):
    def __init__(self, connection: Opens[C], streak: NackStreak | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._conn = connection
        self._streak = streak or NackStreak()
        self._clock = clock
        self._channel = self._open()
        self.reopened = 0

    @property
    def channel(self) -> C:
        """The channel publishes go to now."""
        return self._channel

    def basic_publish(self, exchange: str, routing_key: str, body: bytes,
                      properties: pika.BasicProperties | None = None, mandatory: bool = False) -> None:
        try:
            self._channel.basic_publish(exchange, routing_key, body, properties, mandatory=mandatory)
        except pika.exceptions.NackError:
            if self._streak.nacked(self._clock()):
                self._reopen()
            raise
        except pika.exceptions.UnroutableError:  # the broker answered (an ack after a return): not a nack
            self._streak.acked()
            raise
        self._streak.acked()

    def _open(self) -> C:
        channel = self._conn.channel()
        channel.confirm_delivery()
        return channel

    def _reopen(self) -> None:
        log.warning("broker nacked every settle publish on this channel for a while: opening another "
                    "(nack_streak.py)")
        old, self._channel = self._channel, self._open()
        self._streak.reset()
        self.reopened += 1
        try:
            old.close()
        except pika.exceptions.AMQPError as exc:  # closed by the broker already: nothing to give back
            log.info("old settle channel already closed", extra={"error": repr(exc)})
