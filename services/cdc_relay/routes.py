"""Which messages carry an event, and to which exchange (docs/adr/0115). Pure.

The events exchange is the published contract: every event, one a message (docs/events.md). Walfeed's own consumers
of the fan-out events (the fan-out worker and the notifier) read them from the grouped exchange instead, several to a
message (grouping.py, docs/adr/0095). So a fan-out event (`post.*`, `follow.*`) is published twice: alone to the
events exchange (SINGLE: not mandatory, for consumers that are not walfeed's, of whom there may be none), and to the
grouped exchange (GROUPED: mandatory, walfeed's queues are bound there, and while none is its position is held, ADR
0012). A delivery event is published once, to the events exchange, mandatory (EVENTS), as it always was.

Each copy has a token of its own, and an event is confirmed only once the broker confirmed both: the relay numbers a
fan-out event's copies s (SINGLE) and s + 1 (GROUPED), and its position tracker waits for every number
(`copies`); the polling source's claims count an event's copies (poll_policy.Claims).
"""

from __future__ import annotations

from services.cdc_relay import grouping
from services.cdc_relay.messages import GROUPED, SINGLE, Outgoing
from services.cdc_relay.sessions import Token
from services.core.events import FANOUT_TYPES

COPIES_MAX = 2  # messages an event goes in, at most


def copies(type: str) -> int:
    """How many messages carry an event of `type`: the sequence numbers the relay gives it."""
    return 2 if type in FANOUT_TYPES else 1


def relay(batch: list[Outgoing[int]], group_max: int) -> list[Outgoing[Token]]:
    """The messages of a batch the relay read, its events numbered by `copies` in stream order (a fan-out event s,
    its grouped copy s + 1): walfeed's first, grouped by up to `group_max`, then the fan-out events' single copies."""
    walfeed: list[Outgoing[int]] = []
    single: list[Outgoing[Token]] = []
    for event in batch:
        if event.type in FANOUT_TYPES:
            token, body, message_id, type, timestamp, traceparent = event[:6]
            single.append(Outgoing(token, body, message_id, type, timestamp, traceparent, None, SINGLE))
            walfeed.append(Outgoing(token + 1, body, message_id, type, timestamp, traceparent, None, GROUPED))
        else:
            walfeed.append(event)
    return [*grouping.group(walfeed, group_max), *single]


def poll(batch: list[Outgoing[str]]) -> list[Outgoing[str]]:
    """The messages of a batch the polling source claimed: as `relay`'s, without groups, both copies of a fan-out
    event with its token (the claims count them)."""
    walfeed: list[Outgoing[str]] = []
    single: list[Outgoing[str]] = []
    for event in batch:
        if event.type in FANOUT_TYPES:
            single.append(event._replace(route=SINGLE))
            walfeed.append(event._replace(route=GROUPED))
        else:
            walfeed.append(event)
    return walfeed + single
