"""Signed tokens of notification mail (docs/notifications.md, "Email"; docs/adr/0106). Pure.

The email delivery worker signs them, the api checks them; both read the key from `server_secrets`
(db/init/017_email_verification.sql).
Each token is bound to the address it was mailed to: once the user changes the address, the old tokens verify
nothing and unsubscribe nothing.

- verification code: `<user id>.<expires, unix seconds>.<signature>`, mailed to a new address; the user sends it
  back (`POST /v1/users/me/email/verify`) to show the mailbox is theirs.
- unsubscribe token: `<user id>.<kind>.<signature>`, in each notification mail's List-Unsubscribe URL (RFC 8058):
  a POST with it, no bearer needed, stops mail of that kind to that address. It does not expire.

The signature is HMAC-SHA256 over the purpose, the fields and the address, base64url without padding.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

KEY_NAME: Final = "email_tokens"  # the row of server_secrets
VERIFY_SECONDS: Final = 2 * 24 * 3600  # a verification code is good for two days
KINDS: Final = ("follow", "mention")
MAX_LENGTH: Final = 120  # longer than any token this module makes

_VERIFICATION = re.compile(r"([1-9][0-9]{0,18})\.([0-9]{1,12})\.([A-Za-z0-9_-]{43})")
_UNSUBSCRIBE = re.compile(r"([1-9][0-9]{0,18})\.([a-z]{1,20})\.([A-Za-z0-9_-]{43})")
_BIGINT_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    user: int
    kind: str
    signature: str


@dataclass(frozen=True, slots=True)
class Verification:
    user: int
    expires: int
    signature: str


def _sign(key: bytes, *fields: str) -> str:
    digest = hmac.new(key, "\n".join(fields).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def verification_code(key: bytes, user: int, email: str, now: float) -> str:
    expires = int(now) + VERIFY_SECONDS
    return f"{user}.{expires}.{_sign(key, 'verify', str(user), str(expires), email)}"


def parse_verification(code: str) -> Verification | None:
    """The code's fields, or None when it is not one (any text is parsed totally)."""
    match = _VERIFICATION.fullmatch(code.strip()) if len(code) <= MAX_LENGTH else None
    if match is None or int(match[1]) > _BIGINT_MAX:
        return None
    return Verification(int(match[1]), int(match[2]), match[3])


def verifies(key: bytes, code: Verification, user: int, email: str, now: float) -> bool:
    """`code` was mailed to `email` for `user` and has not expired."""
    expected = _sign(key, "verify", str(code.user), str(code.expires), email)
    return code.user == user and now < code.expires and hmac.compare_digest(expected, code.signature)


def unsubscribe_token(key: bytes, user: int, kind: str, email: str) -> str:
    return f"{user}.{kind}.{_sign(key, 'unsubscribe', str(user), kind, email)}"


def parse_unsubscribe(token: str) -> Unsubscribe | None:
    match = _UNSUBSCRIBE.fullmatch(token.strip()) if len(token) <= MAX_LENGTH else None
    if match is None or int(match[1]) > _BIGINT_MAX or match[2] not in KINDS:
        return None
    return Unsubscribe(int(match[1]), match[2], match[3])


def unsubscribes(key: bytes, token: Unsubscribe, email: str) -> bool:
    """`token` was signed for the user's mail of its kind to `email`."""
    return hmac.compare_digest(_sign(key, "unsubscribe", str(token.user), token.kind, email), token.signature)
