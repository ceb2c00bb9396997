"""How one search request is answered, decided without I/O (docs/search.md, docs/adr/0121).

- Which halves run: `text` is full-text search alone; `semantic` the vector index alone; `hybrid` both, fused
  (services/api/fusion.py). When the vector half cannot answer (no embedder, the embedder failed or timed out, the
  index is still loading, the model's backfill is not complete), `semantic` and `hybrid` answer from text search
  and the response says why in `degraded`.
- Paging: results are ranked, not ordered by id, so a cursor is a position in the ranking (an offset) tied to the
  query it belongs to (a fingerprint of q, mode and filters): a cursor of another query is refused. Rankings are
  recomputed per page, so a post written between two pages may shift the ranking by one; a page never repeats
  itself but may, rarely, repeat or skip a post of the page before. Paging stops at MAX_DEPTH results.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import orjson

Mode = Literal["hybrid", "semantic", "text"]
MODES: Final = ("hybrid", "semantic", "text")
MAX_DEPTH: Final = 1000  # results one query pages through at most: deep pages of a ranking are noise
# Candidates the vector index is asked for, per result still wanted, before the hits are checked against Postgres
# (deleted, author, time range): a narrow filter needs more; asked again four times as many, up to the cap.
OVERFETCH: Final = 2
MAX_CANDIDATES: Final = 4096
# Each half of a hybrid search contributes its top `max(depth, HYBRID_MIN)`: fusion needs some depth even for a
# first page of 1.
HYBRID_MIN: Final = 50
CURSOR_VERSION: Final = 1
MAX_CURSOR_CHARS: Final = 200

# Why the vector half did not answer (the response's `degraded`).
EMBEDDER_OFF: Final = "embedder-off"
EMBEDDER_UNAVAILABLE: Final = "embedder-unavailable"
INDEX_LOADING: Final = "index-loading"
MODEL_INCOMPLETE: Final = "model-incomplete"
DEGRADED: Final = (EMBEDDER_OFF, EMBEDDER_UNAVAILABLE, INDEX_LOADING, MODEL_INCOMPLETE)


class InvalidSearchCursor(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Query:
    q: str
    mode: Mode
    author_id: int | None
    since: datetime | None
    until: datetime | None

    def fingerprint(self) -> str:
        """What a cursor must match: the query and its filters (not the limit: pages may differ in size)."""
        fields = [self.q, self.mode, self.author_id, _moment(self.since), _moment(self.until)]
        return hashlib.sha256(orjson.dumps(fields)).hexdigest()[:16]


def _moment(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True, slots=True)
class Plan:
    text: bool
    semantic: bool
    degraded: str | None

    @property
    def answered_mode(self) -> Mode:
        if self.text and self.semantic:
            return "hybrid"
        return "semantic" if self.semantic else "text"


def plan(mode: Mode, vectors_unavailable: str | None) -> Plan:
    """The halves to run for `mode`, given why the vector half cannot answer (None: it can)."""
    if mode == "text":
        return Plan(text=True, semantic=False, degraded=None)
    if vectors_unavailable is not None:
        return Plan(text=True, semantic=False, degraded=vectors_unavailable)
    return Plan(text=mode == "hybrid", semantic=True, degraded=None)


def after_embedding_failure() -> Plan:
    """The plan once the query's embedding failed or timed out: text alone, saying so."""
    return Plan(text=True, semantic=False, degraded=EMBEDDER_UNAVAILABLE)


def depth(offset: int, limit: int) -> int:
    """Results to rank for a page at `offset` of `limit`, one more to know whether another page exists."""
    return min(offset + limit, MAX_DEPTH) + 1


def candidates(wanted: int) -> int:
    """The vector index's first ask for `wanted` results that survive the check against Postgres."""
    return min(MAX_CANDIDATES, max(wanted * OVERFETCH, 32))


def next_candidates(asked: int, found: int, wanted: int, index_size: int) -> int | None:
    """A larger ask when the last one (`asked` candidates, `found` of them surviving) fell short of `wanted` and
    the index holds more; None when there is nothing more to ask."""
    if found >= wanted or asked >= min(MAX_CANDIDATES, index_size):
        return None
    return min(MAX_CANDIDATES, asked * 4)


def encode_cursor(query: Query, offset: int) -> str:
    raw = orjson.dumps({"v": CURSOR_VERSION, "k": "search", "o": offset, "f": query.fingerprint()})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(query: Query, cursor: str) -> int:
    """The offset a cursor of this query points at. Raises InvalidSearchCursor with the reason."""
    if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
        raise InvalidSearchCursor("cursor is not one this API issued")
    try:
        data = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise InvalidSearchCursor("cursor is not one this API issued") from None
    if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION or data.get("k") != "search":
        raise InvalidSearchCursor("cursor is not a search cursor of this API")
    if data.get("f") != query.fingerprint():
        raise InvalidSearchCursor("cursor belongs to another query: pass the same q, mode and filters")
    offset = data.get("o")
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 < offset < MAX_DEPTH:
        raise InvalidSearchCursor("cursor position is out of range")
    return offset


def page_cut(ranked_count: int, offset: int, limit: int) -> tuple[slice, int | None]:
    """The slice of the ranking this page shows, and the next page's offset (None: last page)."""
    end = offset + limit
    more = ranked_count > end and end < MAX_DEPTH
    return slice(offset, end), (end if more else None)
