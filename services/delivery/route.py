"""How a delivery message waits: the chain of retry queues it hops through, and what its headers say of its wait
(their names are the runtime's, services/consumer/headers.py). Pure.

Each retry queue holds its messages for one fixed time (services/core/topology.py, DELIVERY_RETRY_DELAYS_MS), so
its head always expires first. A message due later than now goes to the queue with the longest delay that does not
overshoot what is left, comes back to the work queue, and hops again until it is due (docs/adr/0081).
"""

from __future__ import annotations

from collections.abc import Mapping

from services.consumer.headers import DUE, UNSEEN, int_of
from services.core.topology import DELIVERY_RETRY_DELAYS_MS


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


def unseen_of(headers: Mapping[str, object] | None) -> int:
    value = int_of(headers, UNSEEN)
    return value if value is not None and value >= 0 else 0


def due_of(headers: Mapping[str, object] | None) -> int:
    """Epoch milliseconds the copy is due at; 0 (due now) for a message without the header (from the relay)."""
    return int_of(headers, DUE) or 0
