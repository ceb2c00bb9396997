"""Search over posts: full text, by meaning, or both fused (docs/api.md "Search", docs/search.md)."""

from __future__ import annotations

import asyncio
import unicodedata
from datetime import UTC, datetime
from typing import Annotated

import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Query, Request, Response

from services.api import fusion, search_plan, search_store
from services.api.deps import Token, database, session, throttle
from services.api.models import BIGINT_MAX, SearchPage, search_page_json
from services.api.problems import ApiError
from services.api.routes import AUTH, INVALID, LIMITED, UNAVAILABLE, CursorParam, Limit, invalid
from services.api.routes.posts import json_response
from services.api.search_plan import Plan
from services.api.searching import Search
from services.api.store import Conn, Row
from services.api.vector_index import VectorIndex
from services.core.embedding.protocol import EmbedderUnavailable

router = APIRouter(prefix="/v1", responses={**AUTH, **INVALID, **UNAVAILABLE})

MAX_QUERY_CHARS = 500
Ranked = list[tuple[Row, float]]

Q = Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS, description="what to search for; text mode takes "
                         'web search syntax: "a phrase", -excluded, or')]
ModeParam = Annotated[search_plan.Mode, Query(description="hybrid (default): both fused; semantic: by meaning; "
                                                          "text: full-text search of the words")]
AuthorParam = Annotated[int | None, Query(ge=1, le=BIGINT_MAX, description="only this author's posts")]
Since = Annotated[datetime | None, Query(description="only posts created at or after this time (RFC 3339; "
                                                     "without an offset: UTC)")]
Until = Annotated[datetime | None, Query(description="only posts created before this time")]


def _utc(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def parse_query(q: str) -> str:
    """The query as bodies are stored (NFC), or a 422 when nothing searchable is left."""
    if "\x00" in q:
        raise ApiError(422, "q must not contain NUL characters", "invalid-query")
    text = unicodedata.normalize("NFC", q).strip()
    if not text:
        raise ApiError(422, "q must contain something to search for", "invalid-query")
    return text


@router.get("/search", response_model=SearchPage, tags=["search"], responses={
    **LIMITED, **invalid("q is blank or holds a NUL character (invalid-query)"),
    400: {"description": "the cursor is not a next_cursor of this same query (invalid-cursor)"}})
async def search(token: Token, request: Request, q: Q, mode: ModeParam = "hybrid", author_id: AuthorParam = None,
                 since: Since = None, until: Until = None, limit: Limit = 20, cursor: CursorParam = None) -> Response:
    """Live posts matching `q`, best first, each with its score. `degraded` says when a semantic or hybrid search
    answered from text alone (the embedder is off, failed or timed out, the index is loading, or the model's
    backfill is not complete)."""
    query = search_plan.Query(parse_query(q), mode, author_id, _utc(since), _utc(until))
    offset = 0
    if cursor is not None:
        try:
            offset = search_plan.decode_cursor(query, cursor)
        except search_plan.InvalidSearchCursor as exc:
            raise ApiError(400, f"{exc}: pass the next_cursor of a previous page unchanged", "invalid-cursor") from None
    service: Search = request.app.state.search
    plan = search_plan.plan(mode, service.unavailable)
    wanted = search_plan.depth(offset, limit)
    async with session(request, token) as (db, me):
        await throttle(request, db, service.settings.limit, str(me))  # before the model spends CPU on it
    vector = None
    if plan.semantic:  # holding no connection meanwhile
        assert service.queries is not None
        try:
            vector = await service.queries.embed(query.q)
        except EmbedderUnavailable:
            plan = search_plan.after_embedding_failure()
    async with database(request) as db:
        ranked = await _rank(db, service, plan, query, vector, wanted)
    shown, next_offset = search_plan.page_cut(len(ranked), offset, limit)
    service.searches.labels(plan.answered_mode, plan.degraded or "none").inc()
    next_cursor = search_plan.encode_cursor(query, next_offset) if next_offset is not None else None
    return json_response(search_page_json(ranked[shown], next_cursor, plan.answered_mode, plan.degraded))


async def _rank(db: Conn, service: Search, plan: Plan, query: search_plan.Query,
                vector: npt.NDArray[np.float32] | None, wanted: int) -> Ranked:
    if not plan.semantic or vector is None or service.index is None or service.index.index is None:
        return [(r, float(r["score"])) for r in await search_store.text(db, query, wanted)]
    index = service.index.index
    assert index is not None
    if not plan.text:
        return await _semantic(db, index, query, vector, wanted)
    depth = max(wanted, search_plan.HYBRID_MIN)
    lexical = await search_store.text(db, query, depth)
    semantic = await _semantic(db, index, query, vector, depth)
    rows = {int(r["id"]): r for r, _ in semantic} | {int(r["id"]): r for r in lexical}
    fused = fusion.fuse([[int(r["id"]) for r in lexical], [int(r["id"]) for r, _ in semantic]])
    return [(rows[post], score) for post, score in fused]


async def _semantic(db: Conn, index: VectorIndex, query: search_plan.Query, vector: npt.NDArray[np.float32],
                    wanted: int) -> Ranked:
    """The index's nearest posts that are live and within the filters, most similar first."""
    asked: int | None = search_plan.candidates(wanted)
    found: Ranked = []
    while asked is not None:
        hits = await asyncio.to_thread(index.search, vector, asked)
        live = await search_store.live(db, query, [post for post, _ in hits])
        found = [(live[post], similarity) for post, similarity in hits if post in live]
        asked = search_plan.next_candidates(asked, len(found), wanted, len(index))
    return found[:wanted]
