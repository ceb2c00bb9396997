"""Database access for ordinary work: psycopg 3 connections and pools."""

from __future__ import annotations

import logging
from typing import Final

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)


# Plan every execution (the pools of the consumers of the events exchange): a prepared statement's generic plan,
# made on nearly empty tables, kept scanning them whole for the life of the connection (docs/adr/0024). No JIT: a
# batch's statements are key probes of a few ms, and a probe of the partitioned timelines is costed as one of every
# partition (docs/adr/0093), which lifts a trim of 200 users over jit_above_cost: 865 ms compiling for a 49 ms
# statement, measured.
PLAN_EACH_BATCH: Final = "-c plan_cache_mode=force_custom_plan -c jit=off"


def make_pool(url: str, *, min_size: int = 1, max_size: int = 10, name: str = "walfeed",
              options: str | None = None, check: bool = True, autocommit: bool = False) -> ConnectionPool:
    """A pool that checks connections on checkout (one round trip), so a database restart costs no failed query.
    `options`: server settings for every connection (libpq's options, e.g. "-c plan_cache_mode=...").
    `check=False`: no check (a round trip per checkout) for a caller that treats a failed query as a retry anyway;
    the pool still drops a connection returned broken. `autocommit`: each statement its own transaction, without
    the BEGIN and COMMIT round trips (for callers whose every write is one statement)."""
    kwargs: dict[str, object] = {"row_factory": dict_row, "autocommit": autocommit,
                                 "application_name": name}  # named in pg_stat_activity
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
