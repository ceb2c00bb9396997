"""The webhook registration's DNS lookups, on threads of their own (not the event loop's default executor, which
other blocking work shares): at most LOOKUP_THREADS at once, LOOKUP_WAITING more queued, each waited for at most
LOOKUP_TIMEOUT. A name server that never answers holds these threads only, never the loop or its executor."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final, TypeVar

T = TypeVar("T")

LOOKUP_THREADS: Final = 4  # getaddrinfo blocks a thread; registrations are rare (a few webhooks per user)
LOOKUP_WAITING: Final = 32  # past this many queued, a registration is told to come back rather than queued
LOOKUP_TIMEOUT: Final = 5.0  # seconds: a resolver's single try (resolv.conf's default timeout)


class LookupsBusy(Exception):
    """Every lookup thread is taken and the queue is full: try again shortly."""


class LookupTimeout(Exception):
    """The lookup did not finish within its time (its thread finishes on its own, unwaited)."""


class Lookups:
    def __init__(self, threads: int = LOOKUP_THREADS, waiting: int = LOOKUP_WAITING,
                 timeout: float = LOOKUP_TIMEOUT) -> None:
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="webhook-dns")
        self._most = threads + waiting
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending = 0  # submitted and not finished (running, queued, or abandoned by a timeout and running)

    async def run(self, call: Callable[[], T]) -> T:
        with self._lock:
            if self._pending >= self._most:
                raise LookupsBusy()
            self._pending += 1
        future = self._executor.submit(call)
        future.add_done_callback(self._finished)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._timeout)
        except TimeoutError:
            future.cancel()  # queued: never runs; running: finishes on its own and then frees its place
            raise LookupTimeout() from None

    def _finished(self, _: Future[T]) -> None:
        with self._lock:
            self._pending -= 1


WEBHOOK_LOOKUPS: Final = Lookups()  # one per process: its threads start on the first registration
