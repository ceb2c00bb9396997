"""`walfeed dead replay` of a delivery channel's letters (docs/adr/0070). A dead delivery's row is DEAD and the
delivery worker acks unsent a message whose row is settled, so republishing the letter alone would do nothing: the
replay first makes the row PENDING again with its attempts from zero, as the api's retry does. Pure: which letters
go back and why the others stay dead; dead_rows.py reads and resets the rows."""

from __future__ import annotations

from dataclasses import dataclass

from services.core.events import MalformedEvent, decode


@dataclass(frozen=True, slots=True)
class Row:
    """A delivery as a replay found it: its status before the replay, whether its webhook is disabled, and whether
    the replay made it PENDING."""

    status: str
    webhook_disabled: bool
    reset: bool


def delivery_id(body: bytes) -> int | None:
    """The delivery a letter is for (its `delivery.*` event's `delivery_id`); None if the body names none."""
    try:
        event = decode(body)
    except MalformedEvent:
        return None
    value = event.payload.get("delivery_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def why_kept(delivery: int | None, row: Row | None, replayed: set[int], dry_run: bool = False) -> str | None:
    """None when the letter goes back to its work queue; else why it stays dead. `replayed`: the deliveries this
    replay already sent back (a delivery dead twice, through the api's retry, has two letters: one try is enough).
    A PENDING row is sent: a replay interrupted after its reset left it so, with no message to carry it (if the
    api's retry made it PENDING, its try and this one may both run: one extra try, same `webhook-id`)."""
    if delivery is None:
        return "its body names no delivery"
    if delivery in replayed:
        return f"delivery {delivery} was sent back by another letter of this replay"
    if row is None:
        return f"no delivery {delivery} (deleted with its webhook?)"
    if row.reset or row.status == "PENDING" or (dry_run and row.status == "DEAD" and not row.webhook_disabled):
        return None
    if row.status == "DEAD":
        return f"delivery {delivery}'s webhook is disabled: enable it first (POST /v1/webhooks/{{id}}/enable)"
    return f"delivery {delivery} is {row.status}, no longer DEAD: nothing to replay"
