"""Database access for ordinary work: psycopg 3 connections and pools."""

from __future__ import annotations

import logging

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)


def make_pool(url: str, *, min_size: int = 1, max_size: int = 10, name: str = "walfeed",
              options: str | None = None, check: bool = True, autocommit: bool = False) -> ConnectionPool:
    """A pool that checks connections on checkout, so a database restart costs one failed query, not a dead pool.
    `options`: server settings for every connection (libpq's options, e.g. "-c plan_cache_mode=...").
    `check=False`: no check (a round trip per checkout) for a caller that treats a failed query as a retry anyway;
    the pool still drops a connection returned broken. `autocommit`: each statement its own transaction, without
    the BEGIN and COMMIT round trips (for callers whose every write is one statement)."""
    kwargs: dict[str, object] = {"row_factory": dict_row, "autocommit": autocommit}
    if options:
        kwargs["options"] = options
    return ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        kwargs=kwargs,
        check=ConnectionPool.check_connection if check else None,
    )
