"""Standard Webhooks signatures (https://www.standardwebhooks.com, "Signature scheme"). Pure.

A secret is `whsec_` + base64 of its key bytes. The signed content is `{webhook-id}.{webhook-timestamp}.{body}`;
`webhook-signature` is `v1,` + base64 of its HMAC-SHA256, one per active secret, separated by spaces, so a receiver
holding either the new or the previous secret accepts a message during a rotation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as random_bytes
from collections.abc import Sequence
from datetime import datetime
from typing import Final

PREFIX: Final = "whsec_"
KEY_BYTES: Final = 32  # new secrets: 256 random bits (the specification asks for 24 to 64 bytes)
ID_HEADER: Final = "webhook-id"
TIMESTAMP_HEADER: Final = "webhook-timestamp"
SIGNATURE_HEADER: Final = "webhook-signature"


class InvalidSecret(ValueError):
    """A stored secret that is not `whsec_` + base64 (never includes the secret in its message)."""


def generate_secret() -> str:
    return PREFIX + base64.b64encode(random_bytes.token_bytes(KEY_BYTES)).decode("ascii")


def key(secret: str) -> bytes:
    """The HMAC key of a secret: the base64 part after `whsec_`, decoded."""
    if not secret.startswith(PREFIX):
        raise InvalidSecret("a webhook secret must start with whsec_")
    try:
        decoded = base64.b64decode(secret[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("a webhook secret must be whsec_ followed by base64") from None
    if not decoded:
        raise InvalidSecret("a webhook secret must not be empty")
    return decoded


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` signature."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def active_secrets(secret: str, previous: str | None, previous_until: datetime | None,
                   now: datetime) -> tuple[str, ...]:
    """The secrets that sign now: the current one, and the previous one until its overlap ends."""
    if previous is not None and previous_until is not None and now < previous_until:
        return (secret, previous)
    return (secret,)


def headers(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """The three Standard Webhooks headers of a message signed by every secret in `secrets`."""
    if not secrets:
        raise InvalidSecret("at least one secret must sign")
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: " ".join(signature(s, msg_id, timestamp, body) for s in secrets),
    }
