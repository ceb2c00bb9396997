"""The strategy of the delivery workers (docs/adr/0082): the statements on the connection thread, the sends on a
pool. A named option of the runtime (services/consumer/session.py), for a consumer whose handler is three steps:
`admit` a batch (one statement: read the messages' rows, take their tries), `send` each try (on a pool thread,
waiting only for its own receiver), `conclude` the finished ones (one statement: record their outcomes).

The connection thread takes every message that is ready (up to a window of twice the pool's threads admitted and
not concluded yet), admits them in one call, and hands each try to the pool; the other half of the window waits
for a thread, so a thread that finishes starts the next send at once instead of waiting for the statements. A
thread that finishes queues its result and wakes the connection thread (once for all those finished meanwhile),
which concludes them in one call, then publishes the copies and acks. So the statements cost one round trip per
batch, not two per message. One pump runs after the messages and results of a round of the I/O loop
(`call_later(0)`): one batch for all of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Generic, Protocol, TypeVar

from services.consumer.messages import Delivery
from services.consumer.outcomes import REQUEUE, Ack, Dead, Hop, Large, Outcome, Requeue, Retry
from services.consumer.session import Started

log = logging.getLogger(__name__)

A = TypeVar("A")  # a try admitted, to send
T = TypeVar("T")  # a try sent, to conclude

_OUTCOMES = (Ack, Retry, Hop, Dead, Requeue, Large)


class Steps(Protocol[A, T]):
    """The handler of a consumer on this strategy (services/delivery/processing.py Processor)."""

    def admit(self, messages: Sequence[tuple[bytes, Mapping[str, object] | None]]) -> Sequence[Outcome | A]:
        """Connection thread: for each message, its outcome without a try, or the try to make."""

    def send(self, attempt: A) -> T:
        """Pool thread: the try. Never raises (a failure is in what it returns)."""

    def conclude(self, tried: Sequence[T]) -> Sequence[Outcome]:
        """Connection thread: the outcomes of the tries, in order."""


class ConnectionThread(Started, Generic[A, T]):
    def __init__(self, steps: Steps[A, T], pool: Executor, concurrency: int) -> None:
        self._steps = steps
        self._pool = pool
        self._concurrency = concurrency
        # Touched by the connection thread only. Admitted, not concluded yet: at most `concurrency` sending on the
        # pool's threads, as many again admitted ahead.
        self._running: dict[int, tuple[Future[None], Delivery]] = {}
        self._window = 2 * concurrency
        self._pump_scheduled = False
        # Filled by the pool threads, taken by the connection thread:
        self._lock = threading.Lock()
        self._finished: list[tuple[Delivery, T]] = []
        self._wake_pending = False

    def describe(self) -> Mapping[str, object]:
        return {"concurrency": self._concurrency}

    def arrived(self) -> None:
        self._schedule()

    def busy(self) -> bool:
        return bool(self._running)

    def unstarted(self) -> list[Delivery]:
        """Admitted, not sending yet: returned (their tries were taken from the rate, as a redelivery's would be)."""
        cancelled = [tag for tag, (task, _) in self._running.items() if task.cancel()]
        return [self._running.pop(tag)[1] for tag in cancelled]

    def abandon(self) -> None:
        for task, _ in self._running.values():
            task.cancel()
        self._running.clear()
        with self._lock:
            self._finished.clear()

    def _schedule(self) -> None:
        """One pump after the messages and results that arrive in this round of the I/O loop: one batch for all."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._s.conn.call_later(0, self._pump)

    def _pump(self) -> None:
        """Connection thread: admit and start what is ready, then conclude and settle the finished sends (the pool
        threads meanwhile work on what was admitted ahead)."""
        s = self._s
        self._pump_scheduled = False
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        free = self._window - (len(self._running) - len(finished))
        if free > 0 and s.ready and not s.stopping.is_set():
            batch = [s.ready.popleft() for _ in range(min(free, len(s.ready)))]
            for delivery, admitted in zip(batch, self._admitted(batch), strict=True):
                if isinstance(admitted, _OUTCOMES):
                    s.settle(delivery, admitted, _context(delivery))
                else:
                    self._running[delivery.tag] = (self._pool.submit(self._send, delivery, admitted), delivery)
        if finished:
            for (delivery, _), outcome in zip(finished, self._concluded([t for _, t in finished]), strict=True):
                del self._running[delivery.tag]
                s.settle(delivery, outcome, _context(delivery))
        s.flush(hold=self._window)  # held behind a slow one: up to a window

    def _admitted(self, batch: list[Delivery]) -> Sequence[Outcome | A]:
        try:
            return self._steps.admit([(d.body, d.props.headers) for d in batch])
        except Exception:  # the steps settle their own failures; this is a bug in them: return the messages
            log.exception("admitting a batch failed, returning its messages", extra={"messages": len(batch)})
            return [REQUEUE] * len(batch)

    def _concluded(self, tried: list[T]) -> Sequence[Outcome]:
        try:
            return self._steps.conclude(tried)
        except Exception:  # a bug in the steps: the messages come back, their tries are made again
            log.exception("concluding a batch failed, returning its messages", extra={"messages": len(tried)})
            return [REQUEUE] * len(tried)

    def _send(self, delivery: Delivery, attempt: A) -> None:
        """Pool thread: the try, then its result queued for the connection thread, woken once for all queued."""
        tried = self._steps.send(attempt)
        with self._lock:
            self._finished.append((delivery, tried))
            first, self._wake_pending = not self._wake_pending, True
        if first:
            self._s.hand_back(self._schedule)


def _context(delivery: Delivery) -> dict[str, object]:
    return {"message_id": delivery.props.message_id}
