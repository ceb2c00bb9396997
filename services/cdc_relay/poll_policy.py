"""The polling source's settings and decisions: how much to claim, when to poll, what to mark. Pure.

The window (`WALFEED_RELAY_WINDOW`), metrics port, shutdown and blocked timeouts are the relay's (config.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from services.core.settings import Declared, Env, Float, Int

MARK_MIN_GAP: Final = 0.1  # seconds between two "mark published" updates while busy

INTERVAL: Final = Float("WALFEED_POLL_INTERVAL", 1.0,
                        "seconds between polls when one found less than a batch (a full batch polls at once)",
                        minimum=0.001, maximum=3600.0)
BATCH: Final = Int("WALFEED_POLL_BATCH", 500, "rows claimed per poll, at most", minimum=1, maximum=100_000)
LEASE: Final = Float("WALFEED_POLL_LEASE", 30.0,
                     "seconds a claim lasts; rows of a poller that died are claimed again after it", minimum=0.5,
                     maximum=86_400.0)
SETTINGS: Final[tuple[Declared, ...]] = (INTERVAL, BATCH, LEASE)


@dataclass(frozen=True, slots=True)
class PollSettings:
    interval: float = INTERVAL.default_value()
    batch: int = BATCH.default_value()
    lease: float = LEASE.default_value()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PollSettings:
        env = Env(environ)
        return cls(interval=INTERVAL.read(env), batch=BATCH.read(env), lease=LEASE.read(env))


def claim_size(batch: int, window: int, in_flight: int) -> int:
    """Rows to claim now: a batch, never more than the window has room for, and 0 (wait for confirms) while the
    room is under half a batch: a trickle of confirms would otherwise cost one claim statement each."""
    want, room = min(batch, window), window - in_flight
    if in_flight and room < (want + 1) // 2:
        return 0
    return max(0, min(want, room))


def next_poll_delay(asked: int, got: int, interval: float) -> float:
    """A full batch means more may be waiting: poll again at once. Fewer: the backlog is drained, wait."""
    return 0.0 if asked > 0 and got >= asked else interval


def mark_due(pending: int, batch: int, since_last: float, stopping: bool) -> bool:
    """Mark confirmed rows now? A batch's worth, or some after MARK_MIN_GAP, or anything when stopping."""
    if pending == 0:
        return False
    return stopping or pending >= batch or since_last >= MARK_MIN_GAP


class Claims:
    """Event ids of this poller: claimed and published, confirmed by the broker (to mark), then marked.

    An id is in flight once per message carrying it: twice for a fan-out event (alone on the events exchange, and on
    the grouped exchange for walfeed's consumers: routes.py), more when our own lease ran out while the broker was
    slow and we claimed it again. Counted, so the window stays honest, and marked once none of them is in flight:
    only then has every exchange's copy been confirmed (docs/adr/0115).
    """

    def __init__(self) -> None:
        self._in_flight: Counter[str] = Counter()
        self._count = 0
        self._to_mark: set[str] = set()

    @property
    def in_flight(self) -> int:
        return self._count

    @property
    def pending_marks(self) -> int:
        return len(self._to_mark)

    def claimed(self, ids: Iterable[str]) -> None:
        for event_id in ids:
            self._in_flight[event_id] += 1
            self._count += 1

    def confirmed(self, ids: Iterable[str]) -> None:
        for event_id in ids:
            left = self._in_flight.get(event_id, 0)
            if left == 0:
                continue  # not ours (or already settled): nothing to account
            self._count -= 1
            if left == 1:
                del self._in_flight[event_id]
                self._to_mark.add(event_id)
            else:
                self._in_flight[event_id] = left - 1

    def take_marks(self) -> list[str]:
        """Confirmed ids to mark published (sorted: stable lock order across pollers); they leave the book."""
        ids = sorted(self._to_mark)
        self._to_mark.clear()
        return ids

    def mark_failed(self, ids: Iterable[str]) -> None:
        """The UPDATE did not happen (database lost): keep them to mark after reconnecting."""
        self._to_mark.update(ids)
