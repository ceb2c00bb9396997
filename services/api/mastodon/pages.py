"""Mastodon's paging, decided without I/O: `max_id` (older than), `since_id` (newer than, newest first),
`min_id` (just newer than: the oldest ones above it) and `limit` (20 by default, 40 at most, clamped), as the
api's own Range (services/api/paging.py); and the Link header pointing past both ends of a page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlencode

from services.api import paging
from services.api.cursor import MAX_ID
from services.api.mastodon.params import Params

POSITIONS: Final = ("max_id", "since_id", "min_id")
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 40


def page_range(params: Params, limit: int) -> paging.Range:
    max_id = params.position("max_id")
    before = MAX_ID if max_id is None else max_id  # max_id=0: older than 0 is nothing, not the newest page
    min_id, since_id = params.position("min_id"), params.position("since_id")
    if min_id is not None:
        return paging.Range(after=min_id, before=before, order="oldest", fetch=limit + 1)
    return paging.Range(after=since_id or 0, before=before, order="newest", fetch=limit + 1)


def cut(asked: paging.Range, rows: Sequence[Any], limit: int) -> tuple[list[Any], bool]:
    """The page newest first whichever way it was read, and whether more rows lie beyond its far end."""
    items, more = paging.cut(rows, limit)
    if asked.order == "oldest":
        items.reverse()
    return items, more


def link(url: str, params: Params, asked: paging.Range, first: int | None, last: int | None, more: bool) -> str | None:
    """`<...max_id=last>; rel="next", <...min_id=first>; rel="prev"` for a non-empty page (next only when older
    items may exist), None for an empty one. The other query parameters (limit, types[]...) are kept."""
    if first is None or last is None:
        return None
    kept = [(k, v) for k, value in params.values.items() if k not in POSITIONS
            for v in (value if isinstance(value, list) else [value]) if isinstance(v, (str, int))]
    parts = []
    if more or asked.order == "oldest" or asked.after > 0:
        parts.append(f'<{url}?{urlencode([*kept, ("max_id", str(last))])}>; rel="next"')
    parts.append(f'<{url}?{urlencode([*kept, ("min_id", str(first))])}>; rel="prev"')
    return ", ".join(parts)
