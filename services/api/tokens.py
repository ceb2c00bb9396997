"""Bearer tokens: issued once at sign-up, stored only as a sha256 hash, compared in constant time. Pure."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

TOKEN_BYTES: Final = 32  # 256 bits, beyond brute force, so an unsalted hash suffices
MAX_TOKEN_CHARS: Final = 128  # longer headers are not ours: rejected before hashing


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def unusable_hash() -> bytes:
    """A stored hash that revokes: the sha256 of 256 random bits nobody holds, so no token matches it."""
    return hashlib.sha256(secrets.token_bytes(TOKEN_BYTES)).digest()


def matches(stored_hash: bytes, token: str) -> bool:
    return hmac.compare_digest(bytes(stored_hash), token_hash(token))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when absent or malformed."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return None
    return token
