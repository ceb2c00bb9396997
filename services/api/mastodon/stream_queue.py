"""The broker side of the live stream (docs/adr/0140): this process's own queue on the events exchange,
`{prefix}.stream.<random>` (exclusive, auto-delete), bound to the post and follow events and consumed without
acknowledgements in a thread of its own (pika's blocking connection); each event goes to the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any, Final

import pika
import pika.exceptions

from services.core import amqp, events
from services.core.settings import Settings
from services.core.topology import Topology

log = logging.getLogger(__name__)

KEYS: Final = (events.POST_CREATED, events.POST_DELETED, events.FOLLOW_CREATED, events.FOLLOW_DELETED)
QUEUE_MAX: Final = 10_000  # messages the broker keeps for a process that reads slower (the oldest go first)


class StreamQueue:
    """`on_event(event)` and `on_state(connected)` are called on `loop`, never in the consuming thread."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop, on_event: Callable[[events.Event], None],
                 on_state: Callable[[bool], None]) -> None:
        self._settings = settings
        self._loop = loop
        self._on_event = on_event
        self._on_state = on_state
        self._stopping = threading.Event()
        self._connection: pika.BlockingConnection | None = None
        self._thread = threading.Thread(target=self._consume, name="walfeed-stream-queue", daemon=True)

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        connection = self._connection
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.add_callback_threadsafe(connection.close)
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join, 10)

    def _consume(self) -> None:
        topology = Topology(self._settings.amqp_prefix)
        while not self._stopping.is_set():
            connection = amqp.connect_with_retry(self._settings.amqp_url, name="walfeed-api-streams",
                                                 should_stop=self._stopping.is_set)
            if connection is None:
                return
            self._connection = connection
            try:
                channel = connection.channel()
                amqp.declare_events_exchange(channel, topology)
                queue = topology.stream_queue_prefix + uuid.uuid4().hex[:16]
                channel.queue_declare(queue, exclusive=True, auto_delete=True,
                                      arguments={"x-max-length": QUEUE_MAX, "x-overflow": "drop-head"})
                for key in KEYS:
                    channel.queue_bind(queue, topology.events_exchange, routing_key=key)
                channel.basic_consume(queue, self._on_message, auto_ack=True)
                self._call(self._on_state, True)
                log.info("stream feed connected", extra={"queue": queue})
                channel.start_consuming()
            except pika.exceptions.AMQPError as exc:
                if not self._stopping.is_set():
                    log.warning("stream feed lost the broker; open streams ended", extra={"error": repr(exc)})
            finally:
                self._connection = None
                self._call(self._on_state, False)
                with contextlib.suppress(pika.exceptions.AMQPError):
                    if connection.is_open:
                        connection.close()
            self._stopping.wait(1.0)

    def _on_message(self, _channel: Any, _method: Any, _properties: Any, body: bytes) -> None:
        try:
            event = events.decode(body)
        except events.MalformedEvent as exc:
            log.warning("stream feed skipped a malformed event", extra={"error": str(exc)})
            return
        self._call(self._on_event, event)

    def _call(self, function: Callable[..., None], *args: Any) -> None:
        if not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (shutdown)
                self._loop.call_soon_threadsafe(function, *args)
