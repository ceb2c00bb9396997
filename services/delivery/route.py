"""How a delivery message waits: the headers it carries and the chain of retry queues it hops through. Pure.

Each retry queue holds its messages for one fixed time (services/core/topology.py, DELIVERY_RETRY_DELAYS_MS), so
its head always expires first. A message due later than now goes to the queue with the longest delay that does not
overshoot what is left, comes back to the work queue, and hops again until it is due (docs/adr/0081).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from services.core.topology import DELIVERY_RETRY_DELAYS_MS

ATTEMPT_HEADER: Final = "x-walfeed-attempt"  # 1-based number of the try this copy is for
DUE_HEADER: Final = "x-walfeed-due"  # epoch milliseconds before which the copy is not worked on
REASON_HEADER: Final = "x-walfeed-reason"  # why it was retried, or why it is a dead letter
ATTEMPTS_HEADER: Final = "x-walfeed-attempts"  # tries made, on a dead letter
DEAD_HEADER: Final = "x-walfeed-dead"  # a dead letter waiting because the dead queue was full: its reason
DEAD_AT_HEADER: Final = "x-walfeed-dead-at"  # when it was dead-lettered, whole seconds since the epoch (as the worker)
UNSEEN_HEADER: Final = "x-walfeed-unseen"  # times the delivery's row was looked for and not visible yet

# Headers the broker adds when dead-lettering (RabbitMQ ignores client-set x-death since 3.13; we never read it).
_BROKER_HEADERS: Final = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
                          "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason")


def hop(remaining_ms: int) -> int | None:
    """The retry queue delay for a copy due in `remaining_ms`, or None when it is due now. Never early (a
    Retry-After is a promise not to come sooner): what is left below the shortest hop waits the shortest hop."""
    if remaining_ms <= 0:
        return None
    fitting = [d for d in DELIVERY_RETRY_DELAYS_MS if d <= remaining_ms]
    return fitting[-1] if fitting else DELIVERY_RETRY_DELAYS_MS[0]


def first_hop(delay_ms: int) -> int:
    """The retry queue delay to start a wait of `delay_ms` with (a short one waits the shortest hop)."""
    return hop(delay_ms) or DELIVERY_RETRY_DELAYS_MS[0]


def _int(headers: Mapping[str, object] | None, name: str) -> int | None:
    value = (headers or {}).get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attempt_of(headers: Mapping[str, object] | None) -> int:
    value = _int(headers, ATTEMPT_HEADER)
    return value if value is not None and value >= 1 else 1


def unseen_of(headers: Mapping[str, object] | None) -> int:
    value = _int(headers, UNSEEN_HEADER)
    return value if value is not None and value >= 0 else 0


def due_of(headers: Mapping[str, object] | None) -> int:
    """Epoch milliseconds the copy is due at; 0 (due now) for a message without the header (from the relay)."""
    return _int(headers, DUE_HEADER) or 0


def parked_reason(headers: Mapping[str, object] | None) -> str | None:
    value = (headers or {}).get(DEAD_HEADER)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value if isinstance(value, str) else None


def copy_headers(headers: Mapping[str, object] | None, **extra: object) -> dict[str, object]:
    """Headers of a republished copy: the original's minus the broker's dead-letter history, plus `extra`."""
    kept = {k: v for k, v in (headers or {}).items() if k not in _BROKER_HEADERS}
    kept.update(extra)
    return kept
