"""What a delivery sends: the Standard Webhooks payload and the notification mail, built at send time from the
notification as the database holds it now. Pure. Never a secret, never an address other than the recipient's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any, Final

import orjson

PING: Final = "webhook.ping"  # a delivery without a notification: POST /v1/webhooks/{id}/ping


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivery row with what its message needs (services/delivery/sql.py LOAD)."""

    id: int
    channel: str
    status: str
    recipient_id: int
    created_at: datetime
    notification_id: int | None = None
    kind: str | None = None
    actor_id: int | None = None
    actor_handle: str | None = None
    post_id: int | None = None
    post_body: str | None = None
    notified_at: datetime | None = None
    withdrawn_at: datetime | None = None
    recipient_handle: str | None = None
    # webhook channel
    webhook_id: int | None = None
    url: str | None = None
    secret: str | None = None
    previous_secret: str | None = None
    previous_secret_until: datetime | None = None
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    failing_since: datetime | None = None
    # email channel
    email: str | None = None
    email_kinds: tuple[str, ...] = ()
    email_verified_at: datetime | None = None  # notification mail goes to a verified address only
    token_key: bytes | None = None  # signs verification codes and unsubscribe tokens (services/core/mailtokens.py)
    target: str = ""  # the rate limit's key: 'webhook:<id>' or 'email:<recipient id>' (sql.LOAD)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Delivery:
        fields: dict[str, Any] = {name: row.get(name) for name in cls.__dataclass_fields__}
        fields["email_kinds"] = tuple(row.get("email_kinds") or ())
        return cls(**fields)

    def __repr__(self) -> str:  # never the secrets
        return f"Delivery(id={self.id}, channel={self.channel!r}, status={self.status!r})"

    @property
    def event_type(self) -> str:
        return PING if self.notification_id is None else f"notification.{self.kind}"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def webhook_body(delivery: Delivery) -> bytes:
    """{"type", "timestamp", "data"} (Standard Webhooks, "Payload structure"): the timestamp is when the
    notification happened; the attempt's time is in the webhook-timestamp header."""
    if delivery.notification_id is None:
        data: dict[str, Any] = {"webhook_id": delivery.webhook_id}
        moment = delivery.created_at
    else:
        data = {
            "notification_id": delivery.notification_id,
            "kind": delivery.kind,
            "recipient_id": delivery.recipient_id,
            "actor": {"id": delivery.actor_id, "handle": delivery.actor_handle},
            "post": None if delivery.post_id is None else {"id": delivery.post_id, "body": delivery.post_body},
        }
        moment = delivery.notified_at or delivery.created_at
    return orjson.dumps({"type": delivery.event_type, "timestamp": _rfc3339(moment), "data": data})


def _summary(delivery: Delivery) -> tuple[str, str]:
    actor = f"@{delivery.actor_handle}"
    if delivery.kind == "follow":
        return f"{actor} followed you", f"{actor} now follows you on walfeed."
    body = delivery.post_body or ""
    return f"{actor} mentioned you", f"{actor} mentioned you in post {delivery.post_id}:\n\n{body}"


def _mail(delivery: Delivery, sender: str, subject: str, now: datetime) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = delivery.email or ""
    message["Subject"] = subject
    message["Date"] = format_datetime(now.astimezone(UTC))
    message["Message-ID"] = make_msgid(f"walfeed-delivery-{delivery.id}")
    message["Auto-Submitted"] = "auto-generated"
    return message


def email_message(delivery: Delivery, sender: str, unsubscribe_url: str, now: datetime) -> EmailMessage:
    """The plain-text notification mail, with a one-click List-Unsubscribe (RFC 2369, RFC 8058): a POST to
    `unsubscribe_url` (its signed token included) stops mail of this kind to this address."""
    subject, text = _summary(delivery)
    message = _mail(delivery, sender, subject, now)
    message["List-Unsubscribe"] = f"<{unsubscribe_url}>"
    message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message.set_content(f"{text}\n\n--\nYou receive this because you chose {delivery.kind} notifications by mail.\n"
                        f"To stop them: POST {unsubscribe_url}\n")
    return message


def verification_message(delivery: Delivery, sender: str, code: str, now: datetime) -> EmailMessage:
    """The mail to a newly set address (a delivery without a notification): the code that shows it is the user's.
    Nothing in it is anyone's text but walfeed's and the recipient's own handle."""
    message = _mail(delivery, sender, "Confirm your address for walfeed notifications", now)
    message.set_content(
        f"The walfeed account @{delivery.recipient_handle} asked for notification mail at this address.\n\n"
        f"If that is you, confirm it with this code (valid for two days):\n\n    {code}\n\n"
        "(POST /v1/users/me/email/verify {\"code\": \"...\"} with your token; your client does this for you.)\n\n"
        "If it is not you, ignore this mail: no notification is mailed to an address that is not confirmed.\n")
    return message
