"""Several events of one type in one AMQP message (docs/adr/0095, docs/events.md "Groups"). Pure.

The relay groups a batch it read together (`Relay._read`): consecutive events of one type, the type one of
`FANOUT_TYPES` (their walfeed consumers, the fan-out worker and the notifier, read groups), become one message of at
most `group_max` events, for the grouped exchange (routes.py, docs/adr/0115). Nothing waits for a group to fill: a
batch holds what the stream had. `delivery.*` events, read by other consumers, always go alone, and a run of one
event is its own message, unchanged.

A group's token is the range of its events' sequence numbers (sessions.py): `_read` numbers the events of a batch
in order, two numbers for a fan-out event (routes.py), so the events of a run are numbered at a constant step and the
broker's confirm of the group confirms each of them.
"""

from __future__ import annotations

from services.cdc_relay.messages import Outgoing
from services.cdc_relay.sessions import Token
from services.core.events import FANOUT_TYPES, encode_group


def group(batch: list[Outgoing[int]], group_max: int) -> list[Outgoing[Token]]:
    """The messages to publish for `batch` (events in stream order, numbered consecutively), in the same order."""
    messages: list[Outgoing[Token]] = []
    run: list[Outgoing[int]] = []  # consecutive events of one fan-out type, not yet a message
    for event in batch:
        if run and (event.type != run[0].type or len(run) == group_max):
            messages.append(_message(run))
            run = []
        if event.type in FANOUT_TYPES:
            run.append(event)
        else:
            messages.append(event)
    if run:
        messages.append(_message(run))
    return messages


def _message(run: list[Outgoing[int]]) -> Outgoing[Token]:
    first = run[0]
    if len(run) == 1:
        return first
    step = run[1].token - first.token
    seqs = range(first.token, run[-1].token + 1, max(step, 1))
    if list(seqs) != [e.token for e in run]:
        raise ValueError(f"a group's events are not numbered at a constant step: {[e.token for e in run]}")
    return Outgoing(seqs, encode_group([e.body for e in run]), first.message_id, first.type, first.timestamp,
                    first.traceparent, tuple(e.traceparent or "" for e in run), first.route)
