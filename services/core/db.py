"""Database access for ordinary work: psycopg 3 connections and pools."""

from __future__ import annotations

import logging

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)


def make_pool(url: str, *, min_size: int = 1, max_size: int = 10, name: str = "walfeed",
              options: str | None = None, check: bool = True) -> ConnectionPool:
    """A pool that checks connections on checkout (one round trip), so a database restart costs no failed query.
    Unchecked (`check=False`), a connection the restart broke fails its next query and the pool replaces it.
    `options`: server settings for every connection (libpq's options, e.g. "-c plan_cache_mode=...")."""
    kwargs: dict[str, object] = {"row_factory": dict_row, "application_name": name}  # named in pg_stat_activity
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
