"""Postgres side of a search: full-text ranking and the check of the vector index's hits (services/api/
search_sql.py). Each function is one statement on an autocommit connection."""

from __future__ import annotations

from typing import Any

from services.api import search_sql
from services.api.search_plan import Query
from services.api.store import Conn, Row


def _filters(query: Query) -> dict[str, Any]:
    return {"author": query.author_id, "since": query.since, "until": query.until}


async def text(conn: Conn, query: Query, limit: int) -> list[Row]:
    """The best `limit` live posts for the query's words, each with its `score` (ts_rank_cd), best first."""
    return await (await conn.execute(search_sql.TEXT, {"q": query.q, "limit": limit, **_filters(query)})).fetchall()


async def live(conn: Conn, query: Query, ids: list[int]) -> dict[int, Row]:
    """The posts of `ids` that are live and within the query's filters, by id."""
    if not ids:
        return {}
    rows = await (await conn.execute(search_sql.RECHECK, {"ids": ids, **_filters(query)})).fetchall()
    return {int(r["id"]): r for r in rows}
