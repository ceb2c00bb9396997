"""Opaque page cursors: keyset pagination on the post id, which only grows, so new posts never shift a page.

A cursor is the urlsafe base64 (unpadded) of a small versioned JSON object `{"v": 1, "k": kind, "id": last}`:
the next page holds posts with id < last. The home timeline also pages towards newer posts: `"d": "newer"` added,
the page holds the posts just above `id`. Pure.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final

import orjson

VERSION: Final = 1
MAX_ID: Final = 2**63 - 1  # bigint
MAX_CURSOR_CHARS: Final = 200


class InvalidCursor(ValueError):
    """The cursor was not issued by this API (or was altered)."""


NEWER: Final = "newer"


@dataclass(frozen=True, slots=True)
class Position:
    id: int
    newer: bool  # the page holds the posts just above `id`; else those below it


def encode(kind: str, last_id: int, *, newer: bool = False) -> str:
    fields: dict[str, object] = {"v": VERSION, "k": kind, "id": last_id}
    if newer:
        fields["d"] = NEWER
    return base64.urlsafe_b64encode(orjson.dumps(fields)).rstrip(b"=").decode("ascii")


def decode(kind: str, cursor: str) -> int:
    """The last post id of the previous page, for listings paged towards older posts only. Raises InvalidCursor
    with the reason."""
    position = decode_position(kind, cursor)
    if position.newer:
        raise InvalidCursor(f"the {kind!r} listing pages towards older posts only")
    return position.id


def decode_position(kind: str, cursor: str) -> Position:
    """Where the page starts and in which direction. Raises InvalidCursor with the reason."""
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
    if not isinstance(last, int) or isinstance(last, bool) or not 0 <= last <= MAX_ID:
        raise InvalidCursor("cursor position is out of range")
    direction = data.get("d")
    if direction not in (None, NEWER) or (direction is None and last == 0):
        raise InvalidCursor("cursor direction is not one this API issues")
    return Position(last, direction == NEWER)
