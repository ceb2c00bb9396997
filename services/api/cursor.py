"""Opaque page cursors: keyset pagination on the post id, which only grows, so new posts never shift a page.

A cursor is the urlsafe base64 (unpadded) of a small versioned JSON object `{"v": 1, "k": kind, "id": last}`:
the next page holds posts with id < last. Pure.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

import orjson

VERSION: Final = 1
MAX_ID: Final = 2**63 - 1  # bigint
MAX_CURSOR_CHARS: Final = 200


class InvalidCursor(ValueError):
    """The cursor was not issued by this API (or was altered)."""


def encode(kind: str, last_id: int) -> str:
    raw = orjson.dumps({"v": VERSION, "k": kind, "id": last_id})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode(kind: str, cursor: str) -> int:
    """The last post id of the previous page. Raises InvalidCursor with the reason."""
    if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
        raise InvalidCursor("cursor is not one this API issued")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise InvalidCursor("cursor is not one this API issued") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise InvalidCursor("cursor version is not supported")
    if data.get("k") != kind:
        raise InvalidCursor(f"cursor belongs to another listing, not {kind!r}")
    last = data.get("id")
    if not isinstance(last, int) or isinstance(last, bool) or not 1 <= last <= MAX_ID:
        raise InvalidCursor("cursor position is out of range")
    return last
