"""A `Publisher` on a thread and IOLoop of its own, for callers with a blocking loop (the polling source)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Generic

from pika.adapters.select_connection import IOLoop

from services.cdc_relay.messages import Outgoing
from services.cdc_relay.publisher import Publisher
from services.cdc_relay.publisher_state import T
from services.core import tracing
from services.core.topology import Topology


class PublisherThread(threading.Thread, Generic[T]):
    """`on_confirmed` is called on this thread; `submit` and `stop` may be called from any thread."""

    def __init__(self, amqp_url: str, topology: Topology, on_confirmed: Callable[[list[T]], None],
                 window: int, blocked_timeout: float = 60.0, traces: tracing.Tracing = tracing.DISABLED) -> None:
        super().__init__(name="publisher", daemon=True)
        self._ioloop = IOLoop()
        self._publisher: Publisher[T] = Publisher(self._ioloop, amqp_url, topology, on_confirmed, window,
                                                  blocked_timeout=blocked_timeout, traces=traces)

    @property
    def unconfirmed(self) -> int:
        return self._publisher.unconfirmed

    def run(self) -> None:
        self._publisher.start()
        try:
            self._ioloop.start()
        finally:
            self._ioloop.close()

    def submit(self, messages: Iterable[Outgoing[T]]) -> None:
        batch = list(messages)
        if batch:
            self._ioloop.add_callback_threadsafe(lambda: self._publisher.submit(batch))

    def stop(self) -> None:
        self._ioloop.add_callback_threadsafe(lambda: self._publisher.stop(self._ioloop.stop))
